"""streamd.second_pass.confidence and align.agreement: a second-pass word's conf from its probability and whether
the first pass wrote the same word there."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakes import FakeRecognizer  # noqa: F401
from streamd.decode.calibration import Calibration, CalibrationError
from streamd.events import Final, Word
from streamd.second_pass.align import agreement
from streamd.second_pass.confidence import SecondPassCalibration
from streamd.second_pass.rescore import SecondPass


def cal(lo, hi, words=100, aggregation="min"):
    return Calibration((0.0, 1.0), (lo, hi), "max_prob", 1.0, aggregation, words=words)


def test_agreement_marks_the_words_both_passes_wrote_at_one_place():
    assert agreement("turn on the lights".split(), "turn off the light".split()) == [True, False, True, False]
    assert agreement([], ["yes"]) == [False]
    assert agreement(["go"], []) == []
    assert agreement("a b c".split(), "x a b c".split()) == [False, True, True, True]   # an inserted word
    assert agreement("one two".split(), "two".split()) == [True]                      # a deleted word


def test_two_maps_by_agreement_and_one_map_for_both():
    split = SecondPassCalibration(cal(0.5, 1.0), cal(0.0, 0.2, words=50))
    assert split.split and split.words == 150 and split.aggregation == "min"
    assert split.apply([0.5, 0.5, 1.0], [True, False, False]) == pytest.approx([0.75, 0.1, 0.2])
    one = SecondPassCalibration.single(cal(0.0, 1.0))
    assert not one.split and one.words == 100
    assert one.apply([0.3, 0.3], [True, False]) == pytest.approx([0.3, 0.3])
    with pytest.raises(ValueError, match="shape"):
        split.apply([0.5], [True, False])
    with pytest.raises(CalibrationError, match="agree is for"):
        SecondPassCalibration(cal(0, 1), cal(0, 1, aggregation="mean"))


def test_stored_forms_round_trip_and_a_plain_map_reads_as_one():
    split = SecondPassCalibration(cal(0.5, 1.0), cal(0.0, 0.2, words=50))
    d = json.loads(json.dumps(split.to_dict()))
    assert d["by"] == "first_pass_agreement" and SecondPassCalibration.from_dict(d) == split
    plain = cal(0.1, 0.9).to_dict()
    assert SecondPassCalibration.single(cal(0.1, 0.9)).to_dict() == plain
    assert SecondPassCalibration.from_dict(plain) == SecondPassCalibration.single(cal(0.1, 0.9))
    with pytest.raises(CalibrationError, match="missing field 'disagree'"):
        SecondPassCalibration.from_dict({k: v for k, v in d.items() if k != "disagree"})
    with pytest.raises(CalibrationError, match="unknown field"):
        SecondPassCalibration.from_dict({**d, "extra": 1})
    with pytest.raises(CalibrationError, match="this streamd reads"):
        SecondPassCalibration.from_dict({**d, "by": "age"})


def test_a_final_s_words_take_the_map_of_their_agreement():
    first = (Word("hello", 1.2, 1.5, 0.4), Word("wold", 1.7, 2.1, 0.3))
    audio = (np.sin(np.arange(32000) / 9) * 8000).astype(np.int16)
    pending = Final(3, 2, "hello wold", first, 1.0, 3.0, first_pass_text="hello wold", second_pass="pending",
                    audio=audio)
    sp = SecondPass(FakeRecognizer("Hello, world."), calibration=SecondPassCalibration(cal(0.5, 1.0), cal(0.0, 0.2)))
    f = sp.apply(pending)
    assert [w.word for w in f.words] == ["hello", "world"]
    assert [w.conf for w in f.words] == pytest.approx([0.5 + 0.5 * 0.8, 0.2 * 0.8])   # raw 0.8 each
