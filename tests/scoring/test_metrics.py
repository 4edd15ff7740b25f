"""streamd.scoring.metrics: word normalization, WER alignment (vs a textbook edit distance), AUC-ROC, NCE, ECE."""

import math

import numpy as np
import pytest

from fractions import Fraction

from tests.evaluation.sets import levenshtein
from streamd.scoring.metrics import (ReliabilityBins, align_words, auc_roc, confidence_scores, ece, nce, normalize_words,
                                   reliability)


# --------------------------------------------------------------------------- WER


def test_normalize_words():
    assert normalize_words("Hello, World-wide 'quoted' don't  -- A.M.!") == \
        ["hello", "world", "wide", "quoted", "don't", "am"]
    assert normalize_words("  ") == []


@pytest.mark.parametrize("ref, hyp, counts, correct", [
    ("a b c", "a b c", (3, 0, 0, 0), [True, True, True]),
    ("a b c d", "a x c", (2, 1, 1, 0), [True, False, True]),
    ("", "a b", (0, 0, 0, 2), [False, False]),
    ("a b", "", (0, 0, 2, 0), []),
    ("a b", "b c", (1, 0, 1, 1), [True, False]),  # fewest errors (2), then most matches: D a, b=b, I c
    ("the cat sat", "the the cat sat", (3, 0, 0, 1), [False, True, True, True]),
    ("i like green eggs and ham", "i like eggs and the ham too", (5, 0, 1, 2),
     [True, True, True, True, False, True, False]),
    ("x y z", "p q", (0, 2, 1, 0), [False, False]),
])
def test_align_hand_cases(ref, hyp, counts, correct):
    a = align_words(ref.split(), hyp.split())
    assert (a.hits, a.subs, a.dels, a.ins) == counts
    assert list(a.hyp_correct) == correct


@pytest.mark.parametrize("seed", range(5))
def test_align_random_vs_reference(seed):
    g = np.random.default_rng(seed)
    for _ in range(40):
        ref = list(g.choice(list("abcd"), size=g.integers(0, 8)))
        hyp = list(g.choice(list("abcd"), size=g.integers(0, 8)))
        a = align_words(ref, hyp)
        assert a.errors == levenshtein(tuple(ref), tuple(hyp))
        assert a.hits + a.subs + a.dels == len(ref) and a.hits + a.subs + a.ins == len(hyp)
        # the ops walk both sequences in order and matches are equal words
        assert [r for _, r, _ in a.ops if r is not None] == list(range(len(ref)))
        assert [h for _, _, h in a.ops if h is not None] == list(range(len(hyp)))
        assert all((op == "=") == (ref[r] == hyp[h]) for op, r, h in a.ops if r is not None and h is not None)


# --------------------------------------------------------------------------- AUC / NCE


def _auc_pairs(labels, scores):
    pos = [s for y, s in zip(labels, scores) if y]
    neg = [s for y, s in zip(labels, scores) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(6))
def test_auc_vs_pair_count_with_ties(seed):
    g = np.random.default_rng(seed)
    n = int(g.integers(2, 60))
    labels = g.random(n) < 0.6
    labels[0], labels[1] = True, False
    scores = np.round(g.random(n) * (3 if seed % 2 else 20)) / 20  # few distinct values: many ties
    assert auc_roc(labels, scores) == pytest.approx(_auc_pairs(labels, scores), abs=1e-12)


