"""asyncio transport of the Wyoming listener (``server.wyoming_port``, ``streamd serve --wyoming-port``).

Thin I/O around :class:`streamd.server.wyoming.WyomingSession`: a TCP server
(``asyncio.start_server``), one :class:`WyomingConn` per connection that reads
events with the ``wyoming`` package's :func:`~wyoming.event.async_read_event`,
writes them with :func:`~wyoming.event.async_write_event` from a bounded
outbox (:class:`streamd.server.outbox.Outbox`), keeps the session's timers (idle
timeout, minimum audio rate) and turns its actions into the same engine
commands as the websocket connections (:mod:`streamd.server.commands`), so
Wyoming streams share the engine, its batches, ``limits.max_streams`` and the
metrics (``stream_class`` / ``route`` label ``wyoming``).  What it needs of the
daemon is :class:`WyomingHost` (a structural type the App satisfies).

Reading guards what the package's reader does not: the header line is bounded
by ``limits.max_text_bytes``, ``data_length`` by ``max_text_bytes`` and
``payload_length`` by ``max_message_bytes`` (an over-size frame is read and
thrown away, then reported as ``too_large``), and an unreadable event (not
JSON, no ``type``) is reported as ``bad_event`` while the connection goes on.

Wyoming has no authentication and no TLS: :func:`.auth.check_wyoming_auth` refuses
to open the port on a non-loopback address when the websocket ports require
tokens, since it would let anyone around them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Protocol

from wyoming.event import Event as WyomingEvent
from wyoming.event import async_read_event, async_write_event

from .. import __version__
from ..events import Done, Error, Event
from .auth import check_wyoming_auth  # noqa: F401 - its home until auth.py; still importable here
from .commands import CloseStream, Command, FeedPcm, FinishStream, OpenStream
from .drain import grace_over_message
from .flow import FlowControl
from .outbox import Outbox, wait_while
from .protocol import Action, Audio, Close, Finish, Open, Send
from .wyoming import Discard, WyomingSession

if TYPE_CHECKING:
    from ..config import AppConfig
    from .metrics import Metrics

__all__ = ["WyomingHost", "WyomingServer", "WyomingConn", "check_wyoming_auth"]

log = logging.getLogger("streamd.server.wyoming")

_SKIP_PIECE = 1 << 16  # bytes read at a time when throwing an over-size frame away


class WyomingHost(Protocol):
    """What the Wyoming listener needs of the daemon (:class:`~streamd.server.app.App`)."""

    config: AppConfig
    metrics: Metrics
    model_info: dict  # what describe reports (read at every describe)
    draining: bool

    @property
    def default_method(self) -> str: ...  # the search a stream gets (transcript streaming needs an append-only one)

    def submit(self, cmd: Command) -> None: ...

    def new_key(self) -> int: ...

    def stream_count(self) -> int: ...

    def capacity_refusal(self) -> tuple[str, str] | None: ...

    def streams_changed(self) -> None: ...


class _TooLarge(Exception):
    """A frame over a size limit (already read and thrown away)."""


class _Malformed(Exception):
    """An event that could not be read (not JSON, not an object, no type, ...)."""


class _GuardedReader:
    """What :func:`async_read_event` reads from: the connection's reader, with the sizes the header line
    announces checked before the data and payload are read (``readline`` / ``readexactly`` are all it uses)."""

    def __init__(self, reader: asyncio.StreamReader, max_data: int, max_payload: int):
        self.reader = reader
        self.max_data = max_data
        self.max_payload = max_payload

    async def readline(self) -> bytes:
        line = await self.reader.readline()
        try:
            head = json.loads(line)
        except (ValueError, RecursionError):
            return line  # the package's reader reports it (None), see _read_event
        if not isinstance(head, dict):
            return line
        sizes = [head.get("data_length"), head.get("payload_length")]
        sizes = [n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0 for n in sizes]
        over = [f"{what} {n} exceeds {name} ({limit})" for what, n, name, limit in
                (("data_length", sizes[0], "max_text_bytes", self.max_data),
                 ("payload_length", sizes[1], "max_message_bytes", self.max_payload)) if n > limit]
        if over:
            left = sum(sizes)
            while left > 0:
                left -= len(await self.reader.readexactly(min(left, _SKIP_PIECE)))
            raise _TooLarge(f"{head.get('type', 'event')!s:.40}: {'; '.join(over)}")
        return line

    async def readexactly(self, n: int) -> bytes:
        return await self.reader.readexactly(n)


async def _read_event(guarded: _GuardedReader) -> WyomingEvent | None:
    """The next event, None at the end of the connection; _Malformed / _TooLarge for an unreadable one."""
    try:
        event = await async_read_event(guarded)  # type: ignore[arg-type]
    except (KeyError, TypeError, AttributeError) as e:  # JSON, but no "type", not an object, bad lengths
        raise _Malformed(f"unreadable event header ({type(e).__name__}: {e}); expected a JSON object with "
                         "a 'type' on one line") from None
    if event is None and not guarded.reader.at_eof():
        raise _Malformed("event is not valid JSON (or its header line is longer than max_text_bytes)")
    return event


class WyomingConn:
    """One Wyoming TCP client: session, outbox, sender task, and the engine key of its live stream."""

    stream_class = "wyoming"  # streamd_backlog_seconds label

    def __init__(self, server: "WyomingServer", reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.app = server.app
        self.reader = reader
        self.writer = writer
        app = self.app
        self.proto = WyomingSession(app.config.limits, lambda: app.model_info, __version__, app.default_method,
                                    url=app.page_url)
        self.outbox = Outbox(app.config.limits.outbox_messages)
        self.key: int | None = None  # engine key of the live stream
        self.sender: asyncio.Task | None = None
        self.aborted = False
        self.done = asyncio.Event()
        self.flow = FlowControl.from_limits(app.config.limits)  # when its input is not read (.flow)
        self.flow_changed = asyncio.Event()  # engine progress, or the connection aborted

    async def held(self) -> float:
        """Wait while flow control holds this connection's input (:mod:`.flow`); the seconds waited."""
        proto = self.proto
        waited = await wait_while(lambda: self.flow.hold(proto.backlog) and not self.aborted and not proto.closed
                                  and self.sender is not None and not self.sender.done(), self.flow_changed)
        self.app.metrics.flow_held.labels(self.stream_class).inc(waited)
        return waited

    def start(self) -> None:
        self.sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def _send_loop(self) -> None:
        try:
            await self.outbox.pump(lambda item: async_write_event(
                WyomingEvent(type=item["type"], data=item.get("data") or {}), self.writer), self._delivered)
        except (ConnectionError, OSError):
            return
        finally:
            self.writer.close()

    def _delivered(self) -> None:
        """Once every event queued so far is in the socket, the token bucket gets the decoded audio back."""
        if self.outbox.drained:
            self.proto.delivered()

    def send(self, message: dict) -> None:
        if message.get("type") == "error":
            self.app.metrics.errors.labels((message.get("data") or {}).get("code", "?")).inc()
        if not self.outbox.put(message):  # type: ignore[arg-type]  (events, not text frames)
            self.abort("slow_consumer", f"client is not reading: {self.outbox.capacity} events queued")

    def abort(self, code: str, message: str) -> None:
        """Disconnect at once (slow reader): the sender may be stuck writing to this client."""
        if self.aborted:
            return
        self.aborted = True
        self.flow_changed.set()
        log.warning("closing wyoming connection: %s", message)
        self.app.metrics.errors.labels(code).inc()
        self.proto.connection_lost()
        self._drop_stream()
        if self.sender is not None:
            self.sender.cancel()
        self.writer.close()

    def perform(self, actions: list[Action]) -> None:
        """Execute the session's actions, in order."""
        app = self.app
        for a in actions:
            if self.aborted:
                return
            if isinstance(a, Send):
                self.send(a.message)
            elif isinstance(a, Open):
                refusal = self.server.refusal()
                if refusal is not None:
                    self.perform(self.proto.open_refused(*refusal))
                    continue
                self.key = app.new_key()
                self.server.streams[self.key] = self
                app.submit(OpenStream(self.key, a.options))
                app.streams_changed()
            elif isinstance(a, Audio):
                if self.key is not None:
                    app.submit(FeedPcm(self.key, a.data, a.fmt))
            elif isinstance(a, Finish):
                if self.key is not None:
                    app.submit(FinishStream(self.key))
            elif isinstance(a, Discard):
                self._drop_stream()
            elif isinstance(a, Close):
                self._drop_stream()
                self.outbox.close(a.code, a.reason)

    def _drop_stream(self, engine_closed: bool = False) -> None:
        key, self.key = self.key, None
        if key is None:
            return
        self.server.streams.pop(key, None)
        if not engine_closed:
            self.app.submit(CloseStream(key))
        self.app.streams_changed()

    # route targets for engine results (App._route)
    def on_opened(self, error: str | None) -> None:
        self.perform(self.proto.opened(error))

    def on_event(self, ev: Event) -> None:
        key = self.key
        self.perform(self.proto.event(ev))
        if (isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal)) and self.key == key:
            self._drop_stream(engine_closed=True)  # the engine has ended that stream

    def on_applied(self, n: int) -> None:
        pass

    def on_progress(self, decoded: float) -> None:
        self.proto.progress(decoded)
        self._delivered()
        self.flow_changed.set()


