"""The stress suite's pure helpers (:mod:`streamd.bench.stress`; the suite itself is loopback load, not run in CI)."""

from __future__ import annotations

import math
import random

import pytest

from streamd.bench import stress

BOUNDS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, math.inf)


def cumulative(samples, bounds=BOUNDS):
    """A Prometheus histogram's cumulative buckets of ``samples`` (le: count of samples <= le)."""
    return [(le, float(sum(x <= le for x in samples))) for le in bounds]


def oracle(samples, q, bounds=BOUNDS):
    """From the definition: the bucket holding the sample of rank ``q * n``, and the linear position of that
    rank between the bucket's lower and upper bound (PromQL's histogram_quantile)."""
    n = len(samples)
    rank = q * n
    lower, below = 0.0, 0
    for le in bounds:
        inside = sum(lower < x <= le for x in samples) if lower else sum(x <= le for x in samples)
        if below + inside >= rank and inside:
            return None if math.isinf(le) else lower + (le - lower) * (rank - below) / inside
        below += inside
        lower = le
    return None


@pytest.mark.parametrize("seed", range(6))
def test_hist_quantile_matches_the_definition_on_what_two_snapshots_differ_by(seed):
    rng = random.Random(seed)
    old = [rng.uniform(0, 0.2) for _ in range(rng.randint(0, 40))]
    new = [rng.expovariate(30) for _ in range(rng.randint(1, 200))]
    before, after = cumulative(old), cumulative(old + new)
    for q in (0.5, 0.9, 0.95, 0.99):
        want = oracle(new, q)
        got = stress.hist_quantile(before, after, q)
        assert (got is None) == (want is None) and (got is None or got == pytest.approx(want)), (q, got, want)


def test_hist_quantile_edges():
    empty = cumulative([])
    assert stress.hist_quantile(empty, empty, 0.95) is None  # nothing counted between the snapshots
    assert stress.hist_quantile([], cumulative([0.012] * 10), 0.5) == pytest.approx(0.015)  # no first snapshot
    assert stress.hist_quantile([], cumulative([5.0]), 0.5) is None  # only in +Inf: no finite bound to give
