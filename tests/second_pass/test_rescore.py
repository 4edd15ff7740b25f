"""streamd.second_pass.rescore: a pending Final becomes the second pass's (spoken-form text, the first pass's text
kept, words dated on the stream's axis, calibrated conf), long segments in pieces, failures keep the first pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fakes import FakeRecognizer  # noqa: F401  (tests/second_pass on sys.path via conftest rootdir)
from streamd.config import SecondPassConfig
from streamd.decode.calibration import Calibration
from streamd.events import Final, Word
from streamd.second_pass.rescore import SecondPass, fallback, spoken_words
from streamd.second_pass.models import RecognizedWord


def pending(seconds=2.0, start=1.0, words=(), text="hallo wold"):
    audio = (np.sin(np.arange(int(seconds * 16000)) / 9) * 8000).astype(np.int16)
    return Final(3, 2, text, tuple(words), start, start + seconds, (5, 6), (1, 2), (0.5, 0.5), "endpoint:rule2",
                 ("hallo world",), (-1.0, -2.0), first_pass_text=text, second_pass="pending", audio=audio)


def test_spoken_words_turn_written_words_into_the_models_form():
    ws = [RecognizedWord(w, 0.5) for w in ("Hello,", "$5", "-", "world.")]
    assert spoken_words(ws) == [("hello", 0), ("five", 1), ("dollars", 1), ("world", 3)]


def test_a_pending_final_becomes_the_second_pass():
    model = FakeRecognizer("Hello, world 3.")
    first = (Word("hallo", 1.2, 1.5, 0.4), Word("wold", 1.7, 2.1, 0.3))
    f = SecondPass(model, SecondPassConfig(model="fake", warp=1.0)).apply(pending(words=first))  # heard as is
    assert f.text == "hello world three" and f.pass_no == 2 and f.second_pass == "done"
    assert f.first_pass_text == "hallo wold" and f.audio is None
    assert f.alternatives == () and f.scores == ()  # the first pass's n-best no longer describes the text
    assert (f.stream, f.segment, f.start, f.end, f.reason) == (3, 2, 1.0, 3.0, "endpoint:rule2")
    assert [w.word for w in f.words] == ["hello", "world", "three"]
    assert [(w.start, w.end) for w in f.words[:2]] == [(1.2, 1.5), (1.7, 2.1)]  # anchored on the first pass
    assert all(1.0 <= w.start <= w.end <= 3.0 for w in f.words)
    assert all(w.conf == w.conf_raw == pytest.approx(0.8) for w in f.words)  # no calibration: raw
    assert model.calls == [32000]
    wire = f.to_wire()
    assert wire["pass"] == 2 and wire["first_pass_text"] == "hallo wold" and wire["second_pass"] == "done"


def test_model_times_are_offset_to_the_segment_and_conf_is_calibrated():
    cal = Calibration((0.0, 1.0), (0.1, 0.9), "max_prob", 1.0, "min", words=10)
    f = SecondPass(FakeRecognizer("one two three", times=True), SecondPassConfig(model="fake", warp=1.0),
                   calibration=cal).apply(pending(start=4.0))
    assert [t for w in f.words for t in (w.start, w.end)] == pytest.approx([4.0, 4.2, 4.3, 4.5, 4.6, 4.8])
    assert all(w.conf == pytest.approx(0.74) and w.conf_raw == pytest.approx(0.8) for w in f.words)


def test_other_finals_pass_unchanged_and_failures_keep_the_first_pass():
    sp = SecondPass(FakeRecognizer())
    plain = Final(1, 0, "x")
    assert sp.apply(plain) is plain and plain.to_wire()["pass"] == 1 and "second_pass" not in plain.to_wire()
    model = FakeRecognizer()
    model.fail = True
    f = SecondPass(model).apply(pending())
    assert (f.text, f.pass_no, f.second_pass, f.first_pass_text, f.audio) == ("hallo wold", 1, "failed",
                                                                               "hallo wold", None)
    assert f.alternatives == ("hallo world",)  # the first pass's Final as it was
    assert fallback(pending(), "skipped_overload").to_wire()["second_pass"] == "skipped_overload"


def test_a_segment_longer_than_the_window_is_decoded_in_pieces_cut_at_pauses():
    model = FakeRecognizer("word", window_s=10.0)
    first = tuple(Word(f"w{i}", 0.5 + 3 * i, 1.5 + 3 * i, 0.5) for i in range(8))  # pauses 1.5-3.5, 4.5-6.5, ...
    f = SecondPass(model, SecondPassConfig(model="fake", window_s=28.0, warp=1.0)).apply(
        pending(seconds=25.0, start=0.0, words=first))
    assert len(model.calls) == 3 and sum(model.calls) == 25 * 16000
    assert all(n <= 10 * 16000 for n in model.calls)
    assert model.calls[0] == int(8.5 * 16000)  # cut in the pause between w2 (ends 7.5) and w3 (starts 9.5)
    assert f.text == "word word word" and all(0 <= w.start <= w.end <= 25.0 for w in f.words)
    assert [w.start for w in f.words] == sorted(w.start for w in f.words)


def test_hotwords_go_to_the_model():
    model = FakeRecognizer()
    SecondPass(model, hotwords=("streamd",)).apply(pending())
    assert model.hotwords == [("streamd",)]


def test_select_confidence_keeps_the_first_pass_when_it_is_surer():
    cal = Calibration((0.0, 1.0), (0.0, 1.0), "max_prob", 1.0, "min", words=10)  # conf = the model's 0.8
    sure = (Word("hallo", 1.2, 1.5, 0.95), Word("wold", 1.7, 2.1, 0.9))
    unsure = (Word("hallo", 1.2, 1.5, 0.5), Word("wold", 1.7, 2.1, 0.6))
    sp = SecondPass(FakeRecognizer("Hello world"), calibration=cal, first_calibrated=True)
    kept = sp.apply(pending(words=sure))
    assert (kept.pass_no, kept.second_pass, kept.text, kept.second_pass_text) == (1, "first_pass_preferred",
                                                                                  "hallo wold", "hello world")
    assert kept.words == sure and kept.to_wire()["second_pass_text"] == "hello world"
    assert sp.apply(pending(words=unsure)).pass_no == 2
    assert sp.apply(pending(words=sure), choose=False).pass_no == 2  # evaluation: the second pass whatever
    wide = SecondPass(FakeRecognizer("Hello world"), SecondPassConfig(model="f", select_margin=0.2), cal, (), True)
    assert wide.apply(pending(words=sure)).pass_no == 2  # 0.925 does not beat 0.8 + 0.2
    for other in (SecondPass(FakeRecognizer("Hello world"), calibration=cal),  # first pass not calibrated
                  SecondPass(FakeRecognizer("Hello world"), SecondPassConfig(model="f", select="always"), cal, (), True)):
        assert other.apply(pending(words=sure)).pass_no == 2


def test_a_segment_the_first_pass_heard_nothing_in_is_not_decoded():
    model = FakeRecognizer("thank you")
    f = SecondPass(model).apply(pending(text=""))
    assert (f.pass_no, f.second_pass, f.text, f.audio) == (1, "skipped_no_speech", "", None) and model.calls == []


def test_select_confidence_keeps_the_first_pass_when_the_second_hears_nothing():
    model = FakeRecognizer("", prob=0.9)
    first = (Word("go", 0.2, 0.5, 0.9),)
    kept = SecondPass(model).apply(pending(words=first, text="go"))
    assert (kept.pass_no, kept.second_pass, kept.text, kept.second_pass_text) == (1, "first_pass_preferred", "go", "")
    always = SecondPass(FakeRecognizer(""), SecondPassConfig(model="f", select="always"))
    assert always.apply(pending(words=first, text="go")).text == ""  # always: the second pass, even empty


def test_a_digit_string_is_read_as_the_first_pass_heard_it():
    ws = [RecognizedWord(w, 0.5) for w in ("Call", "2648.")]
    assert spoken_words(ws) == [("call", 0), ("two", 1), ("thousand", 1), ("six", 1), ("hundred", 1),
                                ("forty", 1), ("eight", 1)]  # nothing heard: the usual reading
    heard = ["call", "to", "six", "for", "eight"]
    assert [s for s, _ in spoken_words(ws, heard)] == ["call", "two", "six", "four", "eight"]
    assert [s for s, _ in spoken_words([RecognizedWord("802", 0.5)], ["eight", "oh", "two"])] == ["eight", "oh", "two"]
    assert [s for s, _ in spoken_words([RecognizedWord("1999", 0.5)], ["nineteen", "ninety"])] == [
        "nineteen", "ninety", "nine"]


class _ContextRecognizer:
    """Writes one word per call ("word", "wordy", ...) with ids (call,); records the context it was given."""

    name, aggregation, window_s, takes_context = "ctx", "min", 30.0, True

    def __init__(self):
        self.contexts = []

    def recognize(self, audio, hotwords=(), context=None):
        from streamd.second_pass.models import Recognized
        self.contexts.append(None if context is None else (context.audio.size, context.ids))
        n = len(self.contexts)
        w = "word" + "y" * (n - 1)
        return Recognized(w, (RecognizedWord(w, 0.9),), (n,))


def segment(stream, seg, start, seconds, reason="endpoint:rule2"):
    audio = (np.sin(np.arange(int(seconds * 16000)) / 9) * 8000).astype(np.int16)
    return Final(stream, seg, "hallo", (Word("hallo", start + 0.1, start + 0.3, 0.5),), start, start + seconds,
                 reason=reason, first_pass_text="hallo", second_pass="pending", audio=audio)


def test_a_segment_split_by_an_endpoint_is_heard_after_the_one_before():
    model = _ContextRecognizer()
    sp = SecondPass(model, SecondPassConfig(model="ctx", select="always", warp=1.0))
    sp.apply(segment(1, 0, 0.0, 2.0))
    sp.apply(segment(2, 0, 0.0, 1.0))                 # another stream between them
    out = sp.apply(segment(1, 1, 2.0, 1.5, "eos"))
    assert model.contexts == [None, None, (32000, (1,))]  # stream 1's first segment: its audio and tokens
    assert out.text == "wordyy" and [w.word for w in out.words] == ["wordyy"]
    sp.apply(segment(1, 2, 3.5, 1.0))                 # after the end of the stream: no context
    assert model.contexts[-1] is None


@pytest.mark.parametrize("second, cfg", [
    (segment(1, 1, 2.5, 1.0), {}),                    # not contiguous: a gap the engine did not end at
    (segment(1, 2, 2.0, 1.0), {}),                    # not the next segment
    (segment(1, 1, 2.0, 1.0), {"context_s": 1.5}),    # the previous segment is longer than context_s
    (segment(1, 1, 2.0, 1.0), {"context_s": 0.0}),    # off
    (segment(1, 1, 2.0, 27.0), {}),                   # both do not fit the window (28 s)
])
def test_no_context_where_it_does_not_belong(second, cfg):
    model = _ContextRecognizer()
    sp = SecondPass(model, SecondPassConfig(model="ctx", select="always", warp=1.0, **cfg))
    sp.apply(segment(1, 0, 0.0, 2.0))
    sp.apply(second)
    assert model.contexts == [None, None]


def test_no_context_after_a_reset_or_an_empty_segment():
    model = _ContextRecognizer()
    sp = SecondPass(model, SecondPassConfig(model="ctx", select="always", warp=1.0))
    sp.apply(segment(1, 0, 0.0, 2.0, "reset"))
    sp.apply(segment(1, 1, 2.0, 1.0))
    empty = dataclasses.replace(segment(1, 2, 3.0, 1.0), text="", words=())
    assert sp.apply(empty).second_pass == "skipped_no_speech"
    sp.apply(segment(1, 3, 4.0, 1.0))
    assert model.contexts == [None, None, None]


def test_warp_lengthens_what_the_model_hears_and_maps_its_times_back():
    """``warp`` 0.8: the model hears 1.25x the samples (pitch and formants lowered), its word times come back on
    the segment's axis; 1 leaves the audio as it is."""
    model = FakeRecognizer("one two three", times=True)
    f = SecondPass(model, SecondPassConfig(model="fake", warp=0.8)).apply(pending(start=4.0))
    assert model.calls == [40000]  # 2 s at 16 kHz resampled to 20 kHz
    assert [t for w in f.words for t in (w.start, w.end)] == pytest.approx([4.0, 4.16, 4.24, 4.4, 4.48, 4.64])
    plain = FakeRecognizer("one", times=True)
    SecondPass(plain, SecondPassConfig(model="fake", warp=1.0)).apply(pending())
    assert plain.calls == [32000]
    with pytest.raises(ValueError, match="warp"):
        SecondPassConfig(model="fake", warp=0.3)
