"""The lane supervisor (streamd.server.supervisor): restarts after a death, the quick-death delays, the
callbacks it is handed; with a fake clock, a recording sleep and fake processes (no engine)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streamd.server.supervisor import (LANE_RESTART_DELAY, LANE_RESTART_MAX, LANE_STABLE, LaneSupervisor,
                                       after_death, restart_delay)


class FakeLane:
    def __init__(self, pid: int):
        self.pid = pid
        self.alive = True


class Harness:
    """A supervisor over fake processes: ``fails`` RuntimeErrors before each new process (None: give up)."""

    def __init__(self, fails: int = 0, give_up: bool = False):
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.closed: list[int] = []
        self.installed: list[tuple[int, int]] = []
        self.deaths = 0
        self.draining = False
        self.fails = fails
        self.give_up = give_up
        self.loading: list = []  # called while a new process loads
        self.pids = iter(range(2, 100))
        self.sup = LaneSupervisor("test lane", self.new, self.close, self.install, lambda: self.draining,
                                  on_death=self.died, clock=lambda: self.now, sleep=self.sleep)

    async def new(self, old: FakeLane) -> FakeLane | None:
        for hook in self.loading:
            hook()
        if self.give_up:
            return None
        if self.fails:
            self.fails -= 1
            raise RuntimeError("cannot start")
        return FakeLane(next(self.pids))

    async def close(self, lane: FakeLane) -> None:
        lane.alive = False
        self.closed.append(lane.pid)

    def install(self, old: FakeLane, new: FakeLane) -> None:
        assert self.sup.lane is new  # already the supervisor's process when installed
        self.installed.append((old.pid, new.pid))

    def died(self) -> None:
        self.deaths += 1

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run(coro):
    return asyncio.run(coro)


def test_restart_delay_doubles_with_each_quick_death_up_to_the_most():
    assert restart_delay(0) == restart_delay(1) == LANE_RESTART_DELAY
    assert restart_delay(2) == 2 * LANE_RESTART_DELAY and restart_delay(3) == 4 * LANE_RESTART_DELAY
    assert restart_delay(50) == LANE_RESTART_MAX
    assert after_death(LANE_STABLE - 1, 2) == (3, 4 * LANE_RESTART_DELAY)
    assert after_death(LANE_STABLE, 5) == (0, LANE_RESTART_DELAY)  # it had lived long enough: count again


def test_a_live_process_or_none_needs_no_restart():
    h = Harness()

    async def body():
        assert h.sup.check() is None  # no process yet
        h.sup.started(FakeLane(1))
        assert h.sup.check() is None

    run(body())
    assert h.deaths == 0 and not h.sleeps and not h.closed


def test_a_dead_process_is_closed_and_a_new_one_started_and_installed(caplog):
    caplog.set_level(logging.INFO, logger="streamd.server")
    h = Harness()
    first = FakeLane(1)

    async def body():
        h.sup.started(first)
        assert h.sup.started_at == 1000.0
        h.now += 5.0
        first.alive = False
        task = h.sup.check()
        assert task is not None and h.sup.restarting is task
        assert h.sup.check() is None  # one restart at a time
        await task

    run(body())
    assert h.deaths == 1
    assert h.sleeps == [LANE_RESTART_DELAY] and h.closed == [1]
    assert h.installed == [(1, 2)] and h.sup.lane.pid == 2 and h.sup.restarting is None
    assert h.sup.quick_deaths == 1 and h.sup.started_at == 1005.0 + LANE_RESTART_DELAY
    log = [r.getMessage() for r in caplog.records]
    assert f"test lane: starting a new engine process in {LANE_RESTART_DELAY:g} s" in log
    assert "test lane: a new engine process (pid 2)" in log


def test_quick_deaths_in_a_row_double_the_delay_and_a_stable_process_resets_it():
    h = Harness()

    async def die_after(seconds: float) -> None:
        h.now += seconds
        h.sup.lane.alive = False
        await h.sup.check()

    async def body():
        h.sup.started(FakeLane(1))
        for _ in range(3):
            await die_after(1.0)
        await die_after(LANE_STABLE)

    run(body())
    assert h.sleeps == [LANE_RESTART_DELAY, 2 * LANE_RESTART_DELAY, 4 * LANE_RESTART_DELAY, LANE_RESTART_DELAY]
    assert h.sup.quick_deaths == 0 and h.deaths == 4 and len(h.installed) == 4


def test_a_process_that_cannot_start_is_tried_again_later(caplog):
    caplog.set_level(logging.INFO, logger="streamd.server")
    h = Harness(fails=2)

    async def body():
        h.sup.started(FakeLane(1))
        h.sup.lane.alive = False
        await h.sup.check()

    run(body())
    # the death (1 quick death), then two failed starts (2 and 3 quick deaths in a row)
    assert h.sleeps == [LANE_RESTART_DELAY, 2 * LANE_RESTART_DELAY, 4 * LANE_RESTART_DELAY]
    assert h.installed == [(1, 2)] and h.sup.quick_deaths == 3
    assert sum("cannot start; trying again in" in r.getMessage() for r in caplog.records) == 2


def test_a_lane_that_gives_up_stays_down():
    h = Harness(give_up=True)
    first = FakeLane(1)

    async def body():
        h.sup.started(first)
        first.alive = False
        await h.sup.check()
        assert h.sup.check() is None  # no second restart: the lane stays down

    run(body())
    assert h.closed == [1] and not h.installed and h.sup.lane is first


@pytest.mark.parametrize("when", ["before", "during"])
def test_no_restart_while_the_daemon_drains(when):
    h = Harness()
    first = FakeLane(1)

    async def body():
        h.sup.started(first)
        first.alive = False
        if when == "before":
            h.draining = True
            assert h.sup.check() is None
            return
        task = h.sup.check()
        h.pids = iter([7])
        h.loading.append(lambda: setattr(h, "draining", True))  # the daemon starts draining meanwhile
        await task

    run(body())
    assert not h.installed and h.sup.lane is first
    assert h.closed == ([] if when == "before" else [1, 7])  # one that came up meanwhile is closed at once
    assert h.deaths == (0 if when == "before" else 1)


def test_the_delay_stops_doubling_at_its_most():
    h = Harness()

    async def body():
        h.sup.started(FakeLane(1))
        for _ in range(12):  # each process dies a second after its start
            h.now += 1.0
            h.sup.lane.alive = False
            await h.sup.check()

    run(body())
    assert h.sup.quick_deaths == 12
    assert h.sleeps[:3] == [LANE_RESTART_DELAY, 2 * LANE_RESTART_DELAY, 4 * LANE_RESTART_DELAY]
    assert max(h.sleeps) == LANE_RESTART_MAX and h.sleeps[-3:] == [LANE_RESTART_MAX] * 3
    assert all(b >= a for a, b in zip(h.sleeps, h.sleeps[1:]))
