"""The daemon's drain and close: new streams refused, live ones finished within the grace, then the
listeners, lanes, second pass and executors closed."""

from __future__ import annotations

import logging
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from .conn import drain_conns
from .lane import LaneProcess, drop_shared_folder

log = logging.getLogger("streamd.server")


class Shutdown:
    """Part of :class:`~.app.App`: its drain and close."""

    async def shutdown(self) -> None:
        """Drain: refuse new streams, finish every live one (finals, done), then close within the grace.

        Under load the streams whose backlog the grace cannot decode (:func:`.drain.drain_plan`, from the
        recent throughput) get a ``shutting_down`` error and close 1001 at once, as does every stream
        still live when the grace is over: no stream ends in silence."""
        if self.draining:
            return
        self.draining = True
        self.notifier.stopping("draining")
        grace = self.config.server.grace_seconds
        log.info("draining %d streams (grace %.1f s)", self.stream_count(), grace)
        deadline = time.monotonic() + grace
        if self._mic_task is not None:
            self._mic_task.cancel()
        extra = [asyncio.ensure_future(m.done.wait()) for m in self.mics.values()]
        if self.wyoming is not None:  # its streams finish (results sent), its idle connections close
            extra += [asyncio.ensure_future(e.wait()) for e in self.wyoming.drain()]
        drains = [drain_conns(self.conns, self.conn_done, self.throughput.rate(time.monotonic()), grace, deadline,
                              self.config.server.close_timeout, extra)]
        if self.fronts is not None:  # the front processes' connections, drained by each front alike
            drains.append(self.fronts.drain(grace, self.throughput.rate(time.monotonic()), deadline))
        await asyncio.gather(*drains)
        for sub in list(self.subscribers):
            sub.outbox.close(1001, "shutting_down")
        await self.close()

    async def close(self) -> None:
        """Stop listening, close what is left (1001), stop the batcher and the worker thread."""
        if self.wyoming is not None:
            await self.wyoming.close()  # a stream still live gets a shutting_down error first
        if self.fronts is not None:  # their connections are over (drained) or end with them
            await self.fronts.close()
        for srv in self.servers:
            srv.close()  # what is left after the grace: 1001 going away
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), self.config.server.close_timeout + 1)
            except asyncio.TimeoutError:
                log.warning("some connections did not close in time")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.main_lane is not None:  # from the engine thread, after the cycle it may be in (one pipe writer)
            await self._close_lane(self.main_lane, self.executor)
        await asyncio.get_running_loop().run_in_executor(None, self.executor.shutdown)
        if self.light_lane is not None:  # from the lane's thread, after the cycle it may be in (one pipe writer)
            await self._close_lane(self.light_lane, self.light_executor)
        if self.light_executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.light_executor.shutdown)
        drop_shared_folder(self._share_dir)  # a start that failed while the engines loaded
        if self.second_worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.second_worker.close)
        self.notifier.close()
        self.resource_errors.restore()
        log.info("stopped")

    @staticmethod
    async def _close_lane(lane: LaneProcess, executor: ThreadPoolExecutor) -> None:
        """Close an engine process from its lane's thread (killed if that takes over 5 s)."""
        closing = asyncio.get_running_loop().run_in_executor(executor, lane.close)
        try:
            await asyncio.wait_for(asyncio.shield(closing), 5.0)
        except asyncio.TimeoutError:
            lane.kill()
            await closing
