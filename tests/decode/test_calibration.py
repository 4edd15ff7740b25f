"""streamd.decode.calibration: PAV and the fits against references from their definitions, the map, storage."""

import itertools
import math

import numpy as np
import pytest

from streamd.config import ConfidenceConfig
from streamd.decode.calibration import (LOGISTIC_KNOTS, Calibration, CalibrationError, fit_calibration,
                                        fit_isotonic, fit_logistic, logistic_params, pav, resolve_calibration)

CC = ConfidenceConfig()


# --------------------------------------------------------------------------- references


def pav_by_partitions(y, w):
    """Least-squares non-decreasing fit by exhaustion: the optimum is constant on consecutive blocks, each at
    its weighted mean, so try every split of 0..n-1 into blocks, keep those whose means do not decrease, and
    take the one with the smallest weighted squared error."""
    n = len(y)
    best, best_err = None, math.inf
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        means = [sum(w[i] * y[i] for i in range(a, b)) / sum(w[a:b]) for a, b in zip(bounds, bounds[1:])]
        if any(m2 < m1 - 1e-12 for m1, m2 in zip(means, means[1:])):
            continue
        fit = [m for (a, b), m in zip(zip(bounds, bounds[1:]), means) for _ in range(a, b)]
        err = sum(wi * (yi - fi) ** 2 for wi, yi, fi in zip(w, y, fit))
        if err < best_err - 1e-12:
            best, best_err = fit, err
    return np.array(best)


def pav_by_minmax(y, w):
    """The closed form of isotonic regression: f_i = max over j <= i of min over k >= i of mean(y[j..k])."""
    n = len(y)

    def mean(j, k):
        return sum(w[t] * y[t] for t in range(j, k + 1)) / sum(w[j:k + 1])

    return np.array([max(min(mean(j, k) for k in range(i, n)) for j in range(i + 1)) for i in range(n)])


# --------------------------------------------------------------------------- PAV


@pytest.mark.parametrize("seed", range(6))
def test_pav_equals_exhaustive_and_minmax_references(seed):
    g = np.random.default_rng(seed)
    for _ in range(25):
        n = int(g.integers(1, 8))
        y = g.choice([0.0, 0.25, 1.0, 0.5], size=n) if seed % 2 else g.normal(size=n)  # ties and plain values
        w = g.integers(1, 5, size=n).astype(float)
        got = pav(y, w)
        assert np.allclose(got, pav_by_partitions(list(y), list(w)), atol=1e-12)
        assert np.allclose(got, pav_by_minmax(list(y), list(w)), atol=1e-12)
        assert (np.diff(got) >= -1e-15).all()


def test_pav_hand_cases_and_errors():
    assert pav([1.0, 0.0], [1.0, 1.0]).tolist() == [0.5, 0.5]
    assert pav([1.0, 0.0], [3.0, 1.0]).tolist() == [0.75, 0.75]
    assert pav([0.0, 1.0, 0.0, 1.0], [1.0] * 4).tolist() == [0.0, 0.5, 0.5, 1.0]
    assert pav([], []).tolist() == []
    with pytest.raises(ValueError, match="w finite and > 0"):
        pav([1.0], [0.0])
    with pytest.raises(ValueError, match="equal length"):
        pav([1.0, 2.0], [1.0])


# --------------------------------------------------------------------------- isotonic fit


def isotonic_reference(raw, correct):
    """Per distinct raw value the PAV fit of the labels (one point per word, by exhaustion): dict value -> fit."""
    xs = np.unique(raw)
    # pool words of equal raw value into one point weighted by its count (the fit must be a function of raw)
    y = [float(np.mean(correct[raw == v])) for v in xs]
    w = [float(np.sum(raw == v)) for v in xs]
    return dict(zip(xs.tolist(), pav_by_partitions(y, w).tolist()))


