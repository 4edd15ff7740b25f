"""streamd.server.protocol: the sans-I/O v1 session (start, audio, reset, eof, errors and their close codes),
its limits (token bucket with the largest frame, minimum audio rate) and the public model info.  No sockets:
time is an argument."""

from __future__ import annotations

import json
import random

import pytest

from tests.server.wire import TENTH, error_of
from streamd.config import LimitsConfig
from streamd.events import Done, Error, Final, Partial, WakeWord, Word
from streamd.server.protocol import (Audio, Close, Finish, MinAudioRate, Open, Reset, Send, TokenBucket, V1Session,
                                     public_model_info)
from streamd.server.vosk import VoskSession

# the model as the daemon describes it (ready echoes it as given); paths for public_model_info
INFO = {"name": "tiny", "methods": ["beam", "greedy", "modified_beam"], "chunk_seconds": 0.16,
        "path": "/srv/models/tiny.pt", "lm": {"path": "/srv/models/tiny.lm.pt", "order": 3, "weight": 0.2}}


LIM = LimitsConfig(max_message_bytes=4096, max_text_bytes=512, max_realtime=2.0, burst_seconds=1.0)


def v1(limits=LIM) -> V1Session:
    return V1Session("s1", limits, INFO, "greedy", 4)


def started(limits=LIM, **start) -> V1Session:
    s = v1(limits)
    acts = s.receive(json.dumps({"type": "start", **start}), 0.0)
    assert isinstance(acts[0], Open), acts
    return s


# ----------------------------------------------------------------------------- v1


def test_start_defaults_and_ready_echo():
    s = v1()
    (op,) = s.receive('{"type": "start"}', 0.0)
    assert op == Open({"sample_rate": 16000, "method": "greedy", "beam": 4, "partials": True, "keywords": True,
                       "endpointing": True})
    (ready,) = s.opened()
    m = ready.message
    assert m["type"] == "ready" and m["session"] == "s1" and m["format"] == "s16le" and m["model"] == INFO
    assert (m["sample_rate"], m["method"], m["beam"], m["partials"], m["keywords"]) == (16000, "greedy", 4, True, True)


def test_start_beam_defaults_to_the_config_else_the_method_own():
    """No beam in the start message: the config's decoding.beam where it sets one, else the method's own
    (modified_beam 8, the others 4); ready echoes the beam the stream got."""
    for config_beam, method, want in ((None, "modified_beam", 8), (None, "beam", 4), (None, "greedy", 4),
                                      (6, "modified_beam", 6), (6, "beam", 6)):
        s = V1Session("s", LIM, INFO, "greedy", config_beam)
        (op,) = s.receive(json.dumps({"type": "start", "method": method}), 0.0)
        assert op.options["beam"] == want, (config_beam, method)
        assert s.opened()[0].message["beam"] == want


def test_start_all_fields():
    s = v1()
    (op,) = s.receive(json.dumps({"type": "start", "sample_rate": 8000.0, "format": "f32le", "method": "modified_beam",
                                  "beam": 7, "partials": False, "keywords": False, "endpointing": False}), 0.0)
    assert op.options == {"sample_rate": 8000, "method": "modified_beam", "beam": 7, "partials": False,
                          "keywords": False, "endpointing": False}
    assert s.opened()[0].message["format"] == "f32le"


@pytest.mark.parametrize("start, code, needle", [
    ({"sample_rate": 5}, "bad_sample_rate", "sample_rate must be an integer 8000..48000, got 5"),
    ({"sample_rate": "16000"}, "bad_sample_rate", "sample_rate"),
    ({"sample_rate": True}, "bad_sample_rate", "sample_rate"),
    ({"format": "mp3"}, "bad_format", "format must be one of ['s16le', 'f32le'], got 'mp3'"),
    ({"method": "ctc_greedy"}, "bad_message", "method must be one of"),
    ({"beam": 0}, "bad_message", "beam must be an integer 1..64, got 0"),
    ({"beam": 2.5}, "bad_message", "beam"),
    ({"partials": "yes"}, "bad_message", "partials must be true or false, got 'yes'"),
    ({"keywords": 1}, "bad_message", "keywords must be true or false"),
    ({"smaple_rate": 8000}, "bad_message", "unknown field 'smaple_rate'"),
])
def test_start_validation_names_the_field(start, code, needle):
    s = v1()
    c, msg, _ = error_of(s.receive(json.dumps({"type": "start", **start}), 0.0))
    assert c == code and needle in msg
    assert s.closed and s.receive(b"\0\0", 0.0) == []  # closed sessions ignore input


@pytest.mark.parametrize("text, code, needle", [
    ("{not json", "bad_json", "not valid JSON"),
    ("[1, 2]", "bad_message", "JSON object"),
    ('{"sample_rate": 8000}', "bad_message", "no 'type' field"),
    ('{"type": "stop"}', "bad_message", "unknown message type 'stop'"),
    ('{"type": "eof"}', "bad_message", "eof before start"),
    ('{"type": "reset"}', "bad_message", "reset before start"),
    ("x" * 600, "too_large", "exceeds max_text_bytes (512)"),
])
def test_bad_text_messages(text, code, needle):
    c, msg, close = error_of(v1().receive(text, 0.0))
    assert c == code and needle in msg and close in (1008, 1009)


