"""streamd.server.conn: a websocket connection that does not read is disconnected, not waited for; the daemon's
microphone stream is broadcast to /v1/events subscribers, retried with back-off, its errors logged once."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
from websockets.asyncio.client import connect

from helpers import random_audio
from tests.server.wire import TIMEOUT, app_config, make_app, run
from streamd.engine import Recognizer
from streamd.events import Final, Partial
from streamd.server.app import App, Conn
from streamd.server.protocol import V1Session

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


class FakeWs:
    def __init__(self):
        self.closed_with = None

    async def send(self, text):
        await asyncio.sleep(3600)  # never drains: a client that does not read

    async def close(self, code=1000, reason=""):
        self.closed_with = (code, reason)


def test_slow_consumer_is_disconnected_not_waited_for(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"outbox_messages": 4}) as app:
            proto = V1Session("x", app.config.limits, app.model_info)
            ws = FakeWs()
            conn = Conn(app, ws, 99, proto)
            conn.start()
            proto.receive('{"type": "start"}', 0.0)
            for i in range(20):  # partials coalesce: never a reason to disconnect
                conn.on_event(Partial(1, 0, f"p{i}"))
            assert ws.closed_with is None and len(conn.outbox) <= 2
            for i in range(6):  # finals cannot be dropped: the bounded outbox overflows
                conn.on_event(Final(1, i, f"f{i}"))
            await asyncio.sleep(0.05)
            assert ws.closed_with == (1008, "slow_consumer") and conn.aborted and conn.sender.cancelled()
            m = app.metrics.render().decode()
            assert 'streamd_errors_total{code="slow_consumer"} 1.0' in m

    run(body())


# ----------------------------------------------------------------------------- microphone


def gated(blocks, gate: threading.Event, fail_after: int | None = None):
    gate.wait(10)
    for i, b in enumerate(blocks):
        if fail_after is not None and i == fail_after:
            from streamd.capture import MicError

            raise MicError("input device 'fake' stopped delivering audio (device lost or unplugged?)")
        yield b


def test_mic_events_broadcast(tiny_ckpt):
    from streamd.capture import MicCapture, ReplaySource

    rate = 16000
    x = random_audio(2.0, rate=rate, seed=11)
    blocks = [x[i:i + 1600] for i in range(0, x.size, 1600)]
    rec = Recognizer.from_checkpoint(tiny_ckpt, app_config().engine)
    sid = rec.create_stream(sample_rate=rate)
    rec.accept_audio(sid, x)
    rec.finish(sid)
    want = [e.text for e in rec.drain() if isinstance(e, Final)]
    gates, calls = [threading.Event(), threading.Event()], []

    def factory(m):
        i = len(calls)
        calls.append(m)
        src = ReplaySource(gated(blocks if i else blocks[:6], gates[i], fail_after=None if i else 5), rate, speed=0)
        return MicCapture(m.device, m.sample_rate, m.block_seconds, source=src)

    cfg = app_config(mic={"enabled": True, "sample_rate": rate, "retry_seconds": 0.05})

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), mic_factory=factory)
        async with app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as sub:
                await asyncio.sleep(0.05)
                gates[0].set()  # first capture: 5 blocks, then the device is lost
                msgs = []
                while not any(m.get("code") == "mic_error" for m in msgs):
                    msgs.append(json.loads(await sub.recv()))
                while len(calls) < 2:
                    await asyncio.sleep(0.01)
                gates[1].set()  # the retry: a new stream with the whole recording
                dones = sum(m["type"] == "done" for m in msgs)
                while dones < 2:
                    msgs.append(json.loads(await sub.recv()))
                    dones += msgs[-1]["type"] == "done"
            return msgs

    msgs = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    err = [m for m in msgs if m["type"] == "error"]
    assert [e["code"] for e in err] == ["mic_error"] and "device lost" in err[0]["message"]
    assert "partial" in [m["type"] for m in msgs]
    last_done = max(i for i, m in enumerate(msgs) if m["type"] == "done")
    first_done = min(i for i, m in enumerate(msgs) if m["type"] == "done")
    second = [m["text"] for m in msgs[first_done + 1:last_done] if m["type"] == "final"]
    assert second == want  # the retried stream decodes exactly like the engine on the same audio
    assert msgs[last_done]["audio_seconds"] == pytest.approx(2.0)


def test_mic_retries_back_off_and_log_a_repeated_error_once(tiny_ckpt, caplog):
    """No input device: the daemon keeps trying, waiting twice as long each time up to retry_max_seconds,
    and the same error is logged (and sent to subscribers) once, not at every try."""
    from streamd.capture import NO_INPUT_DEVICE, MicError

    calls = []

    def factory(m):
        calls.append(asyncio.get_running_loop().time())
        raise MicError(NO_INPUT_DEVICE)

    cfg = app_config(mic={"enabled": True, "retry_seconds": 0.02, "retry_max_seconds": 0.08})

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), mic_factory=factory)
        async with app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as sub:
                while len(calls) < 7:
                    await asyncio.sleep(0.02)
                msgs = []
                try:
                    while True:
                        msgs.append(json.loads(await asyncio.wait_for(sub.recv(), 0.1)))
                except asyncio.TimeoutError:
                    pass
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as late:  # long after the error was new
                first = json.loads(await asyncio.wait_for(late.recv(), 10))
        return msgs, first

    with caplog.at_level("DEBUG", logger="streamd.server"):
        msgs, first = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert first["type"] == "error" and first["code"] == "mic_error" and "microphone" in first["message"]
    gaps = np.diff(calls[:7])
    assert all(g >= 0.95 * want for g, want in zip(gaps, [0.02, 0.04, 0.08, 0.08, 0.08, 0.08])), gaps
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "microphone" in r.getMessage()]
    assert len(errors) == 1 and "trying again in 0.02 s" in errors[0].getMessage()
    assert "--wav" not in errors[0].getMessage()  # serve has no --wav: the hint belongs to `streamd mic`
    assert sum(r.levelname == "DEBUG" and "microphone" in r.getMessage() for r in caplog.records) >= 5
    assert [m["code"] for m in msgs if m["type"] == "error"] in ([], ["mic_error"])