@pytest.mark.parametrize("seed", range(5))
def test_fit_isotonic_at_the_data_equals_the_reference(seed):
    g = np.random.default_rng(seed)
    n = int(g.integers(3, 40))
    raw = np.round(g.uniform(0, 1, n), 1)  # at most 11 distinct values (the exhaustive reference), many ties
    correct = g.uniform(0, 1, n) < raw
    cal = fit_isotonic(raw, correct, CC)
    ref = isotonic_reference(raw, correct)
    lo, hi = 1 / (n + 2), (n + 1) / (n + 2)
    for v, f in ref.items():
        assert cal.apply([v])[0] == pytest.approx(min(max(f, lo), hi), abs=1e-12)
    assert cal.kind == "isotonic" and cal.words == n and set(cal.x) <= set(ref)
    # monotone everywhere, between and beyond the knots
    grid = np.linspace(-0.5, 1.5, 401)
    assert (np.diff(cal.apply(grid)) >= 0).all()
    assert cal.apply([-0.5])[0] == cal.y[0] and cal.apply([1.5])[0] == cal.y[-1]


def test_fit_isotonic_hand_case():
    # raw 0.1: 0/2 correct, 0.5: 1 of 2, 0.4: 1 of 1 (violates with 0.5), 0.9: 2/2
    raw = [0.1, 0.1, 0.4, 0.5, 0.5, 0.9, 0.9]
    correct = [False, False, True, True, False, True, True]
    cal = fit_isotonic(raw, correct, CC)
    n = 7
    # blocks: {0.1} -> 0, {0.4, 0.5} -> 2/3, {0.9} -> 1; bounded to [1/9, 8/9]; a knot at each end of a block
    assert cal.x == (0.1, 0.4, 0.5, 0.9)
    assert cal.y == pytest.approx((1 / (n + 2), 2 / 3, 2 / 3, (n + 1) / (n + 2)))
    assert cal.apply([0.45, 0.7]) == pytest.approx([2 / 3, (2 / 3 + 8 / 9) / 2])


def test_fit_single_value_and_errors():
    cal = fit_isotonic([0.3, 0.3, 0.3], [True, True, False], CC)
    assert cal.x == (0.3,) and cal.apply([0.0, 1.0]) == pytest.approx([2 / 3, 2 / 3])
    with pytest.raises(ValueError, match="no words"):
        fit_isotonic([], [], CC)
    with pytest.raises(ValueError, match="finite"):
        fit_isotonic([0.1, math.nan], [True, False], CC)
    with pytest.raises(ValueError, match="unknown calibration kind"):
        fit_calibration("spline", [0.1], [True], CC)


# --------------------------------------------------------------------------- logistic fit


def platt_targets(correct):
    n_pos = int(np.sum(correct))
    return np.where(correct, (n_pos + 1) / (n_pos + 2), 1 / (len(correct) - n_pos + 2))


