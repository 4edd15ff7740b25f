"""Running one job function over many inputs, in this process or in a pool of spawned workers, with progress
lines on stderr (shared by ``streamd synth`` and ``streamd augment``; no torch)."""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

__all__ = ["job_results", "report_progress"]


@contextmanager
def job_results(job: Callable[[Any], Any], jobs: Sequence[Any], workers: int, init: Callable[..., None],
                initargs: tuple, chunksize: int) -> Iterator[Iterator[Any]]:
    """``job`` over ``jobs``, results in order: here after ``init(*initargs)`` when ``workers`` is 1, else in a
    pool of that many spawned processes, each initialized with ``init(*initargs)`` (closed on exit)."""
    if workers == 1:
        init(*initargs)
        yield map(job, jobs)
        return
    pool = mp.get_context("spawn").Pool(workers, initializer=init, initargs=initargs)
    try:
        yield pool.imap(job, jobs, chunksize=chunksize)
    finally:
        pool.close()
        pool.join()


def report_progress(what: str, k: int, total: int, unit: str, every: int, t0: float) -> None:
    """``<what>: k/total <unit>, N/s`` on stderr every ``every`` items and at the last one (``t0``: the start,
    ``time.monotonic()``)."""
    if k % every == 0 or k == total:
        el = time.monotonic() - t0
        print(f"{what}: {k}/{total} {unit}, {k / el:.1f}/s", file=sys.stderr, flush=True)
