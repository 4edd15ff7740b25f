"""The engine process's side of ``server.front_processes`` > 1: the front processes (:mod:`.front`) that carry the
daemon's websocket connections, started, fed and watched from the daemon's main process, which keeps the one
engine, the admission, the metrics and the systemd notify protocol.

* :meth:`Fronts.start` binds nothing itself: it is handed the listening sockets (the daemon binds them, so
  port 0 and a port in use behave as with one process), spawns the fronts with them and a
  :class:`~.front_link.Link` each, and returns once every front serves;
* a front's records become the daemon's engine commands (:meth:`~.app.App.submit`) and admission calls
  (:meth:`~.app.App.admit`: a refusal goes back to the front as the session's error); each admitted stream
  is a :class:`RemoteTarget` of the daemon's routing, which sends its results back to its front;
* every :data:`~.front.STATE_EVERY` seconds each front gets the shared state (loading, draining, the
  daemon's stream count, the capacity rule for a greedy stream, the model, the microphone's error); the
  daemon says READY=1 only once every front has the state with the model loaded (:meth:`Fronts.wait_ready`),
  so no front refuses a stream as ``loading`` after it;
* ``GET /metrics`` (answered by a front) is every process's registry summed (:func:`merge_families`);
* a front that exits while the daemon is not stopping is logged as an error, counted
  (``streamd_front_process_exits_total``), its streams are closed in the engine, and a new front takes its
  place after :data:`RESTART_DELAY` seconds;
* :meth:`Fronts.drain` has every front drain its connections as the daemon drains its own; :meth:`Fronts.close`
  ends them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from ..config import to_dict
from .commands import CloseStream, FeedPcm, FinishStream, OpenStream, ResetStream
from .front import STATE_EVERY, front_main
from .front_link import Link

if TYPE_CHECKING:
    from .app import App

__all__ = ["Fronts", "RemoteTarget", "merge_families", "RESTART_DELAY"]

log = logging.getLogger("streamd.server")

RESTART_DELAY = 1.0  # seconds before a front that exited is replaced
START_TIMEOUT = 120.0  # seconds a new front may take to serve


class RemoteTarget:
    """A stream of a front process in the daemon's routing (:class:`~.runner.RouteTarget`): its results go back
    to its front over the link (progress only when it moved)."""

    __slots__ = ("key", "link", "stream_class", "lane_of", "decoded")

    def __init__(self, key: int, link: Link, stream_class: str, lane_of: Any):
        self.key, self.link, self.stream_class, self.lane_of = key, link, stream_class, lane_of
        self.decoded = -1.0

    def on_opened(self, error: str | None) -> None:
        self.link.put(("opened", self.key, error, self.lane_of(self.key)))

    def on_event(self, ev: Any) -> None:
        if getattr(ev, "audio", None) is not None:  # a Final's samples are the second pass's, not the client's
            ev = dataclasses.replace(ev, audio=None)
        self.link.put(("event", self.key, ev))

    def on_applied(self, n: int) -> None:
        self.link.put(("applied", self.key, n))

    def on_progress(self, decoded: float) -> None:
        if decoded != self.decoded:
            self.decoded = decoded
            self.link.put(("progress", self.key, decoded))


@dataclass(eq=False)
class FrontProcess:
    """One front: its process, link, streams and connection count."""

    index: int
    process: Any
    link: Link
    keys: set[int] = field(default_factory=set)
    conns: int = 0
    pid: int | None = None
    up: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # it has the state with the model loaded
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task | None = None


async def _wait_all(events: list[asyncio.Event]) -> None:
    """Until every event is set, or :data:`START_TIMEOUT` seconds (the caller looks which are)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    if not waits:
        return
    _, pending = await asyncio.wait(waits, timeout=START_TIMEOUT)
    for w in pending:
        w.cancel()


