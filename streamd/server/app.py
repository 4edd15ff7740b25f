"""asyncio I/O layer of ``streamd serve``: listeners, HTTP routes, the batching task, lifecycle.

Threads and tasks
-----------------
* The event loop runs the websockets server (``websockets.asyncio.server``),
  one handler task per connection, and one sender task per connection that
  drains its bounded :class:`Outbox`.  It never calls the model.
* ONE batching task (:class:`Batcher`) owns the Recognizer.  Connections
  append :class:`Command` s (open / audio / samples / reset / finish / close)
  to its queue; whenever there is work it runs :meth:`EngineRunner.cycle` in a
  single worker thread (``run_in_executor`` on a one-thread executor): apply
  every queued command in order, then ``step()`` while chunks are ready (at
  most ``max_steps_per_cycle``).  Commands arriving meanwhile wait for the
  next cycle, which is what batches streams together under load.
* Back on the loop, the cycle's results are routed: stream creations
  (``ready``), then engine events (partial, final, wake, error, done), then
  acknowledgements of applied frames (Vosk lock-step replies).  Routing only
  appends to outboxes: a slow client never stalls the others; its partials
  coalesce and if its outbox still overflows it is disconnected
  (``slow_consumer``).

Engine stream ids never leave the worker thread: commands and results use
per-connection *keys*.  The protocol state machines are sans-I/O
(:mod:`.protocol`, :mod:`.vosk`), and so are the admission and fair-share rules
(:mod:`.admission`: this module feeds them step times, audio arrivals, partial
lags and its event loop's lag, and asks before every new stream); this module
supplies the clock, the sockets and the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import hashlib
import itertools
import json
import logging
import math
import mimetypes
import os
import secrets
import ssl
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from ..config import AppConfig, AuthConfig, ConfigError, TlsConfig, load_yaml
from ..events import Done, Error, Event, Partial, WakeWord
from .commands import Command
from .metrics import CONTENT_TYPE, Metrics
from .outbox import Outbox
from .admission import Admission, CapacityModel, Candidate, Refusal, fair_pick, stream_cost
from .drain import ThroughputWindow, drain_plan
from .guard import BadRequest, HostRule, RateLimitedLog, check_request, single_header
from .notify import Notifier, watchdog_interval
from .protocol import (CLOSE_CODES, SAMPLE_WIDTH, Action, Audio, Close, Finish, Open, Reset, Send, V1Session,
                       bearer_token, origin_ok, public_model_info, token_ok)
from .vosk import VoskSession

__all__ = ["App", "CycleResult", "EngineRunner", "resolve_config", "load_tokens",
           "make_ssl_context", "default_web_root", "cmd_serve", "cmd_check_config"]

log = logging.getLogger("streamd.server")

V1_PATH, VOSK_PATH, EVENTS_PATH = "/v1/stream", "/vosk", "/v1/events"
PROBE_PATHS = ("/healthz", "/readyz")  # answered whatever the Host (load balancers probe by any name)
# OSError numbers of resource exhaustion (out of file descriptors / buffers / memory): logged at most
# once per ACCEPT_ERROR_LOG_SECONDS with a count, never as one traceback per failed accept()
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_ERROR_LOG_SECONDS = 10.0
ON_TIME_CHUNKS = 2.0  # a stream with at most this many chunks of audio undecoded is on time (admission.fair_pick)
FBANK_LOOKAHEAD_S = 0.015  # a partial ending at t needed the audio up to t + 15 ms (25 ms window, 10 ms hop)


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


def default_web_root() -> Path:
    """``clients/web`` of the repository this package lives in."""
    return Path(__file__).resolve().parents[2] / "clients" / "web"


# =========================================================================== engine side (worker thread)


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
        only = fair_pick(cands, budget, rec.config.max_batch, ON_TIME_CHUNKS * self.chunk_seconds)
        return None if only is not None and len(only) == len(ready) else only

    def cycle(self, cmds: list[Command]) -> CycleResult:
        res = CycleResult()
        for c in cmds:
            try:
                self._apply(c, res)
            except Exception as e:  # noqa: BLE001 - a bug must not take other streams down
                log.exception("engine command %s for stream key %d failed", c.op, c.key)
                self._drop(c.key, close=True)
                res.events.append((c.key, Error(-1, "internal", f"{c.op} failed: {type(e).__name__}: {e}")))
            if c.ack:
                res.acks[c.key] = res.acks.get(c.key, 0) + 1
        rec = self.rec
        for _ in range(self.max_steps):
            if not rec.pending():
                break
            only = self._pick()
            ready = rec.ready_streams() if only is None else only
            batch = min(len(ready), rec.config.max_batch)
            cost = sum(self._cost.get(sid, 1.0) for sid in ready[:batch])
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
        return res

    def _apply(self, c: Command, res: CycleResult) -> None:
        rec = self.rec
        if c.op == "open":
            try:
                sid = rec.create_stream(**c.arg)
            except ValueError as e:
                res.opened.append((c.key, str(e)))
                return
            self._sid[c.key], self._key[sid] = sid, c.key
            opts = rec.stream_options(sid)
            self._cost[sid] = stream_cost(opts.method, opts.beam)
            self._client[sid] = c.client if c.client is not None else f"stream {c.key}"
            self._seq[sid] = next(self._opened)
            res.opened.append((c.key, None))
            return
        sid = self._sid.get(c.key)
        if sid is None or not rec.has_stream(sid):
            self._drop(c.key)
            return  # stream already ended (error, done, closed): nothing to do
        if c.op == "audio":
            data, fmt = c.arg
            evs = rec.accept_pcm(sid, data, fmt)
            if not evs:
                res.audio_seconds += len(data) / SAMPLE_WIDTH[fmt] / rec.stream_options(sid).sample_rate
            self._emit(evs or self._bound(c.key, sid), res)
        elif c.op == "samples":
            evs = rec.accept_audio(sid, c.arg)
            if not evs:
                res.audio_seconds += c.arg.size / rec.stream_options(sid).sample_rate
            self._emit(evs or self._bound(c.key, sid), res)
        elif c.op == "reset":
            rec.reset(sid)
        elif c.op == "finish":
            rec.finish(sid)
        elif c.op == "close":
            self._drop(c.key, close=True)
        else:
            raise ValueError(f"unknown command {c.op!r}")

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


# =========================================================================== connection side (event loop)


def _stream_class(target: Any) -> str:
    """``stream_class`` label of a route target: v1, vosk, mic or wyoming."""
    if isinstance(target, MicStream):
        return "mic"
    if getattr(target, "stream_class", None):
        return target.stream_class  # e.g. wyoming_io.WyomingConn
    return "vosk" if isinstance(target.proto, VoskSession) else "v1"


class Conn:
    """One websocket client: protocol session, outbox, sender task, engine key."""

    def __init__(self, app: "App", ws: ServerConnection, key: int, proto: V1Session | VoskSession | None):
        self.app = app
        self.ws = ws
        self.key = key
        self.proto = proto
        self.outbox = Outbox(app.config.limits.outbox_messages)
        self.sender: asyncio.Task | None = None
        self.aborted = False
        self.decoded = 0.0  # stream seconds decoded so far (the latest partial's / final's end)
        info = getattr(ws, "streamd", None)
        self.client: str = info.client if info is not None else ""  # admission: quotas, fair share
        self.token: str | None = info.token if info is not None else None
        self.arrivals: deque[tuple[float, float]] = deque()  # (audio seconds so far, arrival): partial lag

    def start(self) -> None:
        self.sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def _send_loop(self) -> None:
        try:
            while True:
                item = await self.outbox.get()
                if isinstance(item, Close):
                    await self.ws.close(item.code, item.reason)
                    return
                await self.ws.send(item)
        except ConnectionClosed:
            return

    def send(self, message: dict, droppable: bool = False, when_behind: bool = False, last: bool = False) -> None:
        if message.get("type") == "error":
            self.app.metrics.errors.labels(message.get("code", "?")).inc()
        before = self.outbox.dropped
        if not self.outbox.put(json.dumps(message), droppable, when_behind, force=last):
            self.abort("slow_consumer", f"client is not reading: {self.outbox.capacity} messages queued")
        self.app.metrics.dropped_partials.inc(self.outbox.dropped - before)

    def abort(self, code: str, message: str) -> None:
        """Disconnect at once (slow consumer): the sender may be stuck writing to this client."""
        if self.aborted:
            return
        self.aborted = True
        log.warning("closing connection %s: %s", self.key, message)
        self.app.metrics.errors.labels(code).inc()
        if self.proto is not None:
            self.proto.fail(code, message)  # marks the session closed
        self.app.submit(Command("close", self.key))
        if self.sender is not None:
            self.sender.cancel()
        asyncio.get_running_loop().create_task(self.ws.close(CLOSE_CODES[code], code))

    def perform(self, actions: list[Action]) -> None:
        """Execute a protocol session's actions, in order."""
        for a in actions:
            if self.aborted:
                return
            if isinstance(a, Send):
                self.send(a.message, a.droppable, a.when_behind, a.last)
            elif isinstance(a, Audio):
                self.app.submit(Command("audio", self.key, (a.data, a.fmt), ack=a.ack))
                now = time.monotonic()
                self.app.admission.note_audio(self.key, self.proto.audio_seconds, now)
                self.arrivals.append((self.proto.audio_seconds, now))
            elif isinstance(a, Open):
                refusal = self.app.admit(self.key, a.options, self.client, self.token)
                if refusal is not None:  # at capacity, or this client's quota: the session ends here
                    self.perform(self.proto.fail(refusal.code, refusal.message, {"retry_after": refusal.retry_after}))
                    return
                self.app.submit(Command("open", self.key, a.options, client=self.client))
            elif isinstance(a, Reset):
                self.app.submit(Command("reset", self.key))
            elif isinstance(a, Finish):
                self.app.submit(Command("finish", self.key))
            elif isinstance(a, Close):
                self.outbox.close(a.code, a.reason)
                self.app.submit(Command("close", self.key))

    # route targets for engine results
    def on_opened(self, error: str | None) -> None:
        self.perform(self.proto.opened(error))

    def on_event(self, ev: Event) -> None:
        end = getattr(ev, "end", None)  # partial / final / wake: decoded at least this far
        if isinstance(end, float) and end > self.decoded:
            self.decoded = end
        if isinstance(ev, Partial):  # its lag: from the arrival of the audio that completed its chunk
            need = ev.end + FBANK_LOOKAHEAD_S
            while self.arrivals and self.arrivals[0][0] < need - 1e-9:
                self.arrivals.popleft()
            if self.arrivals:
                now = time.monotonic()
                self.app.admission.note_lag(self.key, now - self.arrivals[0][1], now)
        self.perform(self.proto.event(ev))

    def on_applied(self, n: int) -> None:
        if isinstance(self.proto, VoskSession):
            self.perform(self.proto.applied(n))


