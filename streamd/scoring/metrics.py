"""Scoring metrics of ``streamd eval``: word normalization, WER alignment, AUC-ROC, NCE and ECE.

Conventions (``/work/shared/eval/dev/README.md``): words are lower-cased,
hyphens split words, other punctuation is deleted (apostrophes inside words
are kept).  :func:`align_words` is a Levenshtein alignment with unit costs;
among alignments with the fewest errors one with the most matches is chosen.
A hypothesis word is *correct* when the alignment matches it, wrong when it
is substituted or inserted.  :func:`auc_roc` (Mann-Whitney, ties count half)
and :func:`nce` (NIST / NeMo: ``(H(p_c) - H_conf) / H(p_c)`` in bits,
confidences clipped to ``[1e-15, 1 - 1e-15]``) measure how well word
confidences separate correct from wrong words; :func:`reliability` and
:func:`ece` (expected calibration error over equal-width bins) how close they
are to the probability of being correct.  Pure Python / numpy, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["normalize_words", "Alignment", "align_words", "WordErrorCounts", "word_errors", "auc_roc", "nce",
           "NCE_EPS", "ECE_BINS", "ReliabilityBins", "reliability", "ece", "confidence_scores"]

NCE_EPS = 1e-15
ECE_BINS = 10


# --------------------------------------------------------------------------- words and WER


_HYPHENS = "-\u2010\u2011\u2012\u2013\u2014\u2212"
_APOSTROPHES = "\u2019\u02bc"


def normalize_words(text: str) -> list[str]:
    """Scoring words: lower case, hyphens split words, punctuation deleted, inner apostrophes kept."""
    t = text.lower()
    for h in _HYPHENS:
        t = t.replace(h, " ")
    for a in _APOSTROPHES:
        t = t.replace(a, "'")
    t = "".join(c for c in t if c.isalnum() or c.isspace() or c == "'")
    return [w for w in (w.strip("'") for w in t.split()) if w]


@dataclass(frozen=True)
class Alignment:
    """A minimum-edit alignment of hypothesis words to reference words.

    ops: ``(op, ref_index, hyp_index)`` in order; op ``=`` match, ``S``
    substitution, ``D`` deletion (hyp_index None), ``I`` insertion (ref_index None).
    """

    ops: tuple[tuple[str, int | None, int | None], ...]
    hits: int
    subs: int
    dels: int
    ins: int

    @property
    def errors(self) -> int:
        return self.subs + self.dels + self.ins

    @property
    def hyp_correct(self) -> tuple[bool, ...]:
        """Per hypothesis word: True when matched, False when substituted or inserted."""
        out = {j: op == "=" for op, _, j in self.ops if j is not None}
        return tuple(out[j] for j in range(len(out)))


def align_words(ref: Sequence[str], hyp: Sequence[str]) -> Alignment:
    """Levenshtein alignment (unit costs) of word sequences.

    Among the alignments with the fewest errors, one with the most matches is
    chosen; remaining ties are broken while tracing back from the end by
    preferring match/substitution, then deletion, then insertion.
    """
    n, m = len(ref), len(hyp)
    # cost[i][j] = (errors, -hits) of the best alignment of ref[:i] with hyp[:j]
    cost = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        cost[i][0] = (i, 0)
    for j in range(1, m + 1):
        cost[0][j] = (j, 0)

    def diag(i: int, j: int) -> tuple[int, int]:
        e, h = cost[i - 1][j - 1]
        return (e, h - 1) if ref[i - 1] == hyp[j - 1] else (e + 1, h)

    for i in range(1, n + 1):
        for j in range(1, m + 1):
            up, left = cost[i - 1][j], cost[i][j - 1]
            cost[i][j] = min(diag(i, j), (up[0] + 1, up[1]), (left[0] + 1, left[1]))
    ops: list[tuple[str, int | None, int | None]] = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == diag(i, j):
            ops.append(("=" if ref[i - 1] == hyp[j - 1] else "S", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == (cost[i - 1][j][0] + 1, cost[i - 1][j][1]):
            ops.append(("D", i - 1, None))
            i -= 1
        else:
            ops.append(("I", None, j - 1))
            j -= 1
    ops.reverse()
    count = {k: sum(op == k for op, _, _ in ops) for k in "=SDI"}
    return Alignment(tuple(ops), count["="], count["S"], count["D"], count["I"])


# --------------------------------------------------------------------------- confidence metrics


@dataclass
class WordErrorCounts:
    """Word error counts summed over utterances (``add`` one aligned utterance at a time)."""

    words: int = 0
    hits: int = 0
    subs: int = 0
    dels: int = 0
    ins: int = 0
    utts: int = 0
    wrong_utts: int = 0

    def add(self, ref_words: int, a: Alignment) -> None:
        """Count one utterance: its reference length and its alignment."""
        self.words += ref_words
        self.hits += a.hits
        self.subs += a.subs
        self.dels += a.dels
        self.ins += a.ins
        self.utts += 1
        self.wrong_utts += a.errors > 0

    @property
    def errors(self) -> int:
        return self.subs + self.dels + self.ins

    @property
    def wer(self) -> float | None:
        """Errors / reference words (None when the references hold no words)."""
        return self.errors / self.words if self.words else None

    @property
    def ser(self) -> float | None:
        """Share of utterances with at least one error (None for no utterances)."""
        return self.wrong_utts / self.utts if self.utts else None


def word_errors(refs: Sequence[str], hyps: Sequence[str]) -> WordErrorCounts:
    """Corpus word error counts of hypothesis texts against reference texts (normalized with :func:`normalize_words`)."""
    if len(refs) != len(hyps):
        raise ValueError(f"word_errors: {len(refs)} references but {len(hyps)} hypotheses")
    out = WordErrorCounts()
    for r, h in zip(refs, hyps):
        ref = normalize_words(r)
        out.add(len(ref), align_words(ref, normalize_words(h)))
    return out


def _labels_scores(labels: Sequence[bool], scores: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"{what}: labels and scores must be 1-D of equal length, got shapes {y.shape} and {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"{what}: scores must be finite, got {int((~np.isfinite(s)).sum())} NaN/inf values")
    return y, s


def auc_roc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve of ``scores`` separating True from False labels.

    Mann-Whitney form with average ranks, so a tied (positive, negative) pair
    counts 1/2.  None when one class is empty (undefined).
    """
    y, s = _labels_scores(labels, scores, "auc_roc")
    n1 = int(y.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return None
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each distinct value
    ranks = avg_rank[inverse]
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def nce(labels: Sequence[bool], confs: Sequence[float]) -> float | None:
    """Normalized cross entropy of confidences ``confs`` in [0, 1] for correctness ``labels``.

    ``(H(p_c) - H_conf) / H(p_c)`` in bits per word, ``p_c`` the fraction of
    correct words; 1 is perfect, 0 is no better than always saying ``p_c``.
    Confidences are clipped to ``[1e-15, 1 - 1e-15]``.  None when every word
    is correct or every word is wrong (``H(p_c) = 0``).
    """
    y, c = _labels_scores(labels, confs, "nce")
    if ((c < 0) | (c > 1)).any():
        raise ValueError(f"nce: confidences must be in [0, 1], got min {c.min()} max {c.max()}")
    if y.size == 0:
        return None
    p = float(y.mean())
    if p in (0.0, 1.0):
        return None
    h_p = -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    c = np.clip(c, NCE_EPS, 1 - NCE_EPS)
    h_conf = -float(np.mean(np.where(y, np.log2(c), np.log2(1 - c))))
    return (h_p - h_conf) / h_p


@dataclass(frozen=True)
class ReliabilityBins:
    """Words binned by confidence into ``len(counts)`` equal-width bins of [0, 1] (a reliability diagram).

    Bin ``i`` holds confidences in ``[i / B, (i + 1) / B)``, the last bin also 1.0.
    counts: (B,) words per bin; confidence: (B,) their mean confidence; accuracy: (B,)
    their share of correct words (None for an empty bin).
    """

    counts: tuple[int, ...]
    confidence: tuple[float | None, ...]
    accuracy: tuple[float | None, ...]

    def __post_init__(self) -> None:
        if not len(self.counts) == len(self.confidence) == len(self.accuracy) >= 1:
            raise ValueError(f"ReliabilityBins: counts, confidence and accuracy need one equal length >= 1, got "
                             f"{len(self.counts)}, {len(self.confidence)}, {len(self.accuracy)}")

    @property
    def words(self) -> int:
        return sum(self.counts)

    @property
    def ece(self) -> float | None:
        """Expected calibration error: ``sum_b n_b / N * |accuracy_b - confidence_b|`` (None for no words)."""
        n = self.words
        if n == 0:
            return None
        return math.fsum(k / n * abs(a - c) for k, a, c in zip(self.counts, self.accuracy, self.confidence) if k)

    def to_dict(self) -> dict:
        """JSON form (``streamd eval --json``): the three lists."""
        return {"counts": list(self.counts), "confidence": list(self.confidence), "accuracy": list(self.accuracy)}

    @classmethod
    def from_dict(cls, d: dict) -> "ReliabilityBins":
        return cls(tuple(d["counts"]), tuple(d["confidence"]), tuple(d["accuracy"]))


def reliability(labels: Sequence[bool], confs: Sequence[float], bins: int = ECE_BINS) -> ReliabilityBins:
    """Bin confidences ``confs`` in [0, 1] with correctness ``labels`` into ``bins`` equal-width bins."""
    y, c = _labels_scores(labels, confs, "reliability")
    if ((c < 0) | (c > 1)).any():
        raise ValueError(f"reliability: confidences must be in [0, 1], got min {c.min()} max {c.max()}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"reliability: bins must be an integer >= 1, got {bins!r}")
    idx = np.minimum((c * bins).astype(np.int64), bins - 1)  # (N,) bin of each word
    counts = np.bincount(idx, minlength=bins)
    conf_sum = np.bincount(idx, weights=c, minlength=bins)
    hit_sum = np.bincount(idx, weights=y.astype(np.float64), minlength=bins)
    return ReliabilityBins(tuple(int(k) for k in counts),
                           tuple(float(s / k) if k else None for s, k in zip(conf_sum, counts)),
                           tuple(float(s / k) if k else None for s, k in zip(hit_sum, counts)))


def ece(labels: Sequence[bool], confs: Sequence[float], bins: int = ECE_BINS) -> float | None:
    """Expected calibration error of ``confs`` over ``bins`` equal-width bins, weighted by bin counts.

    0 when every bin's share of correct words equals its mean confidence; None for no words.
    """
    return reliability(labels, confs, bins).ece


def confidence_scores(labels: Sequence[bool], confs: Sequence[float]) -> dict[str, float | None]:
    """``{"auc", "nce", "ece"}`` of word confidences ``confs`` for correctness ``labels`` (None where undefined)."""
    return {"auc": auc_roc(labels, confs), "nce": nce(labels, confs), "ece": ece(labels, confs)}
