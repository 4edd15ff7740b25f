#!/usr/bin/env python3
"""Stress suite of ``streamd serve`` (issue 25): loopback only, bounded in time, not in CI.

    python bench/stress.py                                 # every scenario (~15 min on 2 cores)
    python bench/stress.py --scenarios capacity,overload   # some of them
    python bench/stress.py --capacity 96 --scenarios overload,adversary   # skip the search

Each scenario starts the daemon as a subprocess (``python -m streamd serve --config TMP.yaml``; its log
goes to ``--out-dir``), drives it from this process with the load generator of ``streamd bench server``
(:mod:`streamd.bench.server`: v1 clients sending 100 ms packets at real time, partial lag per chunk),
samples its RSS and file descriptors from /proc, and at the end prints one table and writes one JSON file.

Scenarios (the issue's targets in brackets; docs/benchmarks.md "Overload" has the figures):

* ``baseline``  one greedy stream alone: the victim's unloaded partial lag.  The victim (here and below) is a
  process of its own, as another user's client is; ``--shared-victim`` runs it in this process's event loop
  beside the load instead (how it was measured before 2026-12-03 16:00: its partials then also waited for
  this loop, busy with hundreds of load clients).  ``--light-lane N`` sets ``limits.light_lane`` (0: one
  engine) in every configured daemon, for A/B runs; ``--engine-thread`` sets ``server.engine_process: false``
  (the main engine in a worker thread of the daemon's process, as before 2026-12-05) likewise, and
  ``--engine-nice N`` ``server.engine_nice``, ``--engine-policy P`` ``server.engine_policy``, ``--eager-encoder``
  ``engine.trace_encoder: false``, ``--max-load X`` ``limits.max_load``; ``--daemon-nice N``
  starts every daemon under ``nice -n N`` (systemd's ``Nice=``; a daemon started at 0 asks for ``server.nice``,
  -5, itself, which root gets), ``--no-nice-rights`` without ``CAP_SYS_NICE`` (as a user who may not raise its
  priority: the daemon then runs at 0); ``--busy-cores N`` keeps N busy loops (another
  tenant of the host, at ``--busy-nice``) running through every scenario; ``--own-sessions`` starts the
  daemons, the victim and the busy loops each in a session of their own (with the kernel's autogroups, each a
  scheduling group, as a service or another terminal is) instead of this process's.
* ``capacity``  capacity search with admission off (``limits.max_load: 0``): the most real-time greedy
  streams (p95 partial lag <= one chunk, no growth), doubling then bisecting.
* ``default``   out of the box (no config file): 32 real-time greedy streams [all real time, >= 32].
* ``overload``  2x, 5x (three identical rounds) and 10x the capacity offered at once, with a victim stream
  from another address (127.0.0.2); refused clients retry after ``retry_after`` until the load window
  closes [accepted p95 <= 1 s, victim p95 <= 2x unloaded, no accepted audio lost, every refusal a 1013
  with a reason, full capacity within 5 s after the load, RSS after 3 rounds within 10 % of the first].
* ``adversary`` the victim, then one client (127.0.0.3) opening 60 ``modified_beam`` beam-64 streams at
  3.9x real time [victim p95 <= 2x unloaded].
* ``faults``    TCP aborts mid-stream, slowloris handshakes, trickling streams, clients that never read,
  then SIGTERM under load [documented behaviour, every stream ends with done or an error].
* ``fuzz``      random v1 / Vosk / Wyoming (when the daemon has it) sessions and raw HTTP requests with
  header variants [0 failures in >= 1,000 cases: no 500, no hang, no traceback, an error code and its
  close code for every refusal].
* ``soak``      half the capacity for a few minutes, RSS / fds / p95 sampled every 10 s [flat].
* ``rss``       three 5x rounds each with the glibc defaults and with the systemd unit's allocator
  settings (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``): idle RSS after each round.

Every daemon log is searched for ``Traceback`` [none].
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamd.bench.server import (PACKET_S, RATE, AudioLoop, ClientPlan, ClientTrace, _client,  # noqa: E402
                                  partial_latency)
from streamd.config import ENGINE_POLICIES  # noqa: E402

PKT = int(PACKET_S * RATE)
VICTIM_ADDR, ADVERSARY_ADDR = "127.0.0.2", "127.0.0.3"
ROUNDS = (("2x", 2), ("5x_1", 5), ("5x_2", 5), ("5x_3", 5), ("10x", 10))  # the overload scenario's rounds
ALLOCATOR_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "65536"}  # as in systemd/streamd.service


# =========================================================================== the daemon under test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``python -m streamd serve`` in a subprocess with a YAML config (None: no config file at all)."""

    def __init__(self, name: str, out_dir: Path, config: dict | None, model: str | None, env: dict | None = None,
                 wyoming: bool = False, nice: int = 0, new_session: bool = False, no_nice_rights: bool = False):
        self.name = name
        self.port = free_port()
        self.wyoming_port = free_port() if wyoming else None
        self.log_path = out_dir / f"{name}.log"
        args = [sys.executable, "-m", "streamd", "serve", "--port", str(self.port)]
        if nice:  # as systemd's Nice= in the unit would start it (the engine process adds server.engine_nice)
            args = ["nice", "-n", str(nice)] + args
        if no_nice_rights:  # as a user without CAP_SYS_NICE (and RLIMIT_NICE 0) runs it: server.nice is refused
            args = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"] + args
        if model:
            args += ["--model", model]
        if self.wyoming_port:
            args += ["--wyoming-port", str(self.wyoming_port)]
        if config is not None:
            import yaml

            self.config_path = out_dir / f"{name}.yaml"
            self.config_path.write_text(yaml.safe_dump(config))
            args += ["--config", str(self.config_path)]
        e = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "OMP_", "MKL_", "STREAMD_"))}
        e.update(env or {})
        e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=e, cwd=str(ROOT),
                                     start_new_session=new_session)
        self.url = f"ws://127.0.0.1:{self.port}/v1/stream"

    def wait_ready(self, timeout: float = 180.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited ({self.proc.returncode}); see {self.log_path}")
            if self.readyz()[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"daemon {self.name} not ready after {timeout:.0f} s; see {self.log_path}")

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode().strip()
        except OSError:
            return 0, ""

    def metrics_text(self) -> str:
        """``GET /metrics`` ("" when the daemon does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    def metrics(self) -> dict[str, float]:
        from streamd.bench.server import parse_metrics

        text = self.metrics_text()
        return parse_metrics(text) if text else {}

    def lag_buckets(self, lane: str) -> list[tuple[float, float]]:
        """``streamd_partial_lag_seconds`` of one engine lane: [(upper bound s, cumulative count)], +Inf last."""
        return [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
            r'^streamd_partial_lag_seconds_bucket\{lane="' + re.escape(lane) + r'",le="([^"]+)"\} (\S+)$',
            self.metrics_text(), re.M)]

    def errors(self) -> dict[str, float]:
        """``streamd_errors_total`` by code."""
        return {m.group(1): float(m.group(2)) for m in
                re.finditer(r'^streamd_errors_total\{code="([^"]+)"\} (\S+)$', self.metrics_text(), re.M)}

    def rss_mb(self, pid: int | None = None) -> float | None:
        """The daemon's resident memory (or process ``pid``'s), MiB."""
        try:
            for line in Path(f"/proc/{pid or self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def children_rss_mb(self) -> float | None:
        """Resident memory of the daemon's child processes together (the engine processes: main and light lane;
        multiprocessing's resource tracker), MiB."""
        try:  # a child is listed under the thread that started it
            kids = [k for t in Path(f"/proc/{self.proc.pid}/task").iterdir()
                    for k in (t / "children").read_text().split()]
        except OSError:
            return None
        return sum(self.rss_mb(int(k)) or 0.0 for k in kids)

    def fds(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return None

    def stop(self, timeout: float = 40.0) -> tuple[int | None, float]:
        """SIGTERM; (exit status, seconds to exit)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode, time.monotonic() - t0

    def tracebacks(self) -> int:
        return self.log_path.read_text(errors="replace").count("Traceback")

    def __enter__(self) -> "Daemon":
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.stop()


class Sampler:
    """RSS (MiB) and fds of a daemon every ``every`` seconds, in a task."""

    def __init__(self, d: Daemon, every: float = 1.0):
        self.d, self.every = d, every
        self.samples: list[tuple[float, float | None, int | None]] = []
        self.t0 = time.monotonic()
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self.t0, self.d.rss_mb(), self.d.fds()))
            await asyncio.sleep(self.every)

    def __enter__(self) -> "Sampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._task:
            self._task.cancel()

    def peak_rss(self) -> float | None:
        vals = [r for _, r, _ in self.samples if r is not None]
        return max(vals) if vals else None


# =========================================================================== clients (streamd.bench.server)


@dataclass
class Session:
    """One client stream attempt and what it saw."""

    trace: ClientTrace
    addr: str
    kind: str
    started: float
    ended: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.trace.chunk_seconds is not None

    def lags(self) -> list[float]:
        tr = self.trace
        out = []
        for arrival, end in tr.partials:
            lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
            if lag is not None:
                out.append(lag)
        return out

    def audio_lost(self) -> float | None:
        """Seconds of sent audio the server did not decode (None: not accepted)."""
        if not self.accepted:
            return None
        sent = len(self.trace.sent_at) and min(len(self.trace.sent_at) * PKT, self.trace.total_samples) / RATE
        if self.trace.done_audio_seconds is None:
            return float(sent)
        return max(0.0, sent - self.trace.done_audio_seconds)


class Load:
    """Concurrent client sessions against one daemon, with a live count of accepted streams."""

    def __init__(self, url: str, audio: AudioLoop, seed: int = 0):
        self.url, self.audio = url, audio
        self.rnd = random.Random(seed)
        self.sessions: list[Session] = []
        self.live = 0
        self.peak = 0

    async def stream(self, seconds: float, addr: str = "127.0.0.1", kind: str = "load", method: str | None = None,
                     beam: int | None = None, speed: float = 1.0) -> Session:
        plan = ClientPlan(self.url, int(round(seconds * RATE)), method, beam, local_addr=addr, speed=speed,
                          timeout=30.0)
        tr = ClientTrace(len(self.sessions), PKT, plan.total_samples)
        s = Session(tr, addr, kind, time.monotonic())
        self.sessions.append(s)
        loop = asyncio.get_running_loop()
        ready, go = asyncio.Event(), loop.create_future()

        async def release() -> None:
            await ready.wait()
            if tr.error is None and not go.done():
                self.live += 1
                self.peak = max(self.peak, self.live)
                go.set_result(time.perf_counter())

        rel = loop.create_task(release())
        try:
            await _client(plan, self.audio, tr, self.rnd.randrange(self.audio.pcm.size), self.rnd.uniform(0, PACKET_S),
                          ready, go)
        finally:
            rel.cancel()
            if go.done():
                self.live -= 1
            s.ended = time.monotonic()
        return s

    async def persistent(self, seconds: float, until: float, ramp: float = 2.0, **kw: Any) -> None:
        """Try (after a random delay in ``ramp``) until accepted once or ``until`` (monotonic); refused: wait the
        server's ``retry_after`` (x 0.5-1.5) and try again."""
        await asyncio.sleep(self.rnd.uniform(0, ramp))
        while time.monotonic() < until:
            s = await self.stream(seconds, **kw)
            if s.accepted:
                return
            wait = (s.trace.retry_after or 5.0) * self.rnd.uniform(0.5, 1.5)
            await asyncio.sleep(min(wait, max(0.0, until - time.monotonic())))


def session_partials(s: Session) -> list[tuple[float, float]]:
    """(arrival, lag) of each partial of a session that has a lag (perf_counter seconds)."""
    tr = s.trace
    out = []
    for arrival, end in tr.partials:
        lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
        if lag is not None:
            out.append((arrival, lag))
    return out


def victim_split(partials: list[tuple[float, float]], t_from: float, t_to: float = math.inf
                 ) -> tuple[list[float], list[float]]:
    """The victim's partial lags before ``t_from`` and between ``t_from`` and ``t_to`` (perf_counter)."""
    before = [lag for arrival, lag in partials if arrival < t_from]
    during = [lag for arrival, lag in partials if t_from <= arrival <= t_to]
    return before, during


def victim_report(s: Session) -> dict:
    """The victim's session: its partials as (arrival, lag), how it ended, the audio it lost."""
    r = summarize_sessions([s])
    return {"partials": session_partials(s), "accepted_ended": r["accepted_ended"], "audio_lost_s": r["audio_lost_s"]}


async def victim_main(url: str, seconds: float, audio: AudioLoop) -> None:
    """``--victim URL``: one greedy stream from ``VICTIM_ADDR``; prints :func:`victim_report` (JSON)."""
    load = Load(url, audio, seed=7)
    print(json.dumps(victim_report(await load.stream(seconds, addr=VICTIM_ADDR, kind="victim"))))


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 1)