class MicStream:
    """The daemon's microphone stream: its events go to every ``/v1/events`` subscriber."""

    def __init__(self, app: "App", key: int):
        self.app = app
        self.key = key
        self.done = asyncio.Event()

    def on_opened(self, error: str | None) -> None:
        if error is not None:
            self.app.broadcast({"type": "error", "code": "mic_error", "message": f"microphone stream: {error}"})
            self._end()

    def on_event(self, ev: Event) -> None:
        msg = ev.to_wire()
        self.app.broadcast(msg, droppable=msg["type"] == "partial")
        if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
            self._end()

    def _end(self) -> None:
        self.done.set()
        self.app.mics.pop(self.key, None)
        self.app._update_gauge()

    def on_applied(self, n: int) -> None:
        pass


async def _discard(ws: ServerConnection) -> None:
    """Read and drop messages until the connection is closed."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed:
        return


# =========================================================================== the application


@dataclass
class _ReqInfo:
    route: str  # v1 | vosk | events
    authorized: bool
    client: str = ""  # the peer's address (per-client quota, fair share)
    token: str | None = None  # an id of the bearer token used (per-token quota), never the token itself


class App:
    """One ``streamd serve`` instance: listeners, engine, connections, lifecycle.

    ``recognizer``: an already built Recognizer; otherwise ``loader()`` (or
    ``Recognizer.from_checkpoint(model_path, config.engine)``) builds it in the
    worker thread after the listeners are up, and ``server.warmup_seconds`` of
    audio go through it once (``/readyz`` answers 503 and new streams get
    ``loading`` meanwhile).  ``mic_factory(config.mic)`` builds
    the capture (:class:`streamd.mic.MicCapture`: ``start()``, ``sample_rate``,
    ``async blocks()`` of float32 mono samples) when ``config.mic.enabled``.
    ``tokens`` default to ``auth.tokens`` plus ``auth.token_file``.

    ``async with App(...) as app`` starts it and drains it on exit; ``app.port``
    / ``app.vosk_port`` are the bound ports (useful with port 0).
    """

    def __init__(self, config: AppConfig, recognizer: Any = None, model_path: str | None = None,
                 mic_factory: Callable[[Any], Any] | None = None, notifier: Notifier | None = None,
                 tokens: tuple[str, ...] | None = None, loader: Callable[[], Any] | None = None):
        self.config = config
        self.rec = recognizer
        self.model_path = model_path
        self.loader = loader
        self.mic_factory = mic_factory
        self.notifier = notifier or Notifier(None)
        self.tokens = load_tokens(config.auth) if tokens is None else tuple(tokens)
        self.metrics = Metrics()
        self.web_root = Path(config.server.web_root) if config.server.web_root else default_web_root()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="streamd-engine")
        self.loading = True
        self.draining = False
        self.model_info: dict = {}
        self.conns: dict[int, Conn] = {}
        self.conn_done: dict[int, asyncio.Event] = {}
        self.subscribers: set[Conn] = set()
        self.mics: dict[int, MicStream] = {}  # microphone streams not yet done (a retry opens a new one)
        self.batcher: Batcher | None = None
        self._keys = itertools.count(1)
        self._tasks: list[asyncio.Task] = []
        self._mic_task: asyncio.Task | None = None
        self.servers: list[Server] = []
        self.port: int | None = None
        self.vosk_port: int | None = None
        self.wyoming: Any = None  # wyoming_io.WyomingServer on server.wyoming_port (imported when enabled)
        self.wyoming_port: int | None = None
        self.hosts = HostRule.for_server(config.server.host, config.server.allowed_hosts)
        self.throughput = ThroughputWindow()  # recent decoding speed: what a drain can still finish
        self.admission = Admission(config.limits)  # quotas now; the capacity model after the calibration (start)
        self._had_streams = False
        self._resource_log = RateLimitedLog(ACCEPT_ERROR_LOG_SECONDS)
        self._loop_handler: tuple[Any, Any] | None = None  # (loop, the exception handler before ours)

    # ------------------------------------------------------------------ plumbing

    def submit(self, cmd: Command) -> None:
        if cmd.op == "open":
            load = self.admission.streams.get(cmd.key)
            if load is None:  # a stream no admission rule saw (microphone, Wyoming): counted all the same
                self.admission.reserve(cmd.key, time.monotonic(), self._cost_of(cmd.arg), "local", force=True)
            if cmd.client is None:
                cmd.client = load.client if load is not None else "local"
        elif cmd.op == "close":
            self.admission.release(cmd.key)
        if self.batcher is not None:
            self.batcher.submit(cmd)

    def _cost_of(self, options: Mapping[str, Any] | None) -> float:
        """Cost units of a stream with these options (the engine's defaults for what they leave out)."""
        options = options or {}
        dec = self.rec.config.decoding if self.rec is not None else self.config.engine.decoding
        return stream_cost(options.get("method") or dec.method, options.get("beam") or dec.beam)

    def admit(self, key: int, options: Mapping[str, Any] | None, client: str, token: str | None = None
              ) -> Refusal | None:
        """Admission of stream ``key`` with these options (:class:`.admission.Admission`): None and the stream
        is counted until it ends, or why not (the caller sends the error)."""
        refusal = self.admission.reserve(key, time.monotonic(), self._cost_of(options), client, token)
        if refusal is not None:
            log.debug("refused a stream of %s: %s", client or "?", refusal.message)
        return refusal

    def capacity_refusal(self) -> tuple[str, str] | None:
        """(code, message) when a stream with the default options would be refused now (transports without
        per-client identity, e.g. Wyoming), else None."""
        r = self.admission.check(time.monotonic(), self._cost_of(None))
        return None if r is None else (r.code, r.message)

    def _targets(self) -> dict[int, Any]:
        t: dict[int, Any] = dict(self.conns)
        t.update(self.mics)
        if self.wyoming is not None:
            t.update(self.wyoming.streams)
        return t

    def _route(self, res: CycleResult) -> None:
        targets = self._targets()
        now = time.monotonic()
        for key, err in res.opened:
            if err is not None:
                self.admission.release(key)
            if key in targets:
                targets[key].on_opened(err)
        for key, ev in res.events:
            if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
                self.admission.release(key)
            if isinstance(ev, WakeWord):
                self.metrics.wake_events.labels(ev.keyword).inc()
            elif isinstance(ev, Partial) and key in targets:
                self.metrics.backlog.labels(_stream_class(targets[key])).observe(ev.backlog)
            if key in targets:
                targets[key].on_event(ev)
        for key, n in res.acks.items():
            if key in targets:
                targets[key].on_applied(n)
        model = self.admission.model
        for batch, seconds, audio in res.steps:
            self.metrics.record_step(batch, seconds, audio)
            self.throughput.add(now, seconds, audio)
        if model is not None:
            if self.batcher is not None:  # the next cycles' steps under a burst: short, fair (admission.fair_pick)
                self.batcher.runner.budget = model.step_budget(now, self.config.limits.max_load)
            self.metrics.load.set(model.load(self.admission.demand(now), now))
        if res.audio_seconds:
            self.metrics.audio_seconds.inc(res.audio_seconds)

    def broadcast(self, message: dict, droppable: bool = False) -> None:
        for sub in list(self.subscribers):
            sub.send(message, droppable)

    def _update_gauge(self) -> None:
        n = self.stream_count() + len(self.mics)
        self.metrics.active_streams.set(n)
        if n == 0 and self._had_streams and self.batcher is not None:
            # the last stream ended: hand the freed buffers back to the OS (glibc keeps them otherwise)
            self._had_streams = False
            try:
                asyncio.get_running_loop().run_in_executor(self.executor, release_memory)
            except RuntimeError:  # the executor is shut down (the server is stopping): nothing to give back
                pass
        elif n:
            self._had_streams = True

    def stream_count(self) -> int:
        """Client streams that count toward ``limits.max_streams``: v1 + Vosk connections, live Wyoming streams."""
        return len(self.conns) + (len(self.wyoming.streams) if self.wyoming is not None else 0)

    def new_key(self) -> int:
        """A fresh engine command key (one per stream; Wyoming connections take one per stream they run)."""
        return next(self._keys)

    # ------------------------------------------------------------------ HTTP

    def _respond(self, conn: ServerConnection, status: int, body: bytes, ctype: str) -> Response:
        r = conn.respond(status, "")
        r.body = body
        del r.headers["Content-Length"]
        del r.headers["Content-Type"]
        r.headers["Content-Length"] = str(len(body))
        r.headers["Content-Type"] = ctype
        r.headers["Cache-Control"] = "no-cache"
        return r

    def _ws_request(self, conn: ServerConnection, request: Request, route: str) -> Response | None:
        """A websocket route after :func:`check_request`: HEAD refused, Origin allow-list, token (BadRequest)."""
        if request.method != "GET":
            raise BadRequest(405, "method_not_allowed", f"{request.method} cannot open a websocket (GET)",
                             allow="GET")
        origin = single_header(request.headers, "Origin")
        if not origin_ok(origin, single_header(request.headers, "Host"), self.config.auth.allowed_origins):
            raise BadRequest(403, "origin_not_allowed", f"origin {origin[:100]!r} is not allowed (auth.allowed_origins)")
        given = bearer_token(request.headers, request.path)
        authorized = token_ok(given, self.tokens)
        peer = conn.remote_address
        token_id = hashlib.sha256(given.encode()).hexdigest()[:16] if authorized and self.tokens and given else None
        conn.streamd = _ReqInfo(route, authorized, str(peer[0]) if peer else "",  # type: ignore[attr-defined]
                                token_id)
        return None

    def _bad_request(self, conn: ServerConnection, request: Request, e: BadRequest) -> Response:
        """The HTTP answer to a request refused by the checks (counted in ``streamd_errors_total{code}``,
        logged at debug level only: a flood of bad requests must not flood the log)."""
        self.metrics.errors.labels(e.code).inc()
        log.debug("refused %s %.80r: HTTP %d %s", request.method, request.path, e.status, e.message)
        r = conn.respond(e.status, e.message + "\n")
        if e.allow:
            r.headers["Allow"] = e.allow
        return self._head(request, r)

    @staticmethod
    def _head(request: Request, response: Response) -> Response:
        """A HEAD answer: the GET answer's status and headers (Content-Length included), no body."""
        if request.method == "HEAD":
            response.body = b""
        return response

    async def _http(self, conn: ServerConnection, request: Request) -> Response | None:
        """process_request of the main port: header checks (:mod:`.guard`), then websocket routes pass and
        HTTP routes answer."""
        ws_routes = {V1_PATH: "v1", VOSK_PATH: "vosk", EVENTS_PATH: "events"}
        try:
            path = check_request(request.method, request.path, request.headers, self.hosts, PROBE_PATHS)
            if path in ws_routes:
                return self._ws_request(conn, request, ws_routes[path])
            return self._head(request, await self._http_route(conn, path))
        except BadRequest as e:
            return self._bad_request(conn, request, e)

    async def _http_route(self, conn: ServerConnection, path: str) -> Response:
        """The plain HTTP routes: probes, metrics, static files."""
        if path == "/healthz":
            return conn.respond(200, "ok\n")
        if path == "/readyz":
            if self.loading:
                return conn.respond(503, "loading\n")
            if self.draining:
                return conn.respond(503, "draining\n")
            over = self.admission.overloaded(time.monotonic())
            if over is not None:  # a load balancer routes elsewhere meanwhile
                r = conn.respond(503, "overloaded\n")
                r.headers["Retry-After"] = str(math.ceil(over.retry_after))
                return r
            return conn.respond(200, "ready\n")
        if path == "/metrics":
            return self._respond(conn, 200, self.metrics.render(), CONTENT_TYPE)
        file = self._static_file(path)
        if file is None:
            return conn.respond(404, f"not found: {path}\n")
        try:
            body = await asyncio.to_thread(file.read_bytes)
        except OSError as e:  # e.g. out of file descriptors: an answer, not a traceback
            self._resource_error("reading a static file", e)
            return conn.respond(503, f"cannot read {path}: {e.strerror or e}\n")
        ctype = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
            ctype += "; charset=utf-8"
        return self._respond(conn, 200, body, ctype)

    async def _vosk_http(self, conn: ServerConnection, request: Request) -> Response | None:
        """process_request of the Vosk port: every path is the Vosk protocol (after the header checks)."""
        try:
            check_request(request.method, request.path, request.headers, self.hosts)
            return self._ws_request(conn, request, "vosk")
        except BadRequest as e:
            return self._bad_request(conn, request, e)

    def _static_file(self, path: str) -> Path | None:
        root = self.web_root.resolve()
        if not root.is_dir():
            return None
        rel = unquote(path).lstrip("/") or "index.html"
        try:
            p = (root / rel).resolve()
            if p != root and root not in p.parents:
                return None  # path traversal
            if p.is_dir():
                p = p / "index.html"
            return p if p.is_file() else None
        except (OSError, ValueError):  # e.g. an encoded NUL byte
            return None

    # ------------------------------------------------------------------ websocket handlers

    def _refusal(self, info: _ReqInfo, count: int) -> tuple[str, str] | tuple[str, str, dict] | None:
        if not info.authorized:
            return ("unauthorized", "missing or invalid token: send 'Authorization: Bearer TOKEN' or ?token=TOKEN")
        if self.draining:
            return ("shutting_down", "server is shutting down; no new streams")
        if self.loading:
            return ("loading", "the model is still loading; try again shortly")
        if count >= self.config.limits.max_streams:
            return ("too_many_streams", f"server is at its limit of {self.config.limits.max_streams} "
                                        "concurrent streams; try again later")
        if info.route != "events":  # the cheapest stream (greedy) would not fit: refused before its start message
            r = self.admission.check(time.monotonic(), 1.0, info.client, info.token)
            if r is not None:
                return (r.code, r.message, {"retry_after": r.retry_after})
        return None

    async def _refuse(self, ws: ServerConnection, code: str, message: str, extra: dict | None = None) -> None:
        self.metrics.errors.labels(code).inc()
        try:
            await ws.send(json.dumps({"type": "error", "code": code, "message": message, **(extra or {})}))
            await ws.close(CLOSE_CODES[code], code)
        except ConnectionClosed:
            pass

    async def _handler(self, ws: ServerConnection) -> None:
        info: _ReqInfo = getattr(ws, "streamd", _ReqInfo("vosk", False))
        self.metrics.connections.labels(info.route).inc()
        if info.route == "events":
            await self._serve_events(ws, info)
            return
        refusal = self._refusal(info, self.stream_count())
        if refusal:
            await self._refuse(ws, *refusal)
            return
        key = next(self._keys)
        if info.route == "v1":
            dec = self.rec.config.decoding
            proto: V1Session | VoskSession = V1Session(secrets.token_hex(8), self.config.limits, self.model_info,
                                                       dec.method, dec.beam)
        else:
            proto = VoskSession(self.config.limits, self.config.server.vosk_sample_rate)
        conn = Conn(self, ws, key, proto)
        self.conns[key] = conn
        done = self.conn_done[key] = asyncio.Event()
        self._update_gauge()
        conn.start()
        try:
            if await self._read_loop(conn):
                # input is over (eof, error, draining): keep reading and discarding, or a client that is
                # still sending would block the closing handshake until close_timeout
                rest = asyncio.ensure_future(_discard(ws))
                await asyncio.wait({conn.sender, rest}, return_when=asyncio.FIRST_COMPLETED)
                rest.cancel()
        finally:
            if not conn.sender.done():
                conn.sender.cancel()
            self.submit(Command("close", key))
            del self.conns[key]
            self.conn_done.pop(key, None)
            done.set()
            self._update_gauge()

    async def _read_loop(self, conn: Conn) -> bool:
        """Feed client messages to the session until its input closes; False if the client went away.

        Two timers, both decided by the session: ``idle_timeout`` after the last message
        (``proto.timeout()``) and the session's own ``proto.deadline()`` (``proto.tick(now)``: the
        minimum audio rate), whichever comes first."""
        ws, proto = conn.ws, conn.proto
        idle = self.config.limits.idle_timeout
        last = time.monotonic()
        conn.perform(proto.tick(last))  # starts the session's clock
        while not proto.input_closed and not conn.aborted:
            ends = [t for t in (last + idle if idle else None, proto.deadline()) if t is not None]
            wait = max(0.0, min(ends) - time.monotonic()) if ends else None
            try:
                msg = await asyncio.wait_for(ws.recv(), wait)
            except asyncio.TimeoutError:
                now = time.monotonic()
                conn.perform(proto.timeout() if idle and now >= last + idle else proto.tick(now))
                continue
            except ConnectionClosed:
                return False
            last = time.monotonic()
            conn.perform(proto.receive(msg, last))
        return True

    async def _serve_events(self, ws: ServerConnection, info: _ReqInfo) -> None:
        refusal = self._refusal(info, len(self.subscribers))
        if refusal is None and not self.config.mic.enabled:
            refusal = ("no_mic", "no microphone stream: start the server with --mic (mic.enabled)")
        if refusal:
            await self._refuse(ws, *refusal)
            return
        sub = Conn(self, ws, -1, None)
        self.subscribers.add(sub)
        sub.start()
        try:
            async for _ in ws:  # server-to-client only: client messages are ignored
                pass
        except ConnectionClosed:
            pass
        finally:
            self.subscribers.discard(sub)
            if not sub.sender.done():
                sub.sender.cancel()

    # ------------------------------------------------------------------ microphone

    async def _run_mic(self) -> None:
        """Capture -> one engine stream; after a capture error, retry as a new stream.

        The wait starts at ``mic.retry_seconds`` and doubles after each try that delivered no audio, up to
        ``mic.retry_max_seconds``; a try that delivered audio starts it over.  A failure is logged and
        broadcast when its message is new; the same failure again is logged at debug level only (a daemon
        waiting for a microphone to be plugged in does not fill the journal)."""
        mcfg = self.config.mic
        wait, last_error, tries = mcfg.retry_seconds, None, 0
        while True:
            key = None
            ended = delivered = False
            try:
                capture = self.mic_factory(mcfg)
                capture.start()  # the actual rate is known once started
                key = next(self._keys)
                self.mics[key] = MicStream(self, key)
                self._update_gauge()
                self.submit(Command("open", key, {"sample_rate": int(capture.sample_rate),
                                                  "partials": mcfg.partials, "keywords": mcfg.keywords}))
                async for block in capture.blocks():
                    delivered = True
                    self.submit(Command("samples", key, np.asarray(block, dtype=np.float32).reshape(-1)))
                ended = True
            except asyncio.CancelledError:
                ended = True  # draining
            except Exception as e:  # noqa: BLE001 - MicError (no device, device lost) or a broken source
                message = f"microphone: {e}"
                if delivered:
                    wait, last_error, tries = mcfg.retry_seconds, None, 0
                tries += 1
                retry = f"; trying again in {wait:g} s" if mcfg.retry_seconds and not self.draining else ""
                if message != last_error:
                    log.error("%s%s", message, retry)
                    self.broadcast({"type": "error", "code": "mic_error", "message": message})
                else:
                    log.debug("%s (%d tries)%s", message, tries, retry)
                last_error = message
                self.metrics.errors.labels("mic_error").inc()
            finally:
                if key is not None:
                    self.submit(Command("finish", key))
            if ended or not mcfg.retry_seconds or self.draining:
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, max(mcfg.retry_max_seconds, mcfg.retry_seconds))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen, load the model (readyz 503 meanwhile), start the batcher; READY=1."""
        cfg = self.config
        s, lim = cfg.server, cfg.limits
        ssl_ctx = make_ssl_context(cfg.tls)
        if s.wyoming_port is not None:
            from .wyoming_io import check_wyoming_auth

            check_wyoming_auth(s, self.tokens)  # before anything listens
        common = dict(max_size=max(2 * lim.max_message_bytes, 2 * lim.max_text_bytes),
                      open_timeout=lim.open_timeout or None, ping_interval=s.ping_interval or None,
                      ping_timeout=s.ping_timeout or None, close_timeout=s.close_timeout, compression=None,
                      ssl=ssl_ctx)
        self._install_loop_handler()
        main = await serve(self._handler, s.host, s.port, process_request=self._http, **common)
        self.servers.append(main)
        self.port = main.sockets[0].getsockname()[1]
        scheme = "wss" if ssl_ctx else "ws"
        log.info("listening on %s://%s:%d (v1: %s, vosk: %s, events: %s)", scheme, s.host, self.port,
                 V1_PATH, VOSK_PATH, EVENTS_PATH)
        log.info("answering Host names: %s (server.allowed_hosts)", self.hosts.describe())
        if s.vosk_port is not None:
            vs = await serve(self._handler, s.host, s.vosk_port, process_request=self._vosk_http, **common)
            self.servers.append(vs)
            self.vosk_port = vs.sockets[0].getsockname()[1]
            log.info("vosk listening on %s://%s:%d (every path)", scheme, s.host, self.vosk_port)
        loop = asyncio.get_running_loop()
        if self.rec is None:
            loader = self.loader
            if loader is None:
                from ..engine import Recognizer

                log.info("loading model %s", self.model_path)
                loader = functools.partial(Recognizer.from_checkpoint, self.model_path, cfg.engine)
            self.rec = await loop.run_in_executor(self.executor, loader)
        if s.warmup_seconds > 0:
            t0 = time.perf_counter()
            await loop.run_in_executor(self.executor, self.rec.warm_up, s.warmup_seconds)
            log.info("warmed up (%.1f s of audio, every method) in %.2f s", s.warmup_seconds, time.perf_counter() - t0)
        runner = await loop.run_in_executor(self.executor, EngineRunner, self.rec, s.max_steps_per_cycle,
                                            lim.max_backlog_seconds)
        if lim.max_load:  # admission by capacity: the step-time model, calibrated on this machine now
            model = await loop.run_in_executor(self.executor, runner.calibrate)
            self.admission.model = model
            self._tasks.append(loop.create_task(self._watch_loop_lag()))
            log.info("capacity: a batch step takes %.1f ms + %.2f ms per greedy stream here; about %d greedy "
                     "streams fit in limits.max_load (%g of a %.2f s chunk), fewer with beam searches",
                     1000 * model.fixed, 1000 * model.per_unit, model.budget(0.0, lim.max_load), lim.max_load,
                     model.chunk_seconds)
        self.model_info = public_model_info(runner.model_info, s.show_model_paths)  # what clients see
        self.batcher = Batcher(runner, self.executor, self._route)
        if self.admission.model is not None:
            self.batcher.observe = self.admission.model.add_step
        self._tasks.append(loop.create_task(self.batcher.run()))
        self.loading = False
        if s.wyoming_port is not None:  # opens with the model loaded: describe answers at once
            from .wyoming_io import WyomingServer

            self.wyoming = WyomingServer(self)
            self.wyoming_port = await self.wyoming.start(s.host, s.wyoming_port)
        lm = runner.model_info.get("lm")
        log.info("ready: model %s on %s%s", self.model_info.get("name"), self.model_info.get("device"),
                 f" (modified_beam fuses the n-gram {lm['path']}, weight {lm['weight']})" if lm else "")
        self.notifier.ready(f"ready on port {self.port}")
        interval = watchdog_interval()
        if interval and self.notifier.enabled:
            self._tasks.append(loop.create_task(
                self.notifier.watchdog_loop(interval, lambda: not self.batcher.stalled(2 * interval))))
        if cfg.mic.enabled:
            if self.mic_factory is None:
                raise ConfigError("mic.enabled: no microphone capture available")
            self._mic_task = loop.create_task(self._run_mic())

    async def _watch_loop_lag(self, interval: float = 0.1) -> None:
        """How late this event loop wakes up (its own saturation: reading and answering every client), for the
        admission; and a log line when the capacity rule starts or stops refusing."""
        refusing = False
        while True:
            t = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.admission.note_loop_lag(max(0.0, now - t - interval), now)
            over = self.admission.overloaded(now)
            if (over is not None) != refusing:
                refusing = over is not None
                sig = self.admission.signals(now)
                log.info("admission: %s (%d streams, load %.2f, scale %.2f, steps %.0f %% of the time, loop lag %s, "
                         "partial lag %s)", "at capacity, refusing new streams" if refusing else
                         "accepting new streams again", sig["streams"], sig.get("load", 0.0), sig.get("scale", 1.0),
                         100 * sig.get("busy", 0.0),
                         "n/a" if sig["loop_lag"] is None else f"{1000 * sig['loop_lag']:.0f} ms",
                         "n/a" if sig["late"] is None else f"{sig['late']:.2f} s")

    async def shutdown(self) -> None:
        """Drain: refuse new streams, finish every live one (finals, done), then close within the grace.

        Under load the streams whose backlog the grace cannot decode (:func:`.drain.drain_plan`, from the
        recent throughput) get a ``shutting_down`` error and close 1001 at once, as does every stream
        still live when the grace is over: no stream ends in silence."""
        if self.draining:
            return
        self.draining = True
        self.notifier.stopping("draining")
        grace = self.config.server.grace_seconds
        log.info("draining %d streams (grace %.1f s)", len(self.conns), grace)
        deadline = time.monotonic() + grace
        if self._mic_task is not None:
            self._mic_task.cancel()
        for conn in list(self.conns.values()):
            conn.perform(conn.proto.shutdown())
        live = {k: c for k, c in self.conns.items() if not c.proto.closed}
        give_up = drain_plan({k: c.proto.audio_seconds - c.decoded for k, c in live.items()},
                             self.throughput.rate(time.monotonic()), grace)
        if give_up:
            log.warning("draining: %d of %d streams cannot be decoded within the grace period; ending them now",
                        len(give_up), len(live))
            for k in sorted(give_up):
                c = live[k]
                left = c.proto.audio_seconds - c.decoded
                c.perform(c.proto.fail("shutting_down", f"the server is shutting down and cannot decode the "
                                                        f"{left:.1f} s of audio still queued for this stream "
                                                        f"within its grace period"))
        waits = [asyncio.ensure_future(e.wait()) for e in self.conn_done.values()]
        waits += [asyncio.ensure_future(m.done.wait()) for m in self.mics.values()]
        if self.wyoming is not None:  # its streams finish (results sent), its idle connections close
            waits += [asyncio.ensure_future(e.wait()) for e in self.wyoming.drain()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=max(0.0, deadline - time.monotonic()))
            for w in pending:
                w.cancel()
            late = [c for c in self.conns.values() if not c.proto.closed]
            if late:
                log.warning("grace period over: ending %d streams before their end (shutting_down)", len(late))
                for c in late:
                    c.perform(c.proto.fail("shutting_down", f"the server shut down before this stream was "
                                                            f"decoded to its end (grace period {grace:g} s)"))
            left = [e for e in self.conn_done.values() if not e.is_set()]
            if left:  # the error and close frames go out before the listeners close the rest
                waits = [asyncio.ensure_future(e.wait()) for e in left]
                _, pending = await asyncio.wait(waits, timeout=min(self.config.server.close_timeout, 2.0))
                for w in pending:
                    w.cancel()
        for sub in list(self.subscribers):
            sub.outbox.close(1001, "shutting_down")
        await self.close()

    async def close(self) -> None:
        """Stop listening, close what is left (1001), stop the batcher and the worker thread."""
        if self.wyoming is not None:
            await self.wyoming.close()  # a stream still live gets a shutting_down error first
        for srv in self.servers:
            srv.close()  # what is left after the grace: 1001 going away
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), self.config.server.close_timeout + 1)
            except asyncio.TimeoutError:
                log.warning("some connections did not close in time")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await asyncio.get_running_loop().run_in_executor(None, self.executor.shutdown)
        self.notifier.close()
        self._restore_loop_handler()
        log.info("stopped")

    # ------------------------------------------------------------------ resource exhaustion

    def _install_loop_handler(self) -> None:
        """Route the loop's exception handler through :meth:`_loop_exception` (restored by :meth:`close`)."""
        loop = asyncio.get_running_loop()
        if self._loop_handler is None:
            self._loop_handler = (loop, loop.get_exception_handler())
            loop.set_exception_handler(self._loop_exception)

    def _restore_loop_handler(self) -> None:
        if self._loop_handler is not None:
            loop, previous = self._loop_handler
            self._loop_handler = None
            if not loop.is_closed():
                loop.set_exception_handler(previous)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """Out of file descriptors (``accept()`` failing on the listening socket, and the like): counted and
        logged at most once per interval; everything else goes to the previous handler."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            self._resource_error(context.get("message") or "event loop", exc)
            return
        previous = self._loop_handler[1] if self._loop_handler else None
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def _resource_error(self, what: str, exc: OSError) -> None:
        if exc.errno not in RESOURCE_ERRNOS:
            log.warning("%s: %s", what, exc)
            return
        self.metrics.errors.labels("resource_exhausted").inc()
        if self._resource_log.hit():
            log.error("%s: %s (out of file descriptors or memory: raise LimitNOFILE= / ulimit -n or lower "
                      "limits.max_streams; further failures are counted, one line per %g s)",
                      what, exc, self._resource_log.interval)
            asyncio.get_running_loop().call_later(self._resource_log.interval, self._flush_resource_log)

    def _flush_resource_log(self) -> None:
        n = self._resource_log.flush()
        if n:
            log.error("%d more failures for lack of file descriptors or memory in the last %g s", n,
                      self._resource_log.interval)
            asyncio.get_running_loop().call_later(self._resource_log.interval, self._flush_resource_log)

    async def __aenter__(self) -> "App":
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain gracefully."""
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        await stop.wait()
        await self.shutdown()


