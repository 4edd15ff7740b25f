"""The daemon's engines: the main engine loaded here or in its own process (a lane), the light lane, their
restarts, the calibration of their admission, and the second pass beside them."""

from __future__ import annotations

import logging
import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from ..events import Final, WakeWord
from .lane import LaneProcess, drop_shared_folder, shared_folder
from .runner import Batcher, EngineRunner

log = logging.getLogger("streamd.server")


class EngineLanes:
    """Part of :class:`~.app.App`: its engines."""

    async def _load_engines(self, loop: asyncio.AbstractEventLoop) -> EngineRunner | LaneProcess:
        """The main engine (in its own process with ``server.engine_process``, else here) and the light lane's
        process beside it (the daemon is ready with both): the main engine's runner."""
        s, lim = self.config.server, self.config.limits
        lane = None
        path = self.model_path or getattr(getattr(self.rec, "loaded", None), "path", "")
        if lim.light_lane and path and self.rec is None and self.loader is None and s.engine_process:
            self._share_dir = shared_folder()  # two engine processes: one copy of their n-gram tables (.lane)
        if lim.light_lane and path:
            lane = loop.create_task(self._start_light_lane(str(path)))
        runner: EngineRunner | LaneProcess
        if self.rec is None and self.loader is None and s.engine_process and self.model_path:
            runner = await self._start_main_lane(loop)
        else:
            runner = await self._load_here(loop)
        if lane is not None:  # loaded before the calibration, which it would slow down
            await lane
        drop_shared_folder(self._share_dir)  # both have mapped what they share (restarted lanes load their own)
        self._share_dir = None
        return runner

    async def _start_main_lane(self, loop: asyncio.AbstractEventLoop) -> LaneProcess:
        """The main engine in a process of its own (``server.engine_process``), loaded and warmed up."""
        s = self.config.server
        log.info("loading model %s in the main engine's process", self.model_path)
        t0 = time.perf_counter()
        try:
            runner = await loop.run_in_executor(self.executor, self._main_lane_process)
        except RuntimeError as e:  # as if it had loaded here: the child's own error (CheckpointError, ...)
            if isinstance(e.__cause__, Exception):
                raise e.__cause__ from None
            raise
        self.main_supervisor.started(runner)
        log.info("main engine: process pid %s (policy %s, nice +%d), loaded and warmed up (%.1f s of audio) in "
                 "%.2f s", runner.pid, "normal" if runner.policy_error else s.engine_policy, s.engine_nice,
                 s.warmup_seconds, time.perf_counter() - t0)
        if runner.policy_error:
            log.warning("main engine: server.engine_policy %s not applied (%s); it runs at nice +%d",
                        s.engine_policy, runner.policy_error, s.engine_nice)
        return runner

    async def _load_here(self, loop: asyncio.AbstractEventLoop) -> EngineRunner:
        """The main engine in this process (the given Recognizer, or loaded in the engine thread), warmed up."""
        s, lim = self.config.server, self.config.limits
        if self.rec is None:
            loader = self.loader
            if loader is None:
                from ..engine import Recognizer

                log.info("loading model %s", self.model_path)
                loader = functools.partial(Recognizer.from_checkpoint, self.model_path, self.config.engine)
            self.rec = await loop.run_in_executor(self.executor, loader)
        if s.warmup_seconds > 0:
            t0 = time.perf_counter()
            await loop.run_in_executor(self.executor, self.rec.warm_up, s.warmup_seconds)
            log.info("warmed up (%.1f s of audio, every method) in %.2f s", s.warmup_seconds,
                     time.perf_counter() - t0)
        return await loop.run_in_executor(self.executor, EngineRunner, self.rec, s.max_steps_per_cycle,
                                          lim.max_backlog_seconds)

    async def _calibrate(self, loop: asyncio.AbstractEventLoop, runner: EngineRunner | LaneProcess) -> None:
        """Admission by capacity (``limits.max_load``): the step-time model, calibrated on this machine now, and
        the event loop's lag watched."""
        lim = self.config.limits
        model = await loop.run_in_executor(self.executor, runner.calibrate)
        self.admission.model = model
        self._tasks.append(loop.create_task(self._watch_loop_lag()))
        log.info("capacity: a batch step takes %.1f ms + %.2f ms per greedy stream here; about %d greedy "
                 "streams fit in limits.max_load (%g of a %.2f s chunk), fewer with beam searches",
                 1000 * model.fixed, 1000 * model.per_unit, model.budget(0.0, lim.max_load), lim.max_load,
                 model.chunk_seconds)


    async def _start_second_pass(self, loop: asyncio.AbstractEventLoop) -> None:
        """engine.second_pass: load its model (in its own process or beside the engine, ``worker``) and start
        its worker thread and gate."""
        spc = self.engine_config.second_pass
        if not spc.enabled:
            return
        from ..second_pass.process import second_pass_runner
        from ..second_pass.worker import FinalGate, SecondPassWorker

        t0 = time.perf_counter()
        calibrated = bool(self.model_info.get("calibrated"))
        second = self._second_given or await loop.run_in_executor(None, second_pass_runner, self.engine_config,
                                                                   calibrated)
        self.second_worker = SecondPassWorker(second, spc.max_queue, spc.max_batch, spc.max_wait_s)

        def done(key: Any, final: Final | WakeWord, seconds: float) -> None:  # in the worker thread
            loop.call_soon_threadsafe(self._second_done, key, final, seconds)

        self.second_gate = FinalGate(lambda key, final: self.second_worker.submit(key, final, done),
                                     on_skip=lambda key, final: self._second_outcome(final))
        self.model_info["second_pass"] = spc.model if self.config.server.show_model_paths or \
            not Path(spc.model).is_absolute() else Path(spc.model).name
        log.info("second pass: %s loaded in %.2f s (queue %d, wait <= %g s)", spc.model, time.perf_counter() - t0,
                 spc.max_queue, spc.max_wait_s)

    def _second_outcome(self, ev: Final | WakeWord) -> None:
        if isinstance(ev, WakeWord):
            self.metrics.wake_verifications.labels(ev.keyword, ev.verification or "none").inc()
        else:
            self.metrics.second_pass.labels(ev.second_pass or "none").inc()

    def _second_done(self, key: int, final: Final | WakeWord, seconds: float) -> None:
        """A second pass (or a wake verification) came back (event loop): count it, deliver it (a wake
        detection if it stands) and what waited behind it."""
        self._second_outcome(final)
        if isinstance(final, Final) and final.second_pass == "done":
            self.metrics.second_pass_seconds.observe(seconds)
        if self.second_gate is not None:
            for k, ev in self.second_gate.resolved(key, final):
                self._deliver(k, ev, self._targets())

    def _main_lane_process(self) -> LaneProcess:
        """The main engine's process (``server.engine_process``), loaded and warmed up (blocking: the engine
        thread)."""
        s, lim = self.config.server, self.config.limits
        return LaneProcess(str(self.model_path), self.config.engine, s.max_steps_per_cycle, lim.max_backlog_seconds,
                           s.warmup_seconds, name="main engine", nice=s.engine_nice,
                           policy=s.engine_policy, share_dir=self._share_dir)

    @staticmethod
    async def _in_thread(executor: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def _new_main_lane(self, old: LaneProcess) -> LaneProcess:
        """A new main engine process after ``old`` died (RuntimeError when it cannot start: tried again)."""
        return await self._in_thread(self.executor, self._main_lane_process)

    def _main_lane_died(self) -> None:
        """The main engine's process died (its streams have their errors): new streams get ``loading`` and
        ``/readyz`` 503 while its supervisor starts a new one (the capacity model stays the one calibrated at
        the start)."""
        self.loading = True

    def _install_main_lane(self, old: LaneProcess, lane: LaneProcess) -> None:
        lane.budget = old.budget
        self.batcher.runner = lane
        self.loading = False

    async def _start_light_lane(self, model_path: str) -> None:
        """The light lane (``limits.light_lane``, :mod:`.lane`): the same checkpoint and engine config in a
        child process, driven by a batcher of its own.  Its steps are not fed to the capacity model (the
        main lane's are); every stream still counts in the admission.  While its process is dead (its streams
        have their errors) every stream goes to the main engine; if a new one cannot start, the daemon goes on
        with one engine."""
        config = self.engine_config  # the main engine's
        self.light_executor = ThreadPoolExecutor(1, thread_name_prefix="streamd-light")
        lane = await self._new_lane(model_path, config)
        if lane is None:
            return
        self.light_supervisor.started(lane)
        self.light = Batcher(lane, self.light_executor, self._cycle_done)
        self._tasks.append(asyncio.get_running_loop().create_task(self.light.run()))
        self._lane_gauge()
        log.info("light lane: the only stream of a client (up to %g cost units of them) decodes in a second "
                 "engine process (pid %s)", self.config.limits.light_lane, lane.pid)

    async def _new_lane(self, model_path: str, config: Any) -> LaneProcess | None:
        """A light lane process, loaded (in the lane's thread), or None (logged: the main engine takes every
        stream)."""
        s, lim = self.config.server, self.config.limits
        try:
            return await self._in_thread(
                self.light_executor, functools.partial(LaneProcess, model_path, config, s.max_steps_per_cycle,
                                                       lim.max_backlog_seconds, min(s.warmup_seconds, 1.0),
                                                       share_dir=self._share_dir))
        except RuntimeError as e:
            log.error("%s; every stream goes to the main engine", e)
            return None

    def _install_light_lane(self, old: LaneProcess, lane: LaneProcess) -> None:
        self.light.runner = lane
        self._lane_gauge()