def test_binary_before_start_and_audio_checks():
    c, msg, close = error_of(v1().receive(b"\0\0", 0.0))
    assert (c, close) == ("binary_before_start", 1003) and "start" in msg
    c, msg, close = error_of(started().receive(b"\0" * 4097, 0.0))
    assert (c, close) == ("too_large", 1009) and "4097 bytes exceeds max_message_bytes (4096)" in msg
    c, msg, _ = error_of(started().receive(b"\0" * 3, 0.0))
    assert c == "bad_audio" and "2-byte s16le" in msg
    c, msg, _ = error_of(started(format="f32le").receive(b"\0" * 6, 0.0))
    assert c == "bad_audio" and "4-byte f32le" in msg
    s = started()
    assert s.receive(b"", 0.0) == []
    assert s.receive(b"\1\0" * 10, 0.0) == [Audio(b"\1\0" * 10, "s16le")]


def test_stream_flow_reset_eof_done():
    s = started()
    assert s.receive('{"type": "reset"}', 0.0) == [Reset()]
    assert s.receive('{"type": "start"}', 0.0)[0].message["code"] == "bad_message"  # twice -> error
    s = started()
    p = Partial(1, 0, "ab", (Word("ab", 0.0, 0.2, 0.9),))
    assert s.event(p) == [Send(p.to_wire(), droppable=True)]
    f = Final(1, 0, "ab", (), 0.0, 0.3, reason="endpoint:rule2")
    w = WakeWord(1, "hey stream", 0.9, 0.1, 0.5)
    assert s.event(f) == [Send(f.to_wire())] and s.event(w) == [Send(w.to_wire())]
    assert s.receive('{"type": "eof"}', 0.0) == [Finish()]
    assert s.input_closed and s.receive(b"\0\0", 0.0) == []  # after eof: ignored
    assert s.timeout() == []  # no idle timeout once input is closed
    acts = s.event(Done(1, 1.5))
    assert acts == [Send({"type": "done", "audio_seconds": 1.5}), Close(1000, "done")]
    assert s.event(Partial(1, 0, "late")) == []


def test_engine_error_and_idle_and_shutdown():
    s = started()
    c, msg, close = error_of(s.event(Error(1, "bad_audio", "f32le audio contains 1 non-finite samples")))
    assert (c, close) == ("bad_audio", 1003) and "non-finite" in msg
    c, msg, close = error_of(started().timeout())
    assert (c, close) == ("idle_timeout", 1008) and "idle_timeout" in msg
    c, _, close = error_of(v1().shutdown())
    assert (c, close) == ("shutting_down", 1001)
    s = started()
    assert s.shutdown() == [Finish()] and s.input_closed and s.shutdown() == []
    assert s.event(Done(1, 0.5))[-1] == Close(1001, "shutting_down")


def test_create_failure_reported():
    s = started()
    c, msg, _ = error_of(s.opened("method 'x' needs a CTC head"))
    assert c == "bad_message" and "CTC head" in msg


def test_rate_limit_in_the_core():
    s = started()  # 16 kHz s16le: 32000 bytes per second; 2x real time, burst 1 s
    sec = b"\0\0" * 1600  # 0.1 s
    for i in range(10):  # the 1 s burst at t=0
        assert s.receive(sec, 0.0) == [Audio(sec, "s16le")]
    c, msg, close = error_of(s.receive(sec, 0.0))
    assert (c, close) == ("rate_limited", 1008) and "2x real time" in msg
    s = started()
    t = 0.0
    for i in range(200):  # exactly 2x real time for 10 s of audio: always fine
        assert s.receive(sec, t)[0] == Audio(sec, "s16le")
        t += 0.05


def test_public_model_info():
    pub = public_model_info(INFO)
    assert pub["path"] == "tiny.pt" and pub["lm"]["path"] == "tiny.lm.pt" and pub["lm"]["order"] == 3
    assert set(pub) == set(INFO) and INFO["path"] == "/srv/models/tiny.pt"  # fields kept, input untouched
    assert public_model_info(INFO, show_paths=True) == INFO
    assert public_model_info({"path": "", "lm": None}) == {"path": "", "lm": None}


# ----------------------------------------------------------------------------- token bucket


def token_bucket_reference(rate, capacity, requests):
    """Slow oracle: tokens(t) = min(capacity, tokens at the last accepted/declined request + rate * dt)."""
    out, tokens, last = [], capacity, None
    for amount, now in requests:
        level = tokens if last is None else min(capacity, tokens + rate * (now - last))
        ok = amount <= level
        tokens, last = (level - amount if ok else level), now
        out.append(ok)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_token_bucket_matches_reference(seed):
    rng = random.Random(seed)
    rate, cap = rng.uniform(0.5, 4), rng.uniform(0.5, 5)
    now, reqs = 0.0, []
    for _ in range(300):
        now += rng.expovariate(5.0)
        reqs.append((rng.uniform(0, 1.0), now))
    b = TokenBucket(rate, cap)
    assert [b.take(a, t) for a, t in reqs] == token_bucket_reference(rate, cap, reqs)
    assert all(TokenBucket(0.0, 1.0).take(a, t) for a, t in reqs)  # rate 0: unlimited


