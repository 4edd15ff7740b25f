"""Sans-I/O decisions of a drain under load (SIGTERM): which streams the grace period can finish.

On SIGTERM the server stops admitting and finishes every live stream as if it
had sent eof.  When the engine is behind, decoding all of their backlogs may
take longer than ``server.grace_seconds``; rather than letting every stream
advance a little and none reach ``done`` (and all end in silence at the
deadline), :func:`drain_plan` keeps the streams with the least audio left to
decode, as many as the measured throughput can finish within the grace, and
the I/O layer ends the others at once with a ``shutting_down`` error (close
1001), which also frees the engine for the streams that stay.  Whatever is
still live at the deadline gets the same error.

Time enters only as arguments (``now``); :mod:`streamd.server.app` owns the clock.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

__all__ = ["ThroughputWindow", "drain_plan", "cannot_finish_message", "grace_over_message"]


class ThroughputWindow:
    """Decoding throughput over the last ``seconds`` of batch steps: seconds of audio decoded (summed over
    the streams of each batch) per second of step time."""

    def __init__(self, seconds: float = 10.0):
        self.seconds = seconds
        self._steps: deque[tuple[float, float, float]] = deque()  # (time, step seconds, audio seconds)

    def add(self, now: float, step_seconds: float, audio_seconds: float) -> None:
        self._steps.append((now, step_seconds, audio_seconds))
        while self._steps and self._steps[0][0] < now - self.seconds:
            self._steps.popleft()

    def rate(self, now: float) -> float | None:
        """Audio seconds per compute second over the window (None: no step in it)."""
        steps = [s for s in self._steps if s[0] >= now - self.seconds]
        compute = sum(s[1] for s in steps)
        if not steps or compute <= 0:
            return None
        return sum(s[2] for s in steps) / compute


def drain_plan(remaining: Mapping[int, float], throughput: float | None, grace: float,
               margin: float = 0.8) -> set[int]:
    """The streams to end now: ``remaining`` maps a stream key to its audio seconds still to decode.

    Nothing is ended when the throughput is unknown (no recent step: the engine is idle, not behind) or
    when everything fits in ``margin`` x ``grace`` x ``throughput``.  Otherwise the streams are taken
    from the least remaining audio up (ties: the lower key, the older connection) while their sum fits;
    the rest are returned.
    """
    if throughput is None or not remaining:
        return set()
    budget = margin * grace * throughput
    if sum(max(0.0, r) for r in remaining.values()) <= budget:
        return set()
    kept, used = set(), 0.0
    for key, r in sorted(remaining.items(), key=lambda kv: (kv[1], kv[0])):
        r = max(0.0, r)
        if used + r > budget:
            break
        kept.add(key)
        used += r
    return set(remaining) - kept


def cannot_finish_message(left: float) -> str:
    """The ``shutting_down`` error of a stream :func:`drain_plan` ends at once (``left`` s still to decode)."""
    return (f"the server is shutting down and cannot decode the {left:.1f} s of audio still queued for this "
            f"stream within its grace period")


def grace_over_message(grace: float | None = None) -> str:
    """The ``shutting_down`` error of a stream still live when the grace period (``grace`` s, if known) ends;
    worded like :func:`cannot_finish_message`, so a client sees the same reason whichever ended its stream."""
    period = "its grace period" if grace is None else f"its grace period ({grace:g} s)"
    return f"the server is shutting down and {period} ended before this stream was decoded to its end"
