"""The daemon on loopback for wire tests: test app configs, a timed event loop, PCM, small HTTP and websocket
clients (one v1 session, a refused connection), request-check helpers, the offline reference of a stream, a
local websocket server and a self-signed certificate."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect


def app_config(**sections):
    """An AppConfig for tests: the given sections over the defaults, any free port, CPU, and one engine lane
    (``limits.light_lane: 0``: no second engine process per test app; the light lane's tests turn it on)."""
    from streamd.config import AppConfig, from_dict

    data = {k: dict(v) for k, v in sections.items()}
    data.setdefault("server", {}).setdefault("port", 0)
    data.setdefault("engine", {}).setdefault("device", "cpu")
    data.setdefault("limits", {}).setdefault("light_lane", 0)
    return from_dict(AppConfig, data)


def make_app(ckpt, **sections):
    """A daemon (streamd.server.app.App, not started) on checkpoint ``ckpt`` with :func:`app_config`."""
    from streamd.engine import Recognizer
    from streamd.server.app import App

    cfg = app_config(**sections)
    return App(cfg, recognizer=Recognizer.from_checkpoint(ckpt, cfg.engine))


TIMEOUT = 60  # seconds: how long a wire test may run before it is failed as hung


TENTH = b"\0\0" * 1600  # 0.1 s of s16le at 16 kHz


def run(coro, timeout: float = TIMEOUT):
    """Run one wire test's coroutine in a fresh event loop, failed after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def pcm16(x) -> bytes:
    """float samples in [-1, 1] -> s16le bytes."""
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


async def vosk_lockstep(ws, config: str, pcm: bytes, frame_bytes: int) -> list[dict]:
    """vosk-server's test.py client on an open ``/vosk`` websocket: the ``config`` message, then ``pcm`` in
    ``frame_bytes`` frames each waiting for its reply, then ``eof`` and its reply; the replies in order."""
    await ws.send(config)
    replies = []
    for i in range(0, len(pcm), frame_bytes):
        await ws.send(pcm[i:i + frame_bytes])
        replies.append(json.loads(await ws.recv()))
    await ws.send('{"eof" : 1}')
    replies.append(json.loads(await ws.recv()))
    return replies


async def drain(ws) -> list[dict]:
    """Every message a websocket client receives until the server closes, as JSON objects."""
    from websockets.exceptions import ConnectionClosed

    out = []
    try:
        while True:
            out.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return out


async def http_get(port, path, headers=None):
    """Minimal HTTP/1.1 GET: (status, headers, body); the server closes the connection after answering."""
    extra = "".join(f"\r\n{k}: {v}" for k, v in (headers or {}).items())
    return await raw_http(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}{extra}")


async def raw_http(port: int, head: str) -> tuple[int, dict, bytes]:
    """Send ``head`` (request line + headers, \\r\\n separated, no blank line) and read the whole answer:
    (status, headers with lower-case names, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode("latin-1") + b"\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    hdrs = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


async def until(cond, timeout=5.0):
    """Wait until ``cond()`` holds (failing after ``timeout`` seconds)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "condition not reached"
        await asyncio.sleep(0.01)


def slowed(rec, seconds):
    """Make every batch step of ``rec`` take ``seconds`` longer (an overloaded engine)."""
    real = rec.step

    def step(*args, **kw):  # the runner may restrict a step to some streams (Recognizer.step(only))
        time.sleep(seconds)
        return real(*args, **kw)

    rec.step = step
    return rec


def headers(*pairs):
    """websockets Headers with the (name, value) pairs, repeated names included."""
    from websockets.datastructures import Headers

    h = Headers()
    for k, v in pairs:
        h[k] = v  # Headers appends: a repeated name keeps every value
    return h


def bad(fn, *args, **kw):
    """The BadRequest ``fn(*args, **kw)`` raises (streamd.server.guard)."""
    from streamd.server.guard import BadRequest

    with pytest.raises(BadRequest) as e:
        fn(*args, **kw)
    return e.value


def error_of(actions):
    """(code, message, close code) of an error + close action pair (sans-I/O sessions' actions)."""
    from streamd.server.protocol import CLOSE_CODES, Close, Send

    assert len(actions) == 2 and isinstance(actions[0], Send) and isinstance(actions[1], Close), actions
    msg = actions[0].message
    assert msg["type"] == "error" and set(msg) == {"type", "code", "message"}
    assert actions[1].code == CLOSE_CODES[msg["code"]] and actions[1].reason == msg["code"]
    return msg["code"], msg["message"], actions[1].code


class LocalWsServer:
    """A websocket server on a free loopback port for client tests: ``async with Sub() as srv`` serves
    ``srv.handler`` (connections) after ``srv.http`` (process_request) at ``srv.url`` (the /v1/stream path)."""

    async def __aenter__(self):
        from websockets.asyncio.server import serve

        self.server = await serve(self.handler, "127.0.0.1", 0, process_request=self.http)
        self.url = f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/stream"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def self_signed_cert(folder) -> tuple[str, str]:
    """A self-signed certificate for ``localhost`` / 127.0.0.1 (the ``openssl`` command): (cert.pem, key.pem)."""
    import subprocess

    cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


async def refused(url, **kw):
    """Connect, expect one error message and the close: (error code, close code)."""
    async with connect(url, **kw) as ws:
        msgs = await drain(ws)
    assert len(msgs) == 1 and msgs[0]["type"] == "error" and msgs[0]["message"], msgs
    return msgs[0]["code"], ws.close_code


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


def offline_finals(rec, x):
    """The texts of the Finals of ``x`` decoded as one stream by ``rec`` with its default options."""
    from streamd.events import Final

    sid = rec.create_stream()
    rec.accept_audio(sid, x)
    rec.finish(sid)
    return [e.text for e in rec.drain() if isinstance(e, Final)]


async def raw_client(port: int, path: str = "/") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A bare websocket client: the opening handshake on a raw socket, then nothing the test does not write
    itself (it never answers a closing handshake)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    return reader, writer
