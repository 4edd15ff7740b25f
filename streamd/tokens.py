"""Token tables (id <-> text): the model's output vocabulary, at the ground floor (the model, the searches
and training all read it).

Two kinds of table, told apart by the tokens themselves:

* ``bpe``: sentencepiece pieces; a piece starting with ``"▁"`` begins a new
  word, the bare ``"▁"`` piece is a word boundary on its own.
* ``char``: single characters plus a word-separator token, the first of
  ``" "``, ``"▁"``, ``"|"`` present in the table.

Multi-character tokens written ``<...>`` (``<blk>``, ``<unk>``, ``<sos/eos>``)
are special: never produced by :meth:`TokenTable.encode`; the blank id is
skipped by :meth:`TokenTable.decode` and :func:`streamd.decode.words.tokens_to_words`, other
special tokens are kept as text.

Files: one token per line (the line number is the id), or the k2/icefall
``tokens.txt`` form ``<token> <id>`` with ids 0..V-1 (any order).  In the
one-column form a line holding a single space is the space token.

Timed words from a hypothesis: :mod:`streamd.decode.words`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["TokenTable", "WORD_PREFIX", "SEPARATORS"]

WORD_PREFIX = "\u2581"  # sentencepiece "▁"
SEPARATORS: tuple[str, ...] = (" ", WORD_PREFIX, "|")
_TWO_COLUMN = re.compile(r"^(.+)[ \t](\d+)$")


def _is_special(tok: str) -> bool:
    return len(tok) > 1 and tok.startswith("<") and tok.endswith(">")


@dataclass(frozen=True)
class TokenTable:
    """Output vocabulary: ``tokens[i]`` is the text of token id ``i``."""

    tokens: tuple[str, ...]
    blank_id: int = 0
    _index: dict[str, int] = field(init=False, repr=False, compare=False)
    # derived once from ``tokens`` (the table is frozen): kind, separator, and each id's text piece
    _kind: str = field(init=False, repr=False, compare=False)
    _separator: str | None = field(init=False, repr=False, compare=False)
    _pieces: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        toks = self.tokens
        if isinstance(toks, str) or not isinstance(toks, (tuple, list)):
            raise TypeError(f"TokenTable.tokens must be a tuple of strings, got {type(toks).__name__}")
        object.__setattr__(self, "tokens", tuple(toks))
        if len(self.tokens) < 2:
            raise ValueError(f"a token table needs at least 2 tokens (blank + one), got {len(self.tokens)}")
        index: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            if not isinstance(t, str) or t == "":
                raise ValueError(f"token {i}: must be a non-empty string, got {t!r}")
            if t != " " and any(c.isspace() for c in t):
                raise ValueError(f"token {i}: {t!r} contains whitespace")
            if t in index:
                raise ValueError(f"token {t!r} appears twice (ids {index[t]} and {i})")
            index[t] = i
        if isinstance(self.blank_id, bool) or not isinstance(self.blank_id, int) \
                or not 0 <= self.blank_id < len(self.tokens):
            raise ValueError(f"blank_id must be in [0, {len(self.tokens)}), got {self.blank_id!r}")
        object.__setattr__(self, "_index", index)
        kind = "bpe" if any(t != WORD_PREFIX and t.startswith(WORD_PREFIX) for t in self.tokens) else "char"
        sep = None if kind == "bpe" else next((s for s in SEPARATORS if s in index), None)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_separator", sep)
        object.__setattr__(self, "_pieces", tuple(
            "" if i == self.blank_id else " " if t == sep else t.replace(WORD_PREFIX, " ")
            for i, t in enumerate(self.tokens)))

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def kind(self) -> str:
        """``"bpe"`` if a token other than the bare ``"▁"`` starts with ``"▁"``, else ``"char"``."""
        return self._kind

    @property
    def separator(self) -> str | None:
        """Word-separator token of a char table (first of " ", "▁", "|" present); None for bpe or if absent."""
        return self._separator

    def id(self, token: str) -> int:
        """Id of ``token``; ValueError if it is not in the table."""
        try:
            return self._index[token]
        except KeyError:
            raise ValueError(f"token {token!r} is not in the table") from None

    def _check_id(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < len(self.tokens):
            raise ValueError(f"token id {i} out of range [0, {len(self.tokens)})")
        return i

    # ------------------------------------------------------------------ I/O

    @classmethod
    def from_lines(cls, lines: Iterable[str], blank_id: int = 0) -> "TokenTable":
        """Parse one-token-per-line text or k2 ``<token> <id>`` lines.

        The format is decided by the first line; line endings are stripped,
        trailing empty lines ignored.  Two-column ids must be exactly 0..V-1.
        """
        rows = [ln.rstrip("\r\n") for ln in lines]
        while rows and rows[-1] == "":
            rows.pop()
        if not rows:
            raise ValueError("token table is empty")
        if not _TWO_COLUMN.match(rows[0]):
            for n, tok in enumerate(rows, 1):
                if tok == "":
                    raise ValueError(f"line {n}: empty token")
            return cls(tuple(rows), blank_id)
        by_id: dict[int, str] = {}
        for n, row in enumerate(rows, 1):
            m = _TWO_COLUMN.match(row)
            if m is None:
                raise ValueError(f"line {n}: expected '<token> <id>' like line 1, got {row!r}")
            tok, i = m.group(1), int(m.group(2))
            if i in by_id:
                raise ValueError(f"line {n}: id {i} used twice ({by_id[i]!r} and {tok!r})")
            by_id[i] = tok
        missing = sorted(set(range(len(by_id))) - set(by_id))
        if missing:
            extra = sorted(i for i in by_id if i >= len(by_id))
            raise ValueError(f"token ids must be 0..{len(by_id) - 1} without gaps; missing {missing[:5]}, "
                             f"out of range {extra[:5]}")
        return cls(tuple(by_id[i] for i in range(len(by_id))), blank_id)

    @classmethod
    def from_file(cls, path: str | Path, blank_id: int = 0) -> "TokenTable":
        """Read a UTF-8 token file (see :meth:`from_lines`)."""
        text = Path(path).read_text(encoding="utf-8")
        try:
            return cls.from_lines(text.split("\n"), blank_id)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def to_lines(self, with_ids: bool = False) -> list[str]:
        """One token per line, or ``"<token> <id>"`` lines (k2 format); no line endings."""
        return [f"{t} {i}" if with_ids else t for i, t in enumerate(self.tokens)]

    def to_file(self, path: str | Path, with_ids: bool = False) -> None:
        Path(path).write_text("\n".join(self.to_lines(with_ids)) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------ text

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids: blanks skipped, words joined by single spaces, stripped."""
        pieces = self._pieces
        return " ".join("".join(pieces[self._check_id(i)] for i in ids).split())

    def _case(self, text: str) -> str:
        """Fold ``text`` to the table's letter case (lower unless the table only has upper case)."""
        cased = [c for t in self.tokens if not _is_special(t) for c in t if c.isalpha()]
        if any(c.islower() for c in cased) or not any(c.isupper() for c in cased):
            return text.lower()
        return text.upper()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (whitespace-separated words, case folded to the table's).

        char tables: one token per character, the separator between words.
        bpe tables: greedy longest match of pieces over ``"▁" + word`` for each
        word -- a simple segmentation (not sentencepiece's), fine for tests and
        keyword lists; a word whose start has no ``"▁"`` piece is spelled as the
        bare ``"▁"`` followed by pieces.  Raises ValueError naming what cannot
        be encoded.
        """
        words = self._case(text).split()
        if self.kind == "char":
            return self._encode_char(words)
        return self._encode_bpe(words)

    def _encode_char(self, words: list[str]) -> list[int]:
        unknown = sorted({c for w in words for c in w if self._index.get(c, self.blank_id) == self.blank_id})
        if unknown:
            raise ValueError(f"characters not in the token table: {unknown}")
        sep = self.separator
        if len(words) > 1 and sep is None:
            raise ValueError("cannot encode several words: the char table has no separator (' ', '▁' or '|')")
        out: list[int] = []
        for n, w in enumerate(words):
            if n:
                out.append(self._index[sep])  # type: ignore[index]
            out.extend(self._index[c] for c in w)
        return out

    def _encode_bpe(self, words: list[str]) -> list[int]:
        pieces = {t: i for t, i in self._index.items() if not _is_special(t) and i != self.blank_id}
        longest = max(len(t) for t in pieces)
        out: list[int] = []
        for w in words:
            s, pos = WORD_PREFIX + w, 0
            while pos < len(s):
                for end in range(min(len(s), pos + longest), pos, -1):
                    if s[pos:end] in pieces:
                        out.append(pieces[s[pos:end]])
                        pos = end
                        break
                else:
                    raise ValueError(f"cannot encode word {w!r}: no piece in the token table matches "
                                     f"{s[pos]!r} (at {s[pos:]!r})")
        return out
