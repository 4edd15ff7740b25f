"""``from_wire`` is the inverse of ``to_wire`` for every event the engine emits (streamd/events.py)."""

from __future__ import annotations

import pytest

from helpers import random_audio, write_checkpoint
from streamd import events as E


def test_inverse_on_hand_made_events():
    w = E.Word("turn", 0.4, 0.62, 0.931, 0.412)
    evs = [E.Partial(7, 3, "turn on", (w, E.Word("on", 0.7, 0.8, 0.5)), start=0.32, end=0.96, backlog=0.31),
           E.Final(7, 3, "turn on", (w,), 0.32, 1.2, reason="endpoint:rule2", alternatives=("turn one", "tern on")),
           E.Final(7, 4, "", reason="eos"),
           E.WakeWord(7, "hey stream", 0.973, 0.64, 1.2),
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
