"""The second pass in a child process: :class:`SecondPassProcess` has :class:`~.rescore.SecondPass`'s
``apply`` / ``apply_all`` and runs them in a process of its own (``engine.second_pass.worker: process``).

A Python thread running the second model holds the interpreter lock between its native calls (Moonshine's
greedy loop is Python per token), so the engine's steps wait for it and other streams' partials are late;
a process shares no lock with the engine.  The child (``spawn``: no state copied from the parent) builds the
SecondPass from the config (:func:`~.calibration.load_second_pass`, with the engine's hotwords), answers
``("ready", (its config, whether its model scores texts))`` or ``("error", text)``, then decodes each list of
pending Finals and wake detections it is sent (their 16 kHz audio travels through the pipe) and sends the
results back.  When the child dies, the Finals it held keep the first pass
(``second_pass: failed``, logged) and the next call starts a new child; a child that cannot start raises
:class:`RuntimeError` in the constructor (a server refuses to start, as with a thread).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import threading
from typing import Callable, Sequence

from streamd.config import EngineConfig, SecondPassConfig
from streamd.events import Final, WakeWord

from .rescore import fallback, pending

__all__ = ["SecondPassProcess", "second_pass_runner"]

log = logging.getLogger("streamd.second_pass")


def _serve(conn, factory: Callable, cfg: SecondPassConfig, hotwords: tuple[str, ...], first_calibrated: bool
           ) -> None:  # pragma: no cover - runs in the child
    # Ctrl-C in a terminal reaches the whole process group: the parent drains and then closes the child,
    # which must not die first (the same rule as the engine lanes' children, server/lane.py)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch
        torch.set_num_threads(1)
        second = factory(cfg, hotwords, first_calibrated)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", (second.cfg, bool(getattr(second, "scores_texts", False)),
                         bool(getattr(second, "batches", False)))))
    while True:
        try:
            finals = conn.recv()
        except EOFError:
            return
        if finals is None:
            return
        conn.send(second.apply_all(finals))


class SecondPassProcess:
    """A :class:`~.rescore.SecondPass` built from ``config.second_pass`` in a child process by ``factory``
    (``factory(second_pass_config, hotwords, first_calibrated)``, a module-level function: default
    :func:`~.calibration.load_second_pass`, with the engine's hotwords)."""

    def __init__(self, config: EngineConfig, first_calibrated: bool = False, start_timeout_s: float = 300.0,
                 factory: Callable | None = None):
        from .calibration import engine_hotwords, load_second_pass

        self._args = (factory or load_second_pass, config.second_pass, engine_hotwords(config), first_calibrated)
        self._timeout = start_timeout_s
        self._lock = threading.Lock()
        self._proc = self._conn = None
        self.cfg = config.second_pass
        self.scores_texts = False  # the child's model scores texts (SecondPass.scores_texts): known once it started
        self.batches = False  # ... and reads a round in batches (SecondPass.batches)
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, *self._args), name="streamd-second-pass", daemon=True)
        proc.start()
        child.close()
        if not parent.poll(self._timeout):
            proc.kill()
            raise RuntimeError(f"second pass: its process did not load {self.cfg.model} in {self._timeout:g} s")
        try:
            kind, value = parent.recv()
        except EOFError:
            kind, value = "error", f"its process exited (code {proc.exitcode})"
        if kind != "ready":
            proc.join(5)
            raise RuntimeError(f"second pass: {value}")
        self.cfg, self.scores_texts, self.batches = value
        self._proc, self._conn = proc, parent

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def apply_all(self, finals: Sequence[Final | WakeWord]) -> list[Final | WakeWord]:
        """The client's Finals for ``finals`` and the verified wake detections (as :meth:`SecondPass.apply_all`);
        never raises."""
        finals = list(finals)
        with self._lock:
            try:
                if self._proc is None or not self._proc.is_alive():
                    self._start()
                self._conn.send(finals)
                out = self._conn.recv()
            except Exception:  # noqa: BLE001 - the first pass stands; the next call starts a new child
                log.exception("second pass: its process failed; %d final(s) keep the first pass", len(finals))
                self._stop(kill=True)
                return [fallback(f, "failed") if pending(f) else f for f in finals]
        return out

    def apply(self, final: Final) -> Final:
        return self.apply_all([final])[0]

    def _stop(self, kill: bool = False) -> None:
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if proc is None:
            return
        try:
            if not kill:
                conn.send(None)
                proc.join(5)
        except Exception:  # noqa: BLE001 - the child is gone already
            pass
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        conn.close()

    def close(self) -> None:
        """Stop the child (after the call in progress)."""
        with self._lock:
            self._stop()


def second_pass_runner(config: EngineConfig, first_calibrated: bool = False):
    """The second pass a server's worker runs, per ``config.second_pass.worker``: a :class:`SecondPassProcess`
    or an in-process :class:`~.rescore.SecondPass` (:func:`~.calibration.second_pass_for`); None when off."""
    if not config.second_pass.enabled:
        return None
    if config.second_pass.worker == "process":
        from .calibration import check_verifier
        return check_verifier(config, SecondPassProcess(config, first_calibrated))
    from .calibration import second_pass_for
    return second_pass_for(config, first_calibrated)