def summarize_sessions(sessions: list[Session]) -> dict:
    acc = [s for s in sessions if s.accepted]
    refused = [s for s in sessions if not s.accepted]
    lags = [lag for s in acc for lag in s.lags()]
    lost = [x if x > 0.011 else 0.0 for x in (s.audio_lost() or 0.0 for s in acc)]  # done rounds to 0.01 s
    ended = {}
    for s in acc:
        key = s.trace.error_code or ("done" if s.trace.done_at else "no done")
        ended[key] = ended.get(key, 0) + 1
    codes: dict[str, int] = {}
    bad_refusals = []
    for s in refused:
        tr = s.trace
        key = f"{tr.error_code}/{tr.close_code}"
        codes[key] = codes.get(key, 0) + 1
        if tr.close_code != 1013 or not tr.error_code or not (tr.error or "").split(": ", 1)[-1]:
            bad_refusals.append(f"{tr.error_code} {tr.close_code}: {tr.error}")
    return {"attempts": len(sessions), "accepted": len(acc), "refused": len(refused), "refusal_codes": codes,
            "refusals_not_1013_with_reason": len(bad_refusals), "bad_refusal_examples": bad_refusals[:5],
            "partials": len(lags), "p50_ms": ms(pct(lags, 50)), "p95_ms": ms(pct(lags, 95)),
            "p99_ms": ms(pct(lags, 99)), "max_ms": ms(max(lags) if lags else None),
            "accepted_ended": ended, "audio_lost_s": round(sum(lost), 3),
            "streams_losing_audio": sum(x > 0.011 for x in lost)}


