"""streamd.events: the wire form of every event (docs/protocol.md: rounded times and confidences, what is not on
the wire), and ``from_wire`` as the inverse of ``to_wire`` for every event the engine emits."""

from __future__ import annotations

import dataclasses

import pytest

from helpers import random_audio, write_checkpoint
from streamd import events as E


def test_inverse_on_hand_made_events():
    w = E.Word("turn", 0.4, 0.62, 0.931, 0.412)
    evs = [E.Partial(7, 3, "turn on", (w, E.Word("on", 0.7, 0.8, 0.5)), start=0.32, end=0.96, backlog=0.31),
           E.Final(7, 3, "turn on", (w,), 0.32, 1.2, reason="endpoint:rule2", alternatives=("turn one", "tern on")),
           E.Final(7, 4, "", reason="eos"),
           E.WakeWord(7, "hey stream", 0.973, 0.64, 1.2),
           E.WakeWord(7, "hey savant", 0.41, 1.12, 1.76, "verified", -2.31),
           E.Error(7, "bad_audio", "f32le audio contains 1 non-finite samples"),
           E.Done(7, 15.32)]
    for ev in evs:
        wire = ev.to_wire()
        back = E.from_wire(wire, stream=7)
        assert back == ev and type(back) is type(ev) and type(ev).from_wire(wire, 7) == ev
        assert back.to_wire() == wire
    assert E.from_wire(evs[0].to_wire()).stream == 0  # the stream id is not on the wire
    assert E.Word.from_wire({"word": "a", "start": 0, "end": 0.1, "conf": 0.5}).conf_raw == 0.5  # older servers


def test_inverse_on_what_the_engine_emits(tmp_path):
    """Every event of a real decode (partials, finals with words, wake, done) survives the round trip; what
    is not on the wire (tokens, frames, scores) takes its default."""
    import wave

    import numpy as np

    from streamd.feed import transcribe_files
    from streamd.engine import Recognizer

    ckpt = write_checkpoint(tmp_path / "m.pt", seed=3)
    path = str(tmp_path / "a.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((random_audio(2.0, 16000, seed=1) * 32767).astype("<i2").tobytes())
    evs = transcribe_files(Recognizer.from_checkpoint(ckpt), [path])[path]
    kinds = {type(e) for e in evs}
    assert {E.Partial, E.Final, E.Done} <= kinds and any(e.words for e in evs if isinstance(e, E.Final))
    for ev in evs:
        wire = ev.to_wire()
        back = E.from_wire(wire, ev.stream)
        assert type(back) is type(ev) and back.to_wire() == wire
        if isinstance(ev, (E.Partial, E.Final)):
            assert back.tokens == () and back.segment == ev.segment and back.text == ev.text
            assert [x.word for x in back.words] == [x.word for x in ev.words]


def test_not_an_event_is_a_clear_error():
    with pytest.raises(ValueError, match=r"not an event message: type 'ready' \(events: partial, final, wake"):
        E.from_wire({"type": "ready", "session": "x"})
    with pytest.raises(ValueError, match="not an event message: type None"):
        E.from_wire(["final"])
    with pytest.raises(ValueError, match="final message has no 'text' field"):
        E.from_wire({"type": "final", "segment": 0})
    with pytest.raises(ValueError, match="expected a 'wake' message, got type 'final'"):
        E.WakeWord.from_wire({"type": "final"})
    with pytest.raises(ValueError, match="word message has no 'conf' field"):
        E.from_wire({"type": "partial", "segment": 0, "text": "a", "words": [{"word": "a", "start": 0, "end": 1}]})
    # fields a newer server adds are ignored
    assert E.from_wire({"type": "done", "audio_seconds": 1.5, "new_field": 1}) == E.Done(0, 1.5)
    assert E.from_wire({"type": "error", "code": "overloaded", "message": "m", "retry_after": 2}) == \
        E.Error(0, "overloaded", "m")


def test_the_wire_form_of_each_event():
    w = E.Word("lights", 1.23456, 1.98765, 0.87654, 0.51234)
    assert w.to_wire() == {"word": "lights", "start": 1.23, "end": 1.99, "conf": 0.877, "conf_raw": 0.512}
    assert E.Word("a", 0, 1, 0.25).conf_raw == 0.25  # the raw measure defaults to conf
    p = E.Partial(3, 1, "turn", (w,), tokens=(5, 6), token_frames=(2, 3), token_confs=(0.5, 0.6), start=0.321,
                  end=1.999, backlog=0.456)
    assert p.to_wire() == {"type": "partial", "segment": 1, "text": "turn", "words": [w.to_wire()], "start": 0.32,
                           "end": 2.0, "backlog": 0.46}
    f = E.Final(3, 1, "turn", (), 0.3, 1.2, tokens=(5,), reason="endpoint:rule1", scores=(-1.5,))
    assert f.to_wire() == {"type": "final", "segment": 1, "text": "turn", "words": [], "start": 0.3, "end": 1.2,
                           "reason": "endpoint:rule1", "pass": 1}  # no alternatives key without alternatives
    assert E.Final(3, 1, "a", alternatives=("b",)).to_wire()["alternatives"] == ["b"]
    two = E.Final(3, 1, "hello", pass_no=2, first_pass_text="hallo", second_pass="done", audio=[1, 2])
    assert {k: two.to_wire()[k] for k in ("pass", "first_pass_text", "second_pass")} == {
        "pass": 2, "first_pass_text": "hallo", "second_pass": "done"}  # the audio is not on the wire
    assert E.Final.from_wire(two.to_wire()) == E.Final(0, 1, "hello", pass_no=2, first_pass_text="hallo",
                                                       second_pass="done")
    assert E.WakeWord(3, "hey stream", 0.97349, 0.6449, 1.2051).to_wire() == {
        "type": "wake", "keyword": "hey stream", "score": 0.973, "start": 0.64, "end": 1.21}
    verified = E.WakeWord(3, "hey savant", 0.5, 1.0, 1.2, "verified", -0.001,
                          check=E.WakeCheck([0.0] * 8, -8.0, True)).to_wire()
    assert verified["verification"] == "verified" and str(verified["verifier_gap"]) == "0.0"  # no audio, no "-0.0"
    assert E.Error(3, "bad_audio", "boom", fatal=False).to_wire() == {"type": "error", "code": "bad_audio",
                                                                        "message": "boom"}
    assert E.Done(3, 2.00049).to_wire() == {"type": "done", "audio_seconds": 2.0}
    assert all("stream" not in ev.to_wire() for ev in (p, f, E.Done(3)))  # the stream id is not on the wire


def test_events_are_frozen_and_typed_on_the_wire():
    assert set(E.WIRE_TYPES) == {"partial", "final", "wake", "error", "done"}
    for kind, cls in E.WIRE_TYPES.items():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    samples = [E.Partial(0, 0, ""), E.Final(0, 0, ""), E.WakeWord(0, "k", 0.5, 0, 1), E.Error(0, "c", "m"), E.Done(0)]
    assert [ev.to_wire()["type"] for ev in samples] == list(E.WIRE_TYPES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        samples[4].audio_seconds = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="a word must be a JSON object, got str"):
        E.Word.from_wire("hello")
    with pytest.raises(ValueError, match="a done message must be a JSON object, got list"):
        E.Done.from_wire([])
