"""The ``connections`` scenario: how many real-time websocket clients one daemon carries when decoding costs
nothing (the null engine, ``streamd serve --null-engine``), and the daemon's CPU per connection-frame.

Trials of N clients (``--connections``, ascending; the scenario stops after the first that fails): the
clients (:mod:`.crowd`, spread over ``--crowd-processes`` processes) connect, then all stream
``--seconds`` of audio at real time in 100 ms packets together.  A trial passes with every client ready,
p95 partial lag <= :data:`LAG_TARGET_MS` and no audio lost.  The daemon's CPU (its process and its
children: front and engine processes) over the streaming window, divided by the packets sent, is the cost
of one connection-frame: what extrapolates to a larger host.  ``--front-processes N`` runs the daemon with
``server.front_processes: N``, ``--event-loop uvloop`` with ``server.event_loop: uvloop``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import numpy as np

from .context import Ctx
from .daemon import PACKAGE_ROOT

LAG_TARGET_MS = 100.0
DEFAULT_TRIALS = (250, 500, 1000, 2000, 3000)


async def _crowd(ctx: Ctx, url: str, n: int, seed: int) -> dict:
    cmd = [sys.executable, "-m", "streamd", "bench", "stress", "--crowd", url, "--crowd-clients", str(n),
           "--seconds", str(ctx.seconds), "--crowd-seed", str(seed)]
    if ctx.audio_files:
        cmd += ["--audio", *ctx.audio_files]
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, env=env)
    out, _ = await proc.communicate()
    try:
        return json.loads(out)
    except ValueError:
        return {"clients": n, "ready": 0, "errors": n, "error_examples": [f"crowd process: exit {proc.returncode}"],
                "packets": 0, "lags_ms": [], "audio_lost_s": 0.0, "streams_losing_audio": 0}


async def trial(ctx: Ctx, d, n: int) -> dict:
    """N clients against daemon ``d``: the merged crowd reports and the daemon's CPU while they streamed."""
    k = max(1, min(ctx.crowd_processes, n))
    sizes = [n // k + (i < n % k) for i in range(k)]
    load0, cpu0, main0, t0 = os.getloadavg(), d.cpu_seconds(), d.cpu_seconds(children=False), time.monotonic()
    crowds = await asyncio.gather(*(_crowd(ctx, d.url, m, seed=1000 * n + i) for i, m in enumerate(sizes)))
    cpu, wall = d.cpu_seconds() - cpu0, time.monotonic() - t0
    main = d.cpu_seconds(children=False) - main0  # the engine process (with fronts) or the whole daemon
    lags = [x for c in crowds for x in c["lags_ms"]]
    packets = sum(c["packets"] for c in crowds)
    r = {"clients": n, "ready": sum(c["ready"] for c in crowds), "errors": sum(c["errors"] for c in crowds),
         "error_examples": [e for c in crowds for e in c["error_examples"]][:5],
         "partials": len(lags), "p50_ms": round(float(np.percentile(lags, 50)), 1) if lags else None,
         "p95_ms": round(float(np.percentile(lags, 95)), 1) if lags else None,
         "p99_ms": round(float(np.percentile(lags, 99)), 1) if lags else None,
         "audio_lost_s": round(sum(c["audio_lost_s"] for c in crowds), 2),
         "streams_losing_audio": sum(c["streams_losing_audio"] for c in crowds), "packets": packets,
         "daemon_cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
         # the whole trial's daemon CPU (connect, stream, close) over its frames: an upper bound per frame
         "daemon_cpu_us_per_frame": round(1e6 * cpu / packets, 1) if packets else None,
         "main_process_cpu_us_per_frame": round(1e6 * main / packets, 1) if packets else None,
         "crowd_connect_s": [c.get("connect_s") for c in crowds],
         "crowd_stream_cpu_s": round(sum(c.get("stream_cpu_s", 0.0) for c in crowds), 1),
         "crowd_ticker_late_max_ms": max((c.get("ticker_late_max_ms", 0.0) for c in crowds), default=None),
         "load_average_before": [round(x, 2) for x in load0], "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    r["real_time"] = (r["ready"] == n and r["p95_ms"] is not None and r["p95_ms"] <= LAG_TARGET_MS
                      and r["streams_losing_audio"] == 0)
    return r


async def scenario_connections(ctx: Ctx) -> dict:
    """Trials of ascending N (``ctx.connections``) until one fails: the largest passing N is the figure."""
    fronts = ctx.front_processes or 1
    config = {"limits": {"max_load": 0, "max_streams": 20000, "light_lane": 0},
              "server": {"front_processes": fronts, "event_loop": ctx.event_loop}}
    out: dict = {"front_processes": fronts, "event_loop": ctx.event_loop, "crowd_processes": ctx.crowd_processes,
                 "seconds": ctx.seconds, "trials": {}}
    best = 0
    with ctx.daemon(f"connections_f{fronts}", config, args=("--null-engine",)) as d:
        for n in ctx.connections or DEFAULT_TRIALS:
            r = await trial(ctx, d, n)
            out["trials"][n] = r
            print(f"  connections {n} (fronts {fronts}): ready {r['ready']}, p95 {r['p95_ms']} ms, lost "
                  f"{r['audio_lost_s']} s, daemon {r['daemon_cpu_us_per_frame']} us CPU per frame (main process "
                  f"{r['main_process_cpu_us_per_frame']} us), crowd {r['crowd_stream_cpu_s']} s CPU, load "
                  f"{r['load_average_after']}, errors {r['error_examples'][:2]}", flush=True)
            await asyncio.sleep(3.0)
            if not r["real_time"]:
                break
            best = n
        ctx.done_with(d)
    out["real_time_streams"] = best
    return out
