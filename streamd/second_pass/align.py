"""Second-pass words on the first pass's time axis, and where to cut a segment too long for the model.

Two ways to date a second-pass word, both on the stream's time axis (seconds from its first sample):

* the model's own times (Whisper's cross-attention word timestamps), offset by where its audio began
  (:func:`offset_times`);
* for a model that gives none (Moonshine), the first pass's words as anchors (:func:`anchor_times`): a
  minimum-cost alignment of the two word sequences (:func:`edit_pairs`); a word matched or substituted takes the
  time span of its first-pass word, and the words between two anchors share the gap between them in
  proportion to their lengths in characters.  With no anchor at all (the first pass heard nothing) the
  words share the span the first pass decoded.

Plain Python; no model, no I/O.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["edit_pairs", "anchor_times", "offset_times", "cut_points", "WORD_S"]

WORD_S = 0.4
"""Seconds given to each second-pass word before the first anchor or after the last (about a spoken word)."""


def _sub(x: str, y: str) -> float:
    """Substitution cost: 0 for the same word, 0.5 for words with the same first letter (a first pass's
    misspelling of it, "hallo" for "hello"), else 1."""
    return 0.0 if x == y else 0.5 if x[:1] == y[:1] else 1.0


def edit_pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs (i, j) that a minimum-cost alignment of ``a`` and ``b`` puts together (matches and
    substitutions, in order): insertions and deletions cost 1, substitutions :func:`_sub`."""
    n, m = len(a), len(b)
    cost = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = float(i)
    for j in range(m + 1):
        cost[0][j] = float(j)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i][j] = min(cost[i - 1][j - 1] + _sub(a[i - 1], b[j - 1]), cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i][j] == cost[i - 1][j - 1] + _sub(a[i - 1], b[j - 1]):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def _share(words: Sequence[str], start: float, end: float) -> list[tuple[float, float]]:
    """``words`` laid end to end over [start, end] in proportion to their characters (at least one each)."""
    sizes = [max(1, len(w)) for w in words]
    total = sum(sizes)
    out, t = [], start
    for s in sizes:
        u = t + (end - start) * s / total
        out.append((t, u))
        t = u
    return out


def anchor_times(words: Sequence[str], first: Sequence[tuple[str, float, float]], start: float, end: float
                 ) -> list[tuple[float, float]]:
    """(start, end) of each of ``words`` from the first pass's ``first`` words ((word, start, end), in order)
    over the segment [start, end]: matched and substituted words take their partner's span; the others
    share the gap between their neighbours' spans; before the first anchor or after the last they take
    :data:`WORD_S` each, next to it, within the segment."""
    if not words:
        return []
    if not first:
        return _share(words, start, end)
    pairs = dict(edit_pairs(words, [w for w, _, _ in first]))
    out: list[tuple[float, float] | None] = [None] * len(words)
    for i, j in pairs.items():
        out[i] = (first[j][1], first[j][2])
    i = 0
    while i < len(words):
        if out[i] is not None:
            i += 1
            continue
        k = i
        while k < len(words) and out[k] is None:
            k += 1
        n = k - i  # words before the first anchor or after the last: WORD_S each, within the segment
        lo = out[i - 1][1] if i > 0 else None
        hi = out[k][0] if k < len(words) else None
        lo = lo if lo is not None else max(start, min(hi, end) - WORD_S * n)
        hi = hi if hi is not None else min(end, lo + WORD_S * n)
        hi = max(hi, lo)
        out[i:k] = _share(words[i:k], lo, hi)
        i = k
    return [o for o in out if o is not None]


def offset_times(times: Sequence[tuple[float, float]], offset: float, start: float, end: float
                 ) -> list[tuple[float, float]]:
    """The model's own word times (seconds from its audio's first sample) moved by ``offset`` and kept
    within the segment [start, end], non-decreasing."""
    out, last = [], start
    for a, b in times:
        a = min(max(a + offset, last), end)
        b = min(max(b + offset, a), end)
        out.append((a, b))
        last = a
    return out


def cut_points(duration: float, window: float, gaps: Sequence[float]) -> list[float]:
    """Where to cut ``duration`` seconds into pieces of at most ``window``: at the last pause (``gaps``:
    times between first-pass words, increasing) past the first half of each piece, else at the window."""
    cuts, pos = [], 0.0
    while duration - pos > window:
        inside = [g for g in gaps if pos + window / 2 < g <= pos + window]
        pos = inside[-1] if inside else pos + window
        cuts.append(pos)
    return cuts
