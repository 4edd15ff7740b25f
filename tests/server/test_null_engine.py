"""The null engine (streamd.server.null_engine) and the lean client crowd of the connections scenario
(streamd.bench.stress.crowd) against a daemon serving it on loopback."""

from __future__ import annotations

import functools

import numpy as np

from tests.server.wire import app_config, run
from streamd.bench.server import AudioLoop
from streamd.bench.stress.crowd import crowd_report, run_crowd
from streamd.events import Done, Final, Partial
from streamd.server.app import App
from streamd.server.null_engine import NullRecognizer


def test_null_engine_emits_a_partial_per_chunk_and_finals_on_reset_and_finish():
    cfg = app_config()
    rec = NullRecognizer(cfg.engine, chunk_seconds=0.32)
    sid = rec.create_stream(partials=True)
    assert rec.accept_pcm(sid, b"\0\0" * 1600) == [] and not rec.pending()  # 0.1 s: no whole chunk yet
    rec.accept_pcm(sid, b"\0\0" * 16000)  # 1.1 s in all: three whole chunks
    assert rec.ready_streams() == [sid]
    evs = rec.step()
    assert [type(e) for e in evs] == [Partial] and evs[0].text == "" and abs(evs[0].end - 0.96) < 1e-9
    assert abs(rec.backlog(sid) - 0.14) < 1e-9
    rec.reset(sid)
    evs = rec.step()
    assert [type(e) for e in evs] == [Final] and evs[0].reason == "reset" and abs(evs[0].end - 1.1) < 1e-9
    rec.accept_audio(sid, np.zeros(800, np.float32))
    rec.finish(sid)
    evs = rec.drain()
    assert [type(e) for e in evs] == [Final, Done] and evs[0].segment == 1
    assert abs(evs[1].audio_seconds - 1.15) < 1e-9 and not rec.has_stream(sid)


def test_crowd_through_a_null_engine_daemon_loses_no_audio():
    """Real-time clients of the crowd: every one ready, partials measured, done.audio_seconds = what was sent."""
    cfg = app_config(limits={"max_load": 0})
    audio = AudioLoop((np.arange(16000 * 3) % 200 - 100).astype("<i2"))

    async def body():
        app = App(cfg, loader=functools.partial(NullRecognizer, cfg.engine))
        await app.start()
        try:
            clients, timings = await run_crowd(f"ws://127.0.0.1:{app.port}/v1/stream", 6, 1.0, audio, seed=3)
        finally:
            await app.shutdown()
        return crowd_report(clients, timings)

    r = run(body())
    assert r["ready"] == 6 and r["errors"] == 0, r["error_examples"]
    assert r["packets"] == 60 and r["audio_lost_s"] == 0 and r["streams_losing_audio"] == 0
    assert len(r["lags_ms"]) == 6 * 3  # chunks ending at 0.32, 0.64, 0.96 s of each 1 s stream
