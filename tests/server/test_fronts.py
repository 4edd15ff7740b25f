"""``server.front_processes`` > 1 (streamd.server.front, streamd.server.fronts): connections carried by front
processes feeding the daemon's one engine, on loopback: the same results as in-process, the daemon's
admission across the boundary, the drain, a dying front reported and replaced, /metrics summed."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import time

from websockets.asyncio.client import connect

from helpers import random_audio
from tests.server.wire import app_config, drain, pcm16, run, slowed, until
from streamd.server.app import App
from streamd.server.fronts import merge_families
from streamd.server.null_engine import NullRecognizer


def null_app(step_seconds: float = 0.0, **sections) -> App:
    """A daemon on the null engine (each step ``step_seconds`` longer: an engine that takes its time)."""
    cfg = app_config(**sections)
    if step_seconds:
        return App(cfg, loader=lambda: slowed(NullRecognizer(cfg.engine), step_seconds))
    return App(cfg, loader=functools.partial(NullRecognizer, cfg.engine))


async def stream(port: int, audio: bytes, start: str = '{"type": "start", "partials": false}') -> list[dict]:
    """One v1 stream: start, the audio in 0.25 s messages, eof; every message until the server closes."""
    async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
        await ws.send(start)
        for i in range(0, len(audio), 8000):
            await ws.send(audio[i:i + 8000])
        await ws.send('{"type": "eof"}')
        return await drain(ws)


def metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
               or line.startswith(name + "{"))


async def get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2].decode()


def test_audio_through_a_front_process_gives_the_same_final_as_in_process(tiny_ckpt):
    from streamd.engine import Recognizer

    audio = pcm16(random_audio(2.0, seed=11))

    async def body(fronts: int):
        cfg = app_config(server={"front_processes": fronts})
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine))
        await app.start()
        try:
            return await stream(app.port, audio)
        finally:
            await app.shutdown()

    here, there = run(body(1)), run(body(2))
    finals = [[(m["text"], m["start"], m["end"]) for m in msgs if m["type"] == "final"] for msgs in (here, there)]
    assert finals[0] and finals[0] == finals[1]
    assert here[-1] == there[-1] and there[-1]["type"] == "done" and there[-1]["audio_seconds"] == 2.0


def test_admission_refusal_crosses_the_boundary():
    """limits.max_cost_per_client 1: a client's second stream is refused by the engine process's admission,
    whichever front carries it (client_limit, retry_after, close 1013); once the first ends, one is taken."""
    app = null_app(server={"front_processes": 2}, limits={"max_cost_per_client": 1, "max_load": 0})

    async def body():
        await app.start()
        try:
            first = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await first.send('{"type": "start"}')
            assert json.loads(await first.recv())["type"] == "ready"
            refused = []
            for _ in range(4):  # two fronts: some of these land on the other one
                async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as ws:
                    await ws.send('{"type": "start"}')
                    refused.append((await drain(ws), ws.close_code))
            await first.send('{"type": "eof"}')
            assert (await drain(first))[-1]["type"] == "done"
            await until(lambda: not app.admission.streams)
            again = await stream(app.port, b"\0\0" * 1600)
            return refused, again
        finally:
            await app.shutdown()

    refused, again = run(body())
    for msgs, code in refused:
        assert code == 1013 and msgs[-1]["code"] == "client_limit" and msgs[-1]["retry_after"] > 0, msgs
    assert again[0]["type"] == "ready" and again[-1]["type"] == "done"


def test_drain_finishes_streams_in_flight():
    """SIGTERM's drain with streams live in both fronts: /readyz 503, every stream gets its final and done,
    then close 1001; the fronts exit."""
    app = null_app(0.3, server={"front_processes": 2, "grace_seconds": 10, "close_timeout": 1.0},
                   limits={"max_load": 0})

    async def body():
        await app.start()
        clients = []
        for _ in range(6):
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start", "partials": false}')
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(b"\0\0" * 8000)  # 0.5 s
            clients.append(ws)
        await until(lambda: app.metrics.audio_seconds._value.get() >= 3.0)  # every stream's audio in the engine
        procs = [fp.process for fp in app.fronts.procs.values()]
        stopping = asyncio.create_task(app.shutdown())
        await asyncio.sleep(0.1)
        status = await get(app.port, "/readyz")
        results = [await drain(ws) for ws in clients]
        await stopping
        return results, [ws.close_code for ws in clients], status, procs

    results, codes, status, procs = run(body())
    assert status == (503, "draining\n")
    for msgs in results:
        assert [m["type"] for m in msgs][-2:] == ["final", "done"] and msgs[-1]["audio_seconds"] == 0.5
    assert codes == [1001] * 6
    assert all(not p.is_alive() and p.exitcode == 0 for p in procs)


def test_a_front_process_dying_is_reported_and_replaced(caplog):
    app = null_app(server={"front_processes": 2})

    async def body():
        await app.start()
        try:
            victim = app.fronts.procs[0]
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start"}')
            assert json.loads(await ws.recv())["type"] == "ready"
            os.kill(victim.pid, signal.SIGKILL)
            await until(lambda: app.metrics.front_exits._value.get() == 1, 10)
            await until(lambda: len(app.fronts.procs) == 2 and all(fp.up.is_set() for fp in app.fronts.procs.values())
                        and app.fronts.procs[0] is not victim, 60)
            _, text = await get(app.port, "/metrics")
            served = [await stream(app.port, b"\0\0" * 3200) for _ in range(4)]
            await ws.close()
            await until(lambda: not app.admission.streams)
            return victim.pid, text, served
        finally:
            await app.shutdown()

    with caplog.at_level(logging.ERROR, "streamd.server"):
        pid, text, served = run(body())
    assert any(f"front process 0 (pid {pid}) exited" in r.getMessage() for r in caplog.records)
    assert metric(text, "streamd_front_process_exits_total") == 1 and metric(text, "streamd_front_processes") == 2
    assert all(m[-1]["type"] == "done" for m in served)


def test_metrics_are_summed_over_every_process():
    """/metrics through either front: the connections of both fronts, the engine process's audio."""
    app = null_app(server={"front_processes": 2})

    async def body():
        await app.start()
        try:
            for _ in range(6):
                await stream(app.port, b"\0\0" * 1600)
            return await get(app.port, "/metrics")
        finally:
            await app.shutdown()

    status, text = run(body())
    assert status == 200
    assert metric(text, "streamd_connections_total") == 6
    assert abs(metric(text, "streamd_audio_seconds_total") - 0.6) < 1e-6