def merge_families(groups: Iterable[Iterable[Metric]]) -> list[Metric]:
    """Metric families of several processes' registries as one: each sample (name and labels) summed over the
    processes (counters, histograms, and the gauges only one process sets), a ``_created`` sample the
    earliest."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple, Any]] = {}
    for families in groups:
        for fam in families:
            if fam.name not in merged:
                merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                values[fam.name] = {}
            slot = values[fam.name]
            for s in fam.samples:
                k = (s.name, tuple(sorted(s.labels.items())))
                old = slot.get(k)
                if old is None:
                    slot[k] = s
                elif s.name.endswith("_created"):
                    slot[k] = old._replace(value=min(old.value, s.value))
                else:
                    slot[k] = old._replace(value=old.value + s.value)
    for name, fam in merged.items():
        fam.samples = list(values[name].values())
    return list(merged.values())


class _Merged:
    """A collector yielding given families (to render them with prometheus_client)."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class Fronts:
    """The daemon's front processes (``n`` of them; the module's rules).  ``app``: the daemon (engine, admission,
    metrics, routing)."""

    def __init__(self, app: App, n: int):
        self.app = app
        self.n = n
        self.procs: dict[int, FrontProcess] = {}
        self.targets: dict[int, RemoteTarget] = {}  # key -> its front's target (admitted streams)
        self.count = 0  # connections of every front
        self.stopping = False
        self._socks: list[tuple[str, socket.socket]] = []
        self._ctx = multiprocessing.get_context("spawn")
        self._tasks: list[asyncio.Task] = []
        self._collects: dict[int, tuple[dict[int, Any], asyncio.Future]] = {}
        self._req = 0

    # ------------------------------------------------------------------ processes

    async def start(self, socks: list[tuple[str, socket.socket]]) -> None:
        """Spawn the fronts on the listening sockets ``socks`` ((``main`` or ``vosk``, socket) pairs; kept open
        for the fronts started later, closed by :meth:`close`); return once each one serves (RuntimeError if
        one cannot start)."""
        self._socks = socks
        procs = [await self._spawn(i) for i in range(self.n)]
        await self._wait_up(procs)
        self._tasks.append(asyncio.get_running_loop().create_task(self._share_state()))
        self.app.metrics.front_processes.set(len(self.procs))
        log.info("%d front processes carry the connections (pids %s)", self.n,
                 ", ".join(str(p.pid) for p in procs))

    async def _spawn(self, index: int) -> FrontProcess:
        mine, theirs = socket.socketpair()
        app = self.app
        proc = self._ctx.Process(target=front_main, name=f"streamd-front-{index}", daemon=True,
                                 args=(index, to_dict(app.config), app.tokens, self._socks, theirs))
        await asyncio.get_running_loop().run_in_executor(None, proc.start)
        theirs.close()
        fp = FrontProcess(index, proc, await Link.open(mine))
        self.procs[index] = fp
        fp.reader = asyncio.get_running_loop().create_task(self._read(fp))
        self._state_to(fp)
        return fp

    async def _wait_up(self, procs: list[FrontProcess]) -> None:
        await _wait_all([fp.up for fp in procs])
        dead = [fp for fp in procs if not fp.up.is_set()]
        if dead:
            raise RuntimeError(f"front process {dead[0].index} did not start (exit code "
                               f"{dead[0].process.exitcode}); see the log above")

    async def wait_ready(self) -> None:
        """Until every front has the shared state with the model loaded (so none still refuses a stream as
        ``loading`` once the daemon says READY=1); a front that does not answer within ``START_TIMEOUT`` is
        logged, not waited for."""
        procs = list(self.procs.values())
        await _wait_all([fp.ready for fp in procs])
        for fp in procs:
            if not fp.ready.is_set():
                log.warning("front process %d (pid %s) has not taken the loaded model's state within %g s",
                            fp.index, fp.pid, START_TIMEOUT)

    async def _read(self, fp: FrontProcess) -> None:
        async for batch in fp.link.batches():
            try:
                self._handle(fp, batch)
            except Exception:  # noqa: BLE001 - a bug must not stop the front's other streams
                log.exception("front %d: handling its records failed", fp.index)
        await self._gone(fp)

    async def _gone(self, fp: FrontProcess) -> None:
        """Front ``fp``'s link ended: its process has exited (or is ending).  Unless the daemon is stopping or the
        front had drained: an error in the log, the exit counted, its streams closed, a new front in its place."""
        app = self.app
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, fp.process.join, 5.0)
        expected = self.stopping or fp.drained.is_set()
        keys = sorted(fp.keys)
        for key in keys:
            self.targets.pop(key, None)
            app.submit(CloseStream(key))
        fp.keys.clear()
        fp.conns = 0
        self._recount()
        fp.link.close()
        if self.procs.get(fp.index) is fp:
            del self.procs[fp.index]
        app.metrics.front_processes.set(len(self.procs))
        if expected:
            return
        app.metrics.front_exits.inc()
        log.error("front process %d (pid %s) exited (exit code %s) with %d streams: their streams are closed; a new "
                  "front process starts in %g s", fp.index, fp.pid, fp.process.exitcode, len(keys), RESTART_DELAY)
        await asyncio.sleep(RESTART_DELAY)
        if self.stopping or app.draining:
            return
        try:
            new = await self._spawn(fp.index)
            await self._wait_up([new])
        except (RuntimeError, OSError, ValueError) as e:
            log.error("front process %d: cannot start a new one: %s", fp.index, e)
            return
        app.metrics.front_processes.set(len(self.procs))
        log.info("front process %d: a new one (pid %s)", fp.index, new.pid)

    # ------------------------------------------------------------------ records

    def _handle(self, fp: FrontProcess, batch: list[tuple]) -> None:
        app = self.app
        targets = self.targets
        submit = app.submit
        now = time.monotonic()
        for rec in batch:
            kind = rec[0]
            if kind == "audio":
                _, key, data, fmt, ack, seconds = rec
                if key in targets:
                    submit(FeedPcm(key, data, fmt, ack=ack))
                    app.admission.note_audio(key, seconds, now)
            elif kind == "lag":
                if rec[1] in targets:
                    app.admission.note_lag(rec[1], rec[2], now)
            elif kind == "open":
                self._open(fp, *rec[1:])
            elif kind == "reset":
                if rec[1] in targets:
                    submit(ResetStream(rec[1]))
            elif kind == "finish":
                if rec[1] in targets:
                    submit(FinishStream(rec[1]))
            elif kind == "close":
                if targets.pop(rec[1], None) is not None:
                    fp.keys.discard(rec[1])
                    submit(CloseStream(rec[1]))
            elif kind == "loop_lag":
                app.admission.note_loop_lag(rec[1], now)
            elif kind == "conns":
                fp.conns = rec[1]
                self._recount()
            elif kind == "metrics":
                self._tasks.append(asyncio.get_running_loop().create_task(self._answer_metrics(fp, rec[1])))
            elif kind == "families":
                got = self._collects.get(rec[1])
                if got is not None:
                    got[0][fp.index] = rec[2]
                    if len(got[0]) >= len(self.procs) and not got[1].done():
                        got[1].set_result(None)
            elif kind == "up":
                fp.pid = rec[1]
                fp.up.set()
            elif kind == "ready":
                fp.ready.set()
            elif kind == "drained":
                fp.drained.set()
        self._tasks = [t for t in self._tasks if not t.done()]

    def _open(self, fp: FrontProcess, key: int, options: dict, client: str, token: str | None,
              stream_class: str) -> None:
        """A front's stream asks to start: the daemon's admission decides (a refusal goes back as its error)."""
        app = self.app
        if app.loading or app.batcher is None:
            fp.link.put(("refused", key, "loading", "the model is still loading; try again shortly", 1.0))
            return
        if app.draining:
            fp.link.put(("refused", key, "shutting_down", "server is shutting down; no new streams", 1.0))
            return
        refusal = app.admit(key, options, client, token)
        if refusal is not None:
            fp.link.put(("refused", key, refusal.code, refusal.message, refusal.retry_after))
            return
        self.targets[key] = RemoteTarget(key, fp.link, stream_class, app.lane_of)
        fp.keys.add(key)
        app.submit(OpenStream(key, options, client=client))

    def _recount(self) -> None:
        self.count = sum(fp.conns for fp in self.procs.values())
        self.app.streams_changed()

    # ------------------------------------------------------------------ shared state, metrics, broadcast

    def _state_to(self, fp: FrontProcess) -> None:
        app = self.app
        over = app.admission.overloaded(time.monotonic())
        fp.link.put(("state", app.loading, app.draining, app.stream_count(), fp.conns, over, app.model_info,
                     app.mic_error))

    def share_state(self) -> None:
        """Every front gets the shared state now (loading, draining, counts, capacity)."""
        for fp in list(self.procs.values()):
            self._state_to(fp)

    async def _share_state(self) -> None:
        while True:
            self.share_state()
            await asyncio.sleep(STATE_EVERY)

    def broadcast(self, message: dict, droppable: bool = False) -> None:
        """A message for every ``/v1/events`` subscriber of every front."""
        for fp in list(self.procs.values()):
            fp.link.put(("broadcast", message, droppable))

    async def render(self, timeout: float = 2.0) -> bytes:
        """The whole daemon's metrics (this process's and every front's, :func:`merge_families`), as text."""
        self._req += 1
        req = self._req
        got: dict[int, Any] = {}
        fut = asyncio.get_running_loop().create_future()
        self._collects[req] = (got, fut)
        for fp in list(self.procs.values()):
            fp.link.put(("collect", req))
        try:
            if self.procs:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            log.warning("/metrics: %d of %d front processes did not answer in %g s", len(self.procs) - len(got),
                        len(self.procs), timeout)
        finally:
            self._collects.pop(req, None)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(merge_families([self.app.metrics.registry.collect(), *got.values()])))
        return generate_latest(registry)

    async def _answer_metrics(self, fp: FrontProcess, req: int) -> None:
        fp.link.put(("metrics_text", req, await self.render()))

    # ------------------------------------------------------------------ drain and close

    async def drain(self, grace: float, rate: float | None, deadline: float) -> None:
        """Every front drains its connections (finals, done; ``shutting_down`` for what the grace cannot
        finish) by ``deadline``; returns once each has drained or exited (or the deadline and the close timeout
        have passed)."""
        self.share_state()
        procs = list(self.procs.values())
        for fp in procs:
            fp.link.put(("drain", max(0.0, deadline - time.monotonic()), rate))
        waits = [asyncio.ensure_future(fp.drained.wait()) for fp in procs]
        waits += [fp.reader for fp in procs if fp.reader is not None]
        end = deadline + self.app.config.server.close_timeout + 3.0
        pending = set(waits)
        while pending and any(not fp.drained.is_set() and fp.reader is not None and not fp.reader.done()
                              for fp in procs):
            _, pending = await asyncio.wait(pending, timeout=max(0.0, end - time.monotonic()),
                                            return_when=asyncio.FIRST_COMPLETED)
            if time.monotonic() >= end:
                break
        for w in waits[:len(procs)]:
            w.cancel()

    async def close(self) -> None:
        """End the fronts (a front still running after 5 s is killed) and stop watching them."""
        self.stopping = True
        for t in self._tasks:
            t.cancel()
        loop = asyncio.get_running_loop()
        procs = list(self.procs.values())
        for fp in procs:
            fp.link.close()
        for fp in procs:
            await loop.run_in_executor(None, fp.process.join, 5.0)
            if fp.process.is_alive():
                log.warning("front process %d did not exit; killing it", fp.index)
                fp.process.kill()
                await loop.run_in_executor(None, fp.process.join, 2.0)
        readers = [fp.reader for fp in procs if fp.reader is not None]
        await asyncio.gather(*readers, return_exceptions=True)
        for _, sock in self._socks:
            sock.close()
