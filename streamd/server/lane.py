"""Engine lanes in child processes: :class:`LaneProcess`, an :class:`~.runner.EngineRunner` in a process of its own.

Two lanes use it.  **The main engine** (``server.engine_process``, on by default when ``streamd serve``
loads a checkpoint): the daemon's event loop then shares its process with no model thread.  In one
process the engine thread and the event loop take turns on the interpreter lock at every tensor operation,
so each slows the other down (the streams held in real time either way: docs/benchmarks.md, "Settings and
the measurements behind them").  Its process runs ``server.engine_nice`` steps nicer (or under another CPU
scheduling policy, ``server.engine_policy``), so that on a busy CPU the event loop (every client's I/O) and the
light lane come before the bulk of the decoding.

**The light lane** (``limits.light_lane``): a batch step cannot be interrupted, so in one engine a light
client's partial waits for the step in progress (a heavy client's batch) and then for its own.  The daemon
gives the only stream of a light client (:meth:`.admission.Admission.light`) to a second engine: this one,
with its own Recognizer on the same checkpoint and config.  Not a thread, for the reason above (a second
engine thread slows the main lane's accepted streams: docs/benchmarks_history.md, "the light lane").

:class:`LaneProcess` has the runner's interface (:meth:`cycle`, :attr:`budget`, :meth:`calibrate`,
:attr:`model_info`), so a :class:`~.runner.Batcher` drives it from its one worker thread exactly as it drives
a runner in this process; commands and results cross a pipe (pickled; a 100 ms packet is 3.2 kB).  The
child ignores SIGTERM and SIGINT (systemd and a terminal signal the whole group: the daemon drains the
streams first) and exits when the pipe closes.  If the child dies, every stream of the lane gets an
``internal`` error and :attr:`LaneProcess.alive` turns False (the daemon starts a new process; meanwhile a
dead light lane's new streams go to the main engine, and while the main engine is down new streams get
``loading``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import time
from typing import Any, Callable

from ..config import to_dict
from ..events import Done, Error
from .admission import CapacityModel
from .commands import CloseStream, Command, OpenStream
from .runner import CycleResult

__all__ = ["LaneProcess", "lower_priority", "raise_priority", "share_tensor", "share_tables", "shared_folder",
           "drop_shared_folder"]

log = logging.getLogger("streamd.server")


def _threads() -> list[int]:
    """The ids of this process's threads (Linux: ``/proc/self/task``); elsewhere ``[0]``, the calling thread."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def raise_priority(nice: int | None) -> tuple[int, str | None]:
    """``server.nice``: put every thread of the daemon's process at nice value ``nice`` (-20..19), as an audio
    server asks for its priority at start (PipeWire's rt module, PulseAudio's ``nice-level``), so that on a
    shared host client I/O and the light lane come before ordinary processes; the engine processes it starts
    inherit it and add ``server.engine_nice``.  Only a process started at nice 0: one started at another value
    (``nice -n``, a unit's ``Nice=``) keeps it, and ``nice`` None changes nothing.  Going below the inherited
    value needs ``CAP_SYS_NICE`` (root) or an ``RLIMIT_NICE`` of at least ``20 - nice``; where the system
    refuses, nothing changes.  Returns the process's nice value after, and None or why it was not set."""
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if nice is None or now != 0 or nice == now:
        return now, None
    try:
        _each_thread(lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice))
    except OSError as e:  # EACCES / EPERM: no CAP_SYS_NICE, RLIMIT_NICE too low
        return os.getpriority(os.PRIO_PROCESS, 0), f"{e.strerror or e} (needs CAP_SYS_NICE or RLIMIT_NICE >= {20 - nice})"
    return os.getpriority(os.PRIO_PROCESS, 0), None


def _each_thread(apply: Callable[[int], object]) -> None:
    """``apply(thread id)`` for every thread of this process (OSError where the system refuses; a thread that
    ended meanwhile is skipped)."""
    for tid in _threads():
        try:
            apply(tid)
        except ProcessLookupError:
            pass


