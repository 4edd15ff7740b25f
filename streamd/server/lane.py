"""The light lane (``limits.light_lane``): an :class:`~.runner.EngineRunner` in a child process of its own.

A batch step cannot be interrupted, so in one engine a light client's partial waits for the step in
progress (a heavy client's batch) and then for its own.  The daemon gives the only stream of a light client
(:meth:`.admission.Admission.light`) to a second engine: this one, in a *process* (``spawn``) with its own
Recognizer on the same checkpoint and config.  Not a thread: two engine threads in one process take turns
on the interpreter lock at every tensor operation, and a second one made the main lane's accepted streams
slower (5x / 10x overload p95 148-248 -> 200-1560 ms, docs/benchmarks.md "Overload").

:class:`LaneProcess` has the runner's interface (:meth:`cycle`), so a :class:`~.runner.Batcher` drives it
from its one worker thread exactly as it drives the main lane; commands and results cross a pipe
(pickled; a 100 ms packet is 3.2 kB).  The child ignores SIGTERM and SIGINT (systemd and a terminal signal
the whole group: the daemon drains its lane's streams like the others) and exits when the pipe closes.  If
the child dies, every stream of the lane gets an ``internal`` error and :attr:`LaneProcess.alive` turns
False (the daemon then sends new streams to the main lane and starts a new lane process).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from typing import Any

from ..config import to_dict
from ..events import Done, Error
from .commands import CloseStream, Command, OpenStream
from .runner import CycleResult

__all__ = ["LaneProcess"]

log = logging.getLogger("streamd.server")


def _child(conn: Any, model_path: str, config: dict, max_steps: int, max_backlog: float, warmup: float) -> None:
    """The lane process: load the Recognizer, then apply each list of commands sent and send the result."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..config import EngineConfig, from_dict
    from ..engine import Recognizer
    from .runner import EngineRunner, release_memory

    try:
        rec = Recognizer.from_checkpoint(model_path, from_dict(EngineConfig, config))
        if warmup > 0:
            rec.warm_up(warmup)
        runner = EngineRunner(rec, max_steps, max_backlog)
    except Exception as e:  # noqa: BLE001 - the parent logs it and runs without the lane
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    release_memory()  # what the warm-up freed
    conn.send(("ready", None))
    busy = False
    while True:
        try:
            cmds = conn.recv()
        except (EOFError, OSError):  # the daemon is gone
            return
        if cmds is None:
            return
        conn.send(runner.cycle(cmds))
        if busy and not rec.num_streams:  # the lane's last stream ended: freed memory back to the OS
            release_memory()
        busy = rec.num_streams > 0


class LaneProcess:
    """An engine runner in a child process: :meth:`cycle` (from one thread at a time), :meth:`close`.

    The constructor starts the child and waits (blocking) until its Recognizer is loaded; RuntimeError if
    it could not load or did not answer within ``timeout`` seconds."""

    def __init__(self, model_path: str, config: Any, max_steps: int = 4, max_backlog: float = 0.0,
                 warmup: float = 0.0, timeout: float = 120.0):
        self.model_path, self.config = model_path, config  # what a replacement lane is started with
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs threads and torch
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, name="streamd-light-lane", daemon=True,
                                 args=(child, model_path, to_dict(config), max_steps, max_backlog, warmup))
        self._proc.start()
        child.close()
        self.alive = False
        self._keys: set[int] = set()  # streams opened in the lane and not ended
        try:
            if not self._conn.poll(timeout):
                raise RuntimeError(f"the light lane's process did not load the model within {timeout:g} s")
            what, why = self._conn.recv()
        except (EOFError, OSError):
            what, why = "failed", f"its process ended (exit code {self._proc.exitcode})"
        except RuntimeError:
            self.close()
            raise
        if what != "ready":
            self.close()
            raise RuntimeError(f"the light lane could not start: {why}")
        self.alive = True

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def cycle(self, cmds: list[Command]) -> CycleResult:
        """Apply ``cmds`` in the child and return its :class:`~.runner.CycleResult`.  When the child is gone:
        a fatal ``internal`` error for every stream of the lane, and the lane is no longer :attr:`alive`."""
        for c in cmds:
            if isinstance(c, OpenStream):
                self._keys.add(c.key)
        if self.alive:
            try:
                self._conn.send(cmds)
                res = self._conn.recv()
            except (EOFError, OSError) as e:
                self.alive = False
                log.error("the light lane's engine process ended (exit code %s: %s); its streams end, new ones "
                          "go to the main engine until a new lane is up", self._exitcode(), type(e).__name__)
            else:
                self._forget(res, cmds)
                return res
        res = CycleResult(events=[(k, Error(-1, "internal", "the light lane's engine process ended; reconnect",
                                            fatal=True)) for k in sorted(self._keys)])
        self._keys.clear()
        return res

    def _forget(self, res: CycleResult, cmds: list[Command]) -> None:
        for key, err in res.opened:
            if err is not None:
                self._keys.discard(key)
        for key, ev in res.events:
            if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
                self._keys.discard(key)
        for c in cmds:
            if isinstance(c, CloseStream):
                self._keys.discard(c.key)

    def _exitcode(self) -> int | None:
        self._proc.join(0.5)
        return self._proc.exitcode

    def kill(self) -> None:
        """End the child now (a cycle waiting for it returns the lane's errors)."""
        self.alive = False
        self._proc.kill()

    def close(self, timeout: float = 2.0) -> None:
        """Ask the child to exit, then kill it if it has not within ``timeout``.  Call it from the thread that
        calls :meth:`cycle` (one writer on the pipe), or after :meth:`kill`."""
        self.alive = False
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        t0 = time.monotonic()
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(max(0.1, timeout - (time.monotonic() - t0)))
        self._conn.close()
