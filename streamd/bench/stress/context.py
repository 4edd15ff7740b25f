"""What every scenario shares: the run's settings and results (:class:`Ctx`), the daemons it configures,
the victim process, and the histogram and refusal readers."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..server import AudioLoop
from .clients import VICTIM_ADDR, Load, victim_report
from .daemon import PACKAGE_ROOT, Daemon

ROUNDS = (("2x", 2), ("5x_1", 5), ("5x_2", 5), ("5x_3", 5), ("10x", 10))  # the overload scenario's rounds


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
    connections: tuple[int, ...] = ()  # the connections scenario's trials (empty: its defaults)
    front_processes: int | None = None  # server.front_processes of the connections scenario's daemon
    event_loop: str = "asyncio"  # server.event_loop of the connections scenario's daemon
    crowd_processes: int = 2  # the connections scenario's load generator processes

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
        cmd = [sys.executable, "-m", "streamd", "bench", "stress", "--victim", url, "--seconds", str(seconds)]
        if self.audio_files:
            cmd += ["--audio", *self.audio_files]
        env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, env=env,
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
