"""Running the second pass beside a server: a worker thread with a bounded queue, and each stream's order.

* :class:`SecondPassWorker`: one thread decodes pending Finals (:class:`~.rescore.SecondPass`, or its
  :class:`~.process.SecondPassProcess` that runs the model in a child process), up to
  ``max_batch`` per round, from a queue of at most ``max_queue`` segments, one after another, each
  delivered as soon as it is decoded.  :meth:`~SecondPassWorker.submit`
  refuses when the queue is full, and a segment that waited more than ``max_wait_s`` when its turn comes is
  not decoded: both give the first pass's Final with ``second_pass: "skipped_overload"`` (counted by the
  caller), never a lost final.  The event loop and the engine's steps go on meanwhile; with the model in a child process they
  share no interpreter lock with it either.
* :class:`FinalGate` (sans-I/O): a stream's events after a pending Final wait behind it, so every client
  sees its segments' events in order (a Vosk client has no segment numbers); other streams pass freely.

``done`` callbacks run in the worker thread; a server hands them to its event loop.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from streamd.events import Event, Final

from .rescore import SecondPass, fallback

__all__ = ["SecondPassWorker", "FinalGate", "OVERLOAD"]

log = logging.getLogger("streamd.second_pass")

OVERLOAD = "skipped_overload"


@dataclass
class _Job:
    key: Hashable
    final: Final
    queued: float
    done: Callable[[Hashable, Final, float], None]


class SecondPassWorker:
    """A thread that runs ``second`` over submitted Finals; ``done(key, final, seconds_queued_to_done)``."""

    def __init__(self, second: SecondPass, max_queue: int = 16, max_batch: int = 4, max_wait_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.second = second
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.clock = clock
        self._q: queue.Queue[_Job | None] = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._loop, name="streamd-second-pass", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable, final: Final, done: Callable[[Hashable, Final, float], None]) -> bool:
        """Queue ``final`` (second pass ``pending``); False when the queue is full (the caller falls back)."""
        try:
            self._q.put_nowait(_Job(key, final, self.clock(), done))
        except queue.Full:
            return False
        return True

    @property
    def queued(self) -> int:
        return self._q.qsize()

    def _loop(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            jobs = [job]
            while len(jobs) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)  # stop after this round
                    break
                jobs.append(nxt)
            for j in jobs:  # each delivered as soon as it is decoded, not after the rest of its round
                if self.clock() - j.queued > self.max_wait_s:
                    self._finish(j, fallback(j.final, OVERLOAD))
                else:
                    self._finish(j, self.second.apply_all([j.final])[0])  # never raises: failures fall back

    def _finish(self, job: _Job, final: Final) -> None:
        try:
            job.done(job.key, final, self.clock() - job.queued)
        except Exception:  # noqa: BLE001 - a callback's failure must not stop the worker
            log.exception("second pass: delivering the final of %r failed", job.key)

    def close(self, timeout: float = 5.0) -> None:
        """Finish the queued segments, then stop the thread (and the second pass's process, if it has one)."""
        self._q.put(None)
        self._thread.join(timeout)
        stop = getattr(self.second, "close", None)
        if callable(stop):
            stop()


class FinalGate:
    """Keeps each stream's events in order around pending Finals (sans-I/O).

    ``submit(key, final) -> bool`` hands a pending Final to the second pass (False: refused, overload).
    :meth:`route` returns the events to deliver now; :meth:`resolved` (the second pass's Final came back)
    returns it and the events that waited behind it, up to the next pending Final.
    """

    def __init__(self, submit: Callable[[Any, Final], bool], on_skip: Callable[[Any, Final], None] | None = None):
        """``on_skip(key, final)``: a final of a second-pass stream delivered with the first pass's text."""
        self._submit = submit
        self._on_skip = on_skip
        self._held: dict[Any, collections.deque[Event]] = {}

    def waiting(self, key: Any) -> bool:
        return key in self._held

    def route(self, key: Any, ev: Event) -> list[tuple[Any, Event]]:
        """The events to deliver now for the engine's ``ev`` of stream ``key``."""
        if key in self._held:
            self._held[key].append(ev)
            return []
        return self._pass(key, ev)

    def _pass(self, key: Any, ev: Event) -> list[tuple[Any, Event]]:
        if isinstance(ev, Final) and ev.second_pass == "pending":
            if self._submit(key, ev):
                self._held[key] = collections.deque()
                return []
            ev = fallback(ev, OVERLOAD)
        if isinstance(ev, Final) and ev.second_pass is not None and self._on_skip is not None:
            self._on_skip(key, ev)  # the first pass stands (overload, too long)
        return [(key, ev)]

    def resolved(self, key: Any, final: Final) -> list[tuple[Any, Event]]:
        """The second pass of ``key``'s pending Final is ``final``: it, then what waited behind it."""
        out = [(key, final)]
        held = self._held.pop(key, collections.deque())
        while held:
            ev = held.popleft()
            more = self._pass(key, ev)
            out += more
            if not more:  # another pending Final went to the second pass: the rest waits behind it
                self._held[key] = held
                break
        return out
