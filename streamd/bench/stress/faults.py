"""The faults scenario: TCP aborts, slowloris handshakes, trickling streams, clients that never read, then
SIGTERM under load."""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import time
from typing import Any

from ..server import RATE, AudioLoop
from .clients import PKT, Load, summarize_sessions
from .context import Ctx, cfg


async def raw_http(port: int, request: bytes, timeout: float = 10.0) -> tuple[int | None, bytes]:
    """Send raw bytes, read the answer until close or timeout: (status or None, head)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), timeout)
    finally:
        writer.close()
    m = re.match(rb"HTTP/1\.1 (\d{3})", data)
    return (int(m.group(1)) if m else None), data[:200]


async def open_stream(url: str, until: float, **kw: Any) -> Any:
    """A v1 connection past ``start`` -> ``ready``, retrying as a refusal's ``retry_after`` says until ``until``
    (monotonic); None if never admitted."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    while time.monotonic() < until:
        ws = await connect(url, compression=None, **kw)
        try:
            await ws.send('{"type": "start"}')
        except ConnectionClosed:
            pass
        try:
            m = json.loads(await ws.recv())
        except ConnectionClosed:
            m = {}
        if m.get("type") == "ready":
            return ws
        await ws.close()
        await asyncio.sleep(float(m.get("retry_after") or 1.0) * random.uniform(0.5, 1.5))
    return None


async def abort_one(url: str, pcm: bytes, until: float) -> str:
    """Admitted (retrying until ``until``), one packet, then a TCP reset mid-stream."""
    await asyncio.sleep(random.uniform(0, 5))
    ws = await open_stream(url, until)
    if ws is None:
        return "never admitted"
    await ws.send(pcm)
    await asyncio.sleep(0.2)
    ws.transport.abort()  # TCP reset mid-stream
    return "aborted"


