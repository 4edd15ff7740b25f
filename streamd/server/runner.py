"""The engine side of ``streamd serve``: the runner that owns the Recognizer, and the task that feeds it.

* :class:`EngineRunner` owns the Recognizer; its :meth:`~EngineRunner.cycle` runs only in the one worker
  thread: apply every queued :data:`~.commands.Command` in order, then ``step()`` while chunks are ready
  (at most ``max_steps_per_cycle``), under the step budget the admission sets (:func:`.admission.fair_pick`).
* :class:`Batcher` is the one event-loop task that feeds it: transports :meth:`~Batcher.submit` commands;
  whenever there is work it runs a cycle in the worker thread (``run_in_executor`` on a one-thread
  executor).  Commands arriving meanwhile wait for the next cycle, which is what batches streams together
  under load.  The cycle's :class:`CycleResult` goes to ``route`` back on the loop.

Engine stream ids never leave the worker thread: commands and results use per-connection *keys*.  No
sockets here: the transports (:mod:`.conn`, :mod:`.wyoming_io`) and the daemon (:mod:`.app`) sit above.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from ..events import Done, Error, Event
from .admission import CapacityModel, Candidate, fair_pick
from .commands import CloseStream, Command, FeedPcm, FeedSamples, FinishStream, OpenStream, ResetStream
from .protocol import SAMPLE_WIDTH

__all__ = ["CycleResult", "RouteTarget", "EngineRunner", "Batcher", "release_memory", "ON_TIME_CHUNKS"]

log = logging.getLogger("streamd.server")

ON_TIME_CHUNKS = 2.0  # a stream with at most this many chunks of audio undecoded is on time (admission.fair_pick)
FAST_RATE = 1.5  # a stream whose audio came this much faster than real time ...
FAST_AFTER = 2.0  # ... over at least this many seconds is behind by its own choice: it is owed no step


def release_memory() -> None:
    """Return the allocator's free memory to the OS (glibc ``malloc_trim``; a no-op elsewhere).  Called in
    the engine thread when the last stream has ended, so that RSS goes back down after a load."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


@dataclass
class CycleResult:
    """What one cycle produced, keyed by connection key."""

    opened: list[tuple[int, str | None]] = field(default_factory=list)  # key, error message or None
    events: list[tuple[int, Event]] = field(default_factory=list)
    acks: dict[int, int] = field(default_factory=dict)
    steps: list[tuple[int, float, float]] = field(default_factory=list)  # batch size, seconds, audio seconds
    step_costs: list[float] = field(default_factory=list)  # cost units of each step's batch (admission)
    audio_seconds: float = 0.0  # accepted this cycle
    pending: bool = False  # the engine still has ready chunks
    decoded: dict[int, float] = field(default_factory=dict)  # key -> seconds of its audio decoded so far (flow)
    wake_suppressed: dict[str, int] = field(default_factory=dict)  # wake model keyword -> firings the refractory
    # window held back this cycle (the engine's wake_stats)


class RouteTarget(Protocol):
    """The owner of a stream's key (a websocket connection, the microphone, a Wyoming connection): what the
    routing of a :class:`CycleResult` calls, in this order within a cycle."""

    stream_class: str  # the streamd_backlog_seconds label: v1, vosk, mic or wyoming

    def on_opened(self, error: str | None) -> None: ...  # the engine created the stream (or why not)

    def on_event(self, ev: Event) -> None: ...  # an engine event of the stream

    def on_applied(self, n: int) -> None: ...  # n acknowledged commands were applied (Vosk lock-step)

    def on_progress(self, decoded: float) -> None: ...  # the stream's audio is decoded up to here (seconds)


