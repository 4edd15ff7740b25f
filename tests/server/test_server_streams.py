"""v1 streams end to end on loopback: ready echo, partial/final/done, wire errors, batching loses no audio."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers import make_app, random_audio, write_checkpoint
from streamd.feed import transcribe_files
from streamd.config import AppConfig, from_dict
from streamd.engine import Recognizer
from helpers import write_wav

TIMEOUT = 30


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny steps are slower with intra-op threads


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


async def drain(ws) -> list[dict]:
    out = []
    try:
        while True:
            out.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return out


async def session(port, start: dict | None, chunks: list, eof=True, path="/v1/stream"):
    """Run one client: start, chunks (bytes or str), eof; returns (messages, close code, close reason)."""
    async with connect(f"ws://127.0.0.1:{port}{path}") as ws:
        if start is not None:
            await ws.send(json.dumps({"type": "start", **start}))
        for c in chunks:
            await ws.send(c)
        if eof:
            await ws.send('{"type": "eof"}')
        msgs = await drain(ws)
        return msgs, ws.close_code, ws.close_reason


def split(data: bytes, rng: random.Random, width=2, max_bytes=12000) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = rng.randint(1, max_bytes // width) * width
        out.append(data[pos:pos + n])
        pos += n
    return out


@pytest.fixture(scope="module")
def ep_ckpt(tmp_path_factory):
    """A random model that decodes sparse text with endpoints inside a few seconds of audio."""
    return write_checkpoint(tmp_path_factory.mktemp("ep") / "ep.pt", seed=2, blank_bias=1.0)


def test_ready_echo_partials_final_done(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            start = {"sample_rate": 8000, "format": "f32le", "method": "modified_beam", "beam": 3,
                     "partials": True, "keywords": False}
            x = random_audio(1.5, rate=8000, seed=3)
            msgs, code, reason = await session(app.port, start, [x[i:i + 700].astype("<f4").tobytes()
                                                                 for i in range(0, x.size, 700)])
            ready = msgs[0]
            assert ready["type"] == "ready" and isinstance(ready["session"], str) and ready["session"]
            assert {k: ready[k] for k in start} == start and ready["format"] == "f32le"
            assert ready["model"]["name"] == "tiny-random" and "modified_beam" in ready["model"]["methods"]
            kinds = [m["type"] for m in msgs[1:]]
            assert "partial" in kinds and kinds[-2:] == ["final", "done"] and "wake" not in kinds
            assert all(k in ("partial", "final", "done") for k in kinds)
            fin = msgs[-2]
            assert fin["reason"] == "eos" and set(fin) >= {"segment", "text", "words", "start", "end"}
            assert msgs[-1]["audio_seconds"] == pytest.approx(1.5, abs=1e-3)
            assert (code, reason) == (1000, "done")
            # partials off: no partial at all, still final + done
            msgs, code, _ = await session(app.port, {"partials": False}, [pcm16(random_audio(1.0, seed=4))])
            assert [m["type"] for m in msgs[1:]][-2:] == ["final", "done"] and code == 1000
            assert "partial" not in [m["type"] for m in msgs]

    run(body())


def test_reset_closes_a_segment(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            x = pcm16(random_audio(1.0, seed=5))
            msgs, code, _ = await session(app.port, {"partials": False}, [x, '{"type": "reset"}', x])
            finals = [m for m in msgs if m["type"] == "final"]
            assert [f["reason"] for f in finals] == ["reset", "eos"] and [f["segment"] for f in finals] == [0, 1]
            assert finals[0]["end"] <= finals[1]["start"] + 1e-6 and code == 1000

    run(body())


@pytest.mark.parametrize("case", ["bad_json", "binary_before_start", "bad_format", "bad_sample_rate", "nan",
                                  "inf", "oversize", "huge", "unknown_type"])
def test_wire_errors_then_server_still_serves(tiny_ckpt, case):
    async def body():
        async with make_app(tiny_ckpt, limits={"max_message_bytes": 8192}) as app:
            start, chunks = {}, []
            if case == "bad_json":
                start, chunks = None, ['{"type": "start", "sample_rate": 16000']
            elif case == "binary_before_start":
                start, chunks = None, [b"\0\0" * 10]
            elif case == "bad_format":
                start = {"format": "ulaw"}
            elif case == "bad_sample_rate":
                start = {"sample_rate": 5}
            elif case in ("nan", "inf"):
                bad = np.zeros(800, np.float32)
                bad[17] = np.nan if case == "nan" else np.inf
                start, chunks = {"format": "f32le"}, [np.zeros(800, "<f4").tobytes(), bad.astype("<f4").tobytes()]
            elif case == "oversize":
                chunks = [b"\0" * 8194]  # over max_message_bytes, under the transport's hard cap
            elif case == "huge":
                chunks = [b"\0" * 300000]  # over the hard cap (2x the larger limit): the transport closes 1009 by itself
            elif case == "unknown_type":
                chunks = ['{"type": "pause"}']
            msgs, code, reason = await session(app.port, start, chunks, eof=False)
            expected = {"bad_json": ("bad_json", 1008), "binary_before_start": ("binary_before_start", 1003),
                        "bad_format": ("bad_format", 1003), "bad_sample_rate": ("bad_sample_rate", 1003),
                        "nan": ("bad_audio", 1003), "inf": ("bad_audio", 1003), "oversize": ("too_large", 1009),
                        "huge": (None, 1009), "unknown_type": ("bad_message", 1008)}[case]
            errors = [m for m in msgs if m["type"] == "error"]
            assert code == expected[1]
            if expected[0] is None:
                assert errors == []
            else:
                assert [e["code"] for e in errors] == [expected[0]] and errors[0]["message"]
                assert reason == expected[0]
            needle = {"bad_sample_rate": "got 5", "bad_format": "'ulaw'", "nan": "non-finite",
                      "inf": "non-finite", "oversize": "8194 bytes"}.get(case)
            if needle:
                assert needle in errors[0]["message"]
            # the server and the engine are fine: a normal stream works afterwards
            good = pcm16(random_audio(0.5, seed=1))
            msgs, code, _ = await session(app.port, {}, [good[:8000], good[8000:]])
            assert msgs[-1]["type"] == "done" and code == 1000, msgs[-1]
            await asyncio.sleep(0.05)
            assert app.rec.num_streams == 0 and not app.conns

    run(body())


def test_client_vanishing_mid_stream_leaves_others_alone(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            x = pcm16(random_audio(2.0, seed=7))

            async def vanisher():
                ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
                await ws.send('{"type": "start"}')
                await ws.recv()
                for i in range(0, len(x) // 2, 3200):
                    await ws.send(x[i:i + 3200])
                ws.transport.abort()  # no close frame: the client is just gone

            other = asyncio.create_task(session(app.port, {}, [x[i:i + 1600] for i in range(0, len(x), 1600)]))
            await vanisher()
            msgs, code, _ = await other
            assert msgs[-1]["type"] == "done" and code == 1000
            for _ in range(100):
                if not app.conns and app.rec.num_streams == 0:
                    break
                await asyncio.sleep(0.02)
            assert not app.conns and app.rec.num_streams == 0

    run(body())


def test_slow_reader_does_not_stall_others(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"outbox_messages": 8}) as app:
            x = pcm16(random_audio(3.0, seed=8))
            lazy = await connect(f"ws://127.0.0.1:{app.port}/v1/stream", max_queue=1)
            await lazy.send('{"type": "start"}')
            for i in range(0, len(x), 640):  # many chunks, never reading a reply
                await lazy.send(x[i:i + 640])
            msgs, code, _ = await session(app.port, {}, [x[i:i + 3200] for i in range(0, len(x), 3200)])
            assert msgs[-1]["type"] == "done" and code == 1000
            lazy.transport.abort()

    run(body())


@pytest.mark.parametrize("which", ["tiny", "endpoints"])
def test_no_lost_audio_concurrent_clients_match_transcribe(tiny_ckpt, ep_ckpt, tmp_path, which):
    """Four clients, different audio and rates, random chunk sizes: each equals `transcribe_files`."""
    ckpt = tiny_ckpt if which == "tiny" else ep_ckpt
    rates = [16000, 8000, 22050, 44100]
    paths = [write_wav(tmp_path / f"{i}.wav", random_audio(2.0 + 0.7 * i, rate=r, seed=10 + i), r)
             for i, r in enumerate(rates)]
    from streamd.audio.pcm import load_audio

    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    ref = transcribe_files(rec, paths)
    ref_finals = {p: [e.to_wire() for e in ref[p] if type(e).__name__ == "Final"] for p in paths}

    async def client(port, path, seed):
        x, rate = load_audio(path)
        rng = random.Random(seed)
        chunks = split(pcm16(x), rng)
        async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": rate}))
            for c in chunks:
                await ws.send(c)
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.uniform(0, 0.01))
            await ws.send('{"type": "eof"}')
            return await drain(ws)

    async def body():
        async with make_app(ckpt) as app:
            got = await asyncio.gather(*(client(app.port, p, 100 + i) for i, p in enumerate(paths)))
            return got, app.metrics.render().decode()

    got, metrics = run(body())
    any_text = False
    for p, msgs in zip(paths, got):
        finals = [m for m in msgs if m["type"] == "final"]
        want = ref_finals[p]
        assert [f["text"] for f in finals] == [f["text"] for f in want], p
        assert [(f["start"], f["end"], f["reason"]) for f in finals] == [(f["start"], f["end"], f["reason"])
                                                                         for f in want]
        for f, g in zip(finals, want):
            assert [(w["word"], w["start"], w["end"]) for w in f["words"]] == \
                [(w["word"], w["start"], w["end"]) for w in g["words"]]
            assert np.allclose([w["conf"] for w in f["words"]], [w["conf"] for w in g["words"]], atol=2e-3)
        any_text |= any(f["text"] for f in finals)
        assert msgs[-1]["type"] == "done"
    assert any_text
    if which == "endpoints":
        assert any(f["reason"].startswith("endpoint") for msgs in got for f in msgs if f["type"] == "final")
    value = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith("streamd_batch_size_")}
    assert value['streamd_batch_size_bucket{le="1.0"}'] < value["streamd_batch_size_count"]  # streams were batched


def test_engine_runner_commands_and_isolation(tiny_ckpt):
    """The worker-side runner alone: keys map to engine streams; a failing command only fails its stream."""
    from streamd.server.app import EngineRunner
    from streamd.server.commands import CloseStream, FeedPcm, FinishStream, OpenStream

    rec = Recognizer.from_checkpoint(tiny_ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    runner = EngineRunner(rec, max_steps=2)
    x = pcm16(random_audio(1.0, seed=3))
    real_accept = rec.accept_pcm

    def flaky_accept(sid, data, fmt):
        if len(data) == 1002:
            raise RuntimeError("boom")
        return real_accept(sid, data, fmt)

    rec.accept_pcm = flaky_accept
    res = runner.cycle([OpenStream(7, {"sample_rate": 16000}), OpenStream(8, {"sample_rate": 16000}),
                        OpenStream(9, {"sample_rate": 5}),
                        FeedPcm(7, x, "s16le", ack=True), FeedPcm(8, x[:1002], "s16le", ack=True),
                        FinishStream(7)])
    assert res.opened[:2] == [(7, None), (8, None)] and res.opened[2][0] == 9 and "sample_rate" in res.opened[2][1]
    assert res.acks == {7: 1, 8: 1} and res.audio_seconds == pytest.approx(1.0)
    errs = [(k, e.code) for k, e in res.events if type(e).__name__ == "Error"]
    assert errs == [(8, "internal")] and not rec.has_stream(2)  # key 8's engine stream was closed
    assert len(res.steps) == 2 and res.pending  # max_steps bounds a cycle
    events = list(res.events)
    while res.pending:
        res = runner.cycle([])
        events += res.events
    kinds = [type(e).__name__ for k, e in events if k == 7]
    assert kinds[-2:] == ["Final", "Done"] and rec.num_streams == 0
    assert runner.cycle([FeedPcm(7, x, "s16le"), CloseStream(8)]).events == []  # gone: no-op
