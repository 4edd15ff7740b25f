"""The daemon's drain and close: new streams refused, live ones finished within the grace, then the
listeners, lanes, second pass and executors closed."""

from __future__ import annotations

import logging
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from .drain import cannot_finish_message, drain_plan, grace_over_message
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
        log.info("draining %d streams (grace %.1f s)", len(self.conns), grace)
        deadline = time.monotonic() + grace
        if self._mic_task is not None:
            self._mic_task.cancel()
        for conn in list(self.conns.values()):
            conn.perform(conn.proto.shutdown())
        live = {k: c for k, c in self.conns.items() if not c.proto.closed}
        give_up = drain_plan({k: c.proto.audio_seconds - c.decoded for k, c in live.items()},
                             self.throughput.rate(time.monotonic()), grace)
        if give_up:
            log.warning("draining: %d of %d streams cannot be decoded within the grace period; ending them now",
                        len(give_up), len(live))
            for k in sorted(give_up):
                c = live[k]
                left = c.proto.audio_seconds - c.decoded
                c.perform(c.proto.fail("shutting_down", cannot_finish_message(left)))
        waits = [asyncio.ensure_future(e.wait()) for e in self.conn_done.values()]
        waits += [asyncio.ensure_future(m.done.wait()) for m in self.mics.values()]
        if self.wyoming is not None:  # its streams finish (results sent), its idle connections close
            waits += [asyncio.ensure_future(e.wait()) for e in self.wyoming.drain()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=max(0.0, deadline - time.monotonic()))
            for w in pending:
                w.cancel()
            late = [c for c in self.conns.values() if not c.proto.closed]
            if late:
                log.warning("grace period over: ending %d streams before their end (shutting_down)", len(late))
                for c in late:
                    c.perform(c.proto.fail("shutting_down", grace_over_message(grace)))
            left = [e for e in self.conn_done.values() if not e.is_set()]
            if left:  # the error and close frames go out before the listeners close the rest
                waits = [asyncio.ensure_future(e.wait()) for e in left]
                _, pending = await asyncio.wait(waits, timeout=min(self.config.server.close_timeout, 2.0))
                for w in pending:
                    w.cancel()
        for sub in list(self.subscribers):
            sub.outbox.close(1001, "shutting_down")
        await self.close()

    async def close(self) -> None:
        """Stop listening, close what is left (1001), stop the batcher and the worker thread."""
        if self.wyoming is not None:
            await self.wyoming.close()  # a stream still live gets a shutting_down error first
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
