"""streamd.server.app: the daemon on loopback with the tiny random model: HTTP routes (probes, metrics, static
files), header hardening, every limit and security option, v1 streams end to end (ready echo, partial/final/done,
wire errors, batching loses no audio), loading and warm-up.  The engine processes are in test_app_lanes.py, the
graceful drain in test_app_drain.py."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from helpers import random_audio, write_wav
from tests.server.wire import (TIMEOUT, app_config, drain, http_get, make_app, pcm16, raw_http, refused, run, session,
                               until)
from streamd.config import AppConfig, from_dict
from streamd.engine import Recognizer
from streamd.feed import transcribe_files
from streamd.server.app import App

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


# ----------------------------------------------------------------------------- HTTP routes and limits


def test_probes_metrics_static(tiny_ckpt, tmp_path):
    web = tmp_path / "web"
    (web / "js").mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>streamd</title>")
    big = bytes(np.random.default_rng(0).integers(0, 255, 1_500_000, dtype=np.uint8))
    (web / "js" / "app.js").write_bytes(big)
    (tmp_path / "secret.txt").write_text("nope")

    async def body():
        # a low KWS threshold so that the random model's keyword fires
        async with make_app(tiny_ckpt, server={"web_root": str(web)},
                            engine={"device": "cpu", "kws": {"threshold": 0.05}}) as app:
            p = app.port
            assert (await http_get(p, "/healthz"))[0] == 200
            status, _, text = await http_get(p, "/readyz")
            assert (status, text) == (200, b"ready\n")
            status, hdrs, page = await http_get(p, "/")
            assert status == 200 and page.startswith(b"<!doctype html>") and hdrs["content-type"].startswith("text/html")
            status, hdrs, js = await http_get(p, "/js/app.js")
            assert status == 200 and js == big and "javascript" in hdrs["content-type"]
            for path in ("/missing.css", "/../secret.txt", "/%2e%2e/secret.txt", "/js/../../secret.txt", "/a%00b"):
                assert (await http_get(p, path))[0] == 404, path
            # one stream, one protocol error, then the metrics
            async with connect(f"ws://127.0.0.1:{p}/v1/stream") as ws:
                await ws.send('{"type": "start"}')
                x = pcm16(random_audio(2.0, seed=2))
                for i in range(0, len(x), 4000):
                    await ws.send(x[i:i + 4000])
                await ws.send('{"type": "eof"}')
                msgs = await drain(ws)
            wakes = sum(m["type"] == "wake" for m in msgs)
            async with connect(f"ws://127.0.0.1:{p}/v1/stream") as ws:
                await ws.send("not json")
                await drain(ws)
            status, hdrs, text = await http_get(p, "/metrics")
            assert status == 200 and hdrs["content-type"].startswith("text/plain")
            m = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                 if line and not line.startswith("#")}
            assert m["streamd_active_streams"] == 0
            assert m["streamd_audio_seconds_total"] == pytest.approx(2.0)
            assert m["streamd_batch_size_count"] > 0 and m["streamd_step_seconds_count"] == m["streamd_batch_size_count"]
            assert m["streamd_real_time_factor"] > 0
            assert m['streamd_errors_total{code="bad_json"}'] == 1
            assert m['streamd_connections_total{route="v1"}'] == 2
            partials = [x for x in msgs if x["type"] == "partial"]
            assert partials and all(x["backlog"] >= 0 for x in partials)
            # every partial made is observed (the client may see fewer: a newer one replaces an unread one)
            assert m['streamd_backlog_seconds_count{stream_class="v1"}'] >= len(partials)
            assert m['streamd_backlog_seconds_sum{stream_class="v1"}'] >= 0
            assert 'streamd_backlog_seconds_count{stream_class="vosk"}' not in m
            lags = {k: v for k, v in m.items() if k.startswith("streamd_partial_lag_seconds_count")}
            assert len(lags) == 1 and 0 < sum(lags.values()) <= m['streamd_backlog_seconds_count{stream_class="v1"}']
            assert sum(v for k, v in m.items() if k.startswith("streamd_wake_events_total")) == wakes > 0

    run(body())


def test_readyz_and_streams_while_loading(tiny_ckpt):
    cfg = app_config()

    def slow_loader():
        time.sleep(0.6)
        return Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)

    async def body():
        app = App(cfg, loader=slow_loader)
        start = asyncio.create_task(app.start())
        while app.port is None:
            await asyncio.sleep(0.01)
        assert (await http_get(app.port, "/healthz"))[0] == 200
        status, _, text = await http_get(app.port, "/readyz")
        assert (status, text) == (503, b"loading\n")
        assert await refused(f"ws://127.0.0.1:{app.port}/v1/stream") == ("loading", 1013)
        await start
        assert (await http_get(app.port, "/readyz"))[0] == 200
        await app.shutdown()

    run(body())


def test_warm_up_before_ready(tiny_ckpt):
    """The loaded model decodes server.warmup_seconds of audio before /readyz turns 200; 0 skips it."""
    for seconds in (0.5, 0.0):
        cfg = app_config(server={"warmup_seconds": seconds})
        calls, release = [], threading.Event()
        rec = Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)
        real = rec.warm_up

        def spy(s, real=real, calls=calls, release=release):
            calls.append(s)
            assert release.wait(TIMEOUT)
            real(s)

        rec.warm_up = spy

        async def body():
            app = App(cfg, loader=lambda: rec)
            start = asyncio.create_task(app.start())
            if seconds:
                await until(lambda: calls)
                assert (await http_get(app.port, "/readyz"))[:3:2] == (503, b"loading\n")
                release.set()
            await start
            assert (await http_get(app.port, "/readyz"))[0] == 200
            assert rec.num_streams == 0
            await app.shutdown()

        run(body())
        assert calls == ([seconds] if seconds else [])


def test_too_many_streams(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"max_streams": 2}) as app:
            url = f"ws://127.0.0.1:{app.port}/v1/stream"
            a, b = await connect(url), await connect(f"ws://127.0.0.1:{app.port}/vosk")
            await until(lambda: len(app.conns) == 2)
            code, close = await refused(url)
            assert (code, close) == ("too_many_streams", 1013)
            await a.close()
            await until(lambda: len(app.conns) == 1)
            async with connect(url) as c:  # a slot is free again
                await c.send('{"type": "start"}')
                assert json.loads(await c.recv())["type"] == "ready"
            await b.close()

    run(body())


def test_bearer_token(tiny_ckpt, tmp_path):
    tf = tmp_path / "tokens"
    tf.write_text("# comment\n\nfile-token-123\n")

    async def body():
        async with make_app(tiny_ckpt, auth={"tokens": ["s3cret-token"], "token_file": str(tf)}) as app:
            base = f"ws://127.0.0.1:{app.port}"
            assert await refused(f"{base}/v1/stream") == ("unauthorized", 1008)
            assert await refused(f"{base}/v1/stream", additional_headers={"Authorization": "Bearer wrong"}) == \
                ("unauthorized", 1008)
            assert await refused(f"{base}/vosk?token=wrong") == ("unauthorized", 1008)
            for url, kw in ((f"{base}/v1/stream", {"additional_headers": {"Authorization": "Bearer s3cret-token"}}),
                            (f"{base}/v1/stream?token=file-token-123", {})):
                async with connect(url, **kw) as ws:
                    await ws.send('{"type": "start"}')
                    assert json.loads(await ws.recv())["type"] == "ready"
            assert (await http_get(app.port, "/healthz"))[0] == 200  # probes need no token

    run(body())


def test_origin_allow_list(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, auth={"allowed_origins": ["self", "https://app.example"]}) as app:
            url = f"ws://127.0.0.1:{app.port}/v1/stream"
            with pytest.raises(InvalidStatus) as e:
                await connect(url, origin="https://evil.example")
            assert e.value.response.status_code == 403 and b"evil.example" in e.value.response.body
            for origin in (f"http://127.0.0.1:{app.port}", "https://app.example", None):
                async with connect(url, origin=origin) as ws:
                    await ws.send('{"type": "start"}')
                    assert json.loads(await ws.recv())["type"] == "ready"

    run(body())


def test_rate_limit_and_idle_timeout(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"max_realtime": 1.0, "burst_seconds": 0.5,
                                               "idle_timeout": 0.3}) as app:
            url = f"ws://127.0.0.1:{app.port}/v1/stream"
            x = pcm16(random_audio(2.0, seed=1))
            async with connect(url) as ws:
                await ws.send('{"type": "start"}')
                for i in range(0, len(x), 3200):  # 2 s of audio at once: beyond a 0.5 s burst at 1x
                    try:
                        await ws.send(x[i:i + 3200])
                    except ConnectionClosed:
                        break
                msgs = await drain(ws)
            err = [m for m in msgs if m["type"] == "error"]
            assert [e["code"] for e in err] == ["rate_limited"] and ws.close_code == 1008
            assert "1x real time" in err[0]["message"]
            # real-time pacing is fine
            async with connect(url) as ws:
                await ws.send('{"type": "start", "partials": false}')
                for i in range(0, 16000, 1600):  # 0.5 s in 0.05 s pieces every 0.05 s
                    await ws.send(x[i:i + 1600])
                    await asyncio.sleep(0.05)
                await ws.send('{"type": "eof"}')
                msgs = await drain(ws)
            assert msgs[-1]["type"] == "done" and ws.close_code == 1000
            # idle: nothing after start
            t0 = time.monotonic()
            async with connect(url) as ws:
                await ws.send('{"type": "start"}')
                msgs = await drain(ws)
            assert msgs[-1]["code"] == "idle_timeout" and ws.close_code == 1008
            assert 0.25 < time.monotonic() - t0 < 3

    run(body())


def test_open_timeout(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"open_timeout": 0.3}) as app:
            t0 = time.monotonic()
            reader, writer = await asyncio.open_connection("127.0.0.1", app.port)
            assert await reader.read() == b""  # no handshake sent: the server hangs up
            assert 0.2 < time.monotonic() - t0 < 3
            writer.close()

    run(body())


def test_trickling_clients_lose_their_slot(tiny_ckpt):
    """2 bytes every 0.2 s (v1) or configs only (Vosk) below a 0.5 x real-time minimum over 1 s windows: closed
    with audio_too_slow / 1008, their slots free again; a client streaming at real time is not affected."""
    x = pcm16(random_audio(2.5, seed=3))

    async def trickle(url, first, piece):
        async with connect(url) as ws:
            if first:
                await ws.send(first)
            msgs = []
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < 5:
                    await ws.send(piece)
                    try:
                        msgs.append(json.loads(await asyncio.wait_for(ws.recv(), 0.2)))
                    except asyncio.TimeoutError:
                        pass
            except Exception:  # noqa: BLE001 - the server closed the connection
                pass
            msgs += await drain(ws)
            return msgs, ws.close_code, time.monotonic() - t0

    async def steady(url):
        async with connect(url) as ws:
            await ws.send('{"type": "start", "partials": false}')
            for i in range(0, len(x), 3200):  # 0.1 s every 0.1 s
                await ws.send(x[i:i + 3200])
                await asyncio.sleep(0.1)
            await ws.send('{"type": "eof"}')
            return await drain(ws), ws.close_code

    async def body():
        async with make_app(tiny_ckpt, limits={"max_streams": 3, "min_audio_rate": 0.5,
                                               "min_audio_window": 1.0}) as app:
            base = f"ws://127.0.0.1:{app.port}"
            res = await asyncio.gather(trickle(f"{base}/v1/stream", '{"type": "start"}', b"\0\0"),
                                       trickle(f"{base}/vosk", None, '{"config": {"sample_rate": 16000}}'),
                                       steady(f"{base}/v1/stream"))
            await until(lambda: not app.conns)
            return res

    (v1, v1_code, v1_t), (vk, vk_code, vk_t), (ok, ok_code) = run(body())
    for msgs, code, took in ((v1, v1_code, v1_t), (vk, vk_code, vk_t)):
        errors = [m for m in msgs if m.get("type") == "error"]
        assert [e["code"] for e in errors] == ["audio_too_slow"] and code == 1008, msgs
        assert "min_audio_rate" in errors[0]["message"] and 0.5 < took < 3.0
    assert ok[-1]["type"] == "done" and ok[-1]["audio_seconds"] == pytest.approx(2.5) and ok_code == 1000


# ----------------------------------------------------------------------------- header hardening


def upgrade(path: str, host: str, *extra: str) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    return "\r\n".join([f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
                        f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *extra])


def test_header_hardening_on_the_wire(tiny_ckpt, tmp_path, caplog):
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<!doctype html><title>streamd</title>")
    caplog.set_level(logging.INFO)  # the daemon's default log level

    async def body():
        async with make_app(tiny_ckpt, server={"web_root": str(web), "vosk_port": 0},
                            auth={"tokens": ["s3cret-token"]}) as app:
            p, h = app.port, f"127.0.0.1:{app.port}"
            ok = "Authorization: Bearer s3cret-token"
            for head, want in [
                (upgrade("/v1/stream", h, ok, ok), 400),  # the report's case: two Authorization headers
                (upgrade("/v1/stream", h, ok, f"Origin: http://{h}", f"Origin: http://{h}"), 400),
                (upgrade("/v1/stream", h, ok, f"Host: {h}"), 400),  # two Host headers
                (upgrade("/v1/stream", "[::1", ok), 400),
                (upgrade("/v1/stream?token=s3cret-token&token=x", h), 400),
                # DNS rebinding: the attacker's name in Host and Origin; refused before any stream exists
                (upgrade("/v1/stream", f"evil.example:{p}", ok, f"Origin: http://evil.example:{p}"), 403),
                (upgrade("/v1/events", f"evil.example:{p}", f"Origin: http://evil.example:{p}"), 403),
                (f"GET / HTTP/1.1\r\nHost: evil.example:{p}", 403),
                (f"GET /metrics HTTP/1.1\r\nHost: evil.example:{p}", 403),
                (upgrade("/v1/stream", h, ok, f"Origin: http://evil.example:{p}"), 403),  # origin_not_allowed
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA=="), 400),  # websockets
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Version: 13"), 400),
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Protocol: a,,=b"), 400),
                (f"GET /v1/stream HTTP/1.1\r\nHost: {h}", 426),  # no upgrade at all
                ("GET / HTTP/1.1", 400),  # no Host
                (f"POST /healthz HTTP/1.1\r\nHost: {h}", 405),
                (f"GET //[x/y HTTP/1.1\r\nHost: {h}", 404),
                (f"GET /healthz HTTP/1.1\r\nHost: pod-7.internal:{p}", 200),  # probes answer any name
            ]:
                status, hdrs, text = await raw_http(p, head)
                assert status == want, (head, status, text)
                assert status == 426 or text.endswith(b"\n") and b"Traceback" not in text
            # the Vosk port checks the same headers
            assert (await raw_http(app.vosk_port, upgrade("/", h, ok, ok)))[0] == 400
            assert (await raw_http(app.vosk_port, upgrade("/", f"evil.example:{app.vosk_port}", ok)))[0] == 403
            # HEAD: the GET answer's status and headers, no body
            status, hdrs, text = await raw_http(p, f"HEAD / HTTP/1.1\r\nHost: localhost:{p}")
            assert (status, text) == (200, b"") and int(hdrs["content-length"]) > 0
            assert hdrs["content-type"].startswith("text/html")
            assert (await raw_http(p, f"HEAD /healthz HTTP/1.1\r\nHost: {h}"))[::2] == (200, b"")
            assert (await raw_http(p, f"HEAD /nope HTTP/1.1\r\nHost: {h}"))[::2] == (404, b"")
            status, hdrs, text = await raw_http(p, f"HEAD /v1/stream HTTP/1.1\r\nHost: {h}")
            assert (status, text, hdrs["allow"]) == (405, b"", "GET")
            assert (await raw_http(p, f"PUT / HTTP/1.1\r\nHost: {h}"))[1]["allow"] == "GET, HEAD"
            # the server still serves, by every allowed name
            for url in (f"ws://127.0.0.1:{p}/v1/stream", f"ws://localhost:{p}/v1/stream"):
                async with connect(url, additional_headers={"Authorization": "Bearer s3cret-token"},
                                   origin=url.replace("ws://", "http://").rsplit("/", 2)[0]) as ws:
                    await ws.send('{"type": "start"}')
                    assert json.loads(await ws.recv())["type"] == "ready"
            return app.metrics.render().decode()

    metrics = run(body())
    for code, n in (("bad_header", 7), ("host_not_allowed", 5), ("origin_not_allowed", 1),
                    ("method_not_allowed", 3)):
        assert f'streamd_errors_total{{code="{code}"}} {float(n)}' in metrics, (code, metrics)
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [(r.name, r.getMessage()) for r in noisy]


def test_ready_sends_file_names_unless_configured(tiny_ckpt):
    async def ready(app):
        async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as ws:
            await ws.send('{"type": "start"}')
            return json.loads(await ws.recv())["model"]

    async def body():
        async with make_app(tiny_ckpt) as app:
            hidden = await ready(app)
        async with make_app(tiny_ckpt, server={"show_model_paths": True}) as app:
            shown = await ready(app)
        return hidden, shown

    hidden, shown = run(body())
    assert hidden["path"] == Path(tiny_ckpt).name == "tiny.pt" and shown["path"] == tiny_ckpt
    assert set(hidden) == set(shown) and Path(shown["path"]).is_absolute()


# ----------------------------------------------------------------------------- v1 streams


def split(data: bytes, rng: random.Random, width=2, max_bytes=12000) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = rng.randint(1, max_bytes // width) * width
        out.append(data[pos:pos + n])
        pos += n
    return out


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


def test_events_without_mic(tiny_ckpt):
    async def body():
        cfg = app_config()
        async with App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as ws:
                msgs = await drain(ws)
            return msgs, ws.close_code

    msgs, code = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert msgs[0]["code"] == "no_mic" and "--mic" in msgs[0]["message"] and code == 1008
