"""The stress suite's run: the scenarios by name, the table, and :func:`run_stress` (plain arguments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..server import AudioLoop
from .clients import victim_main
from .connections import scenario_connections
from .crowd import crowd_main
from .context import Ctx
from .faults import scenario_faults
from .fuzz import scenario_fuzz
from .scenarios import (scenario_adversary, scenario_baseline, scenario_capacity, scenario_default,
                        scenario_overload, scenario_rss, scenario_soak)


SCENARIOS: dict[str, Callable[[Ctx], Any]] = {
    "baseline": scenario_baseline, "capacity": scenario_capacity, "default": scenario_default,
    "overload": scenario_overload, "adversary": scenario_adversary, "faults": scenario_faults,
    "fuzz": scenario_fuzz, "soak": scenario_soak, "rss": scenario_rss, "connections": scenario_connections,
}
DEFAULT_SCENARIOS = tuple(n for n in SCENARIOS if n != "connections")  # the null engine's: only when named


def table(ctx: Ctx) -> str:
    r = ctx.results
    rows = [("scenario", "figure", "value")]
    if "baseline" in r:
        rows.append(("baseline", "victim alone p95 partial lag", f"{r['baseline']['p95_ms']} ms"))
    if "capacity" in r:
        rows.append(("capacity", "real-time greedy streams (admission off)", str(r["capacity"]["capacity_streams"])))
    if "default" in r:
        for n, x in r["default"].items():
            rows.append(("default", f"{n} greedy streams, no config",
                         f"accepted {x['accepted']}, p95 {x['p95_ms']} ms"))
    if "overload" in r:
        for k, x in r["overload"].items():
            if isinstance(x, dict):
                rows.append((f"overload {k}", "accepted (peak) / refused / p95 / victim p95 (alone) / lost / non-1013",
                             f"{x['accepted']} ({x['peak_concurrent']}) / {x['refused']} / {x['p95_ms']} ms / "
                             f"{x['victim_p95_ms']} ms ({x['victim_alone_p95_ms']} ms) / {x['audio_lost_s']} s / "
                             f"{x['refusals_not_1013_with_reason']}"))
                rows.append((f"overload {k}", "readyz 200 after / full capacity after / RSS idle",
                             f"{x['readyz_200_after_s']} s / {x['full_capacity_within_s']} s / "
                             f"{x['rss_idle_after_mb']:.0f} MiB"))
    if "adversary" in r:
        x = r["adversary"]
        rows.append(("adversary", "victim p95 alone / with the adversary",
                     f"{x['victim_alone_p95_ms']} ms / {x['victim_with_adversary_p95_ms']} ms"))
    if "fuzz" in r:
        rows.append(("fuzz", "cases / failures", f"{r['fuzz']['cases']} / {r['fuzz']['failures']}"))
    if "faults" in r:
        rows.append(("faults", "SIGTERM", json.dumps(r["faults"].get("sigterm"))))
    if "rss" in r:
        for k, x in r["rss"].items():
            rows.append(("rss", k, f"idle {x['idle_mb']:.0f}, rounds {[round(v) for v in x['after_rounds_mb']]} MiB"))
    if isinstance(r.get("connections"), dict) and "trials" in r["connections"]:
        x = r["connections"]
        for n, t in x["trials"].items():
            rows.append((f"connections f{x['front_processes']}", f"{n} real-time clients: ready / p95 / lost / "
                         "daemon CPU per frame", f"{t['ready']} / {t['p95_ms']} ms / {t['audio_lost_s']} s / "
                         f"{t['daemon_cpu_us_per_frame']} us"))
        rows.append((f"connections f{x['front_processes']}", "real-time streams (null engine)",
                     str(x["real_time_streams"])))
    rows.append(("logs", "tracebacks", json.dumps(ctx.tracebacks)))
    w = [max(len(str(row[i])) for row in rows) for i in range(3)]
    return "\n".join("  ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) for row in rows)


@dataclass(frozen=True)
class StressOptions:
    """One run of the suite (``streamd bench stress``'s flags; None: the daemon's default)."""

    scenarios: tuple[str, ...] = ()  # in order (empty: every scenario of SCENARIOS)
    model: str | None = None
    seconds: float = 12.0  # audio seconds per load stream
    capacity: int | None = None  # skip the search: real-time greedy streams of this machine
    victim_p95_ms: float | None = None  # skip the baseline: the victim's unloaded p95
    audio: tuple[str, ...] = ()  # WAV files (empty: the package's six sample recordings)
    out_dir: str = "bench-out/stress"
    json: str | None = None  # result file (None: OUT_DIR/stress.json)
    rounds: str | None = None  # the overload scenario's rounds, e.g. "10x,10x,10x"
    light_lane: float | None = None
    engine_thread: bool = False
    engine_nice: int | None = None
    max_load: float | None = None
    eager_encoder: bool = False
    engine_policy: str | None = None
    busy_cores: int = 0
    busy_nice: int = 0
    daemon_nice: int = 0
    no_nice_rights: bool = False
    own_sessions: bool = False
    shared_victim: bool = False
    victim: str | None = None  # be the victim process of another run against this URL
    connections: tuple[int, ...] = ()  # the connections scenario's trials (clients)
    front_processes: int | None = None  # the connections scenario's server.front_processes
    event_loop: str = "asyncio"  # the connections scenario's server.event_loop
    crowd_processes: int = 2  # the connections scenario's load generator processes
    crowd: str | None = None  # be one load generator process of the connections scenario against this URL
    crowd_clients: int = 0
    crowd_seed: int = 0


def _meta(o: StressOptions) -> dict[str, Any]:
    return {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "seconds_per_stream": o.seconds, "light_lane": o.light_lane,
            "engine_process": not o.engine_thread, "engine_nice": o.engine_nice,
            "engine_policy": o.engine_policy, "daemon_nice": o.daemon_nice,
            "no_nice_rights": o.no_nice_rights,
            "busy_cores": o.busy_cores, "busy_nice": o.busy_nice, "own_sessions": o.own_sessions,
            "encoder": "eager" if o.eager_encoder else "traced", "max_load": o.max_load,
            "victim": "shared event loop" if o.shared_victim else "own process",
            "front_processes": o.front_processes, "event_loop": o.event_loop, "crowd_processes": o.crowd_processes}


async def _run_scenarios(ctx: Ctx, names: list[str]) -> None:
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            ctx.results[name] = await SCENARIOS[name](ctx)
        except Exception as e:  # noqa: BLE001 - report and go on with the next scenario
            ctx.results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {name} failed: {type(e).__name__}: {e}", flush=True)
        ctx.results[name + "_elapsed_s"] = round(time.monotonic() - t0, 1)


async def run_stress(o: StressOptions) -> int:
    """Run the scenarios of ``o`` in order; print the table, write the JSON; returns the exit status."""
    from ...paths import default_bench_audio

    out_dir = Path(o.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    audio = AudioLoop.from_files(list(o.audio) or default_bench_audio())
    if o.victim:
        await victim_main(o.victim, o.seconds, audio)
        return 0
    if o.crowd:
        await crowd_main(o.crowd, o.crowd_clients, o.seconds, audio, o.crowd_seed)
        return 0
    ctx = Ctx(out_dir, o.model, audio, o.seconds, capacity=o.capacity, light_lane=o.light_lane,
              audio_files=list(o.audio) or None, shared_victim=o.shared_victim, engine_thread=o.engine_thread,
              engine_nice=o.engine_nice, engine_policy=o.engine_policy, daemon_nice=o.daemon_nice,
              own_sessions=o.own_sessions, eager_encoder=o.eager_encoder, max_load=o.max_load,
              no_nice_rights=o.no_nice_rights, connections=o.connections, front_processes=o.front_processes,
              event_loop=o.event_loop, crowd_processes=o.crowd_processes)
    if o.rounds:
        ks = [float(k.rstrip("x")) for k in o.rounds.split(",")]
        ctx.rounds = [(f"{k:g}x_{i + 1}", k) for i, k in enumerate(ks)]
    if o.victim_p95_ms:
        ctx.victim_p95_ms = o.victim_p95_ms
    names = [n.strip() for n in o.scenarios if n.strip()] or list(DEFAULT_SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"streamd bench stress: unknown scenario {unknown[0]!r} (known: {', '.join(SCENARIOS)})",
              file=sys.stderr)
        return 2
    meta = _meta(o)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=(lambda: os.nice(o.busy_nice)) if o.busy_nice else None,
                             start_new_session=o.own_sessions)
            for _ in range(o.busy_cores)]  # another tenant of the host
    try:
        await _run_scenarios(ctx, names)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    meta["load_average_end"] = os.getloadavg()
    result = {"meta": meta, "capacity": ctx.capacity, "victim_unloaded_p95_ms": ctx.victim_p95_ms,
              "results": ctx.results, "tracebacks": ctx.tracebacks}
    path = Path(o.json or out_dir / "stress.json")
    path.write_text(json.dumps(result, indent=1, default=str))
    print(table(ctx))
    print(f"JSON: {path}")
    return 0
