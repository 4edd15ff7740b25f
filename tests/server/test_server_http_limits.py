"""HTTP routes (probes, metrics, static files) and every limit / security option on loopback."""

from __future__ import annotations

import asyncio
import json
import ssl
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from helpers import app_config, make_app, random_audio
from streamd.engine import Recognizer
from streamd.events import Final, Partial
from streamd.server.app import App, Conn
from streamd.server.protocol import V1Session

TIMEOUT = 30


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def pcm16(x):
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


async def drain(ws) -> list[dict]:
    out = []
    try:
        while True:
            out.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return out


async def http_get(port, path, headers=None):
    """Minimal HTTP/1.1 GET; the server closes the connection after answering."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


async def until(cond, timeout=5.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "condition not reached"
        await asyncio.sleep(0.01)


async def refused(url, **kw):
    """Connect, expect one error message and the close: (error code, close code)."""
    async with connect(url, **kw) as ws:
        msgs = await drain(ws)
    assert len(msgs) == 1 and msgs[0]["type"] == "error" and msgs[0]["message"], msgs
    return msgs[0]["code"], ws.close_code


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


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls(tiny_ckpt, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)

    async def body():
        async with make_app(tiny_ckpt, tls={"cert": str(cert), "key": str(key)}) as app:
            ctx = ssl.create_default_context(cafile=str(cert))
            async with connect(f"wss://127.0.0.1:{app.port}/v1/stream", ssl=ctx) as ws:
                await ws.send('{"type": "start"}')
                assert json.loads(await ws.recv())["type"] == "ready"
            with pytest.raises(Exception):  # plain ws:// to a TLS port fails
                await connect(f"ws://127.0.0.1:{app.port}/v1/stream", open_timeout=2)

    run(body())
    from streamd.config import ConfigError
    from streamd.server.app import make_ssl_context

    with pytest.raises(ConfigError, match="tls.cert: no such file"):
        make_ssl_context(app_config(tls={"cert": str(tmp_path / "nope.pem"), "key": str(key)}).tls)
    with pytest.raises(ConfigError, match="cannot load certificate"):
        make_ssl_context(app_config(tls={"cert": str(key), "key": str(key)}).tls)


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
