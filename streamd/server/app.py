"""The daemon of ``streamd serve``: listeners, the routing of engine results, lifecycle.

The server package by purpose, from the bottom up (lower modules never import higher ones):

* sans-I/O rules: :mod:`.protocol`, :mod:`.vosk`, :mod:`.wyoming` (sessions, their :mod:`.states`),
  :mod:`.guard` (request checks), :mod:`.auth` (tokens, origins), :mod:`.admission`, :mod:`.drain`;
* :mod:`.commands` (what transports ask of the engine) and :mod:`.runner` (the engine side: the
  :class:`~.runner.EngineRunner` that owns the Recognizer in one worker thread, the
  :class:`~.runner.Batcher` task that feeds it);
* the transports: :mod:`.conn` (websocket connections, the microphone), :mod:`.wyoming_io`, with
  :mod:`.outbox`;
* :mod:`.settings` (configuration, TLS), :mod:`.static` (the browser page), :mod:`.metrics`,
  :mod:`.notify`, :mod:`.exhaustion`;
* :mod:`.routes` (the HTTP side of the listeners: header checks, probes, metrics, static files),
  :mod:`.handlers` (their websocket side: refusals, each connection's session and :class:`~.conn.Conn`) and
  :mod:`.supervisor` (an engine lane's process started again when it dies);
* :mod:`.front` / :mod:`.fronts` (``server.front_processes`` > 1: the connections in front processes feeding
  this process's engine over :mod:`.front_link`);
* this module: the :class:`App` that ties them together (its engines and lanes in :mod:`.app_engines`, its
  drain and close in :mod:`.app_shutdown`); :mod:`.serve`: the commands.

Threads and tasks
-----------------
* The event loop runs the websockets server (``websockets.asyncio.server``, each connection a
  :class:`~.wsconn.DirectConnection`: its messages go to its session from the socket's callback, with no
  task wake-up per message), one handler task per connection, and one sender task per connection for
  what its transport cannot take at once; the messages queued in its bounded :class:`~.outbox.Outbox`
  during a turn of the loop are written at the next turn by one :class:`~.outbox.Flusher` for all of them.
  It never calls the model.
* ONE batching task (:class:`~.runner.Batcher`) owns the Recognizer.  Connections
  submit typed :mod:`.commands` (open / audio / samples / reset / finish / close)
  to its queue; whenever there is work it runs :meth:`~.runner.EngineRunner.cycle` in a
  single worker thread (``run_in_executor`` on a one-thread executor): apply
  every queued command in order, then ``step()`` while chunks are ready (at
  most ``max_steps_per_cycle``).  Commands arriving meanwhile wait for the
  next cycle, which is what batches streams together under load.  With
  ``server.engine_process`` (the default when a checkpoint is loaded) the
  runner lives in a child process (:class:`.lane.LaneProcess`) and the worker
  thread only sends it the commands and waits for the cycle's result.
* Back on the loop, the cycle's results (:meth:`App._cycle_done`) are routed (:meth:`App._route`),
  measured (:meth:`App._measure`), and a lane whose process died is restarted by its
  :class:`~.supervisor.LaneSupervisor`.  Routing delivers stream creations
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
import itertools
import logging
import os
import socket
import time
from collections import ChainMap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from websockets.asyncio.server import Server, serve

from ..config import AppConfig, ConfigError
from ..events import Done, Error, Event, Partial, WakeWord
from .admission import Admission, Refusal
from .app_engines import EngineLanes
from .app_shutdown import Shutdown
from .auth import check_wyoming_auth, load_tokens
from .commands import CloseStream, Command, OpenStream
from .conn import Conn, ConnTable, MicStream, run_mic
from .drain import ThroughputWindow
from .exhaustion import ACCEPT_ERROR_LOG_SECONDS, RESOURCE_ERRNOS, ResourceErrors
from .guard import HostRule, RateLimitedLog
from .lane import LaneProcess
from .metrics import Metrics
from .notify import Notifier, watchdog_interval
from .protocol import public_model_info
from .runner import Batcher, CycleResult, EngineRunner, RouteTarget, release_memory
from .settings import check_app_config, make_ssl_context, resolve_config, websocket_options
from .handlers import WsHandlers
from .routes import EVENTS_PATH, V1_PATH, VOSK_PATH, HttpRoutes
from .static import StaticFiles, default_web_root
from .supervisor import LaneSupervisor

if TYPE_CHECKING:
    from .fronts import Fronts
    from .wyoming_io import WyomingServer

# the App and what other code and tests import from here (their homes are the modules above)
__all__ = ["App", "CycleResult", "EngineRunner", "Conn", "MicStream", "resolve_config", "load_tokens",
           "make_ssl_context", "check_app_config", "default_web_root", "release_memory",
           "RESOURCE_ERRNOS", "ACCEPT_ERROR_LOG_SECONDS"]

log = logging.getLogger("streamd.server")

class _Targets(ChainMap):
    """Every stream's route target by key, over the maps of its owners (a view: nothing is copied per cycle);
    :meth:`get` in one pass (a ChainMap's looks twice), for the routing of every event."""

    def get(self, key: Any, default: Any = None) -> Any:
        for m in self.maps:
            t = m.get(key)
            if t is not None:
                return t
        return default


class App(EngineLanes, Shutdown, ConnTable):
    """One ``streamd serve`` instance: listeners, engine, connections, lifecycle.

    ``recognizer``: an already built Recognizer; otherwise ``loader()`` (or
    ``Recognizer.from_checkpoint(model_path, config.engine)``) builds it in the
    worker thread after the listeners are up, and ``server.warmup_seconds`` of
    audio go through it once (``/readyz`` answers 503 and new streams get
    ``loading`` meanwhile).  ``mic_factory(config.mic)`` builds
    the capture (:class:`streamd.capture.MicCapture`: ``start()``, ``sample_rate``,
    ``async blocks()`` of float32 mono samples) when ``config.mic.enabled``.
    ``tokens`` default to ``auth.tokens`` plus ``auth.token_file``.

    ``async with App(...) as app`` starts it and drains it on exit; ``app.port``
    / ``app.vosk_port`` are the bound ports (useful with port 0).
    """

    def __init__(self, config: AppConfig, recognizer: Any = None, model_path: str | None = None,
                 mic_factory: Callable[[Any], Any] | None = None, notifier: Notifier | None = None,
                 tokens: tuple[str, ...] | None = None, loader: Callable[[], Any] | None = None,
                 second_pass: Any = None):
        """second_pass: a built :class:`~streamd.second_pass.rescore.SecondPass` to use for
        ``engine.second_pass`` instead of loading its model at start (embedders, tests)."""
        self.config = config
        self.rec = recognizer
        self.model_path = model_path
        self.loader = loader
        self.mic_factory = mic_factory
        self.notifier = notifier or Notifier(None)
        self.tokens = load_tokens(config.auth) if tokens is None else tuple(tokens)
        self.metrics = Metrics()
        # the browser page: the package's own (importlib.resources), or server.web_root
        self.web_root = Path(config.server.web_root) if config.server.web_root else default_web_root()
        self.static = StaticFiles(self.web_root)
        self.routes = HttpRoutes(self)  # the HTTP side of the listeners (.routes)
        self.handlers = WsHandlers(self)  # their websocket side (.handlers)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="streamd-engine")
        self._init_conn_table()
        self.mics: dict[int, MicStream] = {}  # microphone streams not yet done (a retry opens a new one)
        self.mic_error: dict | None = None  # the microphone's last error while it fails (new subscribers get it)
        self.batcher: Batcher | None = None
        # the main engine's process (server.engine_process), started again when it dies (.supervisor)
        self.main_supervisor = LaneSupervisor(
            "main engine", self._new_main_lane, lambda lane: self._in_thread(self.executor, lane.close),
            self._install_main_lane, lambda: self.draining, on_death=self._main_lane_died)
        # the light lane (limits.light_lane): a second engine in a child process (.lane), fed by its batcher
        self.light: Batcher | None = None
        self.light_executor: ThreadPoolExecutor | None = None
        self.light_supervisor = LaneSupervisor(
            "light lane", lambda old: self._new_lane(old.model_path, old.config),
            lambda lane: self._in_thread(self.light_executor, lane.close), self._install_light_lane,
            lambda: self.draining, on_death=self._lane_gauge)
        self._light_keys: set[int] = set()  # streams in the light lane
        self._share_dir: str | None = None  # while the engine processes load: where they share their tables
        self._keys = itertools.count(1)
        self._tasks: list[asyncio.Task] = []
        self._mic_task: asyncio.Task | None = None
        self.servers: list[Server] = []
        self.page_url = ""  # the browser page, GET / (set once listening; the Wyoming attribution link)
        self.port: int | None = None
        self.vosk_port: int | None = None
        self.wyoming: WyomingServer | None = None  # on server.wyoming_port (wyoming_io imported when enabled)
        self.wyoming_port: int | None = None
        self.hosts = HostRule.for_server(config.server.host, config.server.allowed_hosts)
        self.throughput = ThroughputWindow()  # recent decoding speed: what a drain can still finish
        self.admission = Admission(config.limits)  # quotas now; the capacity model after the calibration (start)
        self._had_streams = False
        self.resource_errors = ResourceErrors(self.metrics, ACCEPT_ERROR_LOG_SECONDS)
        self.fronts: Fronts | None = None  # server.front_processes > 1: the processes carrying the connections
        self.second_worker: Any = None  # engine.second_pass: the worker thread and each stream's order (start)
        self.second_gate: Any = None
        self._second_given = second_pass

    # ------------------------------------------------------------------ plumbing

    @property
    def main_lane(self) -> LaneProcess | None:
        """The main engine's process (``server.engine_process``), or None (the engine runs in this process)."""
        return self.main_supervisor.lane

    @property
    def light_lane(self) -> LaneProcess | None:
        """The light lane's engine process (``limits.light_lane``), or None."""
        return self.light_supervisor.lane

    @property
    def _resource_log(self) -> RateLimitedLog:
        return self.resource_errors.log

    def submit(self, cmd: Command) -> None:
        """Queue an engine command (the admission counts every stream from its open to its close)."""
        if isinstance(cmd, OpenStream):
            load = self.admission.streams.get(cmd.key)
            if load is None:  # a stream no admission rule saw (microphone, Wyoming): counted all the same
                self.admission.reserve(cmd.key, time.monotonic(), self._cost_of(cmd.options), "local", force=True)
            if cmd.client is None:
                cmd = dataclasses.replace(cmd, client=load.client if load is not None else "local")
            if self.light is not None and self.light_lane.alive and self.admission.light(
                    cmd.key, self._light_keys, self.config.limits.light_lane):
                self._light_keys.add(cmd.key)
                self._lane_gauge()
        batcher = self.light if cmd.key in self._light_keys else self.batcher
        if isinstance(cmd, CloseStream):
            self._ended(cmd.key)
        if batcher is not None:
            batcher.submit(cmd)

    def lane_of(self, key: int) -> str:
        """The engine lane stream ``key`` decodes in: ``light`` or ``main`` (the streamd_partial_lag_seconds
        label)."""
        return "light" if key in self._light_keys else "main"

    def _ended(self, key: int) -> None:
        """Stream ``key`` ended (closed, done, failed, or never opened): no longer counted anywhere."""
        self.admission.release(key)
        self._light_keys.discard(key)
        self._lane_gauge()

    def _lane_gauge(self) -> None:
        lane = self.light_lane
        self.metrics.light_lane.set(len(self._light_keys) if lane is not None and lane.alive
                                    else -1 if lane is not None else 0)

    @property
    def engine_config(self) -> Any:
        """The main engine's EngineConfig: the Recognizer's here, or the one its process was started with."""
        return self.rec.config if self.rec is not None else self.config.engine

    @property
    def default_method(self) -> str:
        """The search a stream gets when it names none: the engine's (greedy before it is loaded)."""
        return "greedy" if self.rec is None and self.main_lane is None else self.engine_config.decoding.method

    def _cost_of(self, options: Mapping[str, Any] | None) -> float:
        """Cost units of a stream with these options (the engine's defaults for what they leave out)."""
        return self.engine_config.stream_defaults.cost(options)

    def admit(self, key: int, options: Mapping[str, Any] | None, client: str, token: str | None = None
              ) -> Refusal | None:
        """Admission of stream ``key`` with these options (:class:`.admission.Admission`): None and the stream
        is counted until it ends, or why not (the caller sends the error)."""
        refusal = self.admission.reserve(key, time.monotonic(), self._cost_of(options), client, token)
        if refusal is not None:
            log.debug("refused a stream of %s (%s): %s", client or "?", refusal.rule, refusal.message)
        return refusal

    def capacity_refusal(self) -> tuple[str, str] | None:
        """(code, message) when a stream with the default options would be refused now (transports without
        per-client identity, e.g. Wyoming), else None."""
        r = self.admission.check(time.monotonic(), self._cost_of(None))
        return None if r is None else (r.code, r.message)

    def _targets(self) -> Mapping[int, RouteTarget]:
        """Every stream's route target by key (a view: nothing is copied per cycle)."""
        maps: list[Mapping[int, Any]] = [self.conns, self.mics]
        if self.wyoming is not None:
            maps.append(self.wyoming.streams)
        if self.fronts is not None:
            maps.append(self.fronts.targets)
        return _Targets(*maps)

    def _cycle_done(self, res: CycleResult) -> None:
        """An engine cycle's results (either lane's batcher): routed to their streams, measured, and a lane whose
        process died is started again (its supervisor)."""
        self._route(res)
        self._measure(res)
        for supervisor in (self.main_supervisor, self.light_supervisor):
            task = supervisor.check()
            if task is not None:
                self._tasks.append(task)

    def _route(self, res: CycleResult) -> None:
        """A cycle's results to their targets: stream creations, engine events, acknowledgements, progress."""
        targets = self._targets()
        target_of = targets.get
        for key, err in res.opened:
            if err is not None:
                self._ended(key)
            if (t := target_of(key)) is not None:
                t.on_opened(err)
        for key, ev in res.events:
            if self.second_gate is not None:  # a stream's events wait behind its final's second pass
                for k, e in self.second_gate.route(key, ev):
                    self._deliver(k, e, targets)
            else:
                self._deliver(key, ev, targets)
        for key, n in res.acks.items():
            if (t := target_of(key)) is not None:
                t.on_applied(n)
        for key, decoded in res.decoded.items():  # after the events: their results are queued first (flow)
            if (t := target_of(key)) is not None:
                t.on_progress(decoded)

    def _measure(self, res: CycleResult) -> None:
        """A cycle's steps: the metrics, the drain's throughput, and the capacity model's next step budget."""
        now = time.monotonic()
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
        for keyword, n in res.wake_suppressed.items():
            self.metrics.wake_suppressed.labels(keyword).inc(n)

    def _deliver(self, key: int, ev: Event, targets: Mapping[int, RouteTarget]) -> None:
        """One engine event of stream ``key`` to its target (the admission sees the stream end with it)."""
        if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
            self._ended(key)
        target = targets.get(key)
        if isinstance(ev, WakeWord):
            self.metrics.wake_events.labels(ev.keyword).inc()
        elif isinstance(ev, Partial) and target is not None:
            self.metrics.child(self.metrics.backlog, target.stream_class).observe(ev.backlog)
        if target is not None:
            target.on_event(ev)

    def broadcast(self, message: dict, droppable: bool = False) -> None:
        """A message for every ``/v1/events`` subscriber (those of the front processes too)."""
        for sub in list(self.subscribers):
            sub.send(message, droppable)
        if self.fronts is not None:
            self.fronts.broadcast(message, droppable)

    def streams_changed(self) -> None:
        """A stream started or ended: the gauge, and the memory given back once the last one is over."""
        n = self.stream_count() + len(self.mics)
        self.metrics.active_streams.set(n)
        if n == 0 and self._had_streams and self.batcher is not None:
            # the last stream ended: hand the freed buffers back to the OS (glibc keeps them otherwise)
            self._had_streams = False
            try:
                asyncio.get_running_loop().run_in_executor(self.executor, release_memory)  # one process heap
            except RuntimeError:  # the executor is shut down (the server is stopping): nothing to give back
                pass
        elif n:
            self._had_streams = True

    def stream_count(self) -> int:
        """Client streams that count toward ``limits.max_streams``: v1 + Vosk connections (the front processes'
        too), live Wyoming streams."""
        return len(self.conns) + (len(self.wyoming.streams) if self.wyoming is not None else 0) + \
            (self.fronts.count if self.fronts is not None else 0)

    async def metrics_text(self) -> bytes:
        """``GET /metrics``: this process's registry, or with front processes every process's summed."""
        if self.fronts is not None:
            return await self.fronts.render()
        return self.metrics.render()

    def new_key(self) -> int:
        """A fresh engine command key (one per stream; Wyoming connections take one per stream they run)."""
        return next(self._keys)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen, load the model (readyz 503 meanwhile), start the batcher; READY=1."""
        s = self.config.server
        ssl_ctx = make_ssl_context(self.config.tls)
        if s.wyoming_port is not None:
            check_wyoming_auth(s, self.tokens)  # before anything listens
        self.resource_errors.install()
        await self._listen(ssl_ctx)
        loop = asyncio.get_running_loop()
        runner = await self._load_engines(loop)
        if self.config.limits.max_load:  # admission by capacity: the step-time model, calibrated here now
            await self._calibrate(loop, runner)
        self.model_info = public_model_info(runner.model_info, s.show_model_paths)  # what clients see
        await self._start_second_pass(loop)
        self.batcher = Batcher(runner, self.executor, self._cycle_done)
        if self.admission.model is not None:
            self.batcher.observe = self.admission.model.add_step
        self._tasks.append(loop.create_task(self.batcher.run()))
        self.loading = False
        if self.fronts is not None:
            self.fronts.share_state()
            await self.fronts.wait_ready()
        if s.wyoming_port is not None:  # opens with the model loaded: describe answers at once
            from .wyoming_io import WyomingServer

            self.wyoming = WyomingServer(self)
            self.wyoming_port = await self.wyoming.start(s.host, s.wyoming_port)
        lm = runner.model_info.get("lm")
        log.info("ready: model %s on %s%s", self.model_info.get("name"), self.model_info.get("device"),
                 f" (modified_beam fuses the n-gram {lm['path']}, weight {lm['weight']})" if lm else "")
        self._log_page(s, ssl_ctx is not None)
        self.notifier.ready(f"ready on port {self.port}")
        self._start_watchdog(loop)
        if self.config.mic.enabled:
            if self.mic_factory is None:
                raise ConfigError("mic.enabled: no microphone capture available")
            self._mic_task = loop.create_task(run_mic(self, self.mic_factory))

    async def _listen(self, ssl_ctx: Any) -> None:
        """The main port (v1, Vosk and events websockets, the HTTP routes) and ``server.vosk_port``: served here,
        or with ``server.front_processes`` > 1 by the front processes (:meth:`_listen_fronts`)."""
        s = self.config.server
        if s.front_processes > 1:
            await self._listen_fronts()
            return
        common = websocket_options(self.config, ssl_ctx)
        main = await serve(self.handlers.connection, s.host, s.port, process_request=self.routes.main, **common)
        self.servers.append(main)
        self.port = main.sockets[0].getsockname()[1]
        scheme = "wss" if ssl_ctx else "ws"
        log.info("listening on %s://%s:%d (v1: %s, vosk: %s, events: %s)", scheme, s.host, self.port,
                 V1_PATH, VOSK_PATH, EVENTS_PATH)
        log.info("answering Host names: %s (server.allowed_hosts)", self.hosts.describe())
        if s.vosk_port is not None:
            vs = await serve(self.handlers.connection, s.host, s.vosk_port, process_request=self.routes.vosk, **common)
            self.servers.append(vs)
            self.vosk_port = vs.sockets[0].getsockname()[1]
            log.info("vosk listening on %s://%s:%d (every path)", scheme, s.host, self.vosk_port)

    async def _listen_fronts(self) -> None:
        """``server.front_processes`` > 1: the listening sockets bound here (port 0, a port in use: as with one
        process), served by the front processes (:mod:`.fronts`), which are up when this returns."""
        from .fronts import Fronts

        s = self.config.server
        loop = asyncio.get_running_loop()
        socks = []
        for port, name in ((s.port, "main"), (s.vosk_port, "vosk")):
            if port is None:
                continue
            srv = await loop.create_server(asyncio.Protocol, s.host, port, backlog=4096, start_serving=False)
            self.servers.append(srv)  # never serving here: it holds the sockets the fronts accept on
            for sock in srv.sockets:  # one per address of the host name (localhost: IPv4 and IPv6)
                socks.append((name, socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))))
            sock = srv.sockets[0]
            if name == "main":
                self.port = sock.getsockname()[1]
            else:
                self.vosk_port = sock.getsockname()[1]
        self.fronts = Fronts(self, s.front_processes)  # it keeps the sockets for the fronts it starts later
        await self.fronts.start(socks)
        log.info("listening on %s://%s:%d through %d front processes (v1: %s, vosk: %s, events: %s)%s",
                 "wss" if self.config.tls.cert else "ws", s.host, self.port, s.front_processes, V1_PATH, VOSK_PATH,
                 EVENTS_PATH, f"; vosk on port {self.vosk_port}" if self.vosk_port else "")
        log.info("answering Host names: %s (server.allowed_hosts)", self.hosts.describe())

    def _start_watchdog(self, loop: asyncio.AbstractEventLoop) -> None:
        """The systemd watchdog (WATCHDOG_USEC): pinged while no engine lane is stalled."""
        interval = watchdog_interval()
        if interval and self.notifier.enabled:
            self._tasks.append(loop.create_task(
                self.notifier.watchdog_loop(interval, lambda: not self._stalled(2 * interval))))

    def _log_page(self, s: Any, tls: bool) -> None:
        """Where the browser page is (``GET /`` on the main port); ``page_url`` names it for other hosts too
        (a wildcard listener by this host's name: the Wyoming attribution link)."""
        wildcard = s.host in ("", "0.0.0.0", "::")
        host = "localhost" if wildcard else s.host
        host = f"[{host}]" if ":" in host else host
        local = host in ("localhost", "127.0.0.1", "[::1]")
        scheme = "https" if tls else "http"
        log.info("page: %s://%s:%d/ (live transcription in a browser%s)", scheme, host,
                 self.port, "" if tls or local else "; browsers give the microphone only to https or localhost pages")
        self.page_url = f"{scheme}://{socket.gethostname() if wildcard else host}:{self.port}/"

    def _stalled(self, limit: float) -> bool:
        """An engine lane has been in one cycle longer than ``limit`` seconds (the systemd watchdog)."""
        return any(b is not None and b.stalled(limit) for b in (self.batcher, self.light))

    async def _watch_loop_lag(self, interval: float = 0.1) -> None:
        """How late this event loop wakes up (its own saturation: reading and answering every client), for the
        admission; and a log line when the capacity rules start or stop refusing, or another rule refuses (which
        one, in words: :data:`.admission.RULES`)."""
        refusing: str | None = None  # the rule refusing a greedy stream now
        while True:
            t = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.admission.note_loop_lag(max(0.0, now - t - interval), now)
            over = self.admission.overloaded(now)
            rule = over.rule if over is not None else None
            if rule != refusing:
                refusing = rule
                sig = self.admission.signals(now)
                log.info("admission: %s (%d streams, load %.2f of %.2f, scale %.2f, steps %.0f %% of the time, "
                         "loop lag %s, partial lag %s)",
                         f"refusing new streams, {over.rule}: {over.reason}" if over is not None
                         else "accepting new streams again", sig["streams"], sig.get("load", 0.0),
                         self.config.limits.max_load, sig.get("scale", 1.0), 100 * sig.get("busy", 0.0),
                         "n/a" if sig["loop_lag"] is None else f"{1000 * sig['loop_lag']:.0f} ms",
                         "n/a" if sig["late"] is None else f"{sig['late']:.2f} s")

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
