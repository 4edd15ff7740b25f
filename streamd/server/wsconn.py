"""The daemon's websocket connection: the websockets library's server connection, with two cheaper paths for
the one thing a streaming client does thousands of times a second (send a frame, get a partial).

* **Receiving** (:attr:`DirectConnection.sink`): once a handler sets a sink, every complete data message
  (``str`` for a text frame, ``bytes`` for a binary one) is handed to it straight from the transport's
  ``data_received`` callback, in order, instead of going through the library's message queue to a task
  awaiting ``recv()`` (one future, one task wake-up and, with a read timeout, one timer per message).  The
  library's own checks stay: the frame parser (``max_size``, control frames, pings answered, the close
  handshake); a fragmented message is reassembled here (at most the library's ``MAX_FRAGMENTS`` fragments,
  else close 1009), a text message that is not UTF-8 closes the connection with 1007, as ``recv()`` does.
  Messages the library had queued before the sink was set go to it first.  :meth:`DirectConnection.hold` /
  :meth:`DirectConnection.release` stop and resume reading the socket (flow control: TCP makes the client
  wait); messages already read while held wait in order for the release.
* **Sending** (:meth:`DirectConnection.write_now`): a text message written to the transport at once when
  nothing else is being sent and the transport's buffer is under its limit, with no task and no drain
  wait; otherwise the caller leaves it to its sender task (``send()``, which waits for the buffer).  The
  daemon's connections write through it once per turn of the event loop (:class:`~.outbox.Flusher`).

Nothing else changes: ``recv()``, ``send()``, ``close()`` work as in the library for a connection without a
sink (``/v1/events`` subscribers), and a connection whose sink is set still closes, pings and times out
through the library.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from websockets.asyncio import messages
from websockets.asyncio.server import ServerConnection
from websockets.frames import BINARY, CONT, TEXT, CloseCode, Frame
from websockets.protocol import OPEN

__all__ = ["DirectConnection", "Sink"]

Sink = Callable[[Any], None]  # one complete message: str (text frame) or bytes (binary frame)
MAX_FRAGMENTS = getattr(messages, "MAX_FRAGMENTS", 4096)  # the library's bound on a message's fragments


class DirectConnection(ServerConnection):
    """A :class:`websockets.asyncio.server.ServerConnection` with a direct receive path (:attr:`sink`) and a
    direct send path (:meth:`write_now`); the module's rules."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sink: Sink | None = None
        self._parts: list[Frame] = []  # the fragments of a message in progress (sink mode)
        self._held: deque[Frame] | None = None  # while reading is held: complete messages' frames waiting

    # ----------------------------------------------------------------- receiving

    def set_sink(self, sink: Sink) -> None:
        """From now on every complete data message goes to ``sink(message)``, beginning with those the library
        has already queued (before the handler started)."""
        self.sink = sink
        queued = getattr(getattr(self, "recv_messages", None), "frames", None)
        frames = list(queued.queue) if queued is not None else []
        if queued is not None:
            queued.queue.clear()
        assembler = getattr(self, "recv_messages", None)
        if assembler is not None and assembler.paused:  # the library stopped reading for its full queue
            assembler.paused = False
            if self._held is None:
                self.transport.resume_reading()
        for frame in frames:
            self._frame(frame)

    def process_event(self, event: Any) -> None:
        if self.sink is None or not isinstance(event, Frame) or event.opcode not in (TEXT, BINARY, CONT):
            super().process_event(event)  # the handshake, control frames, a connection without a sink
            return
        self._frame(event)

    def _frame(self, frame: Frame) -> None:
        if self._held is not None:
            self._held.append(frame)
            return
        parts = self._parts
        if not frame.fin or parts:
            parts.append(frame)
            if len(parts) > MAX_FRAGMENTS:
                self._parts = []
                self._fail(CloseCode.MESSAGE_TOO_BIG, "too many fragments")
                return
            if not frame.fin:
                return
            self._parts = []
            first = parts[0]
            data = b"".join(f.data for f in parts)
            self._deliver(first.opcode, data)
            return
        self._deliver(frame.opcode, frame.data)

    def _deliver(self, opcode: Any, data: Any) -> None:
        if opcode is TEXT:
            try:
                message: Any = bytes(data).decode() if not isinstance(data, bytes) else data.decode()
            except UnicodeDecodeError as exc:
                self._fail(CloseCode.INVALID_DATA, f"{exc.reason} at position {exc.start}", exc)
                return
        else:
            message = data if isinstance(data, bytes) else bytes(data)
        sink = self.sink
        if sink is not None:
            sink(message)

    def _fail(self, code: CloseCode, reason: str, exc: BaseException | None = None) -> None:
        """Close the connection for a message it cannot deliver (what ``recv()`` does)."""
        if exc is not None:
            self.set_connection_exc(exc)
        if self.protocol.state is OPEN:
            self.protocol.fail(code, reason)
            self.send_data()

    def hold(self) -> None:
        """Stop reading the socket (idempotent): messages already read wait, in order, for :meth:`release`."""
        if self._held is None:
            self._held = deque()
            self.transport.pause_reading()

    def release(self) -> None:
        """Read again (idempotent): the messages that waited go to the sink first, unless it holds again."""
        held = self._held
        if held is None:
            return
        self._held = None
        while held and self._held is None:
            self._frame(held.popleft())
        if self._held is not None:  # held again while delivering: the rest waits before what arrives later
            held.extend(self._held)
            self._held = held
            return
        self.transport.resume_reading()

    @property
    def holding(self) -> bool:
        return self._held is not None

    # ----------------------------------------------------------------- sending

    def write_now(self, text: str) -> bool:
        """Write text message ``text`` to the transport now if nothing else is being sent and the transport's
        buffer is under its high-water mark (True); False: nothing was written, send it the usual way."""
        if self.protocol.state is not OPEN or self.paused or getattr(self, "send_in_progress", None) is not None:
            return False
        self.protocol.send_text(text.encode())
        try:
            self.send_data()
        except Exception as exc:  # noqa: BLE001 - as send()'s context: the connection ends with it
            self.set_connection_exc(exc)
            self.transport.abort()
        return True