def test_one_largest_frame_always_fits_the_burst():
    b = TokenBucket(4.0, 30.0)
    assert b.take(32.768, 0.0, oversize=True)  # a full bucket admits a frame larger than the burst ...
    assert not b.take(0.1, 0.0, oversize=True)  # ... and owes the difference
    assert not b.take(32.768, 8.0, oversize=True)  # refilled to 29.2 only
    assert b.take(32.768, 8.2, oversize=True)  # full again after (32.768 - 30 + 30) / 4 s
    assert not TokenBucket(4.0, 30.0).take(32.768, 0.0)  # without oversize: the plain bucket (reference)
    lim = LimitsConfig()  # the defaults: 1 MiB frames, 30 s burst
    mib = b"\0" * lim.max_message_bytes
    s = V1Session("s", lim, INFO)
    s.receive('{"type": "start"}', 0.0)
    assert s.receive(mib, 0.0) == [Audio(mib, "s16le")]  # 32.8 s of 16 kHz s16le
    assert error_of(s.receive(TENTH, 0.0))[0] == "rate_limited"  # the average stays bounded
    s = V1Session("s", lim, INFO)
    s.receive('{"type": "start", "sample_rate": 8000}', 0.0)
    assert s.receive(mib, 0.0)[0] == Audio(mib, "s16le")  # 65.5 s at 8 kHz
    v = VoskSession(lim, 8000)
    assert v.receive(mib, 0.0)[-1] == Audio(mib, "s16le", ack=True)


# ----------------------------------------------------------------------------- minimum audio rate


RATE = LimitsConfig(max_message_bytes=65536, max_realtime=0.0, idle_timeout=0.0, min_audio_rate=0.1,
                    min_audio_window=10.0)


def test_min_audio_rate_rule():
    r = MinAudioRate(0.1, 10.0)
    assert r.due() is None and r.check(0.0, 5.0) is None and r.due() == 15.0  # the first call starts it
    assert r.check(0.5, 14.9) is None  # the window is not over yet
    assert r.check(1.0, 15.0) is None and r.due() == 25.0  # 1 s in 10 s: exactly enough; next window
    assert "0.40 s of audio in the last 12.0 s" in r.check(1.4, 27.0)  # late check: judged over 12 s
    assert MinAudioRate(0.0, 10.0).check(0.0, 1e9) is None and MinAudioRate(0.0, 10.0).due() is None


def test_trickle_fails_and_a_steady_stream_passes():
    s = V1Session("s", RATE, INFO)
    assert s.tick(0.0) == [] and s.deadline() == 10.0  # the I/O layer starts the clock at connect
    s.receive('{"type": "start"}', 0.5)
    t = 1.0
    while t < 10.0:  # 2 bytes every 2.5 s: the idle timer never fires, but that is no stream
        assert s.receive(b"\0\0", t) == [Audio(b"\0\0", "s16le")]
        t += 2.5
    code, msg, close = error_of(s.tick(10.0))
    assert (code, close) == ("audio_too_slow", 1008) and "limits.min_audio_rate" in msg and "eof" in msg
    assert s.closed and s.deadline() is None and s.tick(99.0) == []
    s = V1Session("s", RATE, INFO)  # 0.1 s every 0.5 s: a fifth of real time, for a minute
    s.tick(0.0)
    s.receive('{"type": "start"}', 0.0)
    for i in range(120):
        t = 0.5 * (i + 1)
        if s.deadline() is not None and t >= s.deadline():
            assert s.tick(t) == []
        assert s.receive(TENTH, t) == [Audio(TENTH, "s16le")]
    assert s.receive('{"type": "eof"}', 60.1) == [Finish()]
    assert s.deadline() is None and s.tick(500.0) == []  # after eof nothing more is owed


def test_late_message_is_judged_after_the_window_and_vosk_config_spam_fails():
    s = V1Session("s", RATE, INFO)
    s.tick(0.0)
    s.receive('{"type": "start"}', 0.0)
    code, _, _ = error_of(s.receive(b"\0\0" * 16000, 11.0))  # the window ended empty before this second
    assert code == "audio_too_slow"
    v = VoskSession(RATE, 16000)  # configs forever, no audio: a held slot
    v.tick(0.0)
    for t in range(1, 10):
        assert v.receive('{"config": {"sample_rate": 16000}}', float(t)) == []
    code, _, close = error_of(v.tick(10.0))
    assert (code, close) == ("audio_too_slow", 1008)
    v = VoskSession(RATE, 16000)
    v.tick(0.0)
    v.receive(b"\0\0" * 16000, 1.0)  # 1 s of audio in the first 10 s
    assert v.tick(10.0) == [] and v.audio_seconds == 1.0
    assert v.receive('{"eof": 1}', 12.0) == [Finish()] and v.deadline() is None