def test_auc_hand_cases():
    assert auc_roc([True, True, False], [0.9, 0.8, 0.1]) == 1.0
    assert auc_roc([True, False], [0.1, 0.9]) == 0.0
    assert auc_roc([True, False, True, False], [0.5] * 4) == 0.5
    assert auc_roc([True, False, False], [0.5, 0.5, 0.2]) == 0.75
    assert auc_roc([True, True], [0.1, 0.2]) is None
    with pytest.raises(ValueError, match="equal length"):
        auc_roc([True], [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        auc_roc([True, False], [float("nan"), 0.2])


def test_nce_hand_cases():
    # p_c = 1/2: H(p_c) = 1 bit; H_conf = -log2(0.8) per word
    assert nce([True, False], [0.8, 0.2]) == pytest.approx(1 + math.log2(0.8), abs=1e-12)
    assert nce([True, False], [0.2, 0.8]) == pytest.approx(1 + math.log2(0.2), abs=1e-12)  # worse than prior: < 0
    assert nce([True, True, True, False], [0.75] * 4) == pytest.approx(0.0, abs=1e-12)  # the prior itself
    assert nce([True, False], [1.0, 0.0]) == pytest.approx(1.0, abs=1e-12)  # perfect (clipped logs)
    # hand value: p_c = 2/3, H = 0.918296 bits; H_conf = -(log2 .9 + log2 .6 + log2 .7) / 3
    h_p = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    h_c = -(math.log2(0.9) + math.log2(0.6) + math.log2(0.7)) / 3
    assert nce([True, True, False], [0.9, 0.6, 0.3]) == pytest.approx((h_p - h_c) / h_p, abs=1e-12)
    assert nce([True, True], [0.5, 0.9]) is None
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        nce([True, False], [1.5, 0.2])


def test_word_errors_sums_the_alignments():
    from streamd.scoring.metrics import word_errors

    c = word_errors(["turn on the light", "volume up", ""], ["turn the lights", "volume up", "hello"])
    # utt 1: "on" deleted, light -> lights; utt 2 exact; utt 3 one insertion against no words
    assert (c.words, c.hits, c.subs, c.dels, c.ins, c.utts, c.wrong_utts) == (6, 4, 1, 1, 1, 3, 2)
    assert c.errors == 3 and c.wer == pytest.approx(0.5) and c.ser == pytest.approx(2 / 3)
    assert word_errors([], []).wer is None and word_errors([], []).ser is None
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        word_errors(["a", "b"], ["a"])


# --------------------------------------------------------------------------- ECE


def _ece_reference(labels, confs, bins=10):
    """ECE from the definition, in exact fractions: words in [i/B, (i+1)/B) (the last bin closed at 1) per bin,
    sum over bins of (words in bin / words) * |share correct - mean confidence|.  A confidence is the decimal
    it prints as (0.3 is 3/10, on the edge of bin 3, not the binary float just below it)."""
    total = Fraction(0)
    n = len(confs)
    exact = [Fraction(repr(float(c))) for c in confs]
    for i in range(bins):
        lo, hi = Fraction(i, bins), Fraction(i + 1, bins)
        members = [(bool(y), c) for y, c in zip(labels, exact) if lo <= c < hi or (i == bins - 1 and c == 1)]
        if members:
            acc = Fraction(sum(y for y, _ in members), len(members))
            mean = sum(c for _, c in members) / len(members)
            total += Fraction(len(members), n) * abs(acc - mean)
    return float(total)


def test_ece_hand_case():
    # bin 0.9-1.0: 0.95 (right), 1.0 (right) -> |1 - 0.975| = 0.025, weight 2/5
    # bin 0.6-0.7: 0.65 (right), 0.65 (wrong) -> |0.5 - 0.65| = 0.15, weight 2/5
    # bin 0.1-0.2: 0.15 (wrong) -> |0 - 0.15| = 0.15, weight 1/5
    labels = [True, True, True, False, False]
    confs = [0.95, 1.0, 0.65, 0.65, 0.15]
    assert ece(labels, confs) == pytest.approx(2 / 5 * 0.025 + 2 / 5 * 0.15 + 1 / 5 * 0.15, abs=1e-12)
    r = reliability(labels, confs)
    assert r.counts == (0, 1, 0, 0, 0, 0, 2, 0, 0, 2) and r.words == 5
    assert r.accuracy[6] == 0.5 and r.confidence[9] == pytest.approx(0.975) and r.accuracy[0] is None
    assert ece([True, False], [1.0, 0.0]) == 0.0  # perfectly calibrated extremes
    assert ece([], []) is None
    assert ReliabilityBins.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        ece([True], [1.2])
    with pytest.raises(ValueError, match="bins must be an integer >= 1"):
        ece([True], [0.5], bins=0)


@pytest.mark.parametrize("seed", range(5))
def test_ece_vs_reference(seed):
    g = np.random.default_rng(seed)
    n = int(g.integers(1, 80))
    confs = np.round(g.random(n), 2 if seed % 2 else 6)  # two decimals: many values on bin edges
    labels = g.random(n) < confs
    for bins in (1, 10, 7):
        assert ece(labels, confs, bins) == pytest.approx(_ece_reference(labels, confs, bins), abs=1e-12)


def test_confidence_scores_bundle_the_metrics():
    labels, confs = [True, False, True], [0.9, 0.3, 0.6]
    assert confidence_scores(labels, confs) == {"auc": auc_roc(labels, confs), "nce": nce(labels, confs),
                                                "ece": ece(labels, confs)}
