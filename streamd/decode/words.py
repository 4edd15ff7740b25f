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

__all__ = ["tokens_to_words", "WordBuilder"]

SKIP, BOUNDARY, START, PART = 0, 1, 2, 3
"""What a token does to words (:func:`token_roles`): blank (ignored), a boundary that belongs to no word
(a char table's separator, bpe's bare ``"▁"``), the first piece of a new word (bpe ``"▁"``-prefixed), a
piece of the open word."""


def token_roles(table: TokenTable) -> tuple[int, ...]:
    """(V,) role of every token id: SKIP, BOUNDARY, START or PART (the word-boundary rule, written once)."""
    sep, bpe = table.separator, table.kind == "bpe"

    def role(i: int, tok: str) -> int:
        if i == table.blank_id:
            return SKIP
        if bpe:
            return BOUNDARY if tok == WORD_PREFIX else START if tok.startswith(WORD_PREFIX) else PART
        return BOUNDARY if tok == sep else PART

    return tuple(role(i, t) for i, t in enumerate(table.tokens))


def _check_args(frame_shift_s: float, aggregation: str) -> None:
    if not frame_shift_s > 0:
        raise ValueError(f"frame_shift_s must be > 0, got {frame_shift_s!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown confidence aggregation {aggregation!r}; expected one of {list(AGGREGATIONS)}")


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
    _check_args(frame_shift_s, aggregation)
    ids = [table._check_id(t) for t in tokens]
    roles = token_roles(table)
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
        r = roles[t]
        if r == SKIP:
            continue
        if r != PART:
            close()
            if r == BOUNDARY:
                continue
        cur.append(k)
    close()
    return words


class WordBuilder:
    """The text and words of one hypothesis that changes at its end, kept up to date incrementally.

    :meth:`update` keeps the first ``keep`` tokens of the hypothesis it holds and appends new ones; it then
    re-reads only the tokens from the start of the first word those could change (the open word, for a
    hypothesis that only grows), never the whole hypothesis.  The result always equals the whole-hypothesis
    definitions: ``text == table.decode(tokens)`` and ``words == tokens_to_words(table, tokens, frames, confs,
    frame_shift_s, aggregation)`` (tests/decode/test_words.py checks both on random edits).

    tokens, frames, confs: the held hypothesis (lists, N each); words: its words (a list);
    text: its text.  The token ids must be in range (they come from the model).
    """

    def __init__(self, table: TokenTable, frame_shift_s: float, aggregation: str):
        _check_args(frame_shift_s, aggregation)
        self.table, self.frame_shift_s, self.aggregation = table, frame_shift_s, aggregation
        self._roles = token_roles(table)
        self._pieces = table._pieces  # noqa: SLF001 - the table's own decode pieces (one rule for text)
        self.tokens: list[int] = []
        self.frames: list[int] = []
        self.confs: list[float] = []
        self.words: list[Word] = []
        self.text = ""
        self._closers: list[int] = []  # position of the token that closed each of ``words`` (N: the end)
        self._raw: list[str] = []  # decode pieces of the tokens, joined as text: " ".join("".join(raw).split())

    def clear(self) -> None:
        """Forget the hypothesis (a new segment)."""
        self.update((), (), (), 0)

    def update(self, tokens: Sequence[int], frames: Sequence[int], confs: Sequence[float], keep: int) -> int:
        """Hold ``held[:keep] + tokens`` (frames and confs alike); returns how many of the held words are
        unchanged (the first ones of :attr:`words`).  0 <= keep <= N."""
        if not 0 <= keep <= len(self.tokens):
            raise ValueError(f"keep must be in 0..{len(self.tokens)}, got {keep}")
        if not len(tokens) == len(frames) == len(confs):
            raise ValueError(f"tokens, frames and confs must have equal lengths, got "
                             f"{len(tokens)}, {len(frames)}, {len(confs)}")
        del self.tokens[keep:], self.frames[keep:], self.confs[keep:], self._raw[keep:]
        self.tokens += tokens
        self.frames += frames
        self.confs += confs
        pieces = self._pieces
        self._raw += [pieces[t] for t in tokens]
        # words closed by a token before ``keep`` stay; re-read from the last one's closer (its role makes the
        # scan state there: nothing open, or a word opened at it)
        w = len(self.words)
        while w and self._closers[w - 1] >= keep:
            w -= 1
        del self.words[w:], self._closers[w:]
        self._scan(self._closers[w - 1] if w else 0)
        self.text = " ".join("".join(self._raw).split())
        return w

    def _scan(self, first: int) -> None:
        roles, ids, frames, confs = self._roles, self.tokens, self.frames, self.confs
        tok_text, shift, how = self.table.tokens, self.frame_shift_s, self.aggregation
        cur: list[int] = []

        def close(at: int) -> None:
            if cur:
                text = "".join(tok_text[ids[k]] for k in cur).replace(WORD_PREFIX, "")
                if text:
                    self.words.append(Word(word=text, start=int(frames[cur[0]]) * shift,
                                           end=(int(frames[cur[-1]]) + 1) * shift,
                                           conf=aggregate([confs[k] for k in cur], how)))
                    self._closers.append(at)
                cur.clear()

        for k in range(first, len(ids)):
            r = roles[ids[k]]
            if r == SKIP:
                continue
            if r != PART:
                close(k)
                if r == BOUNDARY:
                    continue
            cur.append(k)
        close(len(ids))
