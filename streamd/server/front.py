"""A front process (``server.front_processes`` > 1): it carries websocket connections for the daemon, whose
engine stays in the one engine process (:mod:`.fronts`, the daemon's main process).

A front accepts on the listening sockets the engine process handed it (every front accepts on the same
sockets; the kernel gives each connection to one of them), answers the HTTP routes (:mod:`.routes`) and runs
each connection's protocol session (:mod:`.handlers`, :mod:`.conn`) exactly as the daemon's own process does
with one front.  What a connection asks of the daemon goes over the front's :class:`~.front_link.Link`:

* its engine commands (open, audio, reset, finish, close);
* its admission: a stream's ``open`` is admitted or refused by the engine process (the daemon's one
  :class:`~.admission.Admission`: capacity, quotas), whose refusal comes back as the session's error; before
  a start message, a connection is checked against the last shared state (loading, draining, the streams of
  the whole daemon, the capacity rule for a greedy stream), which the engine process sends every
  :data:`STATE_EVERY` seconds and on every change;
* the partial lags and the event loop's lag it measures (the capacity rules);
* ``GET /metrics``: the engine process answers with every process's metrics summed.

The engine process's results (opened, refused, events, acknowledgements, progress) come back to the
connections by key; keys of front ``i`` are ``(i + 1) << KEY_SHIFT`` plus a count, so no two processes hand
out the same one.  A front ignores SIGINT and SIGTERM (a terminal's Ctrl-C and systemd signal every process of
the daemon): the engine process tells it to drain, and it exits once its connections have ended, or when the
engine process goes away.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any, Mapping

from websockets.asyncio.server import Server, serve

from ..config import AppConfig, from_dict
from .admission import Refusal
from .commands import CloseStream, Command, FeedPcm, FinishStream, OpenStream, ResetStream
from .conn import ConnTable, drain_conns
from .eventloop import run as run_event_loop
from .exhaustion import ACCEPT_ERROR_LOG_SECONDS, ResourceErrors
from .front_link import Link
from .guard import HostRule
from .handlers import WsHandlers
from .metrics import Metrics
from .routes import HttpRoutes
from .settings import make_ssl_context, websocket_options
from .static import StaticFiles, default_web_root

__all__ = ["FrontHost", "front_main", "KEY_SHIFT", "STATE_EVERY"]

log = logging.getLogger("streamd.server")

KEY_SHIFT = 40  # front i's stream keys: (i + 1) << KEY_SHIFT, + 1, + 2, ...
STATE_EVERY = 0.1  # seconds between the engine process's state records (and each front's loop-lag samples)


class FrontAdmission:
    """A front's view of the daemon's admission: the engine process decides (at a stream's open); before a
    start message the last shared state answers (:meth:`check`, :meth:`overloaded`: the capacity rule for
    one more greedy stream; the quotas are checked at the open); what the transport measures goes to the
    engine process."""

    def __init__(self, host: "FrontHost"):
        self.host = host
        self.over: Refusal | None = None  # the capacity rule for one more greedy stream, as last shared

    def check(self, now: float, cost: float, client: str | None = None, token: str | None = None) -> Refusal | None:
        return self.over

    def overloaded(self, now: float) -> Refusal | None:
        return self.over

    def note_audio(self, key: int, total_seconds: float, now: float) -> None:
        pass  # carried by the audio record itself (FrontHost.submit)

    def note_lag(self, key: int, lag: float, now: float) -> None:
        self.host.link.put(("lag", key, lag))


class FrontHost(ConnTable):
    """What the connections, the handlers and the HTTP routes of one front need of the daemon (the App's part
    that lives in every front: :class:`~.conn.ConnHost`, and what :class:`~.handlers.WsHandlers` and
    :class:`~.routes.HttpRoutes` read)."""

    def __init__(self, index: int, config: AppConfig, tokens: tuple[str, ...], link: Link):
        self.index = index
        self.config = config
        self.tokens = tokens
        self.link = link
        self.metrics = Metrics()
        self.admission = FrontAdmission(self)
        self.static = StaticFiles(Path(config.server.web_root) if config.server.web_root else default_web_root())
        self.routes = HttpRoutes(self)  # type: ignore[arg-type]
        self.handlers = WsHandlers(self)  # type: ignore[arg-type]
        self.hosts = HostRule.for_server(config.server.host, config.server.allowed_hosts)
        self.resource_errors = ResourceErrors(self.metrics, ACCEPT_ERROR_LOG_SECONDS)
        self._init_conn_table()
        self.mics: dict = {}  # the microphone is the engine process's
        self.mic_error: dict | None = None
        self.wyoming = None
        self.others = 0  # streams of the rest of the daemon (the engine process's count less this front's)
        self._keys = itertools.count(((index + 1) << KEY_SHIFT) + 1)
        self._opening: dict[int, tuple[str, str | None]] = {}  # key -> (client, token) admitted here, not yet sent
        self._lanes: dict[int, str] = {}  # key -> its engine lane (main, light)
        self._metrics_waits: dict[int, asyncio.Future] = {}
        self._req = itertools.count(1)
        self.servers: list[Server] = []
        self.drained = asyncio.Event()

    @property
    def engine_config(self) -> Any:
        return self.config.engine

    # ------------------------------------------------------------------ ConnHost

    def submit(self, cmd: Command) -> None:
        link = self.link
        if isinstance(cmd, FeedPcm):
            conn = self.conns.get(cmd.key)
            seconds = conn.proto.audio_seconds if conn is not None and conn.proto is not None else 0.0
            link.put(("audio", cmd.key, cmd.data, cmd.fmt, cmd.ack, seconds))
        elif isinstance(cmd, OpenStream):
            client, token = self._opening.pop(cmd.key, (cmd.client or "", None))
            conn = self.conns.get(cmd.key)
            link.put(("open", cmd.key, dict(cmd.options), client, token,
                      conn.stream_class if conn is not None else "v1"))
        elif isinstance(cmd, ResetStream):
            link.put(("reset", cmd.key))
        elif isinstance(cmd, FinishStream):
            link.put(("finish", cmd.key))
        elif isinstance(cmd, CloseStream):
            self._lanes.pop(cmd.key, None)
            link.put(("close", cmd.key))
        else:
            raise TypeError(f"a front process cannot submit {cmd!r}")

    def admit(self, key: int, options: Mapping[str, Any] | None, client: str, token: str | None = None
              ) -> Refusal | None:
        """Admitted by the engine process when the open arrives there (its refusal comes back as the session's
        error): nothing to refuse here."""
        self._opening[key] = (client, token)
        return None

    def new_key(self) -> int:
        return next(self._keys)

    def lane_of(self, key: int) -> str:
        return self._lanes.get(key, "main")

    def broadcast(self, message: dict, droppable: bool = False) -> None:
        for sub in list(self.subscribers):
            sub.send(message, droppable)

    def streams_changed(self) -> None:
        self.link.put(("conns", len(self.conns)))

    def stream_count(self) -> int:
        return self.others + len(self.conns)

    async def metrics_text(self) -> bytes:
        """``GET /metrics``: the whole daemon's, summed by the engine process over every process."""
        req = next(self._req)
        fut = self._metrics_waits[req] = asyncio.get_running_loop().create_future()
        self.link.put(("metrics", req))
        try:
            return await asyncio.wait_for(fut, 10.0)
        finally:
            self._metrics_waits.pop(req, None)

    # ------------------------------------------------------------------ the engine process's records

    def _opened(self, key: int, error: str | None, lane: str) -> None:
        conn = self.conns.get(key)
        if error is None:
            self._lanes[key] = lane
        if conn is not None:
            conn.on_opened(error)

    def _refused(self, key: int, code: str, message: str, retry_after: float) -> None:
        conn = self.conns.get(key)
        if conn is not None and conn.proto is not None:
            conn.perform(conn.proto.fail(code, message, {"retry_after": retry_after}))

    def _state(self, loading: bool, draining: bool, streams: int, mine: int, over: Refusal | None,
               model_info: dict, mic_error: dict | None) -> None:
        if self.loading and not loading:
            self.link.put(("ready",))  # the engine process says READY=1 once every front has this
        self.loading, self.model_info, self.mic_error = loading, model_info, mic_error
        self.draining = self.draining or draining
        self.others = max(0, streams - mine)
        self.admission.over = over

    def handle(self, batch: list[tuple]) -> None:
        """One batch of the engine process's records, in order."""
        conns = self.conns
        for rec in batch:
            kind = rec[0]
            if kind == "event":
                conn = conns.get(rec[1])
                if conn is not None:
                    conn.on_event(rec[2])
            elif kind == "progress":
                conn = conns.get(rec[1])
                if conn is not None:
                    conn.on_progress(rec[2])
            elif kind == "applied":
                conn = conns.get(rec[1])
                if conn is not None:
                    conn.on_applied(rec[2])
            elif kind == "opened":
                self._opened(*rec[1:])
            elif kind == "refused":
                self._refused(*rec[1:])
            elif kind == "state":
                self._state(*rec[1:])
            elif kind == "broadcast":
                self.broadcast(*rec[1:])
            elif kind == "collect":
                self.link.put(("families", rec[1], list(self.metrics.registry.collect())))
            elif kind == "metrics_text":
                fut = self._metrics_waits.get(rec[1])
                if fut is not None and not fut.done():
                    fut.set_result(rec[2])
            elif kind == "drain":
                asyncio.get_running_loop().create_task(self.drain(*rec[1:]))

    # ------------------------------------------------------------------ lifecycle

    async def listen(self, socks: list[tuple[str, Any]]) -> None:
        """Serve the listening sockets handed over ((``main`` or ``vosk``, socket) pairs: which routes)."""
        common = websocket_options(self.config, make_ssl_context(self.config.tls))
        for name, sock in socks:
            route = self.routes.main if name == "main" else self.routes.vosk
            self.servers.append(await serve(self.handlers.connection, sock=sock, process_request=route, **common))

    async def drain(self, grace: float, rate: float | None) -> None:
        """The engine process's drain: new streams refused, live ones finished within ``grace`` (as the daemon
        drains its own, :func:`~.conn.drain_conns`), the listeners closed; then ``drained``."""
        if self.draining and self.drained.is_set():
            return
        self.draining = True
        deadline = time.monotonic() + grace
        await drain_conns(self.conns, self.conn_done, rate, grace, deadline, self.config.server.close_timeout)
        for sub in list(self.subscribers):
            sub.outbox.close(1001, "shutting_down")
        await self.close_servers()
        self.link.put(("drained",))
        await self.link.drain()
        self.drained.set()

    async def close_servers(self) -> None:
        for srv in self.servers:
            srv.close()
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), self.config.server.close_timeout + 1)
            except asyncio.TimeoutError:
                log.warning("front %d: some connections did not close in time", self.index)

    async def watch_loop_lag(self) -> None:
        """How late this front's event loop wakes up: the engine process's admission takes the worst front's."""
        while True:
            t = time.monotonic()
            await asyncio.sleep(STATE_EVERY)
            self.link.put(("loop_lag", max(0.0, time.monotonic() - t - STATE_EVERY)))


