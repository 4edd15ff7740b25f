"""The daemon under test: ``python -m streamd serve`` in a subprocess with a YAML config, its readiness,
metrics, RSS and file descriptors from /proc (:class:`Daemon`), and a task sampling them (:class:`Sampler`)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import streamd

# the folder holding the streamd package the daemons import (the repository root in a checkout)
PACKAGE_ROOT = Path(streamd.__file__).resolve().parents[1]
ALLOCATOR_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "65536"}  # as in systemd/streamd.service


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``python -m streamd serve`` in a subprocess with a YAML config (None: no config file at all)."""

    def __init__(self, name: str, out_dir: Path, config: dict | None, model: str | None, env: dict | None = None,
                 wyoming: bool = False, nice: int = 0, new_session: bool = False, no_nice_rights: bool = False,
                 args: tuple[str, ...] = ()):
        """args: more ``streamd serve`` flags (``--null-engine``, ``--front-processes N``)."""
        self.name = name
        self.port = free_port()
        self.wyoming_port = free_port() if wyoming else None
        self.log_path = out_dir / f"{name}.log"
        extra, args = list(args), [sys.executable, "-m", "streamd", "serve", "--port", str(self.port)]
        if nice:  # as systemd's Nice= in the unit would start it (the engine process adds server.engine_nice)
            args = ["nice", "-n", str(nice)] + args
        if no_nice_rights:  # as a user without CAP_SYS_NICE (and RLIMIT_NICE 0) runs it: server.nice is refused
            args = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"] + args
        args += extra
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
        e["PYTHONPATH"] = str(PACKAGE_ROOT) + os.pathsep + e.get("PYTHONPATH", "")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=e,
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

    def pids(self) -> list[int]:
        """The daemon's process and its children (engine and front processes, multiprocessing's helpers)."""
        try:
            kids = [int(k) for t in Path(f"/proc/{self.proc.pid}/task").iterdir()
                    for k in (t / "children").read_text().split()]
        except OSError:
            kids = []
        return [self.proc.pid] + kids

    def cpu_seconds(self, children: bool = True) -> float:
        """CPU time (user + system) the daemon's processes have used so far (:meth:`pids`; a child that has
        exited is not counted; ``children`` False: the daemon's own process only)."""
        tick, total = os.sysconf("SC_CLK_TCK"), 0.0
        for pid in self.pids() if children else [self.proc.pid]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
        return total

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