# =========================================================================== scenarios


@dataclass
class Ctx:
    out_dir: Path
    model: str | None
    audio: AudioLoop
    seconds: float
    capacity: int | None = None
    victim_p95_ms: float | None = None
    results: dict = field(default_factory=dict)
    tracebacks: dict = field(default_factory=dict)
    light_lane: float | None = None  # limits.light_lane of every configured daemon (None: the default)
    engine_thread: bool = False  # server.engine_process: false in every configured daemon
    engine_nice: int | None = None  # server.engine_nice of every configured daemon (None: the default)
    engine_policy: str | None = None  # server.engine_policy of every configured daemon (None: the default)
    daemon_nice: int = 0  # every daemon started under `nice -n N` (systemd's Nice=)
    no_nice_rights: bool = False  # every daemon started without CAP_SYS_NICE (server.nice below 0 refused)
    own_sessions: bool = False  # daemons and the victim each in a session (so an autogroup) of their own
    eager_encoder: bool = False  # engine.trace_encoder: false in every configured daemon
    max_load: float | None = None  # limits.max_load of every configured daemon with admission (None: the default)
    audio_files: list[str] | None = None  # --audio (the victim process reads the same)
    shared_victim: bool = False  # the victim in this process's event loop, beside the load (before 2026-12-03 16:00)
    rounds: list = field(default_factory=lambda: list(ROUNDS))  # the overload scenario's (name, k x capacity)

    def daemon(self, name: str, config: dict | None, **kw: Any) -> Daemon:
        if config is not None:  # None: no config file at all (out of the box), nothing to override
            limits = {} if self.light_lane is None else {"light_lane": self.light_lane}
            if self.max_load is not None and config.get("limits", {}).get("max_load") != 0:
                limits["max_load"] = self.max_load
            server = {"engine_process": False} if self.engine_thread else {}
            if self.engine_nice is not None:
                server["engine_nice"] = self.engine_nice
            if self.engine_policy is not None:
                server["engine_policy"] = self.engine_policy
            engine = {"trace_encoder": False} if self.eager_encoder else {}
            for section, values in (("limits", limits), ("server", server), ("engine", engine)):
                if values:
                    config = {**config, section: {**config.get(section, {}), **values}}
        return Daemon(name, self.out_dir, config, self.model, nice=self.daemon_nice, new_session=self.own_sessions,
                      no_nice_rights=self.no_nice_rights, **kw)

    async def victim(self, load: Load, url: str, seconds: float) -> dict:
        """One greedy stream of another user (``VICTIM_ADDR``) for ``seconds``: its :func:`victim_report`,
        partial arrivals on the system's monotonic clock (``time.perf_counter`` here and in a child process).

        By default the victim is a process of its own, as another user's client would be: in this process
        its partials would also wait for this event loop, busy with hundreds of load clients."""
        if self.shared_victim:
            return victim_report(await load.stream(seconds, addr=VICTIM_ADDR, kind="victim"))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--victim", url, "--seconds", str(seconds)]
        if self.audio_files:
            cmd += ["--audio", *self.audio_files]
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                    start_new_session=self.own_sessions)
        out, _ = await proc.communicate()
        got = json.loads(out)
        got["partials"] = [tuple(x) for x in got["partials"]]
        return got

    def done_with(self, d: Daemon) -> None:
        self.tracebacks[d.name] = d.tracebacks()


