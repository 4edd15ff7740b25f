"""streamd.second_pass.confidence: a second-pass word's conf from its probability, the first pass's confidence
in the segment, the segment's word counts and the stream's input rate (a logistic model), or one stored map
of the probability; maps stored with fewer features still load and apply."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from fakes import FakeRecognizer  # noqa: F401
from streamd.decode.calibration import Calibration, CalibrationError
from streamd.events import Final, Word
from streamd.second_pass.confidence import (FEATURES, SecondPassCalibration, fit_second_pass_calibration,
                                            logistic_weights, narrowband, word_features)
from streamd.second_pass.rescore import SecondPass


def cal(lo, hi, words=100):
    return Calibration((0.0, 1.0), (lo, hi), "max_prob", 1.0, "min", words=words)


def test_word_features_follow_their_definitions():
    f = word_features([0.5, 0.9, 1.0], [0.2, 0.6])
    assert f.shape == (3, len(FEATURES))
    assert f[:, 0] == pytest.approx([0.0, math.log(9), math.log((1 - 1e-4) / 1e-4)])  # logit, clipped at 1
    assert list(f[:, 1]) == pytest.approx([0.4] * 3) and list(f[:, 2]) == [0, 0, 0]
    assert list(f[:, 3]) == pytest.approx([math.log(3)] * 3)
    assert list(f[:, 4]) == [0, 0, 0]  # input rate not known: wideband
    assert list(f[:, 5]) == pytest.approx([math.log(3 / 2)] * 3)  # three words against the first pass's two
    one = word_features([0.5], [])
    assert list(one[0, 1:4]) == [0.0, 1.0, 0.0]  # no first-pass words: confidence 0; one word
    assert one[0, 5] == 0.0  # one word against none, counted as one
    assert word_features([0.5], [0.3] * 4, 8000)[0, 4:] == pytest.approx([1.0, math.log(4)])
    assert word_features([0.5], [0.3], 16000)[0, 4] == word_features([0.5], [0.3], 48000)[0, 4] == 0.0


def test_narrowband_is_a_declared_rate_below_16_khz():
    assert [narrowband(r) for r in (8000, 11025, 15999, 16000, 44100, None)] == [True] * 3 + [False] * 3


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
    for _ in range(900):  # segments: right more often when the probability or the first pass's conf is high,
        n = int(rng.integers(1, 5))  # on telephone streams, and when both passes wrote as many words
        probs, fconf = rng.uniform(0.05, 0.99, n), rng.uniform(0, 1, int(rng.integers(1, 5)))
        f = word_features(probs, fconf, 8000 if rng.uniform() < 0.3 else 16000)
        p = 1 / (1 + np.exp(-(0.8 * f[:, 0] + 2.0 * f[:, 1] - 1.5 * f[:, 2] + 1.0 * f[:, 4] - 1.0 * f[:, 5] - 0.5)))
        rows.append(f)
        right += list(rng.uniform(size=n) < p)
    feats, right = np.concatenate(rows), np.asarray(right)
    c = fit_second_pass_calibration(feats, right, "min")
    assert c.words == len(right) and c.single is None
    w = dict(zip(FEATURES, c.weights))
    assert w["logit_prob"] > 0.5 and w["first_pass_conf"] > 1.0 and w["one_word"] < -0.5
    assert w["narrowband"] > 0.5 and w["count_gap"] < -0.5 and c.features == FEATURES
    p = c.apply_features(feats, np.zeros(len(right)))
    assert abs(p.mean() - right.mean()) < 0.01


def test_stored_forms_round_trip_and_a_plain_map_reads_as_one():
    c = SecondPassCalibration((0.5, 1.0, -1.0, 0.1, 0.7, -0.4), -0.2, "min", 300)
    d = json.loads(json.dumps(c.to_dict()))
    assert d["by"] == "features" and d["features"] == list(FEATURES) and SecondPassCalibration.from_dict(d) == c
    plain = cal(0.1, 0.9).to_dict()
    one = SecondPassCalibration.from_dict(plain)
    assert one.single == cal(0.1, 0.9) and one.to_dict() == plain and one.aggregation == "min"
    assert one.apply([0.5], [0.9]) == pytest.approx([0.5])  # the map alone
    for bad, msg in (({k: v for k, v in d.items() if k != "bias"}, "missing field 'bias'"),
                     ({**d, "extra": 1}, "unknown field"), ({**d, "by": "age"}, "this streamd reads"),
                     ({**d, "features": ["logit_prob", "age"]}, "this streamd computes"),
                     ({**d, "features": ["logit_prob", "logit_prob"]}, "each at most once"),
                     ({**d, "features": "logit_prob"}, "this streamd computes"),
                     ({**d, "features": ["logit_prob"]}, "weights must be 1"),
                     ({**d, "weights": [1.0]}, "weights must be 6")):
        with pytest.raises(CalibrationError, match=msg):
            SecondPassCalibration.from_dict(bad)


def test_a_final_s_words_take_the_segment_s_features():
    first = (Word("hallo", 1.2, 1.5, 0.4), Word("wold", 1.7, 2.1, 0.8))
    audio = (np.sin(np.arange(32000) / 9) * 8000).astype(np.int16)
    pending = Final(3, 2, "hallo wold", first, 1.0, 3.0, first_pass_text="hallo wold", second_pass="pending",
                    audio=audio)
    c = SecondPassCalibration((1.0, 2.0, -1.0, 0.0), -1.0, "min", 10, features=FEATURES[:4])
    f = SecondPass(FakeRecognizer("Hello, world."), calibration=c).apply(pending)
    z = math.log(0.8 / 0.2) + 2.0 * 0.6 - 1.0  # raw 0.8 each, first-pass mean conf 0.6, two words
    assert [w.conf for w in f.words] == pytest.approx([1 / (1 + math.exp(-z))] * 2)
    c6 = SecondPassCalibration((1.0, 2.0, -1.0, 0.0, 0.5, -3.0), -1.0, "min", 10)
    for rate, nb in ((8000, 1.0), (16000, 0.0), (None, 0.0)):  # the stream's declared rate rides on the Final
        f = SecondPass(FakeRecognizer("Hello, big world."), calibration=c6).apply(
            dataclasses.replace(pending, sample_rate=rate))
        z = math.log(0.8 / 0.2) + 2.0 * 0.6 + 0.5 * nb - 3.0 * math.log(3 / 2) - 1.0  # three words against two
        assert [w.conf for w in f.words] == pytest.approx([1 / (1 + math.exp(-z))] * 3)
        assert f.sample_rate == rate and "sample_rate" not in f.to_wire()


def test_a_map_stored_before_the_rate_and_count_features_loads_and_applies_with_its_own():
    old = {"version": 1, "by": "features", "features": ["logit_prob", "first_pass_conf", "one_word", "log_words"],
           "weights": [0.67, 1.42, 0.05, -0.55], "bias": 0.004, "measure": "max_prob", "aggregation": "min",
           "words": 3805}  # streamd/assets/second_pass.calibration.json of 2026-12-06
    c = SecondPassCalibration.from_dict(old)
    assert c.features == FEATURES[:4] and c.to_dict() == old
    z = 0.67 * math.log(0.9 / 0.1) + 1.42 * 0.5 + 0.05 + 0.004  # one word: one_word 1, log_words 0
    for rate in (8000, 16000):  # the features it was not fitted with do not change it
        assert c.apply([0.9], [0.5, 0.5, 0.5], rate) == pytest.approx([1 / (1 + math.exp(-z))])
    assert "narrowband" not in c.describe() and "log_words -0.550" in c.describe()


def test_evaluation_labels_words_with_their_stream_s_rate_and_the_passes_word_counts():
    from streamd.evaluation.second import second_pass_words
    from streamd.evaluation.sets import EvalEntry

    first = Final(0, 0, "hallo", (Word("hallo", 0.1, 0.4, 0.5),), 0.0, 1.0, second_pass="pending", sample_rate=8000)
    two = dataclasses.replace(first, text="hello world", pass_no=2, second_pass="done",
                              words=(Word("hello", 0.1, 0.3, 0.7, 0.9), Word("world", 0.3, 0.5, 0.6, 0.8)))
    raw, conf, right, feats, _ = second_pass_words([EvalEntry("a.wav", "a.wav", "hello there")], [[two]], [[first]])
    assert list(raw) == [0.9, 0.8] and list(right) == [True, False]
    assert feats.shape == (2, len(FEATURES))
    assert list(feats[:, FEATURES.index("narrowband")]) == [1.0, 1.0]
    assert list(feats[:, FEATURES.index("count_gap")]) == pytest.approx([math.log(2)] * 2)
    assert list(feats[:, FEATURES.index("first_pass_conf")]) == [0.5, 0.5]
