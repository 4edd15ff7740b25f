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
* this module: the :class:`App` that ties them together; :mod:`.serve`: the commands.

Threads and tasks
-----------------
* The event loop runs the websockets server (``websockets.asyncio.server``),
  one handler task per connection, and one sender task per connection that
  drains its bounded :class:`~.outbox.Outbox`.  It never calls the model.
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
import functools
import itertools
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from websockets.asyncio.server import Server, serve

from ..config import AppConfig, ConfigError
from ..events import Done, Error, Event, Final, Partial, WakeWord
from .admission import Admission, Refusal
from .auth import check_wyoming_auth, load_tokens
from .commands import CloseStream, Command, OpenStream
from .conn import Conn, MicStream, run_mic
from .drain import ThroughputWindow, cannot_finish_message, drain_plan, grace_over_message
from .exhaustion import ACCEPT_ERROR_LOG_SECONDS, RESOURCE_ERRNOS, ResourceErrors
from .guard import HostRule, RateLimitedLog
from .lane import LaneProcess, drop_shared_folder, shared_folder
from .metrics import Metrics
from .notify import Notifier, watchdog_interval
from .protocol import public_model_info
from .runner import Batcher, CycleResult, EngineRunner, RouteTarget, release_memory
from .settings import check_app_config, make_ssl_context, resolve_config
from .handlers import WsHandlers
from .routes import EVENTS_PATH, V1_PATH, VOSK_PATH, HttpRoutes
from .static import StaticFiles, default_web_root
from .supervisor import LaneSupervisor

if TYPE_CHECKING:
    from .wyoming_io import WyomingServer

# the App and what other code and tests import from here (their homes are the modules above)
__all__ = ["App", "CycleResult", "EngineRunner", "Conn", "MicStream", "resolve_config", "load_tokens",
           "make_ssl_context", "check_app_config", "default_web_root", "release_memory",
           "RESOURCE_ERRNOS", "ACCEPT_ERROR_LOG_SECONDS"]

log = logging.getLogger("streamd.server")

