"""Running the second pass beside a server: a worker thread with a bounded queue, and each stream's order.

* :class:`SecondPassWorker`: one thread decodes pending Finals and verifies pending wake detections
  (``kws.verify``) (:class:`~.rescore.SecondPass`, or its :class:`~.process.SecondPassProcess` that runs
  the model in a child process), up to ``max_batch`` per round, from a queue of at most ``max_queue``
  segments: in one batched call when the model batches (``batches``: Moonshine; the round delivered
  together), else one after another, each delivered as soon as it is decoded.  :meth:`~SecondPassWorker.submit`
  refuses when the queue is full, and a segment that waited more than ``max_wait_s`` when its turn comes is
  not decoded: both give the first pass's Final with ``second_pass: "skipped_overload"`` (counted by the
  caller), never a lost final (a wake detection then stands on its model's own threshold:
  :func:`~.rescore.fallback`).  The event loop and the engine's steps go on meanwhile; with the model in a
  child process they share no interpreter lock with it either.
* :class:`FinalGate` (sans-I/O): a stream's events after a pending Final (or wake detection) wait behind it,
  so every client sees its segments' events in order (a Vosk client has no segment numbers); other streams
  pass freely.  Wake detections that do not stand (:attr:`streamd.events.WakeWord.stands`) are not delivered.

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

from streamd.events import Event, Final, WakeWord

from .rescore import SecondPass, fallback, pending

__all__ = ["SecondPassWorker", "FinalGate", "OVERLOAD"]

log = logging.getLogger("streamd.second_pass")

OVERLOAD = "skipped_overload"


@dataclass
class _Job:
    key: Hashable
    final: Final | WakeWord
    queued: float
    done: Callable[[Hashable, Final | WakeWord, float], None]


class SecondPassWorker:
    """A thread that runs ``second`` over submitted Finals and wake detections; ``done(key, event,
    seconds_queued_to_done)``."""

    def __init__(self, second: SecondPass, max_queue: int = 16, max_batch: int = 4, max_wait_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.second = second
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.clock = clock
        self._q: queue.Queue[_Job | None] = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._loop, name="streamd-second-pass", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable, final: Final | WakeWord,
               done: Callable[[Hashable, Final | WakeWord, float], None]) -> bool:
        """Queue ``final`` (pending: :func:`~.rescore.pending`); False when the queue is full (the caller falls back)."""
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
            # a batching model reads the round in one call, delivered together; another one segment a call,
            # each delivered as soon as it is decoded, not after the rest of its round
            for group in [jobs] if getattr(self.second, "batches", False) else [[j] for j in jobs]:
                now = self.clock()
                fresh = []
                for j in group:
                    if now - j.queued > self.max_wait_s:
                        self._finish(j, fallback(j.final, OVERLOAD))
                    else:
                        fresh.append(j)
                if fresh:
                    for j, final in zip(fresh, self.second.apply_all([j.final for j in fresh])):  # never raises
                        self._finish(j, final)

    def _finish(self, job: _Job, final: Final | WakeWord) -> None:
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
    """Keeps each stream's events in order around pending Finals and wake detections (sans-I/O).

    ``submit(key, event) -> bool`` hands a pending event to the second pass (False: refused, overload).
    :meth:`route` returns the events to deliver now; :meth:`resolved` (the second pass's event came back)
    returns it (a wake detection only if it stands) and the events that waited behind it, up to the next
    pending one.
    """

    def __init__(self, submit: Callable[[Any, Final | WakeWord], bool],
                 on_skip: Callable[[Any, Final | WakeWord], None] | None = None):
        """``on_skip(key, event)``: a final of a second-pass stream delivered with the first pass's text, or a
        wake detection the second pass did not hear (:func:`~.rescore.fallback`: delivered or not)."""
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
        """``[]`` while ``ev`` waits (its stream's next events wait behind it), else the events to deliver."""
        if pending(ev):
            if self._submit(key, ev):
                self._held[key] = collections.deque()
                return []
            ev = fallback(ev, OVERLOAD)
        skipped = ev.second_pass if isinstance(ev, Final) else ev.verification if isinstance(ev, WakeWord) else None
        if skipped is not None and self._on_skip is not None:
            self._on_skip(key, ev)  # the first pass stands (overload, too long); a wake detection not verified
        return [(key, ev)] if not isinstance(ev, WakeWord) or ev.stands else []

    def resolved(self, key: Any, final: Final | WakeWord) -> list[tuple[Any, Event]]:
        """The second pass of ``key``'s pending event is ``final``: it (a wake detection only when it stands),
        then what waited behind it."""
        out = [(key, final)] if not isinstance(final, WakeWord) or final.stands else []
        held = self._held.pop(key, collections.deque())
        while held:
            ev = held.popleft()
            out += self._pass(key, ev)
            if key in self._held:  # another pending event went to the second pass: the rest waits behind it
                self._held[key] = held
                break
        return out