# =========================================================================== configuration and commands


def resolve_config(path: str | None, flags: Mapping[str, Any] | None = None,
                   env: Mapping[str, str] | None = None) -> AppConfig:
    """YAML file (or defaults), then environment (STREAMD_HOST/PORT/MODEL/DEVICE), then flags.

    ``flags`` keys: host, port, model, device, vosk_port, wyoming_port, wake_words, hotwords, mic, mic_device
    (None = not given).
    Errors are ConfigError naming the key path, variable or flag.
    """
    env = os.environ if env is None else env
    flags = dict(flags or {})
    cfg = load_yaml(path, AppConfig) if path else AppConfig()
    server, engine, mic = cfg.server, cfg.engine, cfg.mic

    def put(obj, name, value, source):
        try:
            return dataclasses.replace(obj, **{name: value})
        except (ConfigError, TypeError) as e:
            raise ConfigError(f"{source}: {e}") from None

    def env_int(name):
        v = env.get(name)
        if not v:
            return None
        try:
            return int(v)
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {v!r}") from None

    for var, section, name, conv in (("STREAMD_HOST", "server", "host", str), ("STREAMD_PORT", "server", "port", None),
                                     ("STREAMD_MODEL", "engine", "model", str),
                                     ("STREAMD_DEVICE", "engine", "device", str)):
        value = env_int(var) if conv is None else env.get(var) or None
        if value is None:
            continue
        if section == "server":
            server = put(server, name, value, var)
        else:
            engine = put(engine, name, value, var)
    for flag, name in (("host", "host"), ("port", "port"), ("vosk_port", "vosk_port"),
                       ("wyoming_port", "wyoming_port")):
        if flags.get(flag) is not None:
            server = put(server, name, flags[flag], "--" + flag.replace("_", "-"))
    for flag in ("model", "device"):
        if flags.get(flag) is not None:
            engine = put(engine, flag, flags[flag], f"--{flag}")
    if flags.get("wake_words") is not None:
        engine = dataclasses.replace(engine, kws=put(engine.kws, "wake_words", flags["wake_words"], "--wake-words"))
    if flags.get("hotwords") is not None:
        engine = dataclasses.replace(engine, decoding=put(engine.decoding, "hotwords", flags["hotwords"], "--hotwords"))
    if flags.get("mic"):
        mic = put(mic, "enabled", True, "--mic")
    if flags.get("mic_device") is not None:
        d = flags["mic_device"]
        mic = put(mic, "device", int(d) if str(d).isdigit() else d, "--mic-device")
    return dataclasses.replace(cfg, server=server, engine=engine, mic=mic)


