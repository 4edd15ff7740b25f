"""The connection side of ``streamd serve`` (event loop): one object per stream source.

* :class:`Conn`: one websocket client (``/v1/stream``, ``/vosk``, or a ``/v1/events`` subscriber): its
  sans-I/O protocol session (:mod:`.protocol`, :mod:`.vosk`), its bounded :class:`~.outbox.Outbox` (written
  once per turn of the event loop, and by the sender task when the transport is full), its messages handed
  to the session as they are read (:class:`~.wsconn.DirectConnection`'s sink) with the session's timers and
  flow control, and the translation of the session's actions into engine :mod:`.commands`;
* :class:`MicStream` and :func:`run_mic`: the daemon's own microphone as one engine stream whose events
  go to every ``/v1/events`` subscriber.

Both are route targets of the daemon (:class:`~.runner.RouteTarget`: ``on_opened``, ``on_event``,
``on_applied``).  What they need of the daemon is :class:`ConnHost` (a structural type the
:class:`~.app.App` satisfies): this module never imports the App.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Mapping, MutableMapping, Protocol, Sequence

import numpy as np
from websockets.asyncio.server import ServerConnection  # (a .wsconn.DirectConnection where the daemon serves)
from websockets.exceptions import ConnectionClosed

from ..events import Done, Error, Event, Partial
from .commands import CloseStream, Command, FeedPcm, FeedSamples, FinishStream, OpenStream, ResetStream
from .drain import cannot_finish_message, drain_plan, grace_over_message
from .flow import FlowControl
from .outbox import Flusher, Outbox
from .protocol import CLOSE_CODES, Action, Audio, Close, Finish, Open, Reset, Send, V1Session
from .vosk import VoskSession

if TYPE_CHECKING:
    from ..config import AppConfig
    from .admission import Admission, Refusal
    from .metrics import Metrics

__all__ = ["ConnHost", "ConnTable", "Conn", "MicStream", "run_mic", "discard", "drain_conns", "FBANK_LOOKAHEAD_S"]

log = logging.getLogger("streamd.server")

FBANK_LOOKAHEAD_S = 0.015  # a partial ending at t needed the audio up to t + 15 ms (25 ms window, 10 ms hop)
FLOW_POLL = 1.0  # seconds between looks at a held connection's backlog when no engine progress wakes it


class ConnHost(Protocol):
    """What a connection or the microphone stream needs of the daemon (:class:`~.app.App`)."""

    config: AppConfig
    metrics: Metrics
    admission: Admission
    draining: bool
    mics: MutableMapping[int, MicStream]  # microphone streams not yet done
    mic_error: dict | None  # the microphone's error while it is failing: what a new /v1/events subscriber gets first
    flusher: Flusher  # writes the connections' outboxes once per turn of the event loop (:class:`.outbox.Flusher`)

    def submit(self, cmd: Command) -> None: ...

    def admit(self, key: int, options: Mapping[str, Any] | None, client: str,
              token: str | None = None) -> Refusal | None: ...

    def new_key(self) -> int: ...

    def lane_of(self, key: int) -> str: ...

    def broadcast(self, message: dict, droppable: bool = False) -> None: ...

    def streams_changed(self) -> None: ...


class ConnTable:
    """The connection state of a serving process (the daemon's :class:`~.app.App`, a front process), read and
    written by its handlers: whether it is loading or draining, the model's info, its connections, their
    done events and the ``/v1/events`` subscribers; :meth:`_init_conn_table` sets it up empty."""

    def _init_conn_table(self) -> None:
        self.loading = True
        self.draining = False
        self.model_info: dict = {}
        self.conns: dict[int, Conn] = {}
        self.conn_done: dict[int, asyncio.Event] = {}
        self.subscribers: set[Conn] = set()
        self.flusher = Flusher()  # the connections' messages of each turn of the event loop, written at once


class Conn:
    """One websocket client: protocol session, outbox, sender task, engine key."""

    def __init__(self, app: ConnHost, ws: ServerConnection, key: int, proto: V1Session | VoskSession | None):
        self.app = app
        self.ws = ws
        self.key = key
        self.proto = proto
        self.outbox = Outbox(app.config.limits.outbox_messages, self._write_now if hasattr(ws, "write_now") else None,
                             self._delivered, getattr(app, "flusher", None))
        self.sender: asyncio.Task | None = None
        self.aborted = False
        self.decoded = 0.0  # stream seconds decoded so far (the latest partial's / final's end)
        info = getattr(ws, "streamd", None)  # the request's .auth.RequestInfo
        self.client: str = info.client if info is not None else ""  # admission: quotas, fair share
        self.token: str | None = info.token if info is not None else None
        self.arrivals: deque[tuple[float, float]] = deque()  # (audio seconds so far, arrival): partial lag
        self.flow = FlowControl.from_limits(app.config.limits)  # when its input is not read (.flow)
        self.held_seconds = 0.0  # time its input was not read by flow control
        self._held_at: float | None = None  # since when flow control holds its input (monotonic), or None
        self._input_over: asyncio.Future | None = None  # the read loop's end: set once the input is over
        self._last = 0.0  # when the last client message arrived (monotonic; the idle timeout)
        self._timer: asyncio.TimerHandle | None = None  # the read loop's one timer (:meth:`_arm`)

    @property
    def stream_class(self) -> str:
        """``stream_class`` label of this connection's stream: v1 or vosk."""
        return "vosk" if isinstance(self.proto, VoskSession) else "v1"

    def start(self) -> None:
        self.sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def _send_loop(self) -> None:
        try:
            close = await self.outbox.pump(self.ws.send, self._delivered)
            await self.ws.close(close.code, close.reason)
        except ConnectionClosed:
            return

    def _write_now(self, text: str) -> bool:
        """The outbox's direct path (:meth:`.outbox.Outbox.flush`, :meth:`.wsconn.DirectConnection.write_now`):
        ``text`` in the socket now if the transport takes it (never after an abort)."""
        return not self.aborted and self.ws.write_now(text)

    def _delivered(self) -> None:
        """Once every message queued so far is in the socket, the session's token bucket gets the decoded
        audio's seconds back (:meth:`.protocol.FlowFigures.delivered`; a client that does not read leaves its
        sender waiting in a write)."""
        if self.proto is not None and self.outbox.drained:
            self.proto.delivered()

    async def read_loop(self) -> bool:
        """Feed client messages to the session until its input closes; False if the client went away first.

        The messages come from the connection's direct receive path (:class:`~.wsconn.DirectConnection`: its
        ``sink``, :meth:`_receive`), in order, with no task wake-up per message; this coroutine only waits
        for the input's end (eof, an error, a timeout, the engine's done, an abort, draining) or the
        connection's.

        Two timers, both decided by the session: ``idle_timeout`` after the last message
        (``proto.timeout()``) and the session's own ``proto.deadline()`` (``proto.tick(now)``: the
        minimum audio rate), whichever comes first: one timer per connection, set again only when it fires
        (each message moves no timer: both deadlines only ever move later).

        Flow control (:mod:`.flow`): while more of the stream's audio waits to be decoded than the bound, the
        connection is not read (TCP makes the client wait; the messages it had already read wait in order);
        engine progress reads it again (and a look every :data:`FLOW_POLL` seconds).  That time counts
        neither as the client's silence nor against its minimum audio rate."""
        ws, proto = self.ws, self.proto
        loop = asyncio.get_running_loop()
        self._input_over = over = loop.create_future()
        self._last = time.monotonic()
        self.perform(proto.tick(self._last))  # starts the session's clock
        if proto.input_closed or self.aborted:
            return True
        ws.set_sink(self._receive)
        self._arm()
        lost = asyncio.ensure_future(ws.wait_closed())
        try:
            await asyncio.wait({over, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            self._end_input()
        return proto.input_closed or self.aborted

    def _receive(self, msg: str | bytes) -> None:
        """One client message (the connection's sink): to the session, unless its input is over (then dropped,
        as the handler's :func:`discard` does)."""
        proto, over = self.proto, self._input_over
        if over.done():  # the input is over (every way it ends sets it: :meth:`perform`, :meth:`abort`)
            return
        self._last = now = time.monotonic()
        try:
            self.perform(proto.receive(msg, now))
        except Exception:  # noqa: BLE001 - a bug must not leave the connection half served
            log.exception("connection %s: handling a client message failed", self.key)
            self.abort("internal", "internal error while handling a message")
            return
        if self._held_at is None and not over.done() and self.flow.hold(proto.backlog):
            self._held_at = now
            self.ws.hold()
            self._arm()  # the flow poll

    def _end_input(self) -> None:
        """The input is over (or the connection is): the read loop returns, its timer stops, a held connection
        is read again (what it still sends is dropped)."""
        over = self._input_over
        if over is not None and not over.done():
            over.set_result(None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held_at is not None:
            self._release()

    def _arm(self) -> None:
        """Set the connection's one timer for the earliest of its deadlines; while flow control holds it, for the
        flow poll only (its clocks stand still meanwhile)."""
        if self._input_over is None or self._input_over.done():
            return
        ends = [time.monotonic() + FLOW_POLL] if self._held_at is not None else self._deadlines()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if ends:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, min(ends) - time.monotonic()),
                                                                self._on_timer)

    def _deadlines(self) -> list[float]:
        """The read loop's deadlines (monotonic): ``idle_timeout`` after the last message (when set) and the
        session's own (:meth:`.protocol.V1Session.deadline`, when it has one)."""
        idle = self.app.config.limits.idle_timeout
        return [t for t in (self._last + idle if idle else None, self.proto.deadline()) if t is not None]

    def _on_timer(self) -> None:
        self._timer = None
        proto = self.proto
        if self._held_at is not None:
            self._release()  # when flow control no longer holds it
            if self._held_at is not None:
                self._arm()
                return
        if proto.input_closed or self.aborted:
            return
        now = time.monotonic()
        idle = self.app.config.limits.idle_timeout
        ends = self._deadlines()
        if ends and now >= min(ends):
            self.perform(proto.timeout() if idle and now >= self._last + idle else proto.tick(now))
        self._arm()

    def _release(self) -> None:
        """Read a held connection again once flow control lets it (or it is aborted, or its input is over):
        the time held is not the client's (its idle and minimum-rate clocks move on by as much)."""
        proto = self.proto
        if self.flow.hold(proto.backlog) and not self.aborted and not proto.input_closed:
            return
        waited = time.monotonic() - self._held_at
        self._held_at = None
        self.held_seconds += waited
        self.app.metrics.flow_held.labels(self.stream_class).inc(waited)
        self._last += waited
        proto.pause(waited)
        self.ws.release()  # the messages read before the hold go to the session now (it may hold again)
        self._arm()  # the deadlines, moved on by the time held

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
        self.app.submit(CloseStream(self.key))
        if self.sender is not None:
            self.sender.cancel()
        asyncio.get_running_loop().create_task(self.ws.close(CLOSE_CODES[code], code))
        self._end_input()

    def perform(self, actions: list[Action]) -> None:
        """Execute a protocol session's actions, in order.  A session's input closes with a Finish or a Close
        action (eof, an error, done, draining): the read loop ends then."""
        ended = False
        for a in actions:
            if self.aborted:
                return
            if isinstance(a, Audio):  # first: nearly every action is a client's audio
                self.app.submit(FeedPcm(self.key, a.data, a.fmt, ack=a.ack))
                now = time.monotonic()
                self.app.admission.note_audio(self.key, self.proto.audio_seconds, now)
                self.arrivals.append((self.proto.audio_seconds, now))
            elif isinstance(a, Send):
                self.send(a.message, a.droppable, a.when_behind, a.last)
            elif isinstance(a, Open):
                refusal = self.app.admit(self.key, a.options, self.client, self.token)
                if refusal is not None:  # at capacity, or this client's quota: the session ends here
                    self.perform(self.proto.fail(refusal.code, refusal.message, {"retry_after": refusal.retry_after}))
                    return
                self.app.submit(OpenStream(self.key, a.options, client=self.client))
            elif isinstance(a, Reset):
                self.app.submit(ResetStream(self.key))
            elif isinstance(a, Finish):
                self.app.submit(FinishStream(self.key))
                ended = True
            elif isinstance(a, Close):
                self.outbox.close(a.code, a.reason)
                self.app.submit(CloseStream(self.key))
                ended = True
        if ended:
            self._end_input()

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
                lag = now - self.arrivals[0][1]
                self.app.admission.note_lag(self.key, lag, now)
                metrics = self.app.metrics
                metrics.child(metrics.partial_lag, self.app.lane_of(self.key)).observe(lag)
        self.perform(self.proto.event(ev))

    def on_applied(self, n: int) -> None:
        if isinstance(self.proto, VoskSession):
            self.perform(self.proto.applied(n))

    def on_progress(self, decoded: float) -> None:
        if decoded > self.decoded:
            self.decoded = decoded
        if self.proto is not None:
            self.proto.progress(decoded)
            self._delivered()
        if self._held_at is not None:
            self._release()


async def drain_conns(conns: Mapping[int, Any], conn_done: Mapping[int, asyncio.Event], rate: float | None,
                      grace: float, deadline: float, close_timeout: float, extra: Sequence[asyncio.Future] = ()
                      ) -> None:
    """Finish the websocket streams ``conns`` (key -> :class:`~.conn.Conn`; ``conn_done``: key -> set when its
    handler is over) by ``deadline`` (monotonic): their input ends (finals, done); the streams whose backlog
    ``rate`` (seconds of audio decoded per second lately) cannot decode within ``grace`` seconds get a
    ``shutting_down`` error now, and those still live at the deadline then; their error and close frames get
    ``close_timeout`` (at most 2 s) to go out.  ``extra``: more waits that end with the grace (the
    microphone, Wyoming)."""
    for conn in list(conns.values()):
        conn.perform(conn.proto.shutdown())
    live = {k: c for k, c in conns.items() if not c.proto.closed}
    give_up = drain_plan({k: c.proto.audio_seconds - c.decoded for k, c in live.items()}, rate, grace)
    if give_up:
        log.warning("draining: %d of %d streams cannot be decoded within the grace period; ending them now",
                    len(give_up), len(live))
        for k in sorted(give_up):
            c = live[k]
            left = c.proto.audio_seconds - c.decoded
            c.perform(c.proto.fail("shutting_down", cannot_finish_message(left)))
    waits = [asyncio.ensure_future(e.wait()) for e in conn_done.values()] + list(extra)
    if not waits:
        return
    _, pending = await asyncio.wait(waits, timeout=max(0.0, deadline - time.monotonic()))
    for w in pending:
        w.cancel()
    late = [c for c in conns.values() if not c.proto.closed]
    if late:
        log.warning("grace period over: ending %d streams before their end (shutting_down)", len(late))
        for c in late:
            c.perform(c.proto.fail("shutting_down", grace_over_message(grace)))
    left = [e for e in conn_done.values() if not e.is_set()]
    if left:  # the error and close frames go out before the listeners close the rest
        waits = [asyncio.ensure_future(e.wait()) for e in left]
        _, pending = await asyncio.wait(waits, timeout=min(close_timeout, 2.0))
        for w in pending:
            w.cancel()


async def discard(ws: ServerConnection) -> None:
    """Read and drop messages until the connection is closed."""
    try:
        while True:
            await ws.recv()
    except ConnectionClosed:
        return


class MicStream:
    """The daemon's microphone stream: its events go to every ``/v1/events`` subscriber."""

    stream_class = "mic"  # streamd_backlog_seconds label

    def __init__(self, app: ConnHost, key: int):
        self.app = app
        self.key = key
        self.done = asyncio.Event()

    def on_opened(self, error: str | None) -> None:
        if error is not None:
            msg = {"type": "error", "code": "mic_error", "message": f"microphone stream: {error}"}
            self.app.mic_error = msg
            self.app.broadcast(msg)
            self._end()

    def on_event(self, ev: Event) -> None:
        msg = ev.to_wire()
        self.app.broadcast(msg, droppable=msg["type"] == "partial")
        if isinstance(ev, Done) or (isinstance(ev, Error) and ev.fatal):
            self._end()

    def _end(self) -> None:
        self.done.set()
        self.app.mics.pop(self.key, None)
        self.app.streams_changed()

    def on_applied(self, n: int) -> None:
        pass

    def on_progress(self, decoded: float) -> None:
        pass


async def run_mic(app: ConnHost, factory: Callable[[Any], Any]) -> None:
    """Capture (``factory(config.mic)``) -> one engine stream; after a capture error, retry as a new stream.

    The wait starts at ``mic.retry_seconds`` and doubles after each try that delivered no audio, up to
    ``mic.retry_max_seconds``; a try that delivered audio starts it over.  A failure is logged and
    broadcast when its message is new; the same failure again is logged at debug level only (a daemon
    waiting for a microphone to be plugged in does not fill the journal)."""
    mcfg = app.config.mic
    wait, last_error, tries = mcfg.retry_seconds, None, 0
    while True:
        key = None
        ended = delivered = False
        try:
            capture = factory(mcfg)
            capture.start()  # the actual rate is known once started
            key = app.new_key()
            app.mics[key] = MicStream(app, key)
            app.streams_changed()
            app.submit(OpenStream(key, {"sample_rate": int(capture.sample_rate),
                                        "partials": mcfg.partials, "keywords": mcfg.keywords}))
            async for block in capture.blocks():
                if not delivered:
                    app.mic_error = None  # it works (again): nothing to tell new subscribers
                delivered = True
                app.submit(FeedSamples(key, np.asarray(block, dtype=np.float32).reshape(-1)))
            ended = True
        except asyncio.CancelledError:
            ended = True  # draining
        except Exception as e:  # noqa: BLE001 - MicError (no device, device lost) or a broken source
            message = f"microphone: {e}"
            if delivered:
                wait, last_error, tries = mcfg.retry_seconds, None, 0
            tries += 1
            retry = f"; trying again in {wait:g} s" if mcfg.retry_seconds and not app.draining else ""
            app.mic_error = {"type": "error", "code": "mic_error", "message": message}  # for later subscribers too
            if message != last_error:
                log.error("%s%s", message, retry)
                app.broadcast(app.mic_error)
            else:
                log.debug("%s (%d tries)%s", message, tries, retry)
            last_error = message
            app.metrics.errors.labels("mic_error").inc()
        finally:
            if key is not None:
                app.submit(FinishStream(key))
        if ended or not mcfg.retry_seconds or app.draining:
            return
        await asyncio.sleep(wait)
        wait = min(wait * 2, max(mcfg.retry_max_seconds, mcfg.retry_seconds))
