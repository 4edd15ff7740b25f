"""The link between a front process (:mod:`.front`) and the engine process (:mod:`.fronts`): one unix stream
socket each, carrying batches of records.

A batch on the wire: 4 bytes (little-endian length N), then N bytes of a pickled list of records; a record is
a tuple whose first item names it (:data:`FRONT_RECORDS`, :data:`ENGINE_RECORDS`).  Records queued during one
turn of the event loop leave together in one batch (:meth:`Link.put` schedules :meth:`Link.flush`), so the
cost per system call and per pickle is shared by every stream that spoke in that turn.
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any, AsyncIterator

__all__ = ["Link", "FRONT_RECORDS", "ENGINE_RECORDS"]

# what a front sends: its listeners are up; a stream's open (key, options, client, token, stream class), audio
# (key, data, format, ack, audio seconds so far), reset, finish and close (key); a partial's lag (key, lag); its
# event loop's lag; its count of connections; a /metrics request (request id) and its metric families for one
# (request id, families); drained (every connection ended)
FRONT_RECORDS = ("up", "open", "audio", "reset", "finish", "close", "lag", "loop_lag", "conns", "metrics",
                 "families", "drained")
# what the engine process sends: a stream opened (key, error or None, lane) or refused (key, code, message,
# retry_after); an engine event (key, event); Vosk acknowledgements (key, n); progress (key, decoded seconds);
# the shared state (loading, draining, the daemon's streams, the front's own, the capacity rule for one more
# greedy stream, model info, mic error); a message for /v1/events subscribers (message, droppable); a request
# for metric families (request id); the /metrics text (request id, bytes); drain (grace seconds, decoding
# throughput)
ENGINE_RECORDS = ("opened", "refused", "event", "applied", "progress", "state", "broadcast", "collect",
                  "metrics_text", "drain")

_HEAD = 4


class Link:
    """One end of the link: :meth:`put` records (sent in one batch per event-loop turn), :meth:`batches` in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self._out: list[tuple] = []
        self._scheduled = False
        self.closed = False

    @classmethod
    async def open(cls, sock: Any, limit: int = 1 << 24) -> "Link":
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=limit)
        return cls(reader, writer)

    def put(self, record: tuple) -> None:
        """Queue one record for the next batch."""
        self._out.append(record)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send the queued records as one batch (nothing once the link is closed)."""
        self._scheduled = False
        out, self._out = self._out, []
        if not out or self.closed or self.writer.is_closing():
            return
        data = pickle.dumps(out, pickle.HIGHEST_PROTOCOL)
        self.writer.writelines((len(data).to_bytes(_HEAD, "little"), data))

    async def drain(self) -> None:
        """Wait until the socket's buffer is below its high-water mark (backpressure)."""
        self.flush()
        await self.writer.drain()

    async def batches(self) -> AsyncIterator[list[tuple]]:
        """The peer's batches until it closes (EOF: the iteration ends)."""
        reader = self.reader
        while True:
            try:
                head = await reader.readexactly(_HEAD)
                data = await reader.readexactly(int.from_bytes(head, "little"))
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            yield pickle.loads(data)

    def close(self) -> None:
        self.flush()
        self.closed = True
        self.writer.close()
