"""A lean crowd of real-time v1 clients for the ``connections`` scenario: thousands of websocket streams from
one process, cheap enough that the load generator does not hide the daemon's own cost.

Each client speaks the v1 protocol on a raw asyncio connection (the HTTP upgrade, masked client frames with
a zero mask key, the server's unmasked frames parsed in place): ``start``, ``ready``, then 100 ms s16le
packets at real time, ``eof``, ``done``.  One ticker sends every client's due packets (100 wake-ups a
second, not one timer per client).  A partial's lag is measured as :func:`streamd.bench.server.partial_latency`
does: from sending the packet that completed its chunk to its arrival.

:func:`crowd_main` (``streamd bench stress --crowd URL``) runs one crowd and prints its :func:`crowd_report`
(JSON); the scenario spreads the clients over several such processes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..server import FBANK_LOOKAHEAD_S, PACKET_S, RATE, AudioLoop

PKT = int(PACKET_S * RATE)  # samples per packet
TICK = 0.01  # the ticker's period (s)


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One client frame (RFC 6455), masked with the zero key (so the payload goes as it is)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


@dataclass
class CrowdClient:
    """One client stream and what it saw (``time.perf_counter`` seconds)."""

    index: int
    packets: int  # to send
    offset: int  # where its audio starts in the loop
    phase: float
    sent_at: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    ready: bool = False
    done_audio: float | None = None
    error: str | None = None
    closed: bool = False


class _Proto(asyncio.Protocol):
    """A client's connection: the upgrade answer, then the server's frames."""

    def __init__(self, c: CrowdClient, on_ready: asyncio.Future, ended: asyncio.Future):
        self.c, self.on_ready, self.ended = c, on_ready, ended
        self.buf = bytearray()
        self.upgraded = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                self._fail(f"upgrade refused: {bytes(buf[:40])!r}")
                return
            del buf[:end + 4]
            self.upgraded = True
        while len(buf) >= 2:
            op, n = buf[0] & 0x0F, buf[1] & 0x7F
            i = 2
            if n == 126:
                if len(buf) < 4:
                    return
                n, i = struct.unpack_from("!H", buf, 2)[0], 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n, i = struct.unpack_from("!Q", buf, 2)[0], 10
            if len(buf) < i + n:
                return
            payload = bytes(buf[i:i + n])
            del buf[:i + n]
            self._frame(op, payload)

    def _frame(self, op: int, payload: bytes) -> None:
        c = self.c
        if op == 8:  # close
            c.closed = True
            if self.transport is not None:
                self.transport.close()
            return
        if op == 9:  # ping: the server's keepalive wants its pong
            if self.transport is not None:
                self.transport.write(client_frame(10, payload))
            return
        if op != 1:
            return
        now = time.perf_counter()
        m = json.loads(payload)
        kind = m.get("type")
        if kind == "partial":
            need = int(round(float(m["end"]) * RATE)) + int(round(FBANK_LOOKAHEAD_S * RATE))
            k = (need - 1) // PKT
            if 0 < need and k < len(c.sent_at) and k < c.packets:
                c.lags.append(now - c.sent_at[k])
        elif kind == "ready":
            c.ready = True
            if not self.on_ready.done():
                self.on_ready.set_result(True)
        elif kind == "done":
            c.done_audio = float(m.get("audio_seconds", 0.0))
            if self.transport is not None:  # close handshake: our close, the server's answer ends it
                self.transport.write(client_frame(8, struct.pack("!H", 1000)))
            if not self.ended.done():
                self.ended.set_result(True)
        elif kind == "error":
            self._fail(f"{m.get('code')}: {m.get('message')}")

    def _fail(self, why: str) -> None:
        if self.c.error is None:
            self.c.error = why
        for f in (self.on_ready, self.ended):
            if not f.done():
                f.set_result(False)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            if self.c.error is None and self.c.done_audio is None:
                self.c.error = f"connection lost: {exc}"
            self._fail(self.c.error or "closed")


async def _connect(url: str, c: CrowdClient, timeout: float) -> tuple[asyncio.Transport, asyncio.Future] | None:
    u = urlsplit(url)
    loop = asyncio.get_running_loop()
    on_ready, ended = loop.create_future(), loop.create_future()
    try:
        transport, _ = await asyncio.wait_for(loop.create_connection(
            lambda: _Proto(c, on_ready, ended), u.hostname, u.port), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        c.error = f"connect: {type(e).__name__}: {e}"
        return None
    key = base64.b64encode(os.urandom(16)).decode()
    transport.write(f"GET {u.path or '/'} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                    f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                    .encode())
    start = {"type": "start", "sample_rate": RATE, "format": "s16le", "partials": True}
    transport.write(client_frame(1, json.dumps(start).encode()))
    try:
        ok = await asyncio.wait_for(on_ready, timeout)
    except asyncio.TimeoutError:
        c.error = c.error or "no ready in time"
        ok = False
    if not ok:
        transport.close()
        return None
    return transport, ended


async def run_crowd(url: str, n: int, seconds: float, audio: AudioLoop, seed: int = 0,
                    connect_rate: float = 200.0, timeout: float = 60.0) -> tuple[list[CrowdClient], dict]:
    """``n`` clients: connected (``connect_rate`` a second), then all streaming ``seconds`` of audio at real time
    together (random phases within a packet), eof, done.  The clients, and the crowd's own timings."""
    import random

    rnd = random.Random(seed)
    packets = max(1, int(round(seconds / PACKET_S)))
    clients = [CrowdClient(i, packets, rnd.randrange(audio.pcm.size), rnd.uniform(0, PACKET_S)) for i in range(n)]
    frames = [client_frame(2, audio.read(k * PKT, PKT)) for k in range(max(1, audio.pcm.size // PKT))]
    eof = client_frame(1, b'{"type": "eof"}')
    conns: dict[int, tuple[asyncio.Transport, asyncio.Future]] = {}

    async def one(c: CrowdClient, delay: float) -> None:
        await asyncio.sleep(delay)
        got = await _connect(url, c, timeout)
        if got is not None:
            conns[c.index] = got

    t_conn = time.perf_counter()
    await asyncio.gather(*(one(c, i / connect_rate) for i, c in enumerate(clients)))
    connect_s = time.perf_counter() - t_conn
    live = [c for c in clients if c.index in conns]
    cpu0 = time.process_time()
    t0 = time.perf_counter() + 0.2
    # the ticker: every client's due packets (client i's packet k is due at t0 + phase_i + (k + 1) * PACKET_S)
    order = sorted(live, key=lambda c: c.phase)
    sent = {c.index: 0 for c in live}
    late = 0.0  # the ticker's worst lateness (s): the crowd's own saturation
    while order:
        now = time.perf_counter()
        keep = []
        for c in order:
            k = sent[c.index]
            due = t0 + c.phase + (k + 1) * PACKET_S
            if due <= now:
                late = max(late, now - due)
                tr = conns[c.index][0]
                if tr.is_closing():
                    continue
                tr.write(frames[(c.offset // PKT + k) % len(frames)])
                c.sent_at.append(time.perf_counter())
                k = sent[c.index] = k + 1
                if k >= c.packets:
                    tr.write(eof)
                    continue
            keep.append(c)
        order = keep
        await asyncio.sleep(TICK)
    stream_cpu = time.process_time() - cpu0
    waits = [f for _, f in conns.values()]
    if waits:
        await asyncio.wait(waits, timeout=timeout)
    for tr, _ in conns.values():
        if not tr.is_closing():
            tr.close()
    return clients, {"connect_s": round(connect_s, 2), "stream_cpu_s": round(stream_cpu, 2),
                     "ticker_late_max_ms": round(1000 * late, 1)}


def crowd_report(clients: list[CrowdClient], timings: dict) -> dict:
    """What a crowd saw: clients connected and ready, errors (a few examples), packets sent, partial lags
    (ms, 0.1 ms resolution), audio lost (s: sent but not in ``done.audio_seconds``), the crowd's CPU."""
    lost = []
    for c in clients:
        if c.ready:
            sent = len(c.sent_at) * PACKET_S
            lost.append(sent if c.done_audio is None else max(0.0, sent - c.done_audio))
    errors = [c.error for c in clients if c.error]
    return {"clients": len(clients), "ready": sum(c.ready for c in clients), "errors": len(errors),
            "error_examples": sorted(set(errors))[:5], "packets": sum(len(c.sent_at) for c in clients),
            "lags_ms": [round(1000 * x, 1) for c in clients for x in c.lags],
            "audio_lost_s": round(sum(x for x in lost if x > 0.011), 2),
            "streams_losing_audio": sum(x > 0.011 for x in lost), **timings}


async def crowd_main(url: str, n: int, seconds: float, audio: AudioLoop, seed: int) -> None:
    """``--crowd URL``: one crowd of ``n`` clients; prints its :func:`crowd_report` (JSON)."""
    clients, timings = await run_crowd(url, n, seconds, audio, seed)
    print(json.dumps(crowd_report(clients, timings)))