class App:
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
        self.loading = True
        self.draining = False
        self.model_info: dict = {}
        self.conns: dict[int, Conn] = {}
        self.conn_done: dict[int, asyncio.Event] = {}
        self.subscribers: set[Conn] = set()
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

    def _targets(self) -> dict[int, RouteTarget]:
        t: dict[int, RouteTarget] = dict(self.conns)
        t.update(self.mics)
        if self.wyoming is not None:
            t.update(self.wyoming.streams)
        return t

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
        for key, err in res.opened:
            if err is not None:
                self._ended(key)
            if key in targets:
                targets[key].on_opened(err)
        for key, ev in res.events:
            if self.second_gate is not None:  # a stream's events wait behind its final's second pass
                for k, e in self.second_gate.route(key, ev):
                    self._deliver(k, e, targets)
            else:
                self._deliver(key, ev, targets)
        for key, n in res.acks.items():
            if key in targets:
                targets[key].on_applied(n)
        for key, decoded in res.decoded.items():  # after the events: their results are queued first (flow)
            if key in targets:
                targets[key].on_progress(decoded)

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

    def _deliver(self, key: int, ev: Event, targets: dict[int, RouteTarget]) -> None:
        """One engine event of stream ``key`` to its target (the admission sees the stream end with it)."""
        if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
            self._ended(key)
        if isinstance(ev, WakeWord):
            self.metrics.wake_events.labels(ev.keyword).inc()
        elif isinstance(ev, Partial) and key in targets:
            self.metrics.backlog.labels(targets[key].stream_class).observe(ev.backlog)
        if key in targets:
            targets[key].on_event(ev)

    def broadcast(self, message: dict, droppable: bool = False) -> None:
        for sub in list(self.subscribers):
            sub.send(message, droppable)

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
        """Client streams that count toward ``limits.max_streams``: v1 + Vosk connections, live Wyoming streams."""
        return len(self.conns) + (len(self.wyoming.streams) if self.wyoming is not None else 0)

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
        """The main port (v1, Vosk and events websockets, the HTTP routes) and ``server.vosk_port``."""
        s, lim = self.config.server, self.config.limits
        common = dict(max_size=max(2 * lim.max_message_bytes, 2 * lim.max_text_bytes),
                      open_timeout=lim.open_timeout or None, ping_interval=s.ping_interval or None,
                      ping_timeout=s.ping_timeout or None, close_timeout=s.close_timeout, compression=None,
                      ssl=ssl_ctx)
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

    async def _load_engines(self, loop: asyncio.AbstractEventLoop) -> EngineRunner | LaneProcess:
        """The main engine (in its own process with ``server.engine_process``, else here) and the light lane's
        process beside it (the daemon is ready with both): the main engine's runner."""
        s, lim = self.config.server, self.config.limits
        lane = None
        path = self.model_path or getattr(getattr(self.rec, "loaded", None), "path", "")
        if lim.light_lane and path and self.rec is None and self.loader is None and s.engine_process:
            self._share_dir = shared_folder()  # two engine processes: one copy of their n-gram tables (.lane)
        if lim.light_lane and path:
            lane = loop.create_task(self._start_light_lane(str(path)))
        runner: EngineRunner | LaneProcess
        if self.rec is None and self.loader is None and s.engine_process and self.model_path:
            runner = await self._start_main_lane(loop)
        else:
            runner = await self._load_here(loop)
        if lane is not None:  # loaded before the calibration, which it would slow down
            await lane
        drop_shared_folder(self._share_dir)  # both have mapped what they share (restarted lanes load their own)
        self._share_dir = None
        return runner

    async def _start_main_lane(self, loop: asyncio.AbstractEventLoop) -> LaneProcess:
        """The main engine in a process of its own (``server.engine_process``), loaded and warmed up."""
        s = self.config.server
        log.info("loading model %s in the main engine's process", self.model_path)
        t0 = time.perf_counter()
        try:
            runner = await loop.run_in_executor(self.executor, self._main_lane_process)
        except RuntimeError as e:  # as if it had loaded here: the child's own error (CheckpointError, ...)
            if isinstance(e.__cause__, Exception):
                raise e.__cause__ from None
            raise
        self.main_supervisor.started(runner)
        log.info("main engine: process pid %s (policy %s, nice +%d), loaded and warmed up (%.1f s of audio) in "
                 "%.2f s", runner.pid, "normal" if runner.policy_error else s.engine_policy, s.engine_nice,
                 s.warmup_seconds, time.perf_counter() - t0)
        if runner.policy_error:
            log.warning("main engine: server.engine_policy %s not applied (%s); it runs at nice +%d",
                        s.engine_policy, runner.policy_error, s.engine_nice)
        return runner

    async def _load_here(self, loop: asyncio.AbstractEventLoop) -> EngineRunner:
        """The main engine in this process (the given Recognizer, or loaded in the engine thread), warmed up."""
        s, lim = self.config.server, self.config.limits
        if self.rec is None:
            loader = self.loader
            if loader is None:
                from ..engine import Recognizer

                log.info("loading model %s", self.model_path)
                loader = functools.partial(Recognizer.from_checkpoint, self.model_path, self.config.engine)
            self.rec = await loop.run_in_executor(self.executor, loader)
        if s.warmup_seconds > 0:
            t0 = time.perf_counter()
            await loop.run_in_executor(self.executor, self.rec.warm_up, s.warmup_seconds)
            log.info("warmed up (%.1f s of audio, every method) in %.2f s", s.warmup_seconds,
                     time.perf_counter() - t0)
        return await loop.run_in_executor(self.executor, EngineRunner, self.rec, s.max_steps_per_cycle,
                                          lim.max_backlog_seconds)

    async def _calibrate(self, loop: asyncio.AbstractEventLoop, runner: EngineRunner | LaneProcess) -> None:
        """Admission by capacity (``limits.max_load``): the step-time model, calibrated on this machine now, and
        the event loop's lag watched."""
        lim = self.config.limits
        model = await loop.run_in_executor(self.executor, runner.calibrate)
        self.admission.model = model
        self._tasks.append(loop.create_task(self._watch_loop_lag()))
        log.info("capacity: a batch step takes %.1f ms + %.2f ms per greedy stream here; about %d greedy "
                 "streams fit in limits.max_load (%g of a %.2f s chunk), fewer with beam searches",
                 1000 * model.fixed, 1000 * model.per_unit, model.budget(0.0, lim.max_load), lim.max_load,
                 model.chunk_seconds)

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

    async def _start_second_pass(self, loop: asyncio.AbstractEventLoop) -> None:
        """engine.second_pass: load its model (in its own process or beside the engine, ``worker``) and start
        its worker thread and gate."""
        spc = self.engine_config.second_pass
        if not spc.enabled:
            return
        from ..second_pass.process import second_pass_runner
        from ..second_pass.worker import FinalGate, SecondPassWorker

        t0 = time.perf_counter()
        calibrated = bool(self.model_info.get("calibrated"))
        second = self._second_given or await loop.run_in_executor(None, second_pass_runner, self.engine_config,
                                                                   calibrated)
        self.second_worker = SecondPassWorker(second, spc.max_queue, spc.max_batch, spc.max_wait_s)

        def done(key: Any, final: Final, seconds: float) -> None:  # in the worker thread
            loop.call_soon_threadsafe(self._second_done, key, final, seconds)

        self.second_gate = FinalGate(lambda key, final: self.second_worker.submit(key, final, done),
                                     on_skip=lambda key, final: self._second_outcome(final))
        self.model_info["second_pass"] = spc.model if self.config.server.show_model_paths or \
            not Path(spc.model).is_absolute() else Path(spc.model).name
        log.info("second pass: %s loaded in %.2f s (queue %d, wait <= %g s)", spc.model, time.perf_counter() - t0,
                 spc.max_queue, spc.max_wait_s)

    def _second_outcome(self, final: Final) -> None:
        self.metrics.second_pass.labels(final.second_pass or "none").inc()

    def _second_done(self, key: int, final: Final, seconds: float) -> None:
        """A second pass came back (event loop): count it, deliver it and what waited behind it."""
        self._second_outcome(final)
        if final.second_pass == "done":
            self.metrics.second_pass_seconds.observe(seconds)
        if self.second_gate is not None:
            for k, ev in self.second_gate.resolved(key, final):
                self._deliver(k, ev, self._targets())

    def _main_lane_process(self) -> LaneProcess:
        """The main engine's process (``server.engine_process``), loaded and warmed up (blocking: the engine
        thread)."""
        s, lim = self.config.server, self.config.limits
        return LaneProcess(str(self.model_path), self.config.engine, s.max_steps_per_cycle, lim.max_backlog_seconds,
                           s.warmup_seconds, name="main engine", nice=s.engine_nice,
                           policy=s.engine_policy, share_dir=self._share_dir)

    @staticmethod
    async def _in_thread(executor: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def _new_main_lane(self, old: LaneProcess) -> LaneProcess:
        """A new main engine process after ``old`` died (RuntimeError when it cannot start: tried again)."""
        return await self._in_thread(self.executor, self._main_lane_process)

    def _main_lane_died(self) -> None:
        """The main engine's process died (its streams have their errors): new streams get ``loading`` and
        ``/readyz`` 503 while its supervisor starts a new one (the capacity model stays the one calibrated at
        the start)."""
        self.loading = True

    def _install_main_lane(self, old: LaneProcess, lane: LaneProcess) -> None:
        lane.budget = old.budget
        self.batcher.runner = lane
        self.loading = False

    async def _start_light_lane(self, model_path: str) -> None:
        """The light lane (``limits.light_lane``, :mod:`.lane`): the same checkpoint and engine config in a
        child process, driven by a batcher of its own.  Its steps are not fed to the capacity model (the
        main lane's are); every stream still counts in the admission.  While its process is dead (its streams
        have their errors) every stream goes to the main engine; if a new one cannot start, the daemon goes on
        with one engine."""
        config = self.engine_config  # the main engine's
        self.light_executor = ThreadPoolExecutor(1, thread_name_prefix="streamd-light")
        lane = await self._new_lane(model_path, config)
        if lane is None:
            return
        self.light_supervisor.started(lane)
        self.light = Batcher(lane, self.light_executor, self._cycle_done)
        self._tasks.append(asyncio.get_running_loop().create_task(self.light.run()))
        self._lane_gauge()
        log.info("light lane: the only stream of a client (up to %g cost units of them) decodes in a second "
                 "engine process (pid %s)", self.config.limits.light_lane, lane.pid)

    async def _new_lane(self, model_path: str, config: Any) -> LaneProcess | None:
        """A light lane process, loaded (in the lane's thread), or None (logged: the main engine takes every
        stream)."""
        s, lim = self.config.server, self.config.limits
        try:
            return await self._in_thread(
                self.light_executor, functools.partial(LaneProcess, model_path, config, s.max_steps_per_cycle,
                                                       lim.max_backlog_seconds, min(s.warmup_seconds, 1.0),
                                                       share_dir=self._share_dir))
        except RuntimeError as e:
            log.error("%s; every stream goes to the main engine", e)
            return None

    def _install_light_lane(self, old: LaneProcess, lane: LaneProcess) -> None:
        self.light.runner = lane
        self._lane_gauge()

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
                c.perform(c.proto.fail("shutting_down", cannot_finish_message(left)))
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
                    c.perform(c.proto.fail("shutting_down", grace_over_message(grace)))
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
        if self.main_lane is not None:  # from the engine thread, after the cycle it may be in (one pipe writer)
            await self._close_lane(self.main_lane, self.executor)
        await asyncio.get_running_loop().run_in_executor(None, self.executor.shutdown)
        if self.light_lane is not None:  # from the lane's thread, after the cycle it may be in (one pipe writer)
            await self._close_lane(self.light_lane, self.light_executor)
        if self.light_executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.light_executor.shutdown)
        drop_shared_folder(self._share_dir)  # a start that failed while the engines loaded
        if self.second_worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.second_worker.close)
        self.notifier.close()
        self.resource_errors.restore()
        log.info("stopped")

    @staticmethod
    async def _close_lane(lane: LaneProcess, executor: ThreadPoolExecutor) -> None:
        """Close an engine process from its lane's thread (killed if that takes over 5 s)."""
        closing = asyncio.get_running_loop().run_in_executor(executor, lane.close)
        try:
            await asyncio.wait_for(asyncio.shield(closing), 5.0)
        except asyncio.TimeoutError:
            lane.kill()
            await closing

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