def test_merge_families_sums_samples_and_keeps_the_earliest_created():
    from prometheus_client import CollectorRegistry, Counter

    regs = []
    for n in (2, 3):
        r = CollectorRegistry()
        c = Counter("x", "x", ["code"], registry=r)
        c.labels("a").inc(n)
        regs.append(list(r.collect()))
        time.sleep(0.01)
    (fam,) = merge_families(regs)
    by = {s.name: s.value for s in fam.samples}
    assert by["x_total"] == 5 and by["x_created"] == min(
        s.value for g in regs for f in g for s in f.samples if s.name == "x_created")


def test_a_remote_target_sends_results_to_its_front_without_the_second_pass_samples():
    """What the engine process routes to a front's stream goes over the link; a Final's samples (kept for the
    second pass) stay behind, the rest is the same event; progress is sent when it moved only."""
    import numpy as np

    from streamd.events import Final
    from streamd.server.fronts import RemoteTarget

    class Link:
        def __init__(self):
            self.records = []

        def put(self, record):
            self.records.append(record)

    link = Link()
    t = RemoteTarget(7, link, "v1", lambda key: "light")
    final = Final(3, 0, "hello", start=0.0, end=1.0, audio=np.zeros(16000, np.int16))
    t.on_opened(None)
    t.on_event(final)
    t.on_progress(1.0)
    t.on_progress(1.0)
    t.on_applied(2)
    assert [r[0] for r in link.records] == ["opened", "event", "progress", "applied"]
    assert link.records[0] == ("opened", 7, None, "light")
    sent = link.records[1][2]
    assert sent.audio is None and sent == final  # (audio is not compared)


def test_ready_only_once_every_front_has_the_loaded_state():
    """The daemon's start returns (and says READY=1) only after every front took the state with the model
    loaded: a stream opened at once on any front is served, not refused as ``loading``."""
    async def body():
        app = null_app(server={"front_processes": 2})
        await app.start()
        try:
            assert all(fp.ready.is_set() for fp in app.fronts.procs.values()) and len(app.fronts.procs) == 2
            async def first(port):
                async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
                    await ws.send('{"type": "start"}')
                    return json.loads(await ws.recv())
            return await asyncio.gather(*(first(app.port) for _ in range(8)))
        finally:
            await app.shutdown()

    assert [m["type"] for m in run(body())] == ["ready"] * 8
