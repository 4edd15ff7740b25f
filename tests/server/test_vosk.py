"""streamd.server.vosk: the sans-I/O Vosk-compatible session (lenient messages, lock-step replies, words and
alternatives, errors, coalesced partial replies for a client that is behind), then vosk-server compatibility
on loopback: a client playing vosk-server's websocket/test.py, on /vosk and on vosk_port."""

from __future__ import annotations

import asyncio
import json
import wave

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers import random_audio, write_wav
from tests.server.wire import TENTH, TIMEOUT, app_config, drain, error_of, pcm16, slowed, vosk_lockstep
from streamd.config import AppConfig, LimitsConfig, from_dict
from streamd.engine import Recognizer
from streamd.events import Done, Final, Partial, Word
from streamd.feed import transcribe_files
from streamd.server.app import App
from streamd.server.outbox import Outbox
from streamd.server.protocol import Audio, Close, Finish, Open, Send
from streamd.server.vosk import VoskSession, classify_text

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


# ----------------------------------------------------------------------------- sans-I/O session


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
                                                "method": "modified_beam", "beam": 8})  # the default modified beam
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


def test_vosk_partial_replies_coalesce_only_when_the_client_is_behind():
    async def body():
        s = VoskSession(LimitsConfig(max_realtime=0.0), 16000)
        for _ in range(400):  # 400 frames in one engine cycle (a client that sends without reading)
            s.receive(TENTH, 0.0)
        s.event(Partial(1, 0, "he"))
        s.event(Final(1, 0, "hello", (), reason="endpoint:rule2"))
        s.event(Partial(1, 1, "wo"))
        acts = s.applied(400)
        assert len(acts) == 400 and acts[0].message == {"result": [], "text": "hello"} and not acts[0].droppable
        assert all(a == Send({"partial": "wo"}, droppable=True, when_behind=True) for a in acts[1:])
        box = Outbox(256)
        for a in acts:
            assert box.put(json.dumps(a.message), a.droppable, a.when_behind, a.last)  # never overflows
        assert len(box) == 128 and box.dropped == 272  # one reply per frame until half full, then coalesced
        s.receive('{"eof": 1}', 0.0)
        while len(box) < 256:  # fill the outbox with results the client does not read
            assert box.put('{"text": "x"}')
        assert not box.put('{"text": "one too many"}')
        s.event(Final(1, 1, "world", (), reason="eos"))
        final, close = s.event(Done(1, 2.0))
        assert final == Send({"result": [], "text": "world"}, last=True) and close == Close(1000, "done")
        assert box.put(json.dumps(final.message), final.droppable, final.when_behind, final.last)  # forced
        box.close(close.code, close.reason)
        got = [await box.get() for _ in range(len(box))]
        assert len(got) == 257 and json.loads(got[-1]) == {"result": [], "text": "world"}
        assert await box.get() == close
        box = Outbox(8)  # a lock-step client (one reply waiting at a time) gets every one
        for i in range(20):
            assert box.put(str(i), True, True) and await box.get() == str(i)
        assert box.dropped == 0

    asyncio.run(asyncio.wait_for(body(), 5))


# ----------------------------------------------------------------------------- on loopback


def make_app(ckpt, **server) -> App:
    cfg = from_dict(AppConfig, {"server": {"port": 0, "vosk_port": 0, **server}, "engine": {"device": "cpu"}})
    return App(cfg, recognizer=Recognizer.from_checkpoint(ckpt, cfg.engine))


def reference_texts(ckpt, path) -> list[str]:
    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    return [e.text for e in transcribe_files(rec, [path])[path] if type(e).__name__ == "Final" and e.text]


async def vosk_test_py(uri, wav_path):
    """What vosk-server's websocket/test.py does, returning every reply it printed."""
    replies = []
    async with connect(uri) as websocket:
        wf = wave.open(wav_path, "rb")
        await websocket.send('{ "config" : { "sample_rate" : %d } }' % (wf.getframerate()))
        buffer_size = int(wf.getframerate() * 0.2)  # 0.2 seconds of audio
        while True:
            data = wf.readframes(buffer_size)
            if len(data) == 0:
                break
            await websocket.send(data)
            replies.append(await websocket.recv())
        await websocket.send('{"eof" : 1}')
        replies.append(await websocket.recv())
        try:
            extra = await asyncio.wait_for(websocket.recv(), 5)
        except ConnectionClosed:
            extra = None
        return replies, extra, websocket.close_code, wf.getnframes()