class WyomingServer:
    """The Wyoming listener of an :class:`~streamd.server.app.App`; ``streams`` maps the engine key of every
    live Wyoming stream to its connection (the App routes engine results through it)."""

    def __init__(self, app: WyomingHost):
        self.app = app
        self.streams: dict[int, WyomingConn] = {}
        self.conns: set[WyomingConn] = set()
        self.draining = False
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        lim = self.app.config.limits
        self._server = await asyncio.start_server(self._handle, host, port, limit=max(lim.max_text_bytes, 1024))
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("wyoming listening on tcp://%s:%d", host, self.port)
        return self.port

    def refusal(self) -> tuple[str, str] | None:
        """Why a new stream cannot open now (None: it can)."""
        app = self.app
        if self.draining or app.draining:
            return ("shutting_down", "server is shutting down; no new streams")
        limit = app.config.limits.max_streams
        if app.stream_count() >= limit:
            return ("too_many_streams", f"server is at its limit of {limit} concurrent streams; try again later")
        return app.capacity_refusal()  # at capacity (limits.max_load): overloaded

    def drain(self) -> list[asyncio.Event]:
        """Stop accepting; finish every stream being fed (results sent), close idle connections.
        Returns what to wait for: each connection's end."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns):
            conn.perform(conn.proto.shutdown())
        return [c.done for c in self.conns]

    async def close(self) -> None:
        """Close the listener and what is left (after the grace period): a stream still live gets a
        ``shutting_down`` error; a connection that does not take it within a short wait is cut."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns):
            if conn.proto.stream_live:
                conn.perform(conn.proto.fail("shutting_down", grace_over_message()))
            else:
                conn.perform(conn.proto.shutdown())
        waits = [asyncio.ensure_future(c.done.wait()) for c in self.conns]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=min(self.app.config.server.close_timeout, 2.0))
            for w in pending:
                w.cancel()
        for conn in list(self.conns):
            conn.abort("shutting_down", "server stopped")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        app = self.app
        app.metrics.connections.labels("wyoming").inc()
        conn = WyomingConn(self, reader, writer)
        self.conns.add(conn)
        conn.start()
        try:
            if self.draining:
                conn.perform(conn.proto.shutdown())
            if await self._read_loop(conn):
                conn.perform(conn.proto.client_eof())
            if conn.sender is not None and not conn.aborted:
                await conn.sender  # everything queued goes out (a result still owed first)
        except Exception:  # noqa: BLE001 - a bug must not take the listener down
            log.exception("wyoming connection failed")
        finally:
            conn.proto.connection_lost()
            conn._drop_stream()
            if conn.sender is not None and not conn.sender.done():
                conn.sender.cancel()
            writer.close()
            self.conns.discard(conn)
            conn.done.set()

    async def _read_loop(self, conn: WyomingConn) -> bool:
        """Feed events to the session until it closes; True when the client ended the connection."""
        lim = self.app.config.limits
        guarded = _GuardedReader(conn.reader, lim.max_text_bytes, lim.max_message_bytes)
        proto = conn.proto
        read: asyncio.Future | None = None
        last = time.monotonic()
        try:
            while not proto.closed and not conn.aborted:
                if read is None:
                    if conn.flow.hold(proto.backlog):  # flow control: the server's wait, not the client's
                        paused = await conn.held()
                        last += paused
                        proto.pause(paused)
                        continue
                    read = asyncio.ensure_future(_read_event(guarded))
                now = time.monotonic()
                waits = []
                if proto.expects_input and lim.idle_timeout:
                    waits.append(last + lim.idle_timeout)
                due = proto.deadline()
                if due is not None:
                    waits.append(due)
                # no timer running (the answer is owed): look again after idle_timeout, as the answer may
                # have come meanwhile and the client's idle time counts from its last event
                timeout = max(0.0, min(waits) - now) if waits else (lim.idle_timeout or None)
                done, _ = await asyncio.wait({read, conn.sender}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    if conn.sender in done:
                        return False  # the sender ended (closed or the client is gone)
                    now = time.monotonic()
                    if due is not None and now >= due:
                        conn.perform(proto.tick(now))
                    elif proto.expects_input and lim.idle_timeout and now >= last + lim.idle_timeout:
                        conn.perform(proto.timeout())
                    continue
                task, read = read, None
                last = time.monotonic()
                try:
                    event = task.result()
                except _TooLarge as e:
                    conn.perform(proto.frame_error("too_large", str(e)))
                    continue
                except _Malformed as e:
                    conn.perform(proto.frame_error("bad_event", str(e)))
                    continue
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    return True
                if event is None:
                    return True
                conn.perform(proto.receive(event, last))
            return False
        finally:
            if read is not None and not read.done():
                read.cancel()
