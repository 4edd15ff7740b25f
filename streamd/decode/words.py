"""Timed words from a hypothesis: its tokens, the encoder frames that emitted them and their confidences.

A word spans from its first token's frame start to its last token's frame end; its confidence aggregates
its tokens' (:func:`streamd.decode.confidence.aggregate`).  Word boundaries are the token table's
(:mod:`streamd.tokens`).
"""

from __future__ import annotations

import functools
import math
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


@functools.lru_cache(maxsize=8)
def _token_sets(table: TokenTable) -> tuple[tuple[int, ...], frozenset[int], frozenset[int]]:
    """(roles, not_parts, not_growth) of a table, derived once per table (a WordBuilder per stream reads them):
    :func:`token_roles`; the ids that are no part of a word; and those an update cannot simply append to the
    open word and the text: not_parts and the ids whose piece holds white space (text joins words by single
    spaces)."""
    roles = token_roles(table)
    not_parts = frozenset(i for i, r in enumerate(roles) if r != PART)
    spaced = frozenset(i for i, p in enumerate(table._pieces) if any(c.isspace() for c in p))  # noqa: SLF001
    return roles, not_parts, not_parts | spaced


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

    :meth:`update` keeps the first ``keep`` tokens of the hypothesis it holds and appends new ones.  It reads
    only the new tokens when ``keep`` lies within the open (last) word, which it keeps as running lists, as
    for a hypothesis that only grows; otherwise it re-reads from the start of the first word the edit can
    change; never the whole hypothesis.  The result always equals the whole-hypothesis definitions:
    ``text == table.decode(tokens)`` and ``words == tokens_to_words(table, tokens, frames, confs,
    frame_shift_s, aggregation)`` (tests/decode/test_words.py checks both on random edits).

    tokens, frames, confs: the held hypothesis (lists, N each); words: its words (a list, the open word
    last); text: its text.  The token ids must be in range (they come from the model).
    """

    def __init__(self, table: TokenTable, frame_shift_s: float, aggregation: str):
        _check_args(frame_shift_s, aggregation)
        self.table, self.frame_shift_s, self.aggregation = table, frame_shift_s, aggregation
        self._roles, self._not_parts, self._not_growth = _token_sets(table)
        self._pieces = table._pieces  # noqa: SLF001 - the table's own decode pieces (one rule for text)
        self.tokens: list[int] = []
        self.frames: list[int] = []
        self.confs: list[float] = []
        self.words: list[Word] = []
        self.text = ""
        self._closers: list[int] = []  # position of the token that closed each closed word of ``words``
        self._raw: list[str] = []  # decode pieces of the tokens, joined as text: " ".join("".join(raw).split())
        # the open word: positions of its tokens, their texts and confs; the last boundary or word start
        # (-1: none); whether ``words`` ends with the open word (its words so far, as the end closes it)
        self._cur: list[int] = []
        self._cur_text: list[str] = []
        self._cur_confs: list[float] = []
        self._base = -1
        self._open_shown = False
        self._gap = False  # the pieces end with white space (the next word's text starts after a space)

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
        if keep == len(self.tokens) and self._not_growth.isdisjoint(tokens):
            return self._grow(tokens, frames, confs)
        if self._open_shown:
            self.words.pop()
            self._open_shown = False
        cur = self._cur
        if keep > self._base:  # no boundary at or past ``keep``: the open word's tokens before it stay open
            while cur and cur[-1] >= keep:
                cur.pop(), self._cur_text.pop(), self._cur_confs.pop()
            first = keep
        else:  # words closed by a token before ``keep`` stay; re-read from the last one's closer
            w = len(self.words)
            while w and self._closers[w - 1] >= keep:
                w -= 1
            del self.words[w:], self._closers[w:]
            first = self._closers[w - 1] if w else 0
            cur.clear(), self._cur_text.clear(), self._cur_confs.clear()
            self._base = -1
        unchanged = len(self.words)
        del self.tokens[keep:], self.frames[keep:], self.confs[keep:], self._raw[keep:]
        self.tokens += tokens
        self.frames += frames
        self.confs += confs
        pieces = self._pieces
        self._raw += [pieces[t] for t in tokens]
        self._scan(first)
        raw = "".join(self._raw)
        self.text = " ".join(raw.split())
        self._gap = raw[-1:].isspace()
        return unchanged

    def _grow(self, tokens: Sequence[int], frames: Sequence[int], confs: Sequence[float]) -> int:
        """:meth:`update` for tokens appended to the open word (none in ``_not_growth``): the text grows by their
        pieces and the open word by their texts (the same strings: such a piece holds no white space, so its token
        no "▁") and confidences; nothing before them is read again (min, max and prod aggregate the word's
        confidences from its last value: the same left-to-right result)."""
        shown = self.words.pop() if self._open_shown else None  # the open word as it stood
        self._open_shown = False
        unchanged = len(self.words)
        if not tokens:
            if shown is not None:
                self.words.append(shown)
                self._open_shown = True
            return unchanged
        n = len(self.tokens)
        self.tokens += tokens
        self.frames += frames
        self.confs += confs
        pieces = self._pieces
        new = [pieces[t] for t in tokens]
        self._raw += new
        self._cur += range(n, len(self.tokens))
        self._cur_text += new
        self._cur_confs += confs
        grown = "".join(new)
        how = self.aggregation
        if shown is not None and how in ("min", "max", "prod"):
            conf, vals = float(shown.conf), list(map(float, confs))
            if how == "prod":
                conf = math.prod(vals, start=conf)
            else:
                conf = min(conf, *vals) if how == "min" else max(conf, *vals)
            word = Word(shown.word + grown, shown.start, (int(self.frames[-1]) + 1) * self.frame_shift_s, conf)
        else:
            word = self._word()
        if word is not None:
            self.words.append(word)
            self._open_shown = True
        if grown:  # no white space in it: it continues the last word, or starts one after a gap
            self.text = f"{self.text} {grown}" if self._gap and self.text else self.text + grown
            self._gap = False
        return unchanged

    def _word(self) -> Word | None:
        """The open word as it stands (None when its text is empty)."""
        text = "".join(self._cur_text).replace(WORD_PREFIX, "")
        if not text:
            return None
        cur, frames, shift = self._cur, self.frames, self.frame_shift_s
        return Word(word=text, start=int(frames[cur[0]]) * shift, end=(int(frames[cur[-1]]) + 1) * shift,
                    conf=aggregate(self._cur_confs, self.aggregation))

    def _scan(self, first: int) -> None:
        """Read tokens ``first..N-1`` from the open-word state at ``first``; then show the open word."""
        roles, ids, confs, tok_text = self._roles, self.tokens, self.confs, self.table.tokens
        cur, cur_text, cur_confs = self._cur, self._cur_text, self._cur_confs
        if self._not_parts.isdisjoint(ids[first:]):  # every new token continues the open word
            cur += range(first, len(ids))
            cur_text += map(tok_text.__getitem__, ids[first:])
            cur_confs += confs[first:]
            first = len(ids)
        for k in range(first, len(ids)):
            t = ids[k]
            r = roles[t]
            if r == SKIP:
                continue
            if r != PART:
                if cur:
                    word = self._word()
                    if word is not None:
                        self.words.append(word)
                        self._closers.append(k)
                    cur.clear(), cur_text.clear(), cur_confs.clear()
                self._base = k
                if r == BOUNDARY:
                    continue
            cur.append(k)
            cur_text.append(tok_text[t])
            cur_confs.append(confs[k])
        if cur:
            word = self._word()
            if word is not None:
                self.words.append(word)
                self._open_shown = True