class EngineRunner:
    """Owns the Recognizer; :meth:`cycle` is only ever called from the single worker thread.

    ``max_backlog``: seconds of received audio a stream may have waiting (``limits.max_backlog_seconds``;
    0 = no bound): audio beyond it ends the stream with ``backlog_exceeded``.  ``budget``: cost units one
    step may take (set by the event loop from the capacity model; None = no limit): when the ready streams
    cost more, :func:`.admission.fair_pick` chooses the step's streams."""

    def __init__(self, rec: Any, max_steps: int = 4, max_backlog: float = 0.0):
        self.rec = rec
        self.max_steps = max_steps
        self.max_backlog = max_backlog
        self.budget: float | None = None
        self.model_info = rec.model_info
        self.chunk_seconds = float(self.model_info["chunk_seconds"])
        self._sid: dict[int, int] = {}  # key -> engine stream id
        self._key: dict[int, int] = {}  # engine stream id -> key
        self._cost: dict[int, float] = {}  # engine stream id -> cost units
        self._client: dict[int, str] = {}  # engine stream id -> client (fair share)
        self._opened = itertools.count()
        self._seq: dict[int, int] = {}  # engine stream id -> open order
        self._owed = False  # the last step served streams on time only: the next one serves the others too
        self._fed: dict[int, tuple[float, float]] = {}  # engine stream id -> (first audio, audio seconds since)

    def calibrate(self, large: int = 16, reps: int = 3) -> CapacityModel:
        """Time greedy steps of 1 and ``large`` throwaway streams (quiet noise; median of ``reps`` each) and
        build the capacity model from them.  Only on an idle recognizer (before any client stream)."""
        rec = self.rec
        rng = np.random.default_rng(0)
        chunk = int(round(self.chunk_seconds * 16000))
        timings = []
        for n in (1, large):
            ids = [rec.create_stream(method="greedy", partials=True) for _ in range(n)]
            try:
                times = []
                for r in range(reps + 1):  # the first step (a fresh batch) is not timed
                    for sid in ids:
                        rec.accept_audio(sid, (0.01 * rng.standard_normal(chunk + (400 if r == 0 else 0)))
                                         .astype(np.float32))
                    t0 = time.perf_counter()
                    rec.step()
                    if r:
                        times.append(time.perf_counter() - t0)
            finally:
                for sid in ids:
                    if rec.has_stream(sid):
                        rec.close(sid)
            timings.append((float(n), sorted(times)[len(times) // 2]))
        return CapacityModel.from_timings(self.chunk_seconds, timings[0], timings[1])

    def _pick(self) -> list[int] | None:
        """The streams of the next step under the budget (None: every ready stream)."""
        budget = self.budget
        if budget is None:
            return None
        rec = self.rec
        ready = rec.ready_streams()
        if len(ready) < 2:
            return None
        cands = [Candidate(sid, self._client.get(sid, f"stream {sid}"), self._cost.get(sid, 1.0), rec.backlog(sid),
                           self._seq.get(sid, 0)) for sid in ready]
        on_time = ON_TIME_CHUNKS * self.chunk_seconds
        owed, self._owed = self._owed, False
        now = time.perf_counter()
        behind = [c for c in cands if c.backlog > on_time and not self._fast(c.sid, now)]
        if owed and 0 < len(behind) < len(cands):  # their own step, as the on-time streams had theirs
            only = fair_pick(behind, budget, rec.config.max_batch)
            only = [c.sid for c in behind] if only is None else only
        else:
            only = fair_pick(cands, budget, rec.config.max_batch, on_time)
            timely = any(c.backlog <= on_time for c in cands)
            self._owed = timely and bool(behind)  # they waited for this on-time step: the next one is theirs
        return None if only is not None and len(only) == len(ready) else only

    def _fast(self, sid: int, now: float) -> bool:
        """Stream ``sid`` sends faster than real time (:data:`FAST_RATE` over :data:`FAST_AFTER` s or more): a
        file pushed at full speed, an adversary; behind by its own choice, it takes what on-time streams leave."""
        t0, seconds = self._fed.get(sid, (now, 0.0))
        return now - t0 >= FAST_AFTER and seconds / (now - t0) > FAST_RATE

    def _fed_audio(self, res: CycleResult, sid: int, seconds: float) -> None:
        """Stream ``sid`` took ``seconds`` of audio: counted in the cycle's total and in its arrival rate."""
        res.audio_seconds += seconds
        t0, total = self._fed.get(sid, (time.perf_counter(), 0.0))
        self._fed[sid] = (t0, total + seconds)

    def cycle(self, cmds: list[Command]) -> CycleResult:
        res = CycleResult()
        for c in cmds:
            try:
                self._apply(c, res)
            except Exception as e:  # noqa: BLE001 - a bug must not take other streams down
                log.exception("engine command %s for stream key %d failed", c.op, c.key)
                self._drop(c.key, close=True)
                res.events.append((c.key, Error(-1, "internal", f"{c.op} failed: {type(e).__name__}: {e}")))
            if isinstance(c, FeedPcm) and c.ack:
                res.acks[c.key] = res.acks.get(c.key, 0) + 1
        rec = self.rec
        held = self._wake_suppressed()
        stepped: set[int] = set()  # streams a step of this cycle may have decoded (their progress moved)
        for _ in range(self.max_steps):
            if not rec.pending():
                break
            only = self._pick()
            ready = rec.ready_streams() if only is None else only
            batch = min(len(ready), rec.config.max_batch)
            cost = sum(self._cost.get(sid, 1.0) for sid in ready[:batch])
            stepped.update(ready)
            t0 = time.perf_counter()
            try:
                evs = rec.step() if only is None else rec.step(only)
            except Exception as e:  # noqa: BLE001 - the engine isolates streams itself; guard against bugs
                log.exception("engine step failed")
                for sid in ready:
                    key = self._key.get(sid)
                    if key is not None:
                        self._drop(key, close=True)
                        res.events.append((key, Error(sid, "internal", f"decoding failed: {type(e).__name__}: {e}")))
                break
            res.steps.append((batch, time.perf_counter() - t0, batch * self.chunk_seconds))
            res.step_costs.append(cost)
            self._emit(evs, res)
            if only is not None:  # behind: let the queued commands (a real-time stream's audio) in before more
                break
        res.pending = rec.pending()
        res.wake_suppressed = {k: n - held.get(k, 0) for k, n in self._wake_suppressed().items()
                               if n > held.get(k, 0)}
        self._progress(res, stepped)
        return res

    def _wake_suppressed(self) -> dict[str, int]:
        """The engine's count of held-back wake-model firings so far, per keyword (its ``wake_stats``)."""
        return {k: v["suppressed"] for k, v in getattr(self.rec, "wake_stats", {}).items()}

    def _progress(self, res: CycleResult, stepped: set[int]) -> None:
        """How far each stream with audio that a step of this cycle took is decoded (seconds of its audio: what
        it was fed less its backlog), for the transports' flow control (:mod:`.flow`).  Audio alone does not
        move it (what a stream is fed adds to its backlog as much): the other streams' figures stand."""
        rec = self.rec
        fed_of = self._fed
        for sid in stepped:
            got = fed_of.get(sid)
            key = self._key.get(sid)
            if got is not None and key is not None and rec.has_stream(sid):
                res.decoded[key] = max(0.0, got[1] - rec.backlog(sid))

    def _apply(self, c: Command, res: CycleResult) -> None:
        if isinstance(c, OpenStream):
            self._open(c, res)
            return
        rec = self.rec
        sid = self._sid.get(c.key)
        if sid is None or not rec.has_stream(sid):
            self._drop(c.key)
            return  # stream already ended (error, done, closed): nothing to do
        match c:
            case FeedPcm(data=data, fmt=fmt):
                evs = rec.accept_pcm(sid, data, fmt)
                if not evs:
                    self._fed_audio(res, sid, len(data) / SAMPLE_WIDTH[fmt] / rec.stream_options(sid).sample_rate)
                self._emit(evs or self._bound(c.key, sid), res)
            case FeedSamples(samples=samples):
                evs = rec.accept_audio(sid, samples)
                if not evs:
                    self._fed_audio(res, sid, samples.size / rec.stream_options(sid).sample_rate)
                self._emit(evs or self._bound(c.key, sid), res)
            case ResetStream():
                rec.reset(sid)
            case FinishStream():
                rec.finish(sid)
            case CloseStream():
                self._drop(c.key, close=True)
            case _:
                raise TypeError(f"not an engine command: {c!r}")

    def _open(self, c: OpenStream, res: CycleResult) -> None:
        rec = self.rec
        try:
            sid = rec.create_stream(**c.options)
        except ValueError as e:
            res.opened.append((c.key, str(e)))
            return
        self._sid[c.key], self._key[sid] = sid, c.key
        self._cost[sid] = rec.stream_options(sid).step_cost  # a batch step's share (the second pass is not in it)
        self._client[sid] = c.client if c.client is not None else f"stream {c.key}"
        self._seq[sid] = next(self._opened)
        res.opened.append((c.key, None))

    def _bound(self, key: int, sid: int) -> list[Event]:
        """``limits.max_backlog_seconds``: the stream's end (an Error) once its undecoded audio exceeds it."""
        backlog = self.rec.backlog(sid)
        if not self.max_backlog or backlog <= self.max_backlog:
            return []
        self.rec.close(sid)
        return [Error(sid, "backlog_exceeded",
                      f"{backlog:.1f} s of this stream's audio wait to be decoded, more than the "
                      f"{self.max_backlog:g} s the server holds (limits.max_backlog_seconds): the server is "
                      f"overloaded or the audio comes faster than it can be decoded; reconnect later or send "
                      f"at real time", fatal=True)]

    def _drop(self, key: int, close: bool = False) -> None:
        sid = self._sid.pop(key, None)
        if sid is not None:
            self._key.pop(sid, None)
            self._cost.pop(sid, None)
            self._client.pop(sid, None)
            self._seq.pop(sid, None)
            self._fed.pop(sid, None)
            if close and self.rec.has_stream(sid):
                self.rec.close(sid)

    def _emit(self, evs: list[Event], res: CycleResult) -> None:
        for ev in evs:
            key = self._key.get(ev.stream)
            if key is None:
                continue
            res.events.append((key, ev))
            if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
                self._drop(key)  # the engine has closed that stream


class Batcher:
    """The one task that feeds the engine: command queue in, routed results out."""

    def __init__(self, runner: EngineRunner, executor: ThreadPoolExecutor, route: Callable[[CycleResult], None]):
        self.runner = runner
        self.executor = executor
        self.route = route
        self._queue: list[Command] = []
        self._wake = asyncio.Event()
        self.cycle_started: float | None = None  # monotonic start of the cycle in flight (watchdog)
        self.cycles = 0
        # (now, cost units, seconds from the cycle's start to its results routed, steps): the admission's
        # capacity model learns the engine's and the event loop's time per stream from it
        self.observe: Callable[[float, float, float, int], None] | None = None

    def submit(self, cmd: Command) -> None:
        self._queue.append(cmd)
        self._wake.set()

    def stalled(self, limit: float) -> bool:
        t = self.cycle_started
        return t is not None and time.monotonic() - t > limit

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        pending = False
        while True:
            if not self._queue and not pending:
                self._wake.clear()
                await self._wake.wait()
            cmds, self._queue = self._queue, []
            self.cycle_started = started = time.monotonic()
            try:
                res = await loop.run_in_executor(self.executor, self.runner.cycle, cmds)
            except Exception as e:  # noqa: BLE001 - a bug in the cycle itself: fail its streams, keep serving
                log.exception("engine cycle failed")
                res = CycleResult(events=[(k, Error(-1, "internal", f"engine cycle failed: {type(e).__name__}: {e}"))
                                          for k in dict.fromkeys(c.key for c in cmds)])
            self.cycle_started = None
            self.cycles += 1
            pending = res.pending
            try:
                self.route(res)
            except Exception:  # noqa: BLE001 - routing bugs must not stop the engine task
                log.exception("routing engine results failed")
            if self.observe is not None and res.step_costs:
                now = time.monotonic()
                self.observe(now, sum(res.step_costs), now - started, len(res.step_costs))
