"""streamd.server.app's graceful drain on loopback with the tiny random model: live streams finished, new ones
refused, and under load every stream ends with done or shutting_down."""

from __future__ import annotations

import asyncio
import json
import os
import time

import numpy as np
import pytest
from websockets.asyncio.client import connect

from helpers import random_audio
from tests.server.wire import TIMEOUT, app_config, drain, pcm16, raw_client, slowed, until
from streamd.engine import Recognizer
from streamd.server.app import App

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame (RFC 6455)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    body = (np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)).tobytes()
    return head + mask + body


async def http_status(port, path):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def test_drain_finishes_live_streams(tiny_ckpt):
    """Shutdown: readyz 503, new streams refused (shutting_down), live ones get final + done, close 1001."""
    cfg = app_config(server={"grace_seconds": 10, "close_timeout": 1.0})
    x = pcm16(random_audio(1.5, seed=4))

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine))
        await app.start()
        clients = []
        for _ in range(2):
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start", "partials": false}')
            assert json.loads(await ws.recv())["type"] == "ready"
            for i in range(0, len(x), 4000):
                await ws.send(x[i:i + 4000])
            clients.append(ws)
        reader, writer = await raw_client(app.port, "/v1/stream")  # holds the drain for close_timeout
        writer.write(ws_frame(1, b'{"type": "start"}') + ws_frame(2, x[:16000]))
        await writer.drain()
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        stopping = asyncio.create_task(app.shutdown())
        await asyncio.sleep(0.1)
        assert await http_status(app.port, "/readyz") == (503, b"draining\n")
        async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as late:
            msgs = await drain(late)
        assert msgs[0]["code"] == "shutting_down" and late.close_code == 1001
        results = [await drain(ws) for ws in clients]
        await stopping
        raw = await reader.read()
        writer.close()
        return results, [ws.close_code for ws in clients], raw, time.monotonic() - t0

    results, codes, raw, took = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    for msgs in results:
        assert [m["type"] for m in msgs][-2:] == ["final", "done"] and msgs[-2]["reason"] == "eos"
        assert msgs[-1]["audio_seconds"] == pytest.approx(1.5)
    assert codes == [1001, 1001]
    assert b'"type": "done"' in raw and b'"audio_seconds": 0.5' in raw  # the raw client got its done too
    assert took < 8


def test_drain_under_load_ends_every_stream_with_done_or_shutting_down(tiny_ckpt, caplog):
    """SIGTERM while the engine is behind: the streams the grace cannot decode are told at once (a step of
    at least 0.04 s decodes at most 4 x 0.16 s of audio: 12.8 s within the 0.8 s grace, while 18 s are
    queued), the short one is finished, and nothing ends in silence."""
    from streamd.engine import Recognizer

    cfg = app_config(server={"grace_seconds": 0.8, "close_timeout": 1.0, "max_steps_per_cycle": 1})
    long, short = pcm16(random_audio(6.0, seed=5)), pcm16(random_audio(0.3, seed=6))

    async def client(port, audio, sent):
        ws = await connect(f"ws://127.0.0.1:{port}/v1/stream")
        await ws.send('{"type": "start"}')
        for i in range(0, len(audio), 32000):
            await ws.send(audio[i:i + 32000])
        sent.set()
        return ws

    async def body():
        rec = slowed(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), 0.04)
        app = App(cfg, recognizer=rec)
        await app.start()
        events = [asyncio.Event() for _ in range(4)]
        clients = [await client(app.port, long, events[i]) for i in range(3)]
        await until(lambda: app.throughput.rate(time.monotonic()) is not None)
        clients.append(await client(app.port, short, events[3]))
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        stopping = asyncio.create_task(app.shutdown())
        results = [await drain(ws) for ws in clients]
        await stopping
        return results, [ws.close_code for ws in clients], time.monotonic() - t0

    results, codes, took = asyncio.run(asyncio.wait_for(body(), 60))
    assert codes == [1001] * 4  # every stream is told, none ends in silence
    for msgs in results[:3]:  # 6 s of audio each at an engine this slow: the grace cannot finish them
        assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "shutting_down", msgs[-3:]
        assert "shutting down" in msgs[-1]["message"]
    assert [m["type"] for m in results[3]][-2:] == ["final", "done"]  # the short one is decoded to its end
    assert took < 0.8 + 1.0 + 2.0
    assert any("cannot be decoded within the grace period; ending them now" in r.getMessage() for r in caplog.records)