@pytest.mark.parametrize("seed", range(4))
def test_logistic_params_minimize_the_cross_entropy(seed):
    """Against scipy's general-purpose minimizer on the same objective (Platt targets)."""
    from scipy.optimize import minimize

    g = np.random.default_rng(seed)
    raw = g.uniform(0, 1, 300)
    correct = g.uniform(0, 1, 300) < 1 / (1 + np.exp(-(4 * raw - 1)))
    t = platt_targets(correct)

    def loss(theta):
        z = theta[0] * raw + theta[1]
        return float(np.sum(np.logaddexp(0, z) - t * z))

    ref = minimize(loss, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    a, b = logistic_params(raw, correct)
    assert (a, b) == pytest.approx(tuple(ref), abs=1e-4)
    assert loss(np.array([a, b])) <= loss(ref) + 1e-9


def test_fit_logistic_table_and_separable_data():
    raw = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
    correct = raw > 0.5  # separable: plain maximum likelihood would diverge; Platt's targets keep it finite
    a, b = logistic_params(raw, correct)
    assert math.isfinite(a) and math.isfinite(b) and a > 0
    cal = fit_logistic(raw, correct, CC)
    assert len(cal.x) == LOGISTIC_KNOTS and cal.x[0] == 0.0 and cal.x[-1] == 1.0 and cal.kind == "logistic"
    for s in (0.05, 0.5, 0.77):  # the sigmoid, bounded to [1 / (n + 2), (n + 1) / (n + 2)] for n = 6 words
        assert cal.apply([s])[0] == pytest.approx(min(max(1 / (1 + math.exp(-(a * s + b))), 1 / 8), 7 / 8), abs=1e-3)
    assert cal.apply([0.0])[0] == 1 / 8 and cal.apply([0.5])[0] > 1 / 8
    # an anti-ranking measure: the constant fit, never a decreasing map
    flat = fit_logistic(raw, ~correct, CC)
    assert flat.apply([0.0])[0] == flat.apply([1.0])[0] == pytest.approx(4 / 8)


# --------------------------------------------------------------------------- the map and its storage


def make(**kw):
    base = dict(x=(0.0, 0.5, 1.0), y=(0.2, 0.4, 1.0), measure="entropy_tsallis_exp", alpha=0.33, aggregation="min")
    return Calibration(**{**base, **kw})


def test_interpolation_and_clamping():
    cal = make(x=(0.2, 0.6), y=(0.1, 0.9))
    assert cal.apply([0.0, 0.2, 0.3, 0.4, 0.6, 1.0]) == pytest.approx([0.1, 0.1, 0.3, 0.5, 0.9, 0.9])
    assert cal.apply(np.zeros((2, 3))).shape == (2, 3)
    assert make(x=(0.5,), y=(0.7,)).apply([0.0, 1.0]).tolist() == [0.7, 0.7]


@pytest.mark.parametrize("kw, msg", [
    (dict(x=(0.0, 0.0, 1.0)), "x: must be strictly increasing"),
    (dict(y=(0.5, 0.4, 1.0)), "y: must be non-decreasing"),
    (dict(y=(0.2, 0.4, 1.5)), r"y: must lie in \[0, 1\]"),
    (dict(x=(0.0, 1.0)), "x and y need one equal length"),
    (dict(x=(), y=()), "x and y need one equal length"),
    (dict(x=(0.0, math.nan, 1.0)), "x: must be a sequence of finite numbers"),
    (dict(y="abc"), "y: must be a sequence of finite numbers"),
    (dict(measure="entropy"), "measure: must be one of"),
    (dict(alpha=0), "alpha: must be a finite number > 0"),
    (dict(aggregation="median"), "aggregation: must be one of"),
    (dict(exclude_blank=1), "exclude_blank: must be true or false"),
    (dict(kind="spline"), "kind: must be one of"),
    (dict(words=-1), "words: must be an integer >= 0"),
])
def test_validation(kw, msg):
    with pytest.raises(CalibrationError, match=msg):
        make(**kw)


def test_dict_round_trip_and_errors():
    cal = make(kind="logistic", words=12, exclude_blank=True)
    d = cal.to_dict()
    assert Calibration.from_dict(d) == cal and isinstance(d["x"], list)
    with pytest.raises(CalibrationError, match="calibration.colour: unknown field"):
        Calibration.from_dict({**d, "colour": 1})
    with pytest.raises(CalibrationError, match="missing field 'y'"):
        Calibration.from_dict({k: v for k, v in d.items() if k != "y"})
    with pytest.raises(CalibrationError, match="version 2"):
        Calibration.from_dict({**d, "version": 2})
    with pytest.raises(CalibrationError, match="expected a mapping"):
        Calibration.from_dict([1, 2])


def test_resolve_calibration_matches_the_configured_measure():
    cal = make()
    meta = {"calibration": cal.to_dict()}
    assert resolve_calibration({}, CC) == (None, None)
    assert resolve_calibration(meta, CC) == (cal, None)
    for other in (ConfidenceConfig(measure="max_prob"), ConfidenceConfig(alpha=0.5),
                  ConfidenceConfig(aggregation="mean"), ConfidenceConfig(exclude_blank=False)):
        stored, problem = resolve_calibration(meta, other)
        assert stored == cal and "fitted for entropy_tsallis_exp alpha 0.33 min" in problem
    stored, problem = resolve_calibration(meta, ConfidenceConfig(calibrated=False))
    assert stored == cal and "calibrated: false" in problem
    with pytest.raises(CalibrationError, match=r"meta\.calibration\.x: must be strictly increasing"):
        resolve_calibration({"calibration": {**cal.to_dict(), "x": [1, 0, 2]}}, CC)
