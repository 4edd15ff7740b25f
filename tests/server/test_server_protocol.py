"""Sans-I/O protocol cores: v1 session, Vosk session, limits, auth helpers, the outbox (no sockets)."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from streamd.config import LimitsConfig
from streamd.events import Done, Error, Final, Partial, WakeWord, Word
from streamd.server.outbox import Outbox
from streamd.server.protocol import (CLOSE_CODES, Audio, Close, Finish, Open, Reset, Send, TokenBucket, V1Session,
                                     bearer_token, origin_ok, token_ok)
from streamd.server.vosk import VoskSession, classify_text

INFO = {"name": "tiny", "methods": ["beam", "greedy", "modified_beam"], "chunk_seconds": 0.16}
LIM = LimitsConfig(max_message_bytes=4096, max_text_bytes=512, max_realtime=2.0, burst_seconds=1.0)


def v1(limits=LIM) -> V1Session:
    return V1Session("s1", limits, INFO, "greedy", 4)


def started(limits=LIM, **start) -> V1Session:
    s = v1(limits)
    acts = s.receive(json.dumps({"type": "start", **start}), 0.0)
    assert isinstance(acts[0], Open), acts
    return s


def error_of(actions):
    """(code, message, close code) of an error + close action pair."""
    assert len(actions) == 2 and isinstance(actions[0], Send) and isinstance(actions[1], Close), actions
    msg = actions[0].message
    assert msg["type"] == "error" and set(msg) == {"type", "code", "message"}
    assert actions[1].code == CLOSE_CODES[msg["code"]] and actions[1].reason == msg["code"]
    return msg["code"], msg["message"], actions[1].code


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


# ----------------------------------------------------------------------------- auth helpers


def test_tokens_and_origins():
    assert bearer_token({"Authorization": "Bearer abcdefgh"}, "/v1/stream") == "abcdefgh"
    assert bearer_token({"Authorization": "bearer  xyz12345 "}, "/v1/stream") == "xyz12345"
    assert bearer_token({}, "/v1/stream?token=qq%2Bqqqqqq&x=1") == "qq+qqqqqq"
    assert bearer_token({"Authorization": "Basic Zm9v"}, "/v1/stream") is None
    assert token_ok(None, []) and token_ok("anything", [])
    assert token_ok("secret-2", ["secret-1", "secret-2"]) and not token_ok("secret-3", ["secret-1"])
    assert not token_ok(None, ["secret-1"])
    assert origin_ok(None, "h:1", [])  # not a browser
    assert origin_ok("http://h:1", "h:1", ["self"]) and not origin_ok("http://evil:1", "h:1", ["self"])
    assert origin_ok("https://app.example", "h:1", ["https://app.example"])
    assert origin_ok("http://evil", "h:1", ["*"]) and not origin_ok("http://evil", "h:1", [])


# ----------------------------------------------------------------------------- vosk


def vlim(**kw):
    return LimitsConfig(**{"max_message_bytes": 4096, "max_text_bytes": 512, "max_realtime": 0.0, **kw})


def test_vosk_classify_lenient():
    assert classify_text('{"eof" : 1}') == ("eof", None)
    assert classify_text('{ "eof":0 }') == ("eof", None)  # any eof key, as vosk-server
    assert classify_text("{'eof' : 1}") == ("eof", None)  # not JSON but clearly eof
    assert classify_text("  {eof: 1}") == ("eof", None)
    assert classify_text('{ "config" : { "sample_rate" : 8000.0, "words": 1, "max_alternatives": 0 } }') == \
        ("config", {"sample_rate": 8000.0, "words": 1, "max_alternatives": 0})
    with pytest.raises(Exception, match="expected"):
        classify_text('{"hello": 1}')


def test_vosk_lockstep_replies():
    s = VoskSession(vlim(), 8000)
    assert s.receive('{ "config" : { "sample_rate" : 16000, "words": true } }', 0.0) == []
    acts = s.receive(b"\0\0" * 100, 0.0)
    assert acts[0] == Open({"sample_rate": 16000, "partials": True, "keywords": False})
    assert acts[1] == Audio(b"\0\0" * 100, "s16le", ack=True)
    s.receive(b"\0\0" * 100, 0.0)
    s.receive(b"", 0.0)  # an empty frame gets its reply too
    assert s.owed == 3
    s.event(Partial(1, 0, "he"))
    assert s.applied(1) == [Send({"partial": "he"}, droppable=True, when_behind=True)]
    s.event(Final(1, 0, "hello", (Word("hello", 0.0, 0.4, 0.8),), reason="endpoint:rule2"))
    s.event(Partial(1, 1, "wo"))
    assert s.applied(2) == [Send({"result": [{"word": "hello", "start": 0.0, "end": 0.4, "conf": 0.8}],
                                  "text": "hello"}), Send({"partial": "wo"}, droppable=True, when_behind=True)]
    assert s.receive('{"eof" : 1}', 0.0) == [Finish()]
    s.event(Final(1, 1, "world", (Word("world", 0.5, 0.9, 0.7),), reason="eos"))
    acts = s.event(Done(1, 1.0))
    assert acts[0] == Send({"result": [{"word": "world", "start": 0.5, "end": 0.9, "conf": 0.7}], "text": "world"},
                           last=True)
    assert acts[1] == Close(1000, "done")


def test_vosk_final_waits_for_owed_replies_and_merges_results():
    s = VoskSession(vlim(), 16000)
    s.receive(b"\0\0", 0.0)
    s.receive(b"\0\0", 0.0)
    s.receive('{"eof": 1}', 0.0)
    # one cycle: two endpoints then the end of stream, before the frames are acknowledged
    s.event(Final(1, 0, "a", (Word("a", 0, 0.1, 1.0),), reason="endpoint:rule2"))
    s.event(Final(1, 1, "b", (Word("b", 0.2, 0.3, 1.0),), reason="endpoint:rule2"))
    s.event(Final(1, 2, "c", (Word("c", 0.4, 0.5, 1.0),), reason="endpoint:rule2"))
    s.event(Final(1, 3, "", (), reason="eos"))
    assert s.event(Done(1, 0.0)) == []  # replies are still owed
    acts = s.applied(2)
    assert [a.message["text"] for a in acts[:3]] == ["a", "b", "c"]  # the rest merges into the final
    assert [w["word"] for w in acts[2].message["result"]] == ["c"] and acts[3] == Close(1000, "done")
    s = VoskSession(vlim(), 16000)  # eof with several undelivered results: one merged final
    s.receive('{"eof": 1}', 0.0)
    for i, t in enumerate("xyz"):
        s.event(Final(1, i, t, (Word(t, i, i + 0.5, 1.0),), reason="endpoint:rule1"))
    s.event(Final(1, 3, "w", (Word("w", 3, 3.5, 1.0),), reason="eos"))
    acts = s.event(Done(1, 4.0))
    assert acts[0].message["text"] == "x y z w" and [w["word"] for w in acts[0].message["result"]] == list("xyzw")


def test_vosk_words_and_max_alternatives():
    w = (Word("call", 0.0, 0.3, 0.9), Word("home", 0.3, 0.6, 0.8))
    fin = Final(1, 0, "call home", w, reason="endpoint:rule2", alternatives=("call hum", "cold home"),
                scores=(-1.0, -2.5, -3.0))
    s = VoskSession(vlim(), 16000)  # words false: text only
    s.receive('{"config": {"words": false}}', 0.0)
    assert s.receive(b"\0\0", 0.0)[0] == Open({"sample_rate": 16000, "partials": True, "keywords": False})
    s.event(fin)
    assert s.applied(1) == [Send({"text": "call home"})]
    s = VoskSession(vlim(), 16000)  # alternatives: beam search, up to N texts, best first with its words
    s.receive('{"config": {"max_alternatives": 2}}', 0.0)
    assert s.receive(b"\0\0", 0.0)[0] == Open({"sample_rate": 16000, "partials": True, "keywords": False,
                                                "method": "modified_beam", "beam": 4})
    s.receive(b"\0\0", 0.0)
    s.event(fin)
    s.event(Partial(1, 1, "a"))
    alts = s.applied(2)
    assert alts[0] == Send({"alternatives": [
        {"confidence": -1.0, "text": "call home",  # Vosk's word entries: the v1 word without conf_raw
         "result": [{"word": "call", "start": 0.0, "end": 0.3, "conf": 0.9},
                    {"word": "home", "start": 0.3, "end": 0.6, "conf": 0.8}]},
        {"confidence": -2.5, "text": "call hum"}]})
    assert alts[1] == Send({"partial": "a"}, droppable=True, when_behind=True)  # partials are unchanged
    s.receive('{"eof": 1}', 0.0)
    s.event(Final(1, 1, "now", (Word("now", 1.0, 1.2, 0.7, conf_raw=0.2),), reason="eos", alternatives=("no",),
                  scores=(-0.5, -0.9)))
    final = s.event(Done(1, 1.5))[0].message
    assert final == {"alternatives": [{"confidence": -0.5, "text": "now",
                                       "result": [{"word": "now", "start": 1.0, "end": 1.2, "conf": 0.7}]},
                                      {"confidence": -0.9, "text": "no"}]}
    # several undelivered segments merge: earlier best texts lead every alternative, scores add up
    s = VoskSession(vlim(), 16000)
    s.receive('{"config": {"max_alternatives": 3, "words": 0}}', 0.0)
    s.receive('{"eof": 1}', 0.0)
    s.event(fin)
    s.event(Final(1, 1, "now", (), reason="eos", alternatives=("no",), scores=(-0.5, -0.9)))
    assert s.event(Done(1, 1.5))[0].message == {"alternatives": [
        {"confidence": -1.5, "text": "call home now"}, {"confidence": -1.9, "text": "call home no"}]}
    s = VoskSession(vlim(), 16000)
    s.receive('{"config": {"max_alternatives": 8}}', 0.0)
    assert s.receive(b"\0\0", 0.0)[0].options["beam"] == 8


@pytest.mark.parametrize("cfg, needle", [
    ('{"phrase_list": ["yes", "no"]}', "config.phrase_list"),
    ('{"max_alternatives": -1}', "config.max_alternatives must be an integer 0..64"),
    ('{"max_alternatives": 2.5}', "config.max_alternatives"),
    ('{"max_alternatives": true}', "config.max_alternatives"),
    ('{"words": "yes"}', "config.words must be true or false"),
])
def test_vosk_config_errors_name_the_key(cfg, needle):
    c, msg, close = error_of(VoskSession(vlim(), 16000).receive('{"config": %s}' % cfg, 0.0))
    assert (c, close) == ("bad_message", 1008) and needle in msg


def test_vosk_errors():
    s = VoskSession(vlim(), 16000)
    c, msg, _ = error_of(s.receive('{"config": {"sample_rate": 4000}}', 0.0))
    assert c == "bad_sample_rate" and "config.sample_rate" in msg
    c, _, _ = error_of(VoskSession(vlim(), 16000).receive("{nope", 0.0))
    assert c == "bad_json"
    c, _, _ = error_of(VoskSession(vlim(), 16000).receive(b"\0" * 5000, 0.0))
    assert c == "too_large"
    c, _, _ = error_of(VoskSession(vlim(), 16000).receive(b"\0" * 3, 0.0))
    assert c == "bad_audio"
    s = VoskSession(vlim(max_realtime=1.0, burst_seconds=1.0, max_message_bytes=65536), 16000)
    s.receive(b"\0\0" * 16000, 0.0)
    c, _, _ = error_of(s.receive(b"\0\0" * 1600, 0.0))
    assert c == "rate_limited"


def test_vosk_timeout_shutdown_and_oversized_text():
    """The decisions both protocols share (SessionBase), seen through the Vosk session."""
    c, msg, _ = error_of(VoskSession(vlim(), 16000).receive('{"config": {"x": "' + "a" * 600 + '"}}', 0.0))
    assert c == "too_large" and "max_text_bytes (512)" in msg
    c, msg, close = error_of(VoskSession(vlim(), 16000).timeout())
    assert (c, close) == ("idle_timeout", 1008) and "idle_timeout" in msg
    c, _, close = error_of(VoskSession(vlim(), 16000).shutdown())  # nothing configured or sent yet
    assert (c, close) == ("shutting_down", 1001)
    s = VoskSession(vlim(), 16000)
    s.receive(b"\0\0" * 800, 0.0)
    assert s.shutdown() == [Finish()] and s.input_closed and s.shutdown() == []
    assert s.timeout() == [] and s.receive(b"\0\0" * 800, 0.1) == []  # input closed: ignored
    assert s.fail("engine_error", "x")[-1] == Close(1011, "engine_error") and s.closed
    assert s.fail("engine_error", "again") == []  # idempotent


# ----------------------------------------------------------------------------- outbox


def test_outbox_coalesces_partials_and_bounds_finals():
    async def body():
        box = Outbox(4)
        assert box.put("p1", True) and box.put("p2", True)  # p2 replaces p1
        assert box.put("f1") and box.put("p3", True) and box.put("p4", True)
        assert len(box) == 3 and box.dropped == 2
        assert await box.get() == "p2" and await box.get() == "f1" and await box.get() == "p4"
        for i in range(4):
            assert box.put(f"f{i}")
        assert not box.put("one too many")
        box.close(1000, "done")
        assert box.put("late")  # ignored once closing
        got = [await box.get() for _ in range(5)]
        assert got[:4] == ["f0", "f1", "f2", "f3"] and got[4] == Close(1000, "done")

    asyncio.run(asyncio.wait_for(body(), 5))


def test_outbox_reference_random():
    """Oracle: the outbox equals "a list where a droppable item replaces a droppable tail"."""
    async def body(seed):
        rng = np.random.default_rng(seed)
        box, ref = Outbox(1000), []
        for i in range(300):
            if rng.random() < 0.3 and ref:
                assert await box.get() == ref.pop(0)[0]
            else:
                d = bool(rng.random() < 0.6)
                if d and ref and ref[-1][1]:
                    ref[-1] = (str(i), True)
                else:
                    ref.append((str(i), d))
                box.put(str(i), d)
        assert [await box.get() for _ in ref] == [r[0] for r in ref]

    for seed in range(3):
        asyncio.run(asyncio.wait_for(body(seed), 5))
