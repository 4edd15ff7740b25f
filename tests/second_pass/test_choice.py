"""streamd.second_pass.choice: the segment choice of ``select: learned`` (which pass a final carries), its fit
weighted by the error gap, its stored form, and its use by SecondPass and by calibration."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from fakes import FakeRecognizer  # noqa: F401
from streamd.config import SecondPassConfig
from streamd.decode.calibration import Calibration, CalibrationError
from streamd.events import Final, Word
from streamd.second_pass.choice import (CHOICE_FEATURES, RESCORE_CLIP, RESCORE_NATS, SegmentChoice, choice_features,
                                       fit_segment_choice)
from streamd.second_pass.confidence import SecondPassCalibration
from streamd.second_pass.rescore import SecondPass

IDENTITY = SecondPassCalibration(single=Calibration((0.0, 1.0), (0.0, 1.0), "max_prob", 1.0, "min", words=10))
FEATS = SecondPassCalibration((1.0, 0, 0, 0, 0, 0), 0.0, "min", 10)  # conf = the model's probability


def pending(words, text="hallo wold", rate=16000):
    audio = (np.sin(np.arange(32000) / 9) * 8000).astype(np.int16)
    return Final(3, 2, text, tuple(words), 1.0, 3.0, (5, 6), (1, 2), (0.5, 0.5), "endpoint:rule2",
                 first_pass_text=text, second_pass="pending", audio=audio, sample_rate=rate)


def test_choice_features_follow_their_definitions():
    f = choice_features([0.2, 0.6], [0.9, 0.7, 0.5], True, -12.0)
    assert f.shape == (len(CHOICE_FEATURES),)
    assert list(f) == pytest.approx([0.4, 0.7, math.log(3 / 2), 1.0, -12.0 / RESCORE_NATS])
    assert list(choice_features([], [0.5])) == pytest.approx([0.0, 0.5, 0.0, 0.0, 0.0])  # none counted as one word
    assert choice_features([0.5], [0.5], rival_gap=-1e3)[-1] == -RESCORE_CLIP  # clipped both ways
    assert choice_features([0.5], [0.5], rival_gap=1e3)[-1] == RESCORE_CLIP


def test_the_weighted_fit_is_the_fit_of_each_segment_repeated_by_its_error_gap():
    """The oracle: plain gradient descent on the definition (each segment repeated gap times, mean cross
    entropy, L2 1e-3 on the weights, none on the bias)."""
    rng = np.random.default_rng(0)
    x = np.c_[rng.uniform(0, 1, 300), rng.uniform(0, 1, 300), rng.normal(0, 0.5, 300), rng.uniform(size=300) < 0.3,
              rng.uniform(-3, 0, 300)]
    y = rng.uniform(size=300) < 1 / (1 + np.exp(-(-4 * x[:, 0] + 5 * x[:, 1] - x[:, 2] + x[:, 3] - x[:, 4])))
    gap = rng.integers(1, 5, 300)
    fast = fit_segment_choice(x, y, gap)
    rep = np.repeat(np.arange(300), gap)
    xb, t = np.c_[x[rep], np.ones(rep.size)], y[rep].astype(float)
    theta, reg = np.zeros(6), np.array([1e-3] * 5 + [0.0])
    for _ in range(40000):
        p = 1 / (1 + np.exp(-(xb @ theta)))
        theta -= 1.0 * (xb.T @ (p - t) / rep.size + reg * theta)
    assert [*fast.weights, fast.bias] == pytest.approx(theta, abs=2e-3)
    assert fast.segments == 300


def test_a_fit_learns_which_pass_is_surer_and_decides_with_the_sign_of_its_score():
    rng = np.random.default_rng(1)
    m1, m2 = rng.uniform(0, 1, 600), rng.uniform(0, 1, 600)
    feats = np.stack([choice_features([a], [b]) for a, b in zip(m1, m2)])
    second = m2 - m1 + rng.normal(0, 0.1, 600) > 0
    c = fit_segment_choice(feats, second, np.ones(600))
    w = dict(zip(CHOICE_FEATURES, c.weights))
    assert w["first_conf"] < -2 and w["second_conf"] > 2
    agree = np.mean([c.second_better([a], [b]) == (b > a) for a, b in zip(m1, m2)])
    assert agree > 0.95
    assert c.second_better([0.1], [0.9]) and not c.second_better([0.9], [0.1])
    with pytest.raises(ValueError, match="each pass made fewer"):
        fit_segment_choice(feats, np.ones(600, bool), np.ones(600))
    with pytest.raises(ValueError, match="features"):
        fit_segment_choice(feats[:, :2], second, np.ones(600))


def test_stored_forms_round_trip_with_the_calibration_and_bad_ones_are_refused():
    c = SegmentChoice((-8.0, 6.0, -1.5, 1.3, 1.2), 2.5, 400)
    d = json.loads(json.dumps(c.to_dict()))
    assert SegmentChoice.from_dict(d) == c and d["features"] == list(CHOICE_FEATURES)
    old = {"features": list(CHOICE_FEATURES[:4]), "weights": [-8.0, 6.0, -1.5, 1.3], "bias": 2.5, "segments": 400}
    assert SegmentChoice.from_dict(old) == dataclasses.replace(c, weights=(-8.0, 6.0, -1.5, 1.3, 0.0))  # before rescore
    full = dataclasses.replace(FEATS, choice=c)
    back = SecondPassCalibration.from_dict(json.loads(json.dumps(full.to_dict())))
    assert back == full and back.choice == c
    assert "choice" not in FEATS.to_dict() and SecondPassCalibration.from_dict(FEATS.to_dict()).choice is None
    for bad, msg in (({**d, "features": ["second_conf"]}, "this streamd computes"), ({**d, "weights": [1.0]},
                     "weights must be a list of 5"), ({**d, "extra": 1}, "expected features"), ({**d, "segments": -1}, ">= 0")):
        with pytest.raises(CalibrationError, match=msg):
            SegmentChoice.from_dict(bad)
    with pytest.raises(CalibrationError, match="only with a features calibration"):
        dataclasses.replace(IDENTITY, choice=c)


def test_select_learned_follows_the_stored_choice_and_confidence_the_margin():
    sure = (Word("hallo", 1.2, 1.5, 0.95), Word("wold", 1.7, 2.1, 0.9))  # the model's words: conf 0.8
    unsure = (Word("hallo", 1.2, 1.5, 0.3), Word("wold", 1.7, 2.1, 0.2))
    prefer_second = dataclasses.replace(FEATS, choice=SegmentChoice((0, 0, 0, 0, 0), 5.0))
    prefer_first = dataclasses.replace(FEATS, choice=SegmentChoice((0, 0, 0, 0, 0), -5.0))
    by_band = dataclasses.replace(FEATS, choice=SegmentChoice((0, 0, 0, 10.0, 0), -5.0))  # second only on telephone
    model = FakeRecognizer("Hello world", prob=0.8)

    def served(cal, words, rate=16000, **cfg):
        sp = SecondPass(model, SecondPassConfig(model="f", **cfg), cal, (), True)
        return sp.apply(pending(words, rate=rate)).pass_no

    assert served(prefer_second, sure) == 2  # the margin rule would keep the surer first pass
    assert served(prefer_first, unsure) == 1 and served(prefer_first, sure) == 1
    assert served(by_band, sure, 8000) == 2 and served(by_band, sure, 16000) == 1
    assert served(prefer_second, sure, select="confidence") == 1  # the margin rule: 0.925 > 0.8 + 0.1
    assert served(prefer_first, unsure, select="confidence") == 2
    assert served(FEATS, sure) == 1 and served(FEATS, unsure) == 2  # no stored choice: the margin rule
    assert served(prefer_first, unsure, select="always") == 2
    sp = SecondPass(model, SecondPassConfig(model="f"), prefer_second, (), True)
    two = sp.apply(pending(sure), choose=False)
    assert sp.choose(pending(sure), two).pass_no == 2 and sp.choose(pending(sure), two, 0.1).pass_no == 1  # a margin


def test_choice_segments_count_each_pass_s_errors_on_files_with_one_segment_both_passes_wrote():
    from streamd.evaluation.second import choice_segments
    from streamd.evaluation.sets import EvalEntry

    first = Final(0, 0, "hallo wold", (Word("hallo", 0.1, 0.4, 0.9), Word("wold", 0.5, 0.8, 0.7)), 0.0, 1.0,
                  second_pass="pending", sample_rate=8000)
    two = dataclasses.replace(first, text="hello world", pass_no=2, second_pass="done",
                              words=(Word("hello", 0.1, 0.3, 0.6, 0.6), Word("world", 0.3, 0.5, 0.4, 0.4)))
    quiet = Final(0, 1, "", (), 1.0, 2.0, second_pass="skipped_no_speech")
    other = dataclasses.replace(first, stream=1)
    entries = [EvalEntry("a.wav", "a.wav", "hello world"), EvalEntry("b.wav", "b.wav", "hello world")]
    segs = choice_segments(entries, [[first, quiet], [other, dataclasses.replace(other, segment=1)]],
                           [[two, quiet], [dataclasses.replace(two, stream=1)] * 2], FEATS, 0.1)
    assert segs.keys == ["a.wav\thello world"]  # b: two segments both passes wrote
    assert list(segs.first_errors) == [2] and list(segs.second_errors) == [0]
    assert segs.feats[0] == pytest.approx([0.8, 0.5, 0.0, 1.0, 0.0])  # the second pass's conf through FEATS
    assert list(segs.margin_first) == [True]  # 0.8 > 0.5 + 0.1


class RivalScorer(FakeRecognizer):
    """A FakeRecognizer that scores rivals: log P(rival) - log P(its own) = -``per_word`` nats for each word of the
    rival that its own text lacks (lower case, punctuation dropped); ``rivals``: the rivals it was given."""

    scores_rivals = True

    def __init__(self, *a, per_word: float = 10.0, **k):
        super().__init__(*a, **k)
        self.per_word, self.rivals = per_word, []

    def recognize(self, audio, hotwords=(), rival=None):
        rec = super().recognize(audio, hotwords)
        self.rivals.append(rival)
        own = {w.strip(",.").lower() for w in self.text.split()}
        return dataclasses.replace(rec, rival_gap=-self.per_word * sum(w not in own for w in rival.split()))


def test_the_first_pass_rescored_by_the_second_model_decides_through_rescore():
    sure = (Word("hallo", 1.2, 1.5, 0.95), Word("wold", 1.7, 2.1, 0.9))
    by_rescore = dataclasses.replace(FEATS, choice=SegmentChoice((0, 0, 0, 0, -4.0), -2.0))  # second when gap < -5
    close = RivalScorer("Hello wold", per_word=4.0)  # the first pass's words nearly as likely as its own: -4
    far = RivalScorer("Hello world", per_word=10.0)  # two words it finds unlikely: -20
    for model, served in ((close, 1), (far, 2)):
        sp = SecondPass(model, SecondPassConfig(model="f"), by_rescore, (), True)
        out = sp.apply(pending(sure))
        assert out.pass_no == served and model.rivals == ["hallo wold"]  # the first pass's words of the piece
    two = SecondPass(far, SecondPassConfig(model="f"), by_rescore, (), True).apply(pending(sure), choose=False)
    assert two.rival_gap == -20.0
    plain = SecondPass(FakeRecognizer("Hello world"), SecondPassConfig(model="f"), by_rescore, (), True)
    assert plain.apply(pending(sure), choose=False).rival_gap is None  # a model that scores no texts: rescore 0
    assert plain.apply(pending(sure)).pass_no == 1


def test_a_long_segment_s_pieces_each_score_their_own_first_pass_words_and_the_gaps_add():
    words = tuple(Word(w, t, t + 0.3, 0.9) for w, t in (("one", 1.1), ("two", 1.6), ("three", 2.4), ("four", 2.8)))
    model = RivalScorer("One", per_word=1.0, window_s=1.2)
    sp = SecondPass(model, SecondPassConfig(model="f", window_s=1.2), FEATS, (), True)
    two = sp.apply(pending(words, text="one two three four"), choose=False)
    assert len(model.rivals) == 2 and " ".join(model.rivals) == "one two three four"
    assert two.rival_gap == -3.0  # "two", "three", "four" are not in "One"
