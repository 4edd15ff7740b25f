"""Flow control of a client's audio (sans-I/O): a client that sends faster than the engine decodes is slowed
down, not cut off.

The transports (:mod:`.conn`, :mod:`.wyoming_io`) read a connection's next message only while
:meth:`FlowControl.hold` says so.  While they do not read, the bytes wait in the kernel's socket buffers and TCP
flow control makes the sender wait: memory stays bounded (at most :attr:`FlowControl.bound` seconds of the
stream's audio wait to be decoded, plus the frame read last and what the websocket library reads ahead,
``max_queue`` frames), and a file is transcribed as fast as the engine decodes it.

The other half of the rule is the session's token bucket (``limits.max_realtime`` / ``burst_seconds``,
:class:`~.protocol.TokenBucket`): it is refilled at ``max_realtime`` per second of wall time and, by the
transport, with every second of the stream's audio that has been decoded and whose results have been handed
to the client's socket (:meth:`~.protocol.SessionBase.progress`).  A client that reads its results therefore
never runs out of tokens (with the default 30 s burst and frames up to 25 s); one that floods and never reads
them does, and is closed with ``rate_limited`` as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import LimitsConfig

__all__ = ["FLOW_SECONDS", "FLOW_MIN_SECONDS", "FlowControl"]

FLOW_SECONDS = 5.0  # seconds of a stream's audio that may wait to be decoded before its connection is not read
FLOW_MIN_SECONDS = 1.0  # ... never below this (the engine decodes whole 320 ms chunks: less would never drain)


@dataclass(frozen=True)
class FlowControl:
    """When a transport stops reading a connection: while more than ``bound`` seconds of its stream's accepted
    audio wait to be decoded.

    ``bound`` is :data:`FLOW_SECONDS`, at most half of ``limits.burst_seconds`` and of
    ``limits.max_backlog_seconds`` (so that a client that reads its results stays within the token bucket and
    the engine's backlog bound), and at least :data:`FLOW_MIN_SECONDS`."""

    bound: float = FLOW_SECONDS

    @classmethod
    def from_limits(cls, limits: LimitsConfig) -> "FlowControl":
        return cls(max(FLOW_MIN_SECONDS, min(FLOW_SECONDS, limits.burst_seconds / 2,
                                             limits.max_backlog_seconds / 2)))

    def hold(self, backlog: float) -> bool:
        """True: do not read the connection's next message now (``backlog``: seconds of the stream's accepted
        audio not yet decoded, :attr:`~.protocol.SessionBase.backlog`)."""
        return backlog > self.bound
