"""streamd.server.app's engine processes on loopback with the tiny random model: the light lane beside the main
engine, the main engine in a nicer process of its own, and both started again after their process dies
(streamd.server.supervisor)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import pytest
from websockets.asyncio.client import connect

from helpers import random_audio
from tests.server.wire import app_config, drain, http_get, offline_finals, pcm16, refused, run, session, slowed, until
from streamd.engine import Recognizer
from streamd.server.app import App
from streamd.server.protocol import CLOSE_CODES

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


def test_light_lane_serves_a_light_client_beside_a_slow_heavy_one(tiny_ckpt):
    """limits.light_lane: a client's only stream decodes in the lane's own process, not behind the main
    engine's steps (slowed here to 0.25 s each): the light stream is done first; both transcripts equal the
    engine's; the lane's process ends with the daemon."""
    cfg = app_config(limits={"max_load": 0, "light_lane": 4})
    x = random_audio(2.0, seed=8)
    ref = offline_finals(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), x)
    rec = slowed(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), 0.25)  # the main engine only

    async def opened(port):
        ws = await connect(f"ws://127.0.0.1:{port}/v1/stream")
        await ws.send('{"type": "start"}')
        assert json.loads(await ws.recv())["type"] == "ready"
        return ws

    async def finish(ws):
        data = pcm16(x)
        for i in range(0, len(data), 6400):
            await ws.send(data[i:i + 6400])
        await ws.send('{"type": "eof"}')
        msgs = await drain(ws)
        return msgs, time.monotonic()

    async def body():
        async with App(cfg, recognizer=rec) as app:
            assert app.light is not None and app.light_lane.alive  # ready means ready with its lane
            proc = app.light_lane._proc
            light = await opened(app.port)  # the client's only stream: the light lane
            heavy = await opened(app.port)  # its second: the main lane
            await until(lambda: rec.num_streams == 1)
            assert len(app._light_keys) == 1
            got = await asyncio.gather(finish(light), finish(heavy))
            lags = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in
                    app.metrics.render().decode().splitlines() if line.startswith("streamd_partial_lag_seconds_count")}
        return got, proc, lags

    ((light_msgs, light_done), (heavy_msgs, heavy_done)), proc, lags = run(body())
    assert light_done < heavy_done
    # each lane's partials are measured under its own label (at least one partial each)
    assert set(lags) == {"light", "main"} and min(lags.values()) >= 1
    for msgs in (light_msgs, heavy_msgs):
        assert [m["text"] for m in msgs if m["type"] == "final"] == ref and msgs[-1]["type"] == "done"
    assert not proc.is_alive() and proc.exitcode == 0


def test_a_dead_light_lane_ends_its_streams_and_comes_back(tiny_ckpt, caplog, monkeypatch):
    """The lane's process killed mid-stream: its stream gets internal (1011), the main engine takes new
    streams meanwhile, and a new lane process is started (streamd_light_lane_streams -1 while it is down)."""
    import streamd.server.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "LANE_RESTART_DELAY", 0.5)
    caplog.set_level(logging.INFO, logger="streamd.server")
    cfg = app_config(limits={"light_lane": 4})
    x = pcm16(random_audio(1.0, seed=9))

    def gauge(app):
        return next(float(line.split()[1]) for line in app.metrics.render().decode().splitlines()
                    if line.startswith("streamd_light_lane_streams "))

    async def body():
        async with App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)) as app:
            first = app.light_lane
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start"}')
            await ws.send(x)
            await until(lambda: len(app._light_keys) == 1)
            assert gauge(app) == 1
            first._proc.kill()
            await ws.send(x)  # the next cycle finds the process gone
            msgs = await drain(ws)
            assert not first.alive and not app._light_keys and gauge(app) == -1
            after, code, _ = await session(app.port, {}, [x])  # a light client again: the main engine now
            assert app.light_lane is first and not app._light_keys
            await until(lambda: app.light_lane is not first and app.light_lane.alive, timeout=60)
            assert gauge(app) == 0 and not first._proc.is_alive()
            again, code2, _ = await session(app.port, {}, [x])  # the new lane serves it
            assert app.light.runner is app.light_lane
            return msgs, ws.close_code, after, code, again, code2

    msgs, close, after, code, again, code2 = run(body())
    assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "internal" and "light lane" in msgs[-1]["message"]
    assert close == CLOSE_CODES["internal"]
    assert after[-1]["type"] == "done" and code == 1000
    assert again[-1]["type"] == "done" and code2 == 1000
    assert [m["text"] for m in again if m["type"] == "final"] == [m["text"] for m in after if m["type"] == "final"]
    log = [r.getMessage() for r in caplog.records]
    assert any("light lane's engine process ended" in m for m in log)
    assert any("light lane: a new engine process" in m for m in log)


def test_the_main_engine_runs_in_a_nicer_process_of_its_own(tiny_ckpt):
    """server.engine_process (on by default when the daemon loads a checkpoint): no Recognizer in the
    daemon's process, the engine's process ``engine_nice`` steps nicer, calibrated there; clients get the
    model info and transcripts the engine gives here; the process ends with the daemon."""
    from streamd.server.protocol import public_model_info
    from streamd.server.runner import EngineRunner

    cfg = app_config(server={"engine_nice": 4, "engine_policy": "batch"})
    assert cfg.server.engine_process
    x = random_audio(2.0, seed=10)
    ref_rec = Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)
    ref = offline_finals(ref_rec, x)

    async def body():
        async with App(cfg, model_path=str(tiny_ckpt)) as app:
            lane = app.main_lane
            assert app.rec is None and lane is not None and lane.alive and app.batcher.runner is lane
            assert lane.pid != os.getpid()
            assert os.getpriority(os.PRIO_PROCESS, lane.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 4)
            assert os.sched_getscheduler(lane.pid) == os.SCHED_BATCH
            assert app.admission.model is not None  # calibrated in the engine's process
            assert app.model_info == public_model_info(EngineRunner(ref_rec).model_info, False)
            assert (await http_get(app.port, "/readyz"))[0] == 200
            got = await asyncio.gather(*(session(app.port, {}, [pcm16(x)]) for _ in range(3)))
        return got, lane._proc

    got, proc = run(body())
    for msgs, code, _ in got:
        assert msgs[0]["type"] == "ready" and msgs[-1]["type"] == "done" and code == 1000
        assert [m["text"] for m in msgs if m["type"] == "final"] == ref
    assert not proc.is_alive() and proc.exitcode == 0


def test_a_dead_main_engine_ends_its_streams_and_comes_back(tiny_ckpt, caplog, monkeypatch):
    """The main engine's process killed mid-stream: its stream gets internal (1011); while a new process
    starts, /readyz answers 503 and new streams get ``loading``; then the new process serves."""
    import streamd.server.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "LANE_RESTART_DELAY", 0.5)
    caplog.set_level(logging.INFO, logger="streamd.server")
    cfg = app_config()
    x = pcm16(random_audio(1.0, seed=11))

    async def body():
        async with App(cfg, model_path=str(tiny_ckpt)) as app:
            first = app.main_lane
            before, code0, _ = await session(app.port, {}, [x])
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start"}')
            await ws.send(x)
            first._proc.kill()
            await ws.send(x)  # the next cycle finds the process gone
            msgs = await drain(ws)
            await until(lambda: app.loading)
            assert (await http_get(app.port, "/readyz"))[0] == 503
            down = await refused(f"ws://127.0.0.1:{app.port}/v1/stream")
            await until(lambda: app.main_lane is not first and not app.loading, timeout=60)
            assert app.batcher.runner is app.main_lane and app.main_lane.alive and not first._proc.is_alive()
            assert (await http_get(app.port, "/readyz"))[0] == 200
            again, code2, _ = await session(app.port, {}, [x])
            return before, code0, msgs, ws.close_code, down, again, code2

    before, code0, msgs, close, down, again, code2 = run(body())
    assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "internal" and "main engine" in msgs[-1]["message"]
    assert close == CLOSE_CODES["internal"]
    assert down == ("loading", 1013)
    assert before[-1]["type"] == again[-1]["type"] == "done" and code0 == code2 == 1000
    assert [m["text"] for m in again if m["type"] == "final"] == [m["text"] for m in before if m["type"] == "final"]
    log = [r.getMessage() for r in caplog.records]
    assert any("main engine's engine process ended" in m for m in log)
    assert any("main engine: a new engine process" in m for m in log)