async def _front(index: int, config: AppConfig, tokens: tuple[str, ...], socks: list[tuple[str, Any]],
                 link_sock: Any) -> None:
    link = await Link.open(link_sock)
    host = FrontHost(index, config, tokens, link)
    host.resource_errors.install()
    await host.listen(socks)
    link.put(("up", os.getpid()))
    lag = asyncio.get_running_loop().create_task(host.watch_loop_lag())
    try:
        async for batch in link.batches():
            host.handle(batch)
            if host.drained.is_set():
                break
    finally:
        lag.cancel()
        if not host.drained.is_set():  # the engine process went away: nothing can be decoded any more
            log.error("front %d: the engine process is gone; closing %d connections", index, len(host.conns))
            for conn in list(host.conns.values()):
                conn.abort("shutting_down", "the server's engine process is gone")
            await host.close_servers()
        link.close()
        host.resource_errors.restore()


def front_main(index: int, config_dict: dict, tokens: tuple[str, ...], socks: list[tuple[str, Any]],
               link_sock: Any) -> None:
    """A front process's entry point (``multiprocessing``, spawned by :class:`~.fronts.Fronts`): ``config_dict``
    the daemon's :class:`~streamd.config.AppConfig` as plain data (``to_dict``)."""
    config = from_dict(AppConfig, config_dict)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the engine process says when to drain
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=config.server.log_level.upper(),
                        format=f"%(asctime)s %(name)s[front {index}] %(levelname)s %(message)s")
    if config.server.log_level != "debug":
        logging.getLogger("websockets").setLevel(logging.WARNING)
    run_event_loop(_front(index, config, tokens, socks, link_sock), config.server.event_loop)