async def slowloris(port: int) -> float:
    """A websocket handshake one byte a second; seconds until the server closed (or 30 s more passed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()
    req = f"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n".encode()
    try:
        for b in req:
            writer.write(bytes([b]))
            await writer.drain()
            await asyncio.sleep(1.0)
            if reader.at_eof():
                break
        await asyncio.wait_for(reader.read(), 30)
    except (ConnectionError, asyncio.TimeoutError):
        pass
    writer.close()
    return time.monotonic() - t0


async def trickle(url: str, until: float) -> str:
    """An admitted stream sending 2 bytes every 5 s: the error code and close code it ended with."""
    ws = await open_stream(url, until)
    if ws is None:
        return "never admitted"
    code, t0 = None, time.monotonic()
    try:
        while True:
            await ws.send(b"\x00\x00")  # 2 bytes every 5 s
            try:
                while True:
                    m = json.loads(await asyncio.wait_for(ws.recv(), 5.0))
                    if m.get("type") == "error":
                        code = m["code"]
            except asyncio.TimeoutError:
                pass
    except Exception:  # noqa: BLE001 - closed by the server
        pass
    return f"{code}/{ws.close_code} after {time.monotonic() - t0:.0f} s"


async def never_reads(url: str, until: float, audio: AudioLoop) -> str:
    """An admitted stream sending 30 s at real time and never reading a reply: how it closed."""
    ws = await open_stream(url, until, max_queue=1)
    if ws is None:
        return "never admitted"
    t0 = time.monotonic()
    try:
        for k in range(300):  # 30 s at real time, never reading
            await ws.send(audio.read(k * PKT, PKT))
            await asyncio.sleep(0.1)
        await ws.send('{"type": "eof"}')
        await asyncio.wait_for(ws.wait_closed(), 60)
    except Exception:  # noqa: BLE001
        pass
    ws.transport.abort()
    return f"close {ws.close_code} after {time.monotonic() - t0:.0f} s"


def _outcomes(results: list[Any]) -> dict[str, Any]:
    """The four faulty crowds' outcomes counted (an exception by its type's name)."""
    a, sl, tr, nr = results
    name = lambda x: x if isinstance(x, str) else type(x).__name__  # noqa: E731
    secs = [x for x in sl if isinstance(x, float)]
    return {"aborts": {"count": len(a), "outcomes": _count([name(x) for x in a])},
            "slowloris": {"count": len(sl), "closed_after_s_max": round(max(secs), 1) if secs else None,
                          "open_timeout_s": 10.0},
            "trickle": {"count": len(tr), "outcomes": _count([name(x) for x in tr])},
            "never_read": {"count": len(nr), "outcomes": _count([name(x) for x in nr])}}


async def scenario_faults(ctx: Ctx) -> dict:
    """TCP aborts, slowloris handshakes, trickling streams and clients that never read, all at once, while
    eight normal clients stream; then SIGTERM under load (a daemon of its own)."""
    out: dict[str, Any] = {}
    with ctx.daemon("faults", cfg(max_streams=4000)) as d:
        pcm = ctx.audio.read(0, RATE)
        t_end = time.monotonic() + 30.0
        load = Load(d.url, ctx.audio, seed=9)
        t0 = time.monotonic()
        normal = asyncio.gather(*(load.persistent(40.0, t_end, ramp=0.0, kind="normal") for _ in range(8)))
        await asyncio.sleep(2.0)
        results = await asyncio.gather(
            asyncio.gather(*(abort_one(d.url, pcm, t_end) for _ in range(50)), return_exceptions=True),
            asyncio.gather(*(slowloris(d.port) for _ in range(30)), return_exceptions=True),
            asyncio.gather(*(trickle(d.url, t_end) for _ in range(20)), return_exceptions=True),
            asyncio.gather(*(never_reads(d.url, t_end, ctx.audio) for _ in range(10)), return_exceptions=True))
        await normal
        await asyncio.sleep(2.0)
        m = d.metrics()
        out.update(_outcomes(results))
        n = summarize_sessions([s for s in load.sessions if s.accepted])
        out["normal_clients_meanwhile"] = {k: n[k] for k in ("accepted", "p95_ms", "accepted_ended", "audio_lost_s")}
        out["active_streams_after"] = m.get("streamd_active_streams")
        out["fds_after"] = d.fds()
        out["errors"] = d.errors()
        out["elapsed_s"] = round(time.monotonic() - t0, 1)
        ctx.done_with(d)
    out["sigterm"] = await sigterm_under_load(ctx)
    print(f"  faults: {json.dumps(out, default=str)[:1500]}", flush=True)
    return out


async def run_n_load(load: Load, n: int, seconds: float) -> None:
    await asyncio.gather(*(load.stream(seconds, kind="normal") for _ in range(n)))


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


async def sigterm_under_load(ctx: Ctx) -> dict:
    """Capacity-many streams plus refused clients hammering; SIGTERM mid-way."""
    d = ctx.daemon("sigterm", cfg(max_streams=4000))
    d.wait_ready()
    load = Load(d.url, ctx.audio, seed=11)
    cap = ctx.capacity or 64
    until = time.monotonic() + 30
    tasks = asyncio.gather(*(load.persistent(30.0, until, ramp=1.0) for _ in range(2 * cap)))
    await asyncio.sleep(8.0)
    live = load.live
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    rc = await asyncio.to_thread(d.proc.wait, 60)
    took = time.monotonic() - t0
    await asyncio.wait_for(tasks, 90)
    d._log.close()
    ctx.done_with(d)
    acc = [s for s in load.sessions if s.accepted]
    ends = _count([s.trace.error_code or ("done" if s.trace.done_at else f"silent close {s.trace.close_code}")
                   for s in acc])
    return {"live_at_sigterm": live, "exit_status": rc, "exit_after_s": round(took, 2), "accepted_outcomes": ends,
            "silent_ends": sum(v for k, v in ends.items() if k.startswith("silent"))}