@pytest.mark.parametrize("where", ["path", "port"])
def test_vosk_test_py_lockstep(ep_ckpt, tmp_path, where):
    wav = write_wav(tmp_path / "a.wav", random_audio(4.0, rate=16000, seed=3), 16000)
    want = reference_texts(ep_ckpt, wav)

    async def body():
        async with make_app(ep_ckpt) as app:
            uri = f"ws://127.0.0.1:{app.port}/vosk" if where == "path" else f"ws://127.0.0.1:{app.vosk_port}"
            return await vosk_test_py(uri, wav)

    replies, extra, code, nframes = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert extra is None and code == 1000  # exactly one message after eof, then a normal close
    objs = [json.loads(r) for r in replies]
    assert len(objs) == -(-nframes // 3200) + 1  # one reply per 0.2 s frame, plus the final
    texts = []
    for o in objs[:-1]:
        assert set(o) in ({"partial"}, {"result", "text"}), o
        if "text" in o and o["text"]:
            texts.append(o["text"])
    final = objs[-1]
    assert set(final) == {"result", "text"}
    for w in final["result"]:
        assert set(w) == {"conf", "start", "end", "word"} and 0 <= w["conf"] <= 1 and w["start"] <= w["end"]
    texts += [final["text"]] if final["text"] else []
    assert texts == want and want  # same segments as the engine decoding the file
    assert any("result" in o for o in objs[:-1])  # an endpoint result arrived mid-stream


def test_vosk_pipelined_and_default_rate(tiny_ckpt, tmp_path):
    """No config (vosk_sample_rate applies), frames sent without waiting: replies stay one per frame, in order."""
    x = random_audio(2.0, rate=8000, seed=9)
    wav = write_wav(tmp_path / "b.wav", x, 8000)
    want = reference_texts(tiny_ckpt, wav)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()

    async def body():
        async with make_app(tiny_ckpt, vosk_sample_rate=8000) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                frames = [pcm[i:i + 1234] for i in range(0, len(pcm), 1234)]
                for f in frames:
                    await ws.send(f)
                await ws.send('{"eof" :1}')
                msgs = []
                try:
                    while True:
                        msgs.append(json.loads(await ws.recv()))
                except ConnectionClosed:
                    pass
                return frames, msgs, ws.close_code

    frames, msgs, code = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert len(msgs) == len(frames) + 1 and code == 1000
    assert all("partial" in m or "result" in m for m in msgs[:-1])
    texts = [m["text"] for m in msgs if m.get("text")]
    assert texts == want


def test_vosk_max_alternatives_end_to_end(ep_ckpt, tmp_path):
    """max_alternatives through the daemon: beam-search n-best, distinct texts, best first with its words."""
    x = random_audio(3.0, rate=16000, seed=5)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()

    async def body():
        async with make_app(ep_ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                return await vosk_lockstep(ws, '{"config": {"sample_rate": 16000, "max_alternatives": 5}}', pcm,
                                           6400)

    replies = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    results = [r for r in replies if "alternatives" in r]
    assert results and results[-1] is replies[-1]
    assert all(set(r) in ({"partial"}, {"alternatives"}) for r in replies)
    for r in results:
        alts = r["alternatives"]
        texts = [a["text"] for a in alts]
        assert 1 <= len(alts) <= 5 and len(set(texts)) == len(texts)
        assert set(alts[0]) == {"confidence", "text", "result"} and all(set(a) == {"confidence", "text"}
                                                                          for a in alts[1:])
        assert [a["confidence"] for a in alts[1:]] == sorted((a["confidence"] for a in alts[1:]), reverse=True)
    assert any(len(r["alternatives"]) > 1 for r in results)


def test_vosk_errors_close_cleanly(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.vosk_port}/anything") as ws:
                await ws.send('{"config": {"sample_rate": 1000}}')
                msg = json.loads(await ws.recv())
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
            assert msg["code"] == "bad_sample_rate" and "config.sample_rate" in msg["message"]
            assert ws.close_code == 1003
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:  # the server is fine
                await ws.send(b"\0\0" * 1600)
                assert set(json.loads(await ws.recv())) == {"partial"}
                await ws.send('{"eof" : 1}')
                assert set(json.loads(await ws.recv())) == {"result", "text"}

    asyncio.run(asyncio.wait_for(body(), TIMEOUT))


def test_vosk_client_sending_faster_than_one_cycle_is_not_cut_off(tiny_ckpt):
    """400 frames of 10 ms land in one engine cycle: the partial replies coalesce (no slow_consumer), the
    final result arrives, close 1000."""
    from streamd.engine import Recognizer

    cfg = app_config(limits={"max_realtime": 0})
    pcm = pcm16(random_audio(4.0, seed=8))

    async def body():
        rec = slowed(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), 0.2)
        async with App(cfg, recognizer=rec) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                await ws.send('{"config": {"sample_rate": 16000}}')
                for i in range(0, len(pcm), 320):
                    await ws.send(pcm[i:i + 320])
                await ws.send('{"eof": 1}')
                msgs = await drain(ws)
                return msgs, ws.close_code, app.metrics.render().decode()

    msgs, code, metrics = asyncio.run(asyncio.wait_for(body(), 60))
    assert code == 1000 and "slow_consumer" not in metrics
    assert not [m for m in msgs if m.get("type") == "error"]
    assert all(set(m) <= {"partial", "result", "text"} for m in msgs) and "text" in msgs[-1]
    assert 1 < len(msgs) < 401  # coalesced, yet more than the final alone


def test_alternatives_beam_is_the_configured_one_or_n():
    """max_alternatives N decodes with modified beam at max(N, the configured beam, else the default 8)."""
    for config_beam, n, want in ((None, 2, 8), (None, 12, 12), (4, 2, 4), (4, 6, 6)):
        s = VoskSession(vlim(), 16000, config_beam)
        s.receive('{"config": {"max_alternatives": %d}}' % n, 0.0)
        assert s.receive(b"\0\0", 0.0)[0].options["beam"] == want, (config_beam, n)
