"""streamd.second_pass.confidence: a second-pass word's conf from its probability, the first pass's confidence
in the segment and the segment's word count (a logistic model), or one stored map of the probability."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fakes import FakeRecognizer  # noqa: F401
from streamd.decode.calibration import Calibration, CalibrationError
from streamd.events import Final, Word
from streamd.second_pass.confidence import (FEATURES, SecondPassCalibration, fit_second_pass_calibration,
                                            logistic_weights, word_features)
from streamd.second_pass.rescore import SecondPass


def cal(lo, hi, words=100):
    return Calibration((0.0, 1.0), (lo, hi), "max_prob", 1.0, "min", words=words)


def test_word_features_follow_their_definitions():
    f = word_features([0.5, 0.9, 1.0], [0.2, 0.6])
    assert f.shape == (3, len(FEATURES))
    assert f[:, 0] == pytest.approx([0.0, math.log(9), math.log((1 - 1e-4) / 1e-4)])  # logit, clipped at 1
    assert list(f[:, 1]) == pytest.approx([0.4] * 3) and list(f[:, 2]) == [0, 0, 0]
    assert list(f[:, 3]) == pytest.approx([math.log(3)] * 3)
    one = word_features([0.5], [])
    assert list(one[0, 1:]) == [0.0, 1.0, 0.0]  # no first-pass words: confidence 0; one word


def test_newton_fit_matches_the_objective_minimized_slowly():
    """The oracle: plain gradient descent on the definition of the regularized mean cross entropy."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = rng.uniform(size=400) < 1 / (1 + np.exp(-(x @ [1.5, -2.0, 0.5] + 0.3)))
    fast = logistic_weights(x, y, l2=0.01)
    theta = np.zeros(4)
    xb = np.c_[x, np.ones(400)]
    reg = np.array([0.01, 0.01, 0.01, 0.0])
    for _ in range(20000):
        p = 1 / (1 + np.exp(-(xb @ theta)))
        theta -= 0.5 * (xb.T @ (p - y) / 400 + reg * theta)
    assert fast == pytest.approx(theta, abs=1e-4)


def test_a_fit_follows_each_feature_and_is_calibrated_where_fitted():
    rng = np.random.default_rng(1)
    rows, right = [], []
    for _ in range(600):  # segments: right more often when the probability or the first pass's conf is high
        n = int(rng.integers(1, 5))
        probs, fconf = rng.uniform(0.05, 0.99, n), rng.uniform(0, 1, 2)
        f = word_features(probs, fconf)
        p = 1 / (1 + np.exp(-(0.8 * f[:, 0] + 2.0 * f[:, 1] - 1.5 * f[:, 2] - 0.5)))
        rows.append(f)
        right += list(rng.uniform(size=n) < p)
    feats, right = np.concatenate(rows), np.asarray(right)
    c = fit_second_pass_calibration(feats, right, "min")
    assert c.words == len(right) and c.single is None
    w = dict(zip(FEATURES, c.weights))
    assert w["logit_prob"] > 0.5 and w["first_pass_conf"] > 1.0 and w["one_word"] < -0.5
    p = c.apply_features(feats, np.zeros(len(right)))
    assert abs(p.mean() - right.mean()) < 0.01


def test_stored_forms_round_trip_and_a_plain_map_reads_as_one():
    c = SecondPassCalibration((0.5, 1.0, -1.0, 0.1), -0.2, "min", 300)
    d = json.loads(json.dumps(c.to_dict()))
    assert d["by"] == "features" and d["features"] == list(FEATURES) and SecondPassCalibration.from_dict(d) == c
    plain = cal(0.1, 0.9).to_dict()
    one = SecondPassCalibration.from_dict(plain)
    assert one.single == cal(0.1, 0.9) and one.to_dict() == plain and one.aggregation == "min"
    assert one.apply([0.5], [0.9]) == pytest.approx([0.5])  # the map alone
    for bad, msg in (({k: v for k, v in d.items() if k != "bias"}, "missing field 'bias'"),
                     ({**d, "extra": 1}, "unknown field"), ({**d, "by": "age"}, "this streamd reads"),
                     ({**d, "features": ["logit_prob"]}, "this streamd computes"),
                     ({**d, "weights": [1.0]}, "weights must be 4")):
        with pytest.raises(CalibrationError, match=msg):
            SecondPassCalibration.from_dict(bad)


def test_a_final_s_words_take_the_segment_s_features():
    first = (Word("hallo", 1.2, 1.5, 0.4), Word("wold", 1.7, 2.1, 0.8))
    audio = (np.sin(np.arange(32000) / 9) * 8000).astype(np.int16)
    pending = Final(3, 2, "hallo wold", first, 1.0, 3.0, first_pass_text="hallo wold", second_pass="pending",
                    audio=audio)
    c = SecondPassCalibration((1.0, 2.0, -1.0, 0.0), -1.0, "min", 10)
    f = SecondPass(FakeRecognizer("Hello, world."), calibration=c).apply(pending)
    z = math.log(0.8 / 0.2) + 2.0 * 0.6 - 1.0  # raw 0.8 each, first-pass mean conf 0.6, two words
    assert [w.conf for w in f.words] == pytest.approx([1 / (1 + math.exp(-z))] * 2)
