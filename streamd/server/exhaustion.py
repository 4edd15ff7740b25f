"""Running out of file descriptors or memory: counted, logged at most once per interval, never a storm.

When the process is out of file descriptors, asyncio reports every failed ``accept()`` on a listening
socket to the loop's exception handler, one traceback each.  :class:`ResourceErrors` takes over that
handler while the daemon runs: those failures (and any other :data:`RESOURCE_ERRNOS` error the daemon
reports through :meth:`ResourceErrors.report`) are counted in ``streamd_errors_total{code=
"resource_exhausted"}`` and logged as one line per interval with a count (:class:`~.guard.RateLimitedLog`);
everything else goes to the previous handler.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import TYPE_CHECKING, Any

from .guard import RateLimitedLog

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["RESOURCE_ERRNOS", "ACCEPT_ERROR_LOG_SECONDS", "ResourceErrors"]

log = logging.getLogger("streamd.server")

# OSError numbers of resource exhaustion (out of file descriptors / buffers / memory): logged at most
# once per ACCEPT_ERROR_LOG_SECONDS with a count, never as one traceback per failed accept()
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_ERROR_LOG_SECONDS = 10.0


class ResourceErrors:
    """The event loop's exception handler for resource exhaustion, and the rate-limited log behind it."""

    def __init__(self, metrics: Metrics, interval: float = ACCEPT_ERROR_LOG_SECONDS):
        self.metrics = metrics
        self.log = RateLimitedLog(interval)
        self._loop_handler: tuple[Any, Any] | None = None  # (loop, the exception handler before ours)

    def install(self) -> None:
        """Route the running loop's exception handler through this (undone by :meth:`restore`)."""
        loop = asyncio.get_running_loop()
        if self._loop_handler is None:
            self._loop_handler = (loop, loop.get_exception_handler())
            loop.set_exception_handler(self._loop_exception)

    def restore(self) -> None:
        if self._loop_handler is not None:
            loop, previous = self._loop_handler
            self._loop_handler = None
            if not loop.is_closed():
                loop.set_exception_handler(previous)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """Out of file descriptors (``accept()`` failing on the listening socket, and the like): counted and
        logged at most once per interval; everything else goes to the previous handler."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            self.report(context.get("message") or "event loop", exc)
            return
        previous = self._loop_handler[1] if self._loop_handler else None
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def report(self, what: str, exc: OSError) -> None:
        """An OSError while doing ``what``: a warning, or (resource exhaustion) counted and rate-limited."""
        if exc.errno not in RESOURCE_ERRNOS:
            log.warning("%s: %s", what, exc)
            return
        self.metrics.errors.labels("resource_exhausted").inc()
        if self.log.hit():
            log.error("%s: %s (out of file descriptors or memory: raise LimitNOFILE= / ulimit -n or lower "
                      "limits.max_streams; further failures are counted, one line per %g s)",
                      what, exc, self.log.interval)
            asyncio.get_running_loop().call_later(self.log.interval, self._flush)

    def _flush(self) -> None:
        n = self.log.flush()
        if n:
            log.error("%d more failures for lack of file descriptors or memory in the last %g s", n,
                      self.log.interval)
            asyncio.get_running_loop().call_later(self.log.interval, self._flush)
