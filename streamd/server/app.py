"""The daemon of ``streamd serve``: listeners, HTTP routes, the routing of engine results, lifecycle.

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
* Back on the loop, the cycle's results are routed (:meth:`App._route`): stream creations
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
import json
import logging
import math
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from ..config import AppConfig, ConfigError
from ..events import Done, Error, Event, Final, Partial, WakeWord
from .admission import Admission, Refusal
from .auth import RequestInfo, authorize, check_wyoming_auth, load_tokens
from .commands import CloseStream, Command, OpenStream
from .conn import Conn, MicStream, discard, run_mic
from .drain import ThroughputWindow, cannot_finish_message, drain_plan, grace_over_message
from .exhaustion import ACCEPT_ERROR_LOG_SECONDS, RESOURCE_ERRNOS, ResourceErrors
from .guard import BadRequest, HostRule, RateLimitedLog, check_request
from .lane import LaneProcess, drop_shared_folder, shared_folder
from .metrics import CONTENT_TYPE, Metrics
from .notify import Notifier, watchdog_interval
from .protocol import CLOSE_CODES, V1Session, public_model_info
from .runner import Batcher, CycleResult, EngineRunner, RouteTarget, release_memory
from .settings import check_app_config, make_ssl_context, resolve_config
from .static import StaticFiles, content_type, default_web_root
from .vosk import VoskSession

if TYPE_CHECKING:
    from .wyoming_io import WyomingServer

# the App and what other code and tests import from here (their homes are the modules above)
__all__ = ["App", "CycleResult", "EngineRunner", "Conn", "MicStream", "resolve_config", "load_tokens",
           "make_ssl_context", "check_app_config", "default_web_root", "release_memory",
           "RESOURCE_ERRNOS", "ACCEPT_ERROR_LOG_SECONDS"]

log = logging.getLogger("streamd.server")
# a dead light lane is started again after 2 s, doubling (up to 5 min) while each lane dies within a minute
LANE_RESTART_DELAY, LANE_RESTART_MAX, LANE_STABLE = 2.0, 300.0, 60.0


def restart_delay(quick_deaths: int) -> float:
    """Seconds before a dead engine process is started again: :data:`LANE_RESTART_DELAY`, doubled for each
    process in a row that died within :data:`LANE_STABLE` of its start (``quick_deaths``), at most
    :data:`LANE_RESTART_MAX`."""
    return min(LANE_RESTART_MAX, LANE_RESTART_DELAY * 2 ** max(0, quick_deaths - 1))


def after_death(started: float, quick_deaths: int) -> tuple[int, float]:
    """An engine process started at ``started`` (monotonic) died now, after ``quick_deaths`` quick deaths in a
    row: the new count (0 when it had lived :data:`LANE_STABLE` or longer) and its :func:`restart_delay`."""
    n = quick_deaths + 1 if time.monotonic() - started < LANE_STABLE else 0
    return n, restart_delay(n)


V1_PATH, VOSK_PATH, EVENTS_PATH = "/v1/stream", "/vosk", "/v1/events"
PROBE_PATHS = ("/healthz", "/readyz")  # answered whatever the Host (load balancers probe by any name)


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
        self.main_lane: LaneProcess | None = None  # the main engine's process (server.engine_process), or None
        self._main_restart: asyncio.Task | None = None  # a new main engine process after the last one died
        self._main_started = 0.0
        self._main_quick_deaths = 0
        # the light lane (limits.light_lane): a second engine in a child process (.lane), fed by its batcher
        self.light: Batcher | None = None
        self.light_lane: LaneProcess | None = None
        self.light_executor: ThreadPoolExecutor | None = None
        self._light_keys: set[int] = set()  # streams in the light lane
        self._lane_restart: asyncio.Task | None = None  # a new lane process after the last one died
        self._lane_started = 0.0  # monotonic start of the current lane process
        self._lane_quick_deaths = 0  # lanes in a row that died within LANE_STABLE of their start
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

    def _route(self, res: CycleResult) -> None:
        targets = self._targets()
        now = time.monotonic()
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
        main = self.main_lane
        if main is not None and not main.alive and self._main_restart is None and not self.draining:
            self._main_restart = asyncio.get_running_loop().create_task(self._restart_main_lane())
            self._tasks.append(self._main_restart)
        lane = self.light_lane
        if lane is not None and not lane.alive and self._lane_restart is None and not self.draining:
            self._lane_gauge()
            self._lane_restart = asyncio.get_running_loop().create_task(self._restart_light_lane())
            self._tasks.append(self._lane_restart)

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
        peer = conn.remote_address
        conn.streamd = authorize(route, request.path, request.headers,  # type: ignore[attr-defined]
                                 str(peer[0]) if peer else "", self.tokens, self.config.auth.allowed_origins)
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
        file = self.static.find(path)
        if file is None:
            return conn.respond(404, f"not found: {path}\n")
        try:
            body = await asyncio.to_thread(file.read_bytes)
        except OSError as e:  # e.g. out of file descriptors: an answer, not a traceback
            self.resource_errors.report("reading a static file", e)
            return conn.respond(503, f"cannot read {path}: {e.strerror or e}\n")
        return self._respond(conn, 200, body, content_type(file.name))

    async def _vosk_http(self, conn: ServerConnection, request: Request) -> Response | None:
        """process_request of the Vosk port: every path is the Vosk protocol (after the header checks)."""
        try:
            check_request(request.method, request.path, request.headers, self.hosts)
            return self._ws_request(conn, request, "vosk")
        except BadRequest as e:
            return self._bad_request(conn, request, e)

    # ------------------------------------------------------------------ websocket handlers

    def _refusal(self, info: RequestInfo, count: int) -> tuple[str, str] | tuple[str, str, dict] | None:
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
        info: RequestInfo = getattr(ws, "streamd", RequestInfo("vosk", False))
        self.metrics.connections.labels(info.route).inc()
        if info.route == "events":
            await self._serve_events(ws, info)
            return
        refusal = self._refusal(info, self.stream_count())
        if refusal:
            await self._refuse(ws, *refusal)
            return
        key = self.new_key()
        if info.route == "v1":
            dec = self.engine_config.decoding
            proto: V1Session | VoskSession = V1Session(secrets.token_hex(8), self.config.limits, self.model_info,
                                                       dec.method, dec.beam)
        else:
            proto = VoskSession(self.config.limits, self.config.server.vosk_sample_rate,
                                self.engine_config.decoding.beam)
        conn = Conn(self, ws, key, proto)
        self.conns[key] = conn
        done = self.conn_done[key] = asyncio.Event()
        self.streams_changed()
        conn.start()
        try:
            if await conn.read_loop():
                # input is over (eof, error, draining): keep reading and discarding, or a client that is
                # still sending would block the closing handshake until close_timeout
                rest = asyncio.ensure_future(discard(ws))
                await asyncio.wait({conn.sender, rest}, return_when=asyncio.FIRST_COMPLETED)
                rest.cancel()
        finally:
            if not conn.sender.done():
                conn.sender.cancel()
            self.submit(CloseStream(key))
            del self.conns[key]
            self.conn_done.pop(key, None)
            done.set()
            self.streams_changed()

    async def _serve_events(self, ws: ServerConnection, info: RequestInfo) -> None:
        refusal = self._refusal(info, len(self.subscribers))
        if refusal is None and not self.config.mic.enabled:
            refusal = ("no_mic", "no microphone stream: start the server with --mic (mic.enabled)")
        if refusal:
            await self._refuse(ws, *refusal)
            return
        sub = Conn(self, ws, -1, None)
        self.subscribers.add(sub)
        sub.start()
        if self.mic_error is not None:  # a broken microphone: every subscriber hears why, not only the first
            sub.send(self.mic_error)
        try:
            async for _ in ws:  # server-to-client only: client messages are ignored
                pass
        except ConnectionClosed:
            pass
        finally:
            self.subscribers.discard(sub)
            if not sub.sender.done():
                sub.sender.cancel()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen, load the model (readyz 503 meanwhile), start the batcher; READY=1."""
        cfg = self.config
        s, lim = cfg.server, cfg.limits
        ssl_ctx = make_ssl_context(cfg.tls)
        if s.wyoming_port is not None:
            check_wyoming_auth(s, self.tokens)  # before anything listens
        common = dict(max_size=max(2 * lim.max_message_bytes, 2 * lim.max_text_bytes),
                      open_timeout=lim.open_timeout or None, ping_interval=s.ping_interval or None,
                      ping_timeout=s.ping_timeout or None, close_timeout=s.close_timeout, compression=None,
                      ssl=ssl_ctx)
        self.resource_errors.install()
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
        lane = None  # the light lane's process loads beside the main engine (the daemon is ready with both)
        path = self.model_path or getattr(getattr(self.rec, "loaded", None), "path", "")
        if lim.light_lane and path and self.rec is None and self.loader is None and s.engine_process:
            self._share_dir = shared_folder()  # two engine processes: one copy of their n-gram tables (.lane)
        if lim.light_lane and path:
            lane = loop.create_task(self._start_light_lane(str(path)))
        runner: EngineRunner | LaneProcess
        if self.rec is None and self.loader is None and s.engine_process and self.model_path:
            log.info("loading model %s in the main engine's process", self.model_path)
            t0 = time.perf_counter()
            try:
                runner = self.main_lane = await loop.run_in_executor(self.executor, self._new_main_lane)
            except RuntimeError as e:  # as if it had loaded here: the child's own error (CheckpointError, ...)
                if isinstance(e.__cause__, Exception):
                    raise e.__cause__ from None
                raise
            self._main_started = time.monotonic()
            log.info("main engine: process pid %s (policy %s, nice +%d), loaded and warmed up (%.1f s of audio) in "
                     "%.2f s", runner.pid, "normal" if runner.policy_error else s.engine_policy, s.engine_nice,
                     s.warmup_seconds, time.perf_counter() - t0)
            if runner.policy_error:
                log.warning("main engine: server.engine_policy %s not applied (%s); it runs at nice +%d",
                            s.engine_policy, runner.policy_error, s.engine_nice)
        else:
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
                log.info("warmed up (%.1f s of audio, every method) in %.2f s", s.warmup_seconds,
                         time.perf_counter() - t0)
            runner = await loop.run_in_executor(self.executor, EngineRunner, self.rec, s.max_steps_per_cycle,
                                                lim.max_backlog_seconds)
        if lane is not None:  # loaded before the calibration below, which it would slow down
            await lane
        drop_shared_folder(self._share_dir)  # both have mapped what they share (restarted lanes load their own)
        self._share_dir = None
        if lim.max_load:  # admission by capacity: the step-time model, calibrated on this machine now
            model = await loop.run_in_executor(self.executor, runner.calibrate)
            self.admission.model = model
            self._tasks.append(loop.create_task(self._watch_loop_lag()))
            log.info("capacity: a batch step takes %.1f ms + %.2f ms per greedy stream here; about %d greedy "
                     "streams fit in limits.max_load (%g of a %.2f s chunk), fewer with beam searches",
                     1000 * model.fixed, 1000 * model.per_unit, model.budget(0.0, lim.max_load), lim.max_load,
                     model.chunk_seconds)
        self.model_info = public_model_info(runner.model_info, s.show_model_paths)  # what clients see
        await self._start_second_pass(loop)
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
        self._log_page(s, ssl_ctx is not None)
        self.notifier.ready(f"ready on port {self.port}")
        interval = watchdog_interval()
        if interval and self.notifier.enabled:
            self._tasks.append(loop.create_task(
                self.notifier.watchdog_loop(interval, lambda: not self._stalled(2 * interval))))
        if cfg.mic.enabled:
            if self.mic_factory is None:
                raise ConfigError("mic.enabled: no microphone capture available")
            self._mic_task = loop.create_task(run_mic(self, self.mic_factory))

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

    def _new_main_lane(self) -> LaneProcess:
        """The main engine's process (``server.engine_process``), loaded and warmed up (blocking: the engine
        thread)."""
        s, lim = self.config.server, self.config.limits
        return LaneProcess(str(self.model_path), self.config.engine, s.max_steps_per_cycle, lim.max_backlog_seconds,
                           s.warmup_seconds, name="main engine", nice=s.engine_nice,
                           policy=s.engine_policy, share_dir=self._share_dir)

    async def _restart_main_lane(self) -> None:
        """The main engine's process died (its streams have their errors): new streams get ``loading`` and
        ``/readyz`` 503 while a new one starts, after a delay as for the light lane
        (:meth:`_restart_light_lane`); the capacity model stays the one calibrated at the start."""
        self.loading = True
        self._main_quick_deaths, delay = after_death(self._main_started, self._main_quick_deaths)
        log.info("main engine: starting a new engine process in %g s", delay)
        await asyncio.sleep(delay)
        loop = asyncio.get_running_loop()
        old = self.main_lane
        await loop.run_in_executor(self.executor, old.close)
        while not self.draining:
            try:
                lane = await loop.run_in_executor(self.executor, self._new_main_lane)
            except RuntimeError as e:
                self._main_quick_deaths += 1
                delay = restart_delay(self._main_quick_deaths)
                log.error("%s; trying again in %g s", e, delay)
                await asyncio.sleep(delay)
                continue
            if self.draining:
                await loop.run_in_executor(self.executor, lane.close)
                return
            lane.budget = old.budget
            self.main_lane = self.batcher.runner = lane
            self._main_started = time.monotonic()
            self._main_restart = None
            self.loading = False
            log.info("main engine: a new engine process (pid %s)", lane.pid)
            return

    async def _start_light_lane(self, model_path: str) -> None:
        """The light lane (``limits.light_lane``, :mod:`.lane`): the same checkpoint and engine config in a
        child process, driven by a batcher of its own.  Its steps are not fed to the capacity model (the
        main lane's are); every stream still counts in the admission."""
        config = self.engine_config  # the main engine's
        self.light_executor = ThreadPoolExecutor(1, thread_name_prefix="streamd-light")
        lane = await self._new_lane(model_path, config)
        if lane is None:
            return
        self.light_lane = lane
        self.light = Batcher(lane, self.light_executor, self._route)
        self._tasks.append(asyncio.get_running_loop().create_task(self.light.run()))
        self._lane_started = time.monotonic()
        self._lane_gauge()
        log.info("light lane: the only stream of a client (up to %g cost units of them) decodes in a second "
                 "engine process (pid %s)", self.config.limits.light_lane, lane.pid)

    async def _new_lane(self, model_path: str, config: Any) -> LaneProcess | None:
        """A light lane process, loaded (in the lane's thread), or None (logged: the main engine takes every
        stream)."""
        s, lim = self.config.server, self.config.limits
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.light_executor, functools.partial(LaneProcess, model_path, config, s.max_steps_per_cycle,
                                                       lim.max_backlog_seconds, min(s.warmup_seconds, 1.0),
                                                       share_dir=self._share_dir))
        except RuntimeError as e:
            log.error("%s; every stream goes to the main engine", e)
            return None

    async def _restart_light_lane(self) -> None:
        """The lane's process died (its streams have their errors): start a new one after
        :data:`LANE_RESTART_DELAY`, doubled for each lane in a row that died within :data:`LANE_STABLE` of
        its start (meanwhile every stream goes to the main engine); if it cannot start, the daemon goes on
        with one engine."""
        self._lane_quick_deaths, delay = after_death(self._lane_started, self._lane_quick_deaths)
        log.info("light lane: starting a new engine process in %g s", delay)
        await asyncio.sleep(delay)
        old, loop = self.light_lane, asyncio.get_running_loop()
        await loop.run_in_executor(self.light_executor, old.close)
        lane = await self._new_lane(old.model_path, old.config)
        if lane is None:
            return
        if self.draining:
            await loop.run_in_executor(self.light_executor, lane.close)
            return
        self.light_lane = self.light.runner = lane
        self._lane_started = time.monotonic()
        self._lane_restart = None
        self._lane_gauge()
        log.info("light lane: a new engine process (pid %s)", lane.pid)

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
