"""Keeping an engine lane's process running: one :class:`LaneSupervisor` per lane (the main engine's process with
``server.engine_process``, the light lane of ``limits.light_lane``).

The rules, written once for both lanes:

* a dead process is noticed after an engine cycle (:meth:`LaneSupervisor.check`: the process is no longer
  ``alive``), never while the daemon drains, and one restart at a time;
* a new one starts after :func:`restart_delay` of the quick deaths in a row (processes that died within
  :data:`LANE_STABLE` of their start): :data:`LANE_RESTART_DELAY`, doubling up to :data:`LANE_RESTART_MAX`;
* the old process is closed first; a new one that cannot start either is tried again (its lane's ``new``
  raises RuntimeError: one more quick death) or is given up (``new`` returns None: the lane stays down);
* a process that comes up while the daemon drains is closed at once.

What a lane does with its process (which thread starts and closes it, what its batcher runs, the gauges and
``loading``) is the caller's: the supervisor is handed those callbacks, and its clock and sleep (tests pass
their own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

log = logging.getLogger("streamd.server")
# a dead engine process is started again after 2 s, doubling (up to 5 min) while each one dies within a minute
LANE_RESTART_DELAY, LANE_RESTART_MAX, LANE_STABLE = 2.0, 300.0, 60.0


def restart_delay(quick_deaths: int) -> float:
    """Seconds before a dead engine process is started again: :data:`LANE_RESTART_DELAY`, doubled for each
    process in a row that died within :data:`LANE_STABLE` of its start (``quick_deaths``), at most
    :data:`LANE_RESTART_MAX`."""
    return min(LANE_RESTART_MAX, LANE_RESTART_DELAY * 2 ** max(0, quick_deaths - 1))


def after_death(lived: float, quick_deaths: int) -> tuple[int, float]:
    """An engine process died after ``lived`` seconds, after ``quick_deaths`` quick deaths in a row: the new
    count (0 when it had lived :data:`LANE_STABLE` or longer) and its :func:`restart_delay`."""
    n = quick_deaths + 1 if lived < LANE_STABLE else 0
    return n, restart_delay(n)


class LaneSupervisor:
    """Restarts one lane's engine process when it dies (the module's rules).

    ``name``: the lane in the log lines (``main engine``, ``light lane``).  Callbacks (the lane's own):

    * ``new(old)``: a new process like ``old``, started and loaded (RuntimeError: try again later; None: give up);
    * ``close(process)``: close a process (from the thread that drives it);
    * ``install(old, new)``: the new process (already :attr:`lane`) serves the lane from now on (its batcher's
      runner, gauges);
    * ``on_death()``: the process was found dead (called before the restart is scheduled);
    * ``draining()``: whether the daemon is draining (no restart then).

    ``lane`` is the process now (None before :meth:`started`); ``restarting`` the restart under way, if any.
    """

    def __init__(self, name: str, new: Callable[[Any], Awaitable[Any]], close: Callable[[Any], Awaitable[None]],
                 install: Callable[[Any, Any], None], draining: Callable[[], bool],
                 on_death: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.name = name
        self._new, self._close, self._install = new, close, install
        self._draining, self._on_death = draining, on_death
        self._clock, self._sleep = clock, sleep
        self.lane: Any = None
        self.started_at = 0.0  # the clock's time the current process started
        self.quick_deaths = 0  # processes in a row that died within LANE_STABLE of their start
        self.restarting: asyncio.Task | None = None

    def started(self, lane: Any) -> None:
        """``lane`` is the lane's process from now on (the first one; restarts call this themselves)."""
        self.lane = lane
        self.started_at = self._clock()

    def check(self) -> asyncio.Task | None:
        """After an engine cycle: the restart task when the process has just been found dead (none under way,
        not draining), else None."""
        lane = self.lane
        if lane is None or lane.alive or self.restarting is not None or self._draining():
            return None
        if self._on_death is not None:
            self._on_death()
        self.restarting = asyncio.get_running_loop().create_task(self.restart())
        return self.restarting

    async def restart(self) -> None:
        """Close the dead process and start a new one after the delay (tried again while ``new`` raises
        RuntimeError); the new one is :meth:`started` and installed unless the daemon drains meanwhile."""
        self.quick_deaths, delay = after_death(self._clock() - self.started_at, self.quick_deaths)
        log.info("%s: starting a new engine process in %g s", self.name, delay)
        await self._sleep(delay)
        old = self.lane
        await self._close(old)
        while not self._draining():
            try:
                lane = await self._new(old)
            except RuntimeError as e:
                self.quick_deaths += 1
                delay = restart_delay(self.quick_deaths)
                log.error("%s; trying again in %g s", e, delay)
                await self._sleep(delay)
                continue
            if lane is None:  # given up (the lane said why): it stays down
                return
            if self._draining():
                await self._close(lane)
                return
            self.started(lane)
            self._install(old, lane)
            self.restarting = None
            log.info("%s: a new engine process (pid %s)", self.name, lane.pid)
            return
