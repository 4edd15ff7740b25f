"""Timed words from a hypothesis: its tokens, the encoder frames that emitted them and their confidences.

A word spans from its first token's frame start to its last token's frame end; its confidence aggregates
its tokens' (:func:`streamd.decode.confidence.aggregate`).  Word boundaries are the token table's
(:mod:`streamd.tokens`).
"""

from __future__ import annotations

from typing import Sequence

from streamd.decode.confidence import AGGREGATIONS, aggregate
from streamd.events import Word
from streamd.tokens import WORD_PREFIX, TokenTable

__all__ = ["tokens_to_words"]


def tokens_to_words(
    table: TokenTable,
    tokens: Sequence[int],
    frames: Sequence[int],
    confs: Sequence[float],
    frame_shift_s: float,
    aggregation: str,
    time_offset_s: float = 0.0,
) -> list[Word]:
    """Group one hypothesis' tokens into words.

    Args:
        table: the token table.
        tokens: (N,) emitted token ids in order (blank ids are ignored).
        frames: (N,) encoder frame index of each token (same time origin as
            ``time_offset_s``).
        confs: (N,) token confidences in [0, 1].
        frame_shift_s: seconds per encoder frame (> 0).
        aggregation: word confidence from its tokens', one of min/mean/max/prod.
        time_offset_s: added to every time.

    A char table's separator ends a word and belongs to none; in a bpe table a
    ``"▁"``-prefixed piece starts a word and the bare ``"▁"`` piece is a
    boundary.  Word text drops ``"▁"``; ``start = frames[first] * shift +
    offset``, ``end = (frames[last] + 1) * shift + offset``.  Words with empty
    text are skipped.
    """
    if not len(tokens) == len(frames) == len(confs):
        raise ValueError(f"tokens, frames and confs must have equal lengths, got "
                         f"{len(tokens)}, {len(frames)}, {len(confs)}")
    if not frame_shift_s > 0:
        raise ValueError(f"frame_shift_s must be > 0, got {frame_shift_s!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown confidence aggregation {aggregation!r}; expected one of {list(AGGREGATIONS)}")
    ids = [table._check_id(t) for t in tokens]
    sep = table.separator
    bpe = table.kind == "bpe"
    words: list[Word] = []
    cur: list[int] = []  # positions (into tokens) of the open word's tokens

    def close() -> None:
        if cur:
            text = "".join(table.tokens[ids[k]] for k in cur).replace(WORD_PREFIX, "")
            if text:
                words.append(Word(
                    word=text,
                    start=int(frames[cur[0]]) * frame_shift_s + time_offset_s,
                    end=(int(frames[cur[-1]]) + 1) * frame_shift_s + time_offset_s,
                    conf=aggregate([confs[k] for k in cur], aggregation),
                ))
            cur.clear()

    for k, t in enumerate(ids):
        if t == table.blank_id:
            continue
        tok = table.tokens[t]
        if bpe:
            if tok == WORD_PREFIX:
                close()
                continue
            if tok.startswith(WORD_PREFIX):
                close()
        elif tok == sep:
            close()
            continue
        cur.append(k)
    close()
    return words