def hist_quantile(before: list[tuple[float, float]], after: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of what a Prometheus histogram counted between two snapshots (cumulative buckets
    [(le, count)]), interpolated linearly inside its bucket as PromQL's ``histogram_quantile`` does; None
    when nothing was counted (or the quantile lies in the +Inf bucket)."""
    start = dict(before)
    delta = [(le, c - start.get(le, 0.0)) for le, c in after]
    if not delta or delta[-1][1] <= 0:
        return None
    rank = q * delta[-1][1]
    lo_le, lo_c = 0.0, 0.0
    for le, c in delta:
        if c >= rank:
            if math.isinf(le):
                return None
            return lo_le + (le - lo_le) * ((rank - lo_c) / (c - lo_c) if c > lo_c else 1.0)
        lo_le, lo_c = le, c
    return None


def refusal_reason(message: str | None) -> str | None:
    """Which admission rule refused (from the ``overloaded`` message's wording, streamd.server.admission)."""
    if not message:
        return None
    for needle, why in (("gradually", "slow start"), ("would need", "load rule"), ("event loop", "loop lag"),
                        ("after their audio", "late partials")):
        if needle in message:
            return why
    return message[:40]


def cfg(**limits: Any) -> dict:
    return {"limits": limits} if limits else {}


async def scenario_baseline(ctx: Ctx) -> dict:
    with ctx.daemon("baseline", cfg()) as d:
        load = Load(d.url, ctx.audio, seed=1)
        lags = [lag for _, lag in (await ctx.victim(load, d.url, 20.0))["partials"]]
        ctx.done_with(d)
    r = {"partials": len(lags), "p50_ms": ms(pct(lags, 50)), "p95_ms": ms(pct(lags, 95)),
         "max_ms": ms(max(lags) if lags else None)}
    ctx.victim_p95_ms = r["p95_ms"]
    return r


async def run_n(url: str, audio: AudioLoop, n: int, seconds: float, seed: int = 0, **kw: Any) -> list[Session]:
    load = Load(url, audio, seed)
    await asyncio.gather(*(load.stream(seconds, **kw) for _ in range(n)))
    return load.sessions


def realtime(r: dict, chunk_ms: float = 320.0) -> bool:
    return r["accepted"] == r["attempts"] and r["p95_ms"] is not None and r["p95_ms"] <= chunk_ms \
        and r["streams_losing_audio"] == 0


async def scenario_capacity(ctx: Ctx) -> dict:
    """Largest N of real-time greedy streams with admission off (p95 <= one chunk)."""
    runs = {}
    with ctx.daemon("capacity", cfg(max_load=0, max_streams=4000)) as d:
        async def trial(n: int) -> bool:
            sessions = await run_n(d.url, ctx.audio, n, ctx.seconds, seed=n)
            r = summarize_sessions(sessions)
            runs[n] = {k: r[k] for k in ("accepted", "p50_ms", "p95_ms", "streams_losing_audio")}
            print(f"  capacity trial {n}: p95 {r['p95_ms']} ms, accepted {r['accepted']}/{n}", flush=True)
            await asyncio.sleep(2.0)
            return realtime(r)

        good, bad, n = 0, None, 32
        while bad is None and n <= 1024:
            if await trial(n):
                good, n = n, 2 * n
            else:
                bad = n
        while bad is not None and bad - good > max(8, good // 8):
            mid = (good + bad) // 2
            if await trial(mid):
                good = mid
            else:
                bad = mid
        ctx.done_with(d)
    ctx.capacity = good
    return {"capacity_streams": good, "first_failing": bad, "trials": runs}


async def scenario_default(ctx: Ctx) -> dict:
    """Out of the box: no config file; 32 greedy real-time streams."""
    with ctx.daemon("default", None) as d:
        out = {}
        for n in (32, 48):  # all at once; a refused client retries as told (the slow start takes 16 a second)
            load = Load(d.url, ctx.audio, seed=n)
            until = time.monotonic() + 15.0
            await asyncio.gather(*(load.persistent(ctx.seconds, until, ramp=0.0) for _ in range(n)))
            r = summarize_sessions([s for s in load.sessions if s.accepted])
            r["refused"] = sum(not s.accepted for s in load.sessions)
            r["refusal_codes"] = summarize_sessions(load.sessions)["refusal_codes"]
            r["peak_concurrent"] = load.peak
            out[n] = {k: r[k] for k in ("accepted", "peak_concurrent", "refused", "refusal_codes", "p50_ms",
                                        "p95_ms", "p99_ms", "streams_losing_audio")}
            out[n]["real_time"] = r["p95_ms"] is not None and r["p95_ms"] <= 320.0
            print(f"  default config, {n} streams: {out[n]}", flush=True)
            await asyncio.sleep(3.0)
        ctx.done_with(d)
    return out


async def overload_round(ctx: Ctx, d: Daemon, k: float, sampler: Sampler, load_window: float = 20.0,
                         seed: int = 0) -> dict:
    """k x capacity clients offered at once (plus the victim); then recovery to full capacity."""
    cap = ctx.capacity or 64
    n = int(round(k * cap))
    load = Load(d.url, ctx.audio, seed)
    alone = 8.0  # the victim alone first: its unloaded lag in the same daemon, minutes apart from nothing
    lags_a = d.lag_buckets("light")
    victim = asyncio.create_task(ctx.victim(load, d.url, alone + load_window + ctx.seconds + 4))
    await asyncio.sleep(alone)
    t_load = time.perf_counter()
    until = time.monotonic() + load_window
    rss_before = d.rss_mb()
    lags0 = d.lag_buckets("light")  # the victim is the light lane's only stream (the load's client has many)
    alone_in_daemon = hist_quantile(lags_a, lags0, 0.95)
    await asyncio.gather(*(load.persistent(ctx.seconds, until, kind="load") for _ in range(n)))
    t_end = time.monotonic()
    in_daemon = hist_quantile(lags0, d.lag_buckets("light"), 0.95)
    # recovery: /readyz back to 200, then as many streams as were admitted at the peak
    ready_after = None
    while time.monotonic() - t_end < 30:
        if d.readyz()[0] == 200:
            ready_after = time.monotonic() - t_end
            break
        await asyncio.sleep(0.1)
    peak = load.peak
    again = Load(d.url, ctx.audio, seed + 1)  # as many clients as were streaming at the peak, retrying as told
    n_rec = max(1, peak - 1)
    await asyncio.gather(*(again.persistent(3.0, t_end + 20.0, ramp=0.0, kind="recovery") for _ in range(n_rec)))
    got = sorted(s.started for s in again.sessions if s.accepted)
    full_after = got[-1] - t_end if len(got) == n_rec else None
    v = await victim
    rec = [s for s in again.sessions if s.accepted]
    await asyncio.sleep(3.0)
    sessions = [s for s in load.sessions if s.kind == "load"]
    r = summarize_sessions(sessions)
    before, during = victim_split(v["partials"], t_load, t_end - time.monotonic() + time.perf_counter())
    r.update(offered=n, k=k, peak_concurrent=peak, victim_p95_ms=ms(pct(during, 95)),
             victim_alone_p95_ms=ms(pct(before, 95)), victim_in_daemon_p95_ms=ms(in_daemon),
             victim_alone_in_daemon_p95_ms=ms(alone_in_daemon),
             victim_ended=v["accepted_ended"],
             victim_audio_lost_s=v["audio_lost_s"],
             readyz_200_after_s=None if ready_after is None else round(ready_after, 2),
             recovery_accepted=len(rec), recovery_offered=n_rec,
             full_capacity_within_s=None if full_after is None else round(full_after, 2),
             # each recovery attempt: seconds after the load, admitted, the refusal's hint and its rule
             recovery_attempts=[[round(s.started - t_end, 2), s.accepted, s.trace.retry_after,
                                 None if s.accepted else refusal_reason(s.trace.error)] for s in again.sessions],
             rss_before_mb=rss_before, rss_peak_mb=sampler.peak_rss(), rss_idle_after_mb=d.rss_mb(),
             children_rss_idle_after_mb=d.children_rss_mb(),
             fds_idle_after=d.fds())
    print(f"  overload {k}x ({n} clients): accepted {r['accepted']} (peak {peak}), refused {r['refused']}, "
          f"p95 {r['p95_ms']} ms, victim p95 {r['victim_p95_ms']} ms (alone {r['victim_alone_p95_ms']} ms, "
          f"in the daemon {r['victim_in_daemon_p95_ms']} / {r['victim_alone_in_daemon_p95_ms']} ms), "
          f"lost {r['audio_lost_s']} s, "
          f"refusal codes {r['refusal_codes']}, ready after {r['readyz_200_after_s']} s, "
          f"recovery {r['recovery_accepted']}/{r['recovery_offered']}, RSS {r['rss_idle_after_mb']} MiB", flush=True)
    return r


async def scenario_overload(ctx: Ctx) -> dict:
    out = {}
    with ctx.daemon("overload", cfg(max_streams=4000)) as d, Sampler(d) as sampler:
        await asyncio.sleep(1.0)
        out["idle_rss_mb"] = d.rss_mb()
        out["idle_children_rss_mb"] = d.children_rss_mb()
        for name, k in ctx.rounds:
            out[name] = await overload_round(ctx, d, k, sampler, seed=hash(name) % 1000)
        ctx.done_with(d)
    if all(f"5x_{i}" in out for i in (1, 2, 3)):
        rss = [out[f"5x_{i}"]["rss_idle_after_mb"] for i in (1, 2, 3)]
        out["rss_rounds_mb"] = rss
        out["children_rss_rounds_mb"] = [out[f"5x_{i}"]["children_rss_idle_after_mb"] for i in (1, 2, 3)]
        out["rss_third_vs_first"] = round(rss[2] / rss[0], 3) if all(rss) else None
    return out


async def scenario_adversary(ctx: Ctx) -> dict:
    with ctx.daemon("adversary", cfg()) as d:
        load = Load(d.url, ctx.audio, seed=5)
        alone, total = 15.0, 50.0  # the victim alone first (its unloaded lag, same daemon and hour), then not
        victim = asyncio.create_task(ctx.victim(load, d.url, total))
        await asyncio.sleep(alone)
        t_adv = time.perf_counter()
        until = time.monotonic() + 25.0
        await asyncio.gather(*(load.persistent(60.0, until, ramp=0.5, addr=ADVERSARY_ADDR, kind="adversary",
                                               method="modified_beam", beam=64, speed=3.9) for _ in range(60)))
        v = await victim
        errors = d.errors()
        ctx.done_with(d)
    a = summarize_sessions([s for s in load.sessions if s.kind == "adversary"])
    before, during = victim_split(v["partials"], t_adv)
    lags = before + during
    r = {"victim": {"partials": len(lags), "p95_ms": ms(pct(lags, 95)), "accepted_ended": v["accepted_ended"],
                    "audio_lost_s": v["audio_lost_s"]}, "adversary": {k: a[k] for k in ("attempts", "accepted", "refused", "refusal_codes",
                                                       "accepted_ended", "refusals_not_1013_with_reason",
                                                       "bad_refusal_examples")},
         "victim_alone_p95_ms": ms(pct(before, 95)), "victim_with_adversary_p95_ms": ms(pct(during, 95)),
         "victim_with_adversary_p50_ms": ms(pct(during, 50)),
         "victim_p95_ms": ms(pct(lags, 95)), "unloaded_victim_p95_ms": ctx.victim_p95_ms, "server_errors": errors}
    print(f"  adversary: victim p95 alone {r['victim_alone_p95_ms']} ms, with the adversary "
          f"{r['victim_with_adversary_p95_ms']} ms (baseline run {ctx.victim_p95_ms}), adversary {r['adversary']}",
          flush=True)
    return r


# --------------------------------------------------------------------------- faults


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


async def scenario_faults(ctx: Ctx) -> dict:
    """TCP aborts, slowloris handshakes, trickling streams and clients that never read, all at once, while
    eight normal clients stream; then SIGTERM under load (a daemon of its own)."""
    out: dict[str, Any] = {}
    with ctx.daemon("faults", cfg(max_streams=4000)) as d:
        pcm = ctx.audio.read(0, RATE)
        t_end = time.monotonic() + 30.0

        async def abort_one(i: int) -> str:
            await asyncio.sleep(random.uniform(0, 5))
            ws = await open_stream(d.url, t_end)
            if ws is None:
                return "never admitted"
            await ws.send(pcm)
            await asyncio.sleep(0.2)
            ws.transport.abort()  # TCP reset mid-stream
            return "aborted"

        async def slowloris(i: int) -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", d.port)
            t0 = time.monotonic()
            req = f"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\nUpgrade: websocket\r\n".encode()
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

        async def trickle(i: int) -> str:
            ws = await open_stream(d.url, t_end)
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

        async def never_reads(i: int) -> str:
            ws = await open_stream(d.url, t_end, max_queue=1)
            if ws is None:
                return "never admitted"
            t0 = time.monotonic()
            try:
                for k in range(300):  # 30 s at real time, never reading
                    await ws.send(ctx.audio.read(k * PKT, PKT))
                    await asyncio.sleep(0.1)
                await ws.send('{"type": "eof"}')
                await asyncio.wait_for(ws.wait_closed(), 60)
            except Exception:  # noqa: BLE001
                pass
            ws.transport.abort()
            return f"close {ws.close_code} after {time.monotonic() - t0:.0f} s"

        load = Load(d.url, ctx.audio, seed=9)
        t0 = time.monotonic()
        normal = asyncio.gather(*(load.persistent(40.0, t_end, ramp=0.0, kind="normal") for _ in range(8)))
        await asyncio.sleep(2.0)
        results = await asyncio.gather(asyncio.gather(*(abort_one(i) for i in range(50)), return_exceptions=True),
                                       asyncio.gather(*(slowloris(i) for i in range(30)), return_exceptions=True),
                                       asyncio.gather(*(trickle(i) for i in range(20)), return_exceptions=True),
                                       asyncio.gather(*(never_reads(i) for i in range(10)), return_exceptions=True))
        await normal
        await asyncio.sleep(2.0)
        m = d.metrics()
        a, sl, tr, nr = results
        name = lambda x: x if isinstance(x, str) else type(x).__name__  # noqa: E731
        out["aborts"] = {"count": len(a), "outcomes": _count([name(x) for x in a])}
        secs = [x for x in sl if isinstance(x, float)]
        out["slowloris"] = {"count": len(sl), "closed_after_s_max": round(max(secs), 1) if secs else None,
                            "open_timeout_s": 10.0}
        out["trickle"] = {"count": len(tr), "outcomes": _count([name(x) for x in tr])}
        out["never_read"] = {"count": len(nr), "outcomes": _count([name(x) for x in nr])}
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


# --------------------------------------------------------------------------- fuzz


def _rand_value(rnd: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "float", "str", "bool", "none", "list", "dict", "big", "neg"]
    k = rnd.choice(kinds if depth < 2 else kinds[:5])
    if k == "int":
        return rnd.choice([0, 1, 8000, 16000, 48000, 7999, 48001, 64, 65, -1, 2 ** 31, 2 ** 63])
    if k == "float":
        return rnd.choice([0.5, 16000.0, 1e308, -0.0, 3.14])
    if k == "str":
        return rnd.choice(["", "greedy", "modified_beam", "beam", "s16le", "f32le", "x" * 300, "\u00e9\u2603",
                           "hey stream", "ctc_prefix_beam", "\x00"])
    if k == "bool":
        return rnd.choice([True, False])
    if k == "none":
        return None
    if k == "list":
        return [_rand_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    if k == "dict":
        return {rnd.choice(["phrase", "boost", "threshold", "x"]): _rand_value(rnd, depth + 1)
                for _ in range(rnd.randint(0, 3))}
    if k == "big":
        return 10 ** rnd.randint(5, 400)
    return -rnd.randint(1, 10 ** 6)


def fuzz_v1_messages(rnd: random.Random, pcm: bytes) -> list[str | bytes]:
    fields = ["sample_rate", "format", "method", "beam", "partials", "keywords", "endpointing", "wake_words",
              "hotwords", "bogus"]
    msgs: list[str | bytes] = []
    for _ in range(rnd.randint(1, 6)):
        r = rnd.random()
        if r < 0.35:
            start = {"type": "start"}
            for f in rnd.sample(fields, rnd.randint(0, 4)):
                start[f] = _rand_value(rnd)
            msgs.append(json.dumps(start))
        elif r < 0.6:
            n = rnd.choice([0, 1, 2, 3, 320, 3200, 32001, 1048576, 1048577])
            msgs.append(pcm[:n] if n <= len(pcm) else os.urandom(n))
        elif r < 0.7:
            msgs.append(rnd.choice(['{"type": "eof"}', '{"type": "reset"}', '{"type": "eof", "x": 1}',
                                    '{"type": "nope"}', '{}', '[]', '"x"', 'null', '{"type": 5}']))
        elif r < 0.8:
            msgs.append(rnd.choice(["{", "not json", "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
                                    "[" * 5000 + "]" * 5000, "{\"type\": \"start\"" + " " * 70000 + "}"]))
        elif r < 0.9:
            msgs.append(os.urandom(rnd.randint(1, 9)))
        else:
            msgs.append(json.dumps({"type": "start", "wake_words": [rnd.choice(["computer", "", "9", "x" * 200])] *
                                    rnd.randint(0, 300)}))
    return msgs


def fuzz_vosk_messages(rnd: random.Random, pcm: bytes) -> list[str | bytes]:
    msgs: list[str | bytes] = []
    for _ in range(rnd.randint(1, 6)):
        r = rnd.random()
        if r < 0.3:
            c = {k: _rand_value(rnd) for k in rnd.sample(["sample_rate", "words", "max_alternatives", "phrase_list",
                                                           "x"], rnd.randint(0, 3))}
            msgs.append(json.dumps({"config": rnd.choice([c, _rand_value(rnd)])}))
        elif r < 0.7:
            n = rnd.choice([0, 1, 2, 3, 320, 1600, 8001, 1048577])
            msgs.append(pcm[:n] if n <= len(pcm) else os.urandom(n))
        else:
            msgs.append(rnd.choice(['{"eof" : 1}', "{'eof': 1}", '{"eof": 0}', "{", "[]", '{"x": 1}', "eof"]))
    return msgs


CLOSE_CODES_OK = {1000, 1001, 1003, 1008, 1009, 1013}


async def fuzz_ws_case(url: str, msgs: list[str | bytes], eof: str) -> str | None:
    """None when the server behaved: ends with done/close 1000, or an error message whose code maps to the
    close code; else what went wrong."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from streamd.server.protocol import CLOSE_CODES

    got: list[Any] = []
    try:
        async with connect(url, compression=None, max_size=None, open_timeout=20, close_timeout=5) as ws:
            try:
                for m in msgs:
                    await ws.send(m)
                await ws.send(eof)
            except ConnectionClosed:
                pass

            async def read_all() -> None:
                try:
                    async for raw in ws:
                        try:
                            got.append(json.loads(raw))
                        except ValueError:
                            got.append(raw)
                except ConnectionClosed:
                    pass

            await asyncio.wait_for(read_all(), 30)
        code = ws.close_code
    except asyncio.TimeoutError:
        return "no close within 30 s"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    errors = [m for m in got if isinstance(m, dict) and m.get("type") == "error"]
    if code == 1011 or code not in CLOSE_CODES_OK:
        return f"close code {code} ({errors[-1] if errors else 'no error message'})"
    if code != 1000:
        if not errors:
            return f"close {code} without an error message"
        if CLOSE_CODES.get(errors[-1].get("code")) != code or not errors[-1].get("message"):
            return f"error {errors[-1]} then close {code}"
    return None


def header_cases(rnd: random.Random, port: int) -> list[bytes]:
    host = f"127.0.0.1:{port}"
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    variants = [
        [("Host", host)], [("Host", host), ("Host", host)], [("Host", "evil.example")], [("Host", "")],
        [("Host", "[::1")], [("Host", host), ("Origin", "http://evil.example")],
        [("Host", host), ("Origin", f"http://{host}"), ("Origin", f"http://{host}")],
        [("Host", host), ("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
        [("Host", host), ("Authorization", "Basic xyz")], [("Host", "localhost:99999")],
        [("Host", host), ("Sec-WebSocket-Key", "short")], [("Host", host), ("Sec-WebSocket-Version", "8")],
        [("Host", host), ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Key", key)],
        [("Host", "h\u00e9".encode("utf-8").decode("latin-1"))], [("Host", host), ("X-Big", "a" * 9000)],
        [("Host", host), ("Sec-WebSocket-Protocol", ",,,")], [("Host", host), ("Connection", "close")],
        [], [("Host", host), ("Upgrade", "h2c")], [("host", host), ("HOST", host)],
    ]
    paths = ["/v1/stream", "/vosk", "/v1/events", "/readyz", "/healthz", "/metrics", "/", "/nope",
             "/v1/stream?token=a&token=b", "http://evil.example/v1/stream", "/%00", "/../../etc/passwd", "*",
             "/v1/stream?" + "x" * 5000]
    methods = ["GET", "HEAD", "POST", "OPTIONS", "G\u00c9T", "PUT"]
    cases = []
    for _ in range(400):
        method, path = rnd.choice(methods), rnd.choice(paths)
        hdrs = list(rnd.choice(variants))
        if rnd.random() < 0.6:
            hdrs += [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
                     ("Sec-WebSocket-Key", key)]
        rnd.shuffle(hdrs)
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
        cases.append(head.encode("latin-1", "replace"))
    cases += [b"\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n", b"GARBAGE\r\n\r\n", b"GET /\r\n\r\n",
              b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Length: 5\r\n\r\nhello"]
    return cases


def wyoming_cases(rnd: random.Random, pcm: bytes) -> list[bytes]:
    out = []
    types = ["describe", "transcribe", "audio-start", "audio-chunk", "audio-stop", "detect", "ping",
             "select-program", "nope", ""]
    for _ in range(150):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            t = rnd.choice(types)
            data = {k: _rand_value(rnd) for k in rnd.sample(["rate", "width", "channels", "name", "language",
                                                              "names", "timestamp", "text"], rnd.randint(0, 4))}
            payload = pcm[: rnd.choice([0, 1, 2, 3, 320, 3200])] if t == "audio-chunk" else b""
            body = json.dumps(data).encode()
            header: dict[str, Any] = {"type": t, "data_length": len(body), "payload_length": len(payload)}
            if rnd.random() < 0.2:
                header[rnd.choice(["data_length", "payload_length"])] = _rand_value(rnd)
            line = json.dumps(header).encode() + b"\n"
            if rnd.random() < 0.1:
                line = rnd.choice([b"{\n", b"[]\n", b"\xff\xfe\n", b"x" * 70000 + b"\n"])
            parts.append(line + (body if isinstance(header.get("data_length"), int) else b"") + payload)
        out.append(b"".join(parts))
    return out


async def wyoming_case(port: int, blob: bytes) -> str | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(blob + b'{"type": "describe"}\n')
        await writer.drain()
        t0 = time.monotonic()
        buf = b""
        while b'"info"' not in buf and time.monotonic() - t0 < 20:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 20)
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
        writer.close()
        return None  # answered or closed: the server is alive (checked below with a clean describe)
    except OSError as e:
        return f"{type(e).__name__}: {e}"


async def scenario_fuzz(ctx: Ctx, cases_per_protocol: int = 350) -> dict:
    rnd = random.Random(25)
    pcm = ctx.audio.read(0, 3 * RATE)
    failures: list[str] = []
    counts: dict[str, int] = {}
    with ctx.daemon("fuzz", cfg(max_streams=4000, idle_timeout=5.0), wyoming=True) as d:
        vosk_url = f"ws://127.0.0.1:{d.port}/vosk"
        sem = asyncio.Semaphore(16)

        async def bounded(name: str, coro: Any) -> None:
            async with sem:
                r = await coro
                counts[name] = counts.get(name, 0) + 1
                if r is not None:
                    failures.append(f"{name}: {r}")

        jobs = [bounded("v1", fuzz_ws_case(d.url, fuzz_v1_messages(rnd, pcm), '{"type": "eof"}'))
                for _ in range(cases_per_protocol)]
        jobs += [bounded("vosk", fuzz_ws_case(vosk_url, fuzz_vosk_messages(rnd, pcm), '{"eof" : 1}'))
                 for _ in range(cases_per_protocol)]
        for raw in header_cases(rnd, d.port):
            async def one(raw: bytes = raw) -> str | None:
                try:
                    status, head = await raw_http(d.port, raw)
                except (OSError, asyncio.TimeoutError) as e:
                    return f"{type(e).__name__}: {e} for {raw[:80]!r}"
                if status is not None and status >= 500 and b"/readyz" not in raw:
                    return f"HTTP {status} for {raw[:80]!r}"
                return None
            jobs.append(bounded("headers", one()))
        wy_ok = d.wyoming_port is not None
        if wy_ok:
            jobs += [bounded("wyoming", wyoming_case(d.wyoming_port, blob)) for blob in wyoming_cases(rnd, pcm)]
        t0 = time.monotonic()
        await asyncio.gather(*jobs)
        alive = d.readyz()[0] in (200, 503)
        errors = d.errors()
        if wy_ok and await wyoming_case(d.wyoming_port, b"") is not None:
            failures.append("wyoming: no answer to a clean describe after the fuzz")
        ctx.done_with(d)
    total = sum(counts.values())
    r = {"cases": total, "by_protocol": counts, "failures": len(failures), "failure_examples": failures[:10],
         "alive_after": alive, "elapsed_s": round(time.monotonic() - t0, 1),
         "errors_by_code": errors}
    print(f"  fuzz: {total} cases, {len(failures)} failures {failures[:3]}", flush=True)
    return r


# --------------------------------------------------------------------------- soak and allocator


async def scenario_soak(ctx: Ctx, minutes: float = 3.0) -> dict:
    cap = ctx.capacity or 64
    n = max(1, cap // 2)
    with ctx.daemon("soak", cfg(max_streams=4000)) as d, Sampler(d, every=10.0) as sampler:
        load = Load(d.url, ctx.audio, seed=13)
        until = time.monotonic() + 60 * minutes

        async def worker() -> None:
            await asyncio.sleep(load.rnd.uniform(0, 5))
            while time.monotonic() < until - 20:
                s = await load.stream(min(60.0, until - time.monotonic()))
                if not s.accepted:  # refused: wait as told
                    await asyncio.sleep((s.trace.retry_after or 1.0) * load.rnd.uniform(0.5, 1.5))
        await asyncio.gather(*(worker() for _ in range(n)))
        ctx.done_with(d)
    by_window: dict[int, list[float]] = {}
    t_first = min((s.trace.sent_at[0] for s in load.sessions if s.trace.sent_at), default=0.0)
    for s in load.sessions:
        tr = s.trace
        for arrival, end in tr.partials:
            lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
            if lag is not None:
                by_window.setdefault(int((arrival - t_first) // 30), []).append(lag)
    p95_by_30s = [ms(pct(by_window[w], 95)) for w in sorted(by_window)]
    r = summarize_sessions(load.sessions)
    rss = [(round(t), x) for t, x, _ in sampler.samples]
    fds = [(round(t), x) for t, _, x in sampler.samples]
    return {"streams": n, "minutes": minutes, "summary": {k: r[k] for k in ("attempts", "accepted", "p50_ms", "p95_ms",
                                                                            "p99_ms", "audio_lost_s")},
            "p95_ms_by_30s": p95_by_30s, "rss_mb": rss, "fds": fds}


async def scenario_rss(ctx: Ctx) -> dict:
    out = {}
    for name, env in (("glibc_defaults", {}), ("unit_allocator", ALLOCATOR_ENV)):
        with ctx.daemon(f"rss_{name}", cfg(max_streams=4000), env=env) as d, Sampler(d) as sampler:
            await asyncio.sleep(1.0)
            idle, idle_children = d.rss_mb(), d.children_rss_mb()
            rounds, children = [], []  # the daemon's process; its children (the engine processes)
            for i in range(3):
                r = await overload_round(ctx, d, 5, sampler, load_window=12.0, seed=100 + i)
                rounds.append(r["rss_idle_after_mb"])
                children.append(r["children_rss_idle_after_mb"])
            ctx.done_with(d)
        out[name] = {"env": env, "idle_mb": idle, "after_rounds_mb": rounds, "peak_mb": sampler.peak_rss(),
                     "third_vs_first": round(rounds[2] / rounds[0], 3) if all(rounds) else None,
                     "children_idle_mb": idle_children, "children_after_rounds_mb": children,
                     "children_third_vs_first": round(children[2] / children[0], 3) if all(children) else None}
        print(f"  rss {name}: {out[name]}", flush=True)
    return out


SCENARIOS: dict[str, Callable[[Ctx], Any]] = {
    "baseline": scenario_baseline, "capacity": scenario_capacity, "default": scenario_default,
    "overload": scenario_overload, "adversary": scenario_adversary, "faults": scenario_faults,
    "fuzz": scenario_fuzz, "soak": scenario_soak, "rss": scenario_rss,
}


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
    rows.append(("logs", "tracebacks", json.dumps(ctx.tracebacks)))
    w = [max(len(str(row[i])) for row in rows) for i in range(3)]
    return "\n".join("  ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) for row in rows)


async def main_async(args: argparse.Namespace) -> int:
    from streamd.paths import default_bench_audio

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    audio = AudioLoop.from_files(args.audio or default_bench_audio())
    if args.victim:
        await victim_main(args.victim, args.seconds, audio)
        return 0
    ctx = Ctx(out_dir, args.model, audio, args.seconds, capacity=args.capacity, light_lane=args.light_lane,
              audio_files=args.audio, shared_victim=args.shared_victim, engine_thread=args.engine_thread,
              engine_nice=args.engine_nice, engine_policy=args.engine_policy, daemon_nice=args.daemon_nice,
              own_sessions=args.own_sessions, eager_encoder=args.eager_encoder, max_load=args.max_load,
              no_nice_rights=args.no_nice_rights)
    if args.rounds:
        ks = [float(k.rstrip("x")) for k in args.rounds.split(",")]
        ctx.rounds = [(f"{k:g}x_{i + 1}", k) for i, k in enumerate(ks)]
    if args.victim_p95_ms:
        ctx.victim_p95_ms = args.victim_p95_ms
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"stress.py: unknown scenario {unknown[0]!r} (known: {', '.join(SCENARIOS)})", file=sys.stderr)
        return 2
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "seconds_per_stream": args.seconds, "light_lane": args.light_lane,
            "engine_process": not args.engine_thread, "engine_nice": args.engine_nice,
            "engine_policy": args.engine_policy, "daemon_nice": args.daemon_nice,
            "no_nice_rights": args.no_nice_rights,
            "busy_cores": args.busy_cores, "busy_nice": args.busy_nice, "own_sessions": args.own_sessions,
            "encoder": "eager" if args.eager_encoder else "traced", "max_load": args.max_load,
            "victim": "shared event loop" if args.shared_victim else "own process"}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=(lambda: os.nice(args.busy_nice)) if args.busy_nice else None,
                             start_new_session=args.own_sessions)
            for _ in range(args.busy_cores)]  # another tenant of the host
    try:
        for name in names:
            print(f"== {name}", flush=True)
            t0 = time.monotonic()
            try:
                ctx.results[name] = await SCENARIOS[name](ctx)
            except Exception as e:  # noqa: BLE001 - report and go on with the next scenario
                ctx.results[name] = {"error": f"{type(e).__name__}: {e}"}
                print(f"  {name} failed: {type(e).__name__}: {e}", flush=True)
            ctx.results[name + "_elapsed_s"] = round(time.monotonic() - t0, 1)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    meta["load_average_end"] = os.getloadavg()
    result = {"meta": meta, "capacity": ctx.capacity, "victim_unloaded_p95_ms": ctx.victim_p95_ms,
              "results": ctx.results, "tracebacks": ctx.tracebacks}
    path = Path(args.json or out_dir / "stress.json")
    path.write_text(json.dumps(result, indent=1, default=str))
    print(table(ctx))
    print(f"JSON: {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint (default: the shipped model)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, in order")
    ap.add_argument("--seconds", type=float, default=12.0, help="audio seconds per load stream")
    ap.add_argument("--capacity", type=int, help="skip the search: real-time greedy streams of this machine")
    ap.add_argument("--victim-p95-ms", type=float, help="skip the baseline: the victim's unloaded p95")
    ap.add_argument("--audio", nargs="*", help="WAV files (default: the package's six sample recordings)")
    ap.add_argument("--out-dir", default="bench-out/stress", help="daemon logs and configs")
    ap.add_argument("--json", help="result file (default: OUT_DIR/stress.json)")
    ap.add_argument("--rounds", help="the overload scenario's rounds, e.g. 10x,10x,10x (default: 2x, 5x three "
                                     "times, 10x)")
    ap.add_argument("--light-lane", type=float, help="limits.light_lane of every configured daemon (0: one lane)")
    ap.add_argument("--engine-thread", action="store_true",
                    help="server.engine_process: false in every configured daemon (the engine in a thread)")
    ap.add_argument("--engine-nice", type=int, help="server.engine_nice of every configured daemon")
    ap.add_argument("--max-load", type=float,
                    help="limits.max_load of every configured daemon that admits by capacity (A/B runs)")
    ap.add_argument("--eager-encoder", action="store_true",
                    help="engine.trace_encoder: false in every configured daemon (A/B against the traced default)")
    ap.add_argument("--engine-policy", choices=ENGINE_POLICIES,
                    help="server.engine_policy of every configured daemon")
    ap.add_argument("--busy-cores", type=int, default=0,
                    help="keep N busy loops running through every scenario (another process on the host)")
    ap.add_argument("--busy-nice", type=int, default=0, help="the busy loops' nice value (0..19)")
    ap.add_argument("--daemon-nice", type=int, default=0,
                    help="start every daemon under `nice -n N` (as systemd's Nice= would; negative: needs root)")
    ap.add_argument("--no-nice-rights", action="store_true",
                    help="start every daemon without CAP_SYS_NICE (setpriv), as a user without the right to raise "
                         "its priority: server.nice (-5) is refused and the daemon runs at nice 0")
    ap.add_argument("--own-sessions", action="store_true",
                    help="start every daemon, the victim and the busy loops in a session of their own (as a "
                         "service or another terminal is; with the kernel's autogroup scheduling each session "
                         "shares the CPU as one group) instead of this process's session")
    ap.add_argument("--shared-victim", action="store_true",
                    help="run the victim in this process's event loop beside the load (the measurement before "
                         "2026-12-03 16:00) instead of a process of its own")
    ap.add_argument("--victim", metavar="URL", help=argparse.SUPPRESS)  # internal: be the victim process
    args = ap.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
