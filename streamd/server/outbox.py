"""A client's bounded queue of outgoing messages (websocket and Wyoming transports alike)."""

from __future__ import annotations

import asyncio
from collections import deque
import time
from typing import Any, Awaitable, Callable

from .protocol import Close

__all__ = ["Outbox", "Flusher", "wait_while"]


class Flusher:
    """The outboxes with messages put during this turn of the event loop, written once each at the next turn
    (:meth:`Outbox.flush`): one callback for every connection's messages of a turn, instead of waking each
    connection's sender task for each message.  Messages put in one turn coalesce exactly as they did while
    they waited for the sender task."""

    def __init__(self) -> None:
        self._due: list[Outbox] = []

    def due(self, box: "Outbox") -> None:
        if not self._due:
            asyncio.get_running_loop().call_soon(self._flush)
        self._due.append(box)

    def _flush(self) -> None:
        due, self._due = self._due, []
        for box in due:
            box.flush()


class Outbox:
    """Bounded FIFO of outgoing text frames for one client.

    A droppable message (a partial) replaces a droppable one still waiting at
    the tail, so a slow reader gets the newest partial, never a backlog of
    stale ones.  A ``when_behind`` droppable message (a Vosk partial reply)
    replaces one only once half the capacity is waiting: a client that reads
    its replies gets every one.  :meth:`put` returns False when the queue is
    full (the caller disconnects that client), except for a ``force``d message
    (a stream's last one), which may exceed the bound.  :meth:`close` queues
    the final close after everything already queued.

    With a ``flusher`` (:class:`Flusher`) and the transport's direct path ``write_now(text)`` (True: the
    message is in the socket; False: the transport cannot take it now), what is put during a turn of the
    event loop is written at the next turn by :meth:`flush`, with no wake-up of the sender task; what the
    transport cannot take then waits for the sender (:meth:`pump`), which waits for the transport.
    ``written()`` after each message the flush wrote (as :meth:`pump`'s).
    """

    def __init__(self, capacity: int, write_now: Callable[[str], bool] | None = None,
                 written: Callable[[], Any] | None = None, flusher: Flusher | None = None):
        self.capacity = capacity
        self.write_now = write_now if flusher is not None else None
        self.written = written
        self.flusher = flusher
        self._flush_due = False
        self._items: deque[str] = deque()
        self._tail_droppable = False
        self._close: Close | None = None
        self._event = asyncio.Event()
        self.dropped = 0
        self.writing = False  # the pump is handing a message to the transport

    @property
    def drained(self) -> bool:
        """Nothing waits and no message is being written: everything queued so far is in the socket."""
        return not self._items and not self.writing

    def __len__(self) -> int:
        return len(self._items)

    def put(self, text: str, droppable: bool = False, when_behind: bool = False, force: bool = False) -> bool:
        if self._close is not None:
            return True  # closing: late messages are discarded
        if droppable and self._items and self._tail_droppable and \
                (not when_behind or len(self._items) >= max(1, self.capacity // 2)):
            self._items[-1] = text
            self.dropped += 1
            return True
        if len(self._items) >= self.capacity and not force:
            return False
        self._items.append(text)
        self._tail_droppable = droppable
        if self.write_now is None:
            self._event.set()
        elif not self._flush_due:
            self._flush_due = True
            self.flusher.due(self)
        return True

    def flush(self) -> None:
        """Write what waits through ``write_now``, in order, until it is empty or the transport cannot take more
        (then the sender task waits for the transport and writes the rest); nothing while the sender is
        writing (it takes the rest after its message)."""
        self._flush_due = False
        items = self._items
        if self.writing or self.write_now is None:
            return
        while items:
            if not self.write_now(items[0]):
                self._event.set()
                return
            items.popleft()
            if not items:
                self._tail_droppable = False
            if self.written is not None:
                self.written()

    def close(self, code: int, reason: str) -> None:
        if self._close is None:
            self._close = Close(code, reason)
            self._event.set()

    async def get(self) -> str | Close:
        while True:
            if self._items:
                item = self._items.popleft()
                if not self._items:
                    self._tail_droppable = False
                return item
            if self._close is not None:
                return self._close
            self._event.clear()
            await self._event.wait()

    async def pump(self, write: Callable[[Any], Awaitable[Any]], written: Callable[[], Any] | None = None) -> Close:
        """A connection's sender: ``write`` each message as it is queued, in order, until the close, which it
        returns (the caller closes its transport); ``written()`` after each (flow control's delivery).  What
        ``write`` raises ends the pump."""
        while True:
            item = await self.get()
            if isinstance(item, Close):
                return item
            self.writing = True
            try:
                await write(item)
            finally:
                self.writing = False
            if written is not None:
                written()


async def wait_while(hold: Callable[[], bool], changed: asyncio.Event, poll: float = 1.0) -> float:
    """A transport's flow control (:mod:`.flow`): wait while ``hold()`` is true, looking again whenever
    ``changed`` is set (engine progress, the connection aborted) and at least every ``poll`` seconds; the
    seconds waited."""
    t0 = time.monotonic()
    while hold():
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), poll)
        except asyncio.TimeoutError:
            pass
    return time.monotonic() - t0
