"""A client's bounded queue of outgoing messages (websocket and Wyoming transports alike)."""

from __future__ import annotations

import asyncio
from collections import deque
import time
from typing import Any, Awaitable, Callable

from .protocol import Close

__all__ = ["Outbox", "wait_while"]


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
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
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
        self._event.set()
        return True

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