def load_tokens(auth: AuthConfig) -> tuple[str, ...]:
    """``auth.tokens`` plus the non-empty, non-comment lines of ``auth.token_file``."""
    tokens = list(auth.tokens)
    if auth.token_file:
        try:
            lines = Path(auth.token_file).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigError(f"auth.token_file: cannot read {auth.token_file!r}: {e.strerror or e}") from None
        for i, line in enumerate(lines, 1):
            t = line.strip()
            if t and not t.startswith("#"):
                if len(t) < 8:
                    raise ConfigError(f"auth.token_file: line {i}: token shorter than 8 characters")
                tokens.append(t)
    return tuple(tokens)


def make_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Server TLS context from ``tls.cert`` / ``tls.key`` (None when TLS is off)."""
    if not tls.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for name, p in (("cert", tls.cert), ("key", tls.key)):
        if not Path(p).is_file():
            raise ConfigError(f"tls.{name}: no such file {p!r}")
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"tls.cert: cannot load certificate {tls.cert!r} / key {tls.key!r}: {e}") from None
    return ctx


def check_app_config(cfg: AppConfig) -> None:
    """Checks that need the file system (model and LM files, token file, TLS files)."""
    if cfg.engine.model and not Path(cfg.engine.model).is_file():
        raise ConfigError(f"engine.model: no such file {cfg.engine.model!r}")
    lm = cfg.engine.decoding.lm
    if lm not in ("auto", "none") and not Path(lm).is_file():
        raise ConfigError(f"engine.decoding.lm: no such file {lm!r}")
    tokens = load_tokens(cfg.auth)
    make_ssl_context(cfg.tls)
    if cfg.server.wyoming_port is not None:
        from .wyoming_io import check_wyoming_auth

        check_wyoming_auth(cfg.server, tokens)


def _mic_factory():
    try:
        from ..mic import MicCapture
    except ImportError as e:
        raise ConfigError(f"--mic: microphone capture is unavailable ({e}); install the 'mic' extra") from None
    return lambda m: MicCapture(m.device, m.sample_rate, m.block_seconds)


def cmd_serve(args: Any) -> int:
    """``streamd serve``: run the daemon until SIGTERM/SIGINT, then drain; 0 on a clean stop."""
    import signal

    from ..paths import default_model_path

    env = os.environ
    cfg = resolve_config(args.config or env.get("STREAMD_CONFIG") or None,
                         {"host": args.host, "port": args.port, "model": args.model, "device": args.device,
                          "vosk_port": args.vosk_port, "mic": args.mic, "mic_device": args.mic_device,
                          "wyoming_port": getattr(args, "wyoming_port", None),
                          "wake_words": getattr(args, "wake_words", None), "hotwords": getattr(args, "hotwords", None)},
                         env)
    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cfg.server.log_level != "debug":  # two lines per connection at info: a flood (and CPU) under load
        logging.getLogger("websockets").setLevel(logging.WARNING)
    model = cfg.engine.model or str(default_model_path())
    if not Path(model).is_file():
        what = f"model {model!r} not found" if cfg.engine.model else f"no default model at {model}"
        raise SystemExit(f"streamd serve: {what}; pass --model PATH or set STREAMD_MODEL (or engine.model)")
    tokens = load_tokens(cfg.auth)
    make_ssl_context(cfg.tls)  # fail before listening
    mic_factory = _mic_factory() if cfg.mic.enabled else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        app = App(cfg, model_path=model, mic_factory=mic_factory, notifier=Notifier.from_env(), tokens=tokens)
        await app.run(stop)

    asyncio.run(main())
    return 0


def cmd_check_config(args: Any) -> int:
    """``streamd check-config FILE``: OK (exit 0) or the error with its key path (exit 2)."""
    import sys

    import yaml

    try:
        check_app_config(load_yaml(args.file, AppConfig))
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 2
    print("OK")
    return 0