def lower_priority(nice: int, policy: str) -> str | None:
    """Make every thread of this process ``nice`` steps nicer (0..19) and put it under the CPU scheduling policy
    ``policy`` (one of :data:`~streamd.config.ENGINE_POLICIES`: Linux SCHED_OTHER, SCHED_BATCH or SCHED_IDLE;
    none needs privileges); threads started later inherit both from their creator.  Every thread, not just the
    calling one: on Linux both are per thread, and imports (numpy's BLAS) start threads before a spawned
    child's code runs.  Returns None, or why the policy could not be set (the threads then keep their own)."""
    if nice:
        _each_thread(lambda tid: os.setpriority(os.PRIO_PROCESS, tid,
                                                min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)))
    if policy == "normal":
        return None
    name = "SCHED_" + policy.upper()
    const = getattr(os, name, None)
    if const is None or not hasattr(os, "sched_setscheduler"):
        return f"this platform has no {name}"
    try:
        _each_thread(lambda tid: os.sched_setscheduler(tid, const, os.sched_param(0)))
    except OSError as e:
        return f"{name}: {e}"
    return None


def shared_folder() -> str | None:
    """A new folder on /dev/shm (a tmpfs) for :func:`share_tables`, or None where there is none to use."""
    import tempfile

    try:
        return tempfile.mkdtemp(prefix="streamd-tables-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    except OSError:
        return None


def drop_shared_folder(folder: str | None) -> None:
    """Remove a :func:`shared_folder` (the processes that mapped its files keep them: memory is freed with the
    last mapping)."""
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def share_tensor(t: Any, folder: str) -> bool:
    """Back CPU tensor ``t`` by a file in ``folder`` (a tmpfs: /dev/shm), mapped copy-on-write: processes that
    build a table with the same contents and share the folder hold one copy of it.  The file is named by the
    table's dtype, shape and SHA-1 of its bytes; the first process writes it (created under a temporary name and
    linked into place, so a file under that name is always complete), the others map what is there.  ``t``
    keeps its identity (``set_``: every holder of it sees the mapped storage).  False (nothing changed) where
    the folder or the mapping cannot be used."""
    import hashlib

    import torch

    if t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
        return False
    data = t.numpy()
    name = f"{str(t.dtype).removeprefix('torch.')}-{'x'.join(map(str, t.shape))}-" \
           f"{hashlib.sha1(data.tobytes()).hexdigest()}"
    path = os.path.join(folder, name)
    try:
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            try:
                data.tofile(tmp)  # ENOSPC on a small tmpfs (a container's 64 MB /dev/shm): this one stays private
                os.link(tmp, path)  # the first writer's file stays; another process's equal one is dropped
            except FileExistsError:
                pass
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        mapped = torch.from_file(path, shared=False, size=t.numel(), dtype=t.dtype).view(t.shape)
    except (OSError, RuntimeError):
        return False
    with torch.no_grad():
        t.set_(mapped)
    return True


def share_tables(rec: Any, folder: str) -> int:
    """The read-only tables of Recognizer ``rec`` that no stream writes to, backed by files in ``folder``
    (:func:`share_tensor`): the fusion n-gram's (log-probabilities, successor states, end scores) and modified
    beam search's fused score table, 77 MB with the shipped n-gram.  Returns the bytes now mapped."""
    tables = []
    lm = getattr(rec, "lm", None)
    if lm is not None:
        tables += [lm.logp, lm.next, lm.eos]
    search = getattr(rec, "searches", {}).get("modified_beam")
    if getattr(search, "_lm_table", None) is not None:
        tables.append(search._lm_table)
    return sum(t.numel() * t.element_size() for t in tables if share_tensor(t, folder))


def _child(conn: Any, model_path: str, config: dict, max_steps: int, max_backlog: float, warmup: float,
           nice: int, policy: str, share_dir: str | None = None) -> None:
    """The lane process: load the Recognizer, then answer each message: a ``(commands, budget)`` pair with the
    cycle's result, ``"calibrate"`` with the runner's :class:`~.admission.CapacityModel`."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    policy_error = lower_priority(nice, policy)  # before the engine starts threads: they inherit it
    from ..config import EngineConfig, from_dict
    from ..engine import Recognizer
    from .runner import EngineRunner, release_memory

    try:
        rec = Recognizer.from_checkpoint(model_path, from_dict(EngineConfig, config))
        if share_dir:  # one copy of the n-gram's tables for every engine process of the daemon
            share_tables(rec, share_dir)
        if warmup > 0:
            rec.warm_up(warmup)
        runner = EngineRunner(rec, max_steps, max_backlog)
    except Exception as e:  # noqa: BLE001 - the parent says why (and raises it again for the main engine)
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:  # noqa: BLE001 - an exception that does not survive the pipe: its text does
            e = RuntimeError(f"{type(e).__name__}: {e}")
        conn.send(("failed", e))
        return
    release_memory()  # what the warm-up freed
    conn.send(("ready", (runner.model_info, policy_error)))
    busy = False
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the daemon is gone
            return
        if msg is None:
            return
        if msg == "calibrate":
            conn.send(runner.calibrate())
            release_memory()
            continue
        cmds, runner.budget = msg
        conn.send(runner.cycle(cmds))
        if busy and not rec.num_streams:  # the lane's last stream ended: freed memory back to the OS
            release_memory()
        busy = rec.num_streams > 0


class LaneProcess:
    """An engine runner in a child process: :meth:`cycle` and :meth:`calibrate` (from one thread at a time),
    :meth:`close`.

    The constructor starts the child and waits (blocking) until its Recognizer is loaded (and warmed up
    with ``warmup`` seconds of audio); RuntimeError if it could not load or did not answer within
    ``timeout`` seconds (the child's exception, when it raised one, is its ``__cause__``).  ``name``: the lane
    in messages ("light lane", "main engine"); ``nice``: added to the child's nice value (0..19, lower CPU
    priority); ``policy``: the child's CPU scheduling policy (:func:`lower_priority`; where it cannot be set, the
    child runs on under its own and :attr:`policy_error` says why); ``share_dir``: a folder on a tmpfs where engine
    processes started with the same one keep a single copy of their read-only tables (:func:`share_tables`)."""

    def __init__(self, model_path: str, config: Any, max_steps: int = 4, max_backlog: float = 0.0,
                 warmup: float = 0.0, timeout: float = 120.0, name: str = "light lane", nice: int = 0,
                 policy: str = "normal", share_dir: str | None = None):
        self.model_path, self.config = model_path, config  # what a replacement lane is started with
        self.name = name
        self.budget: float | None = None  # the runner's step budget, sent with every cycle (EngineRunner.budget)
        self.model_info: dict = {}
        self.policy_error: str | None = None
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs threads and torch
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, name="streamd-" + name.replace(" ", "-"), daemon=True,
                                 args=(child, model_path, to_dict(config), max_steps, max_backlog, warmup, nice,
                                       policy, share_dir))
        self._proc.start()
        child.close()
        self.alive = False
        self._keys: set[int] = set()  # streams opened in the lane and not ended
        try:
            if not self._conn.poll(timeout):
                raise RuntimeError(f"the {name}'s process did not load the model within {timeout:g} s")
            what, why = self._conn.recv()
        except (EOFError, OSError):
            what, why = "failed", f"its process ended (exit code {self._proc.exitcode})"
        except RuntimeError:
            self.close()
            raise
        if what != "ready":
            self.close()
            if isinstance(why, BaseException):  # the child's own exception is the cause
                raise RuntimeError(f"the {name} could not start: {type(why).__name__}: {why}") from why
            raise RuntimeError(f"the {name} could not start: {why}")
        self.model_info, self.policy_error = why
        self.alive = True

    def calibrate(self) -> CapacityModel:
        """The child runner's :meth:`~.runner.EngineRunner.calibrate` (before any stream); RuntimeError when
        the child is gone."""
        try:
            self._conn.send("calibrate")
            return self._conn.recv()
        except (EOFError, OSError) as e:
            self.alive = False
            raise RuntimeError(f"the {self.name}'s process ended while calibrating (exit code "
                               f"{self._exitcode()})") from e

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
                self._conn.send((cmds, self.budget))
                res = self._conn.recv()
            except (EOFError, OSError) as e:
                self.alive = False
                log.error("the %s's engine process ended (exit code %s: %s); its streams end, and a new process "
                          "starts", self.name, self._exitcode(), type(e).__name__)
            else:
                self._forget(res, cmds)
                return res
        res = CycleResult(events=[(k, Error(-1, "internal", f"the {self.name}'s engine process ended; reconnect",
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
