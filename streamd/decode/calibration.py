"""Calibrated word confidence: a monotone map from a raw word measure to P(word correct).

The engine's raw word confidence (a NeMo measure aggregated over the word's
tokens, :mod:`streamd.decode.confidence`) ranks words well but is not a
probability.  A :class:`Calibration` maps it to one: knots ``x`` (increasing
raw values) and ``y`` (non-decreasing probabilities), applied by
piecewise-linear interpolation and clamped to ``y[0]`` / ``y[-1]`` outside
``[x[0], x[-1]]``.  It records the measure it was fitted for (measure name,
alpha, aggregation, exclude_blank): applied to another measure's values it
would be meaningless, so :func:`resolve_calibration` refuses a mismatch.

Two fits (``streamd calibrate`` chooses on held-out words):

* **isotonic** (:func:`fit_isotonic`): the least-squares non-decreasing fit
  of the 0/1 correctness labels (pool adjacent violators, :func:`pav`, over
  the distinct raw values); a knot at each end of every constant run.
* **logistic** (:func:`fit_logistic`, Platt scaling): ``sigmoid(a s + b)``
  fitted by maximum likelihood with Platt's smoothed targets, tabulated at
  :data:`LOGISTIC_KNOTS` knots over [0, 1] (every raw measure lies in [0, 1])
  so that every kind is applied the same way; a negative slope (a measure
  that anti-ranks) is replaced by the constant fit.

Both bound the probabilities to ``[1 / (N + 2), (N + 1) / (N + 2)]`` for N
fitted words: finitely many words never justify a confidence of exactly 0 or
1.  Plain numpy; no torch, sockets or threads.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np

from streamd.config import ConfidenceConfig
from streamd.decode.confidence import AGGREGATIONS, MEASURE_NAMES

__all__ = ["CALIBRATION_KINDS", "LOGISTIC_KNOTS", "META_KEY", "CalibrationError", "Calibration", "pav",
           "fit_isotonic", "logistic_params", "newton_logistic", "fit_logistic", "fit_calibration", "resolve_calibration",
           "sigmoid", "finite_real"]

CALIBRATION_KINDS: tuple[str, ...] = ("isotonic", "logistic")
LOGISTIC_KNOTS = 201
META_KEY = "calibration"  # where a checkpoint's meta holds Calibration.to_dict()
_VERSION = 1


class CalibrationError(ValueError):
    """A calibration (or its stored form) is invalid; the message says which field and why."""


def finite_real(v: Any) -> bool:
    """A real number, finite, and not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Calibration:
    """A monotone map from one raw word-confidence measure to the probability that the word is right.

    x: (K,) knots, strictly increasing finite raw values, K >= 1.
    y: (K,) probabilities at the knots, non-decreasing, in [0, 1].
    measure, alpha, aggregation, exclude_blank: the raw measure it was fitted for
    (:class:`~streamd.config.ConfidenceConfig` ``name``, ``alpha``, ``aggregation``, ``exclude_blank``).
    kind: how it was fitted (``isotonic`` or ``logistic``); words: how many words it was fitted on.
    """

    x: tuple[float, ...]
    y: tuple[float, ...]
    measure: str
    alpha: float
    aggregation: str
    exclude_blank: bool = True
    kind: str = "isotonic"
    words: int = 0
    _xa: np.ndarray = field(init=False, repr=False, compare=False)
    _ya: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("x", "y"):
            v = getattr(self, name)
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or not all(finite_real(t) for t in v):
                raise CalibrationError(f"calibration.{name}: must be a sequence of finite numbers, got {v!r}")
            object.__setattr__(self, name, tuple(float(t) for t in v))
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        if not x.size or x.size != y.size:
            raise CalibrationError(f"calibration: x and y need one equal length >= 1, got {x.size} and {y.size}")
        if (np.diff(x) <= 0).any():
            raise CalibrationError(f"calibration.x: must be strictly increasing, got {list(self.x)}")
        if (np.diff(y) < 0).any():
            raise CalibrationError(f"calibration.y: must be non-decreasing, got {list(self.y)}")
        if y[0] < 0 or y[-1] > 1:
            raise CalibrationError(f"calibration.y: must lie in [0, 1], got {y[0]} .. {y[-1]}")
        if self.measure not in MEASURE_NAMES:
            raise CalibrationError(f"calibration.measure: must be one of {list(MEASURE_NAMES)}, got {self.measure!r}")
        if not finite_real(self.alpha) or self.alpha <= 0:
            raise CalibrationError(f"calibration.alpha: must be a finite number > 0, got {self.alpha!r}")
        if self.aggregation not in AGGREGATIONS:
            raise CalibrationError(f"calibration.aggregation: must be one of {list(AGGREGATIONS)}, "
                                   f"got {self.aggregation!r}")
        if not isinstance(self.exclude_blank, bool):
            raise CalibrationError(f"calibration.exclude_blank: must be true or false, got {self.exclude_blank!r}")
        if self.kind not in CALIBRATION_KINDS:
            raise CalibrationError(f"calibration.kind: must be one of {list(CALIBRATION_KINDS)}, got {self.kind!r}")
        if isinstance(self.words, bool) or not isinstance(self.words, int) or self.words < 0:
            raise CalibrationError(f"calibration.words: must be an integer >= 0, got {self.words!r}")
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "_xa", x)
        object.__setattr__(self, "_ya", y)

    def apply(self, raw: Sequence[float] | np.ndarray) -> np.ndarray:
        """Calibrated probabilities of raw values ``raw`` (any shape) -> float64 of the same shape.

        Piecewise-linear between knots; ``y[0]`` below ``x[0]`` and ``y[-1]`` above ``x[-1]``.
        """
        return np.interp(np.asarray(raw, dtype=np.float64), self._xa, self._ya)

    def mismatch(self, cfg: ConfidenceConfig) -> str | None:
        """None when ``cfg`` computes the raw measure this map was fitted for; else what differs."""
        ours = (self.measure, self.alpha, self.aggregation, self.exclude_blank)
        theirs = (cfg.name, float(cfg.alpha), cfg.aggregation, cfg.exclude_blank)
        if ours[0] == theirs[0] and math.isclose(ours[1], theirs[1], rel_tol=1e-9) and ours[2:] == theirs[2:]:
            return None
        return (f"fitted for {self.describe_measure()}, the engine computes {cfg.name} alpha {cfg.alpha} "
                f"{cfg.aggregation}, exclude_blank {str(cfg.exclude_blank).lower()}")

    def describe_measure(self) -> str:
        return f"{self.measure} alpha {self.alpha} {self.aggregation}, exclude_blank {str(self.exclude_blank).lower()}"

    def describe(self) -> str:
        """One line for people: kind, knots, measure, words."""
        return f"{self.kind}, {len(self.x)} knots, for {self.describe_measure()} (fitted on {self.words} words)"

    def to_dict(self) -> dict[str, Any]:
        """Plain form for a checkpoint's ``meta`` (loadable with ``torch.load(weights_only=True)``)."""
        return {"version": _VERSION, "kind": self.kind, "measure": self.measure, "alpha": self.alpha,
                "aggregation": self.aggregation, "exclude_blank": self.exclude_blank, "words": self.words,
                "x": list(self.x), "y": list(self.y)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Calibration":
        """Inverse of :meth:`to_dict`; CalibrationError names a missing, unknown or bad field."""
        if not isinstance(d, Mapping):
            raise CalibrationError(f"calibration: expected a mapping, got {type(d).__name__}")
        d = dict(d)
        if d.get("version") != _VERSION:
            raise CalibrationError(f"calibration: version {d.get('version')!r}, this streamd reads {_VERSION}")
        known = {f.name for f in fields(cls) if f.init} | {"version"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CalibrationError(f"calibration.{unknown[0]}: unknown field (known: {', '.join(sorted(known))})")
        missing = sorted(known - set(d))
        if missing:
            raise CalibrationError(f"calibration: missing field {missing[0]!r}")
        d.pop("version")
        return cls(**d)


# --------------------------------------------------------------------------- fits


def pav(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit by pool adjacent violators.

    y: (n,) values in order; w: (n,) positive weights.  Returns (n,) the
    non-decreasing ``f`` minimizing ``sum w (y - f)^2``: adjacent blocks whose
    means violate the order are pooled into their weighted mean until none does.
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if y.ndim != 1 or w.shape != y.shape:
        raise ValueError(f"pav: y and w must be 1-D of equal length, got shapes {y.shape} and {w.shape}")
    if not (np.isfinite(y).all() and np.isfinite(w).all() and (w > 0).all()):
        raise ValueError("pav: y must be finite and w finite and > 0")
    means: list[float] = []  # stack of blocks: weighted mean, weight, size
    weights: list[float] = []
    sizes: list[int] = []
    for v, wt in zip(y.tolist(), w.tolist()):
        m, k, n = v, wt, 1
        while means and means[-1] >= m:  # pool with the previous block while it is not below
            pm, pk = means.pop(), weights.pop()
            m = (pm * pk + m * k) / (pk + k)
            k += pk
            n += sizes.pop()
        means.append(m)
        weights.append(k)
        sizes.append(n)
    return np.repeat(np.asarray(means), sizes)


def _check_sample(raw: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(raw, dtype=np.float64)
    c = np.asarray(correct, dtype=bool)
    if s.ndim != 1 or c.shape != s.shape:
        raise ValueError(f"calibration fit: raw and correct must be 1-D of equal length, got shapes "
                         f"{s.shape} and {c.shape}")
    if not s.size:
        raise ValueError("calibration fit: no words to fit on")
    if not np.isfinite(s).all():
        raise ValueError(f"calibration fit: raw values must be finite, got {int((~np.isfinite(s)).sum())} NaN/inf")
    return s, c


def sigmoid(z: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-z))`` without overflow for any finite z."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _bounded(p: np.ndarray, n: int) -> np.ndarray:
    """Probabilities limited to [1 / (n + 2), (n + 1) / (n + 2)] for a fit on n words (order kept)."""
    return np.clip(p, 1.0 / (n + 2), (n + 1.0) / (n + 2))


def fit_isotonic(raw: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                 cfg: ConfidenceConfig) -> Calibration:
    """Isotonic calibration of raw word confidences ``raw`` (N,) with correctness ``correct`` (N,).

    Words with equal raw values are pooled first (the map is a function of the
    raw value), then :func:`pav` runs over the distinct values weighted by
    their word counts; each constant run of the fit becomes one or two knots.
    """
    s, c = _check_sample(raw, correct)
    xs, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    fitted = pav(np.bincount(inverse, weights=c.astype(np.float64)) / counts, counts.astype(np.float64))
    starts = np.flatnonzero(np.r_[True, np.diff(fitted) != 0])  # first distinct value of each constant run
    ends = np.r_[starts[1:] - 1, xs.size - 1]
    keep = np.unique(np.r_[starts, ends])  # (K,) distinct-value indices that are knots
    return Calibration(tuple(xs[keep]), tuple(_bounded(fitted[keep], s.size)), cfg.name, cfg.alpha,
                       cfg.aggregation, cfg.exclude_blank, "isotonic", int(s.size))


def logistic_params(raw: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                    iterations: int = 100) -> tuple[float, float]:
    """Platt scaling: (a, b) of ``P(correct | s) = sigmoid(a s + b)`` by maximum likelihood.

    Targets are Platt's smoothed labels ``(N+ + 1) / (N+ + 2)`` for correct and
    ``1 / (N- + 2)`` for wrong words, which keeps the fit finite on separable
    data.  Newton's method with step halving on the (convex) cross entropy.
    """
    s, c = _check_sample(raw, correct)
    n_pos = int(c.sum())
    t = np.where(c, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (s.size - n_pos + 2.0))  # (N,) targets
    start = np.array([0.0, math.log((t.sum() + 1e-12) / (s.size - t.sum() + 1e-12))])
    theta = newton_logistic(np.stack([s, np.ones_like(s)], 1), t, start=start, iterations=iterations)
    return float(theta[0]), float(theta[1])


def newton_logistic(feats: np.ndarray, targets: np.ndarray, reg: np.ndarray | None = None,
                    start: np.ndarray | None = None, iterations: int = 100,
                    sample_weight: np.ndarray | None = None) -> np.ndarray:
    """(K,) theta minimizing the mean cross entropy of ``sigmoid(feats @ theta)`` against ``targets`` (N,) in
    [0, 1], plus ``sum(reg * theta ** 2) / 2`` (``reg`` (K,), default none); ``feats`` (N, K) (a column of ones
    for a bias); ``sample_weight`` (N,) >= 0 weighs each example's cross entropy (default 1 each: a weight of 2
    counts an example twice).  Newton's method with step halving from ``start`` (default zeros); the
    objective is convex."""
    x = np.asarray(feats, dtype=np.float64)
    t = np.asarray(targets, dtype=np.float64)
    n, k = x.shape
    reg = np.zeros(k) if reg is None else np.asarray(reg, dtype=np.float64)
    sw = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)

    def loss(theta: np.ndarray) -> float:
        z = x @ theta
        return float(np.sum(sw * (np.logaddexp(0.0, z) - t * z)) / n + 0.5 * np.sum(reg * theta ** 2))

    theta = np.zeros(k) if start is None else np.asarray(start, dtype=np.float64).copy()
    cur = loss(theta)
    for _ in range(iterations):
        p = sigmoid(x @ theta)
        grad = x.T @ (sw * (p - t)) / n + reg * theta
        hess = (x * (sw * p * (1 - p))[:, None]).T @ x / n + np.diag(reg) + 1e-10 * np.eye(k)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6 and loss(theta - scale * step) > cur:
            scale /= 2
        new = theta - scale * step
        new_loss = loss(new)
        if new_loss > cur:
            break
        done = abs(cur - new_loss) <= 1e-12 * max(1.0, abs(cur))
        theta, cur = new, new_loss
        if done:
            break
    return theta


def fit_logistic(raw: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                 cfg: ConfidenceConfig) -> Calibration:
    """Platt-scaling calibration (:func:`logistic_params`) tabulated at :data:`LOGISTIC_KNOTS` knots over [0, 1].

    A negative slope would make the map decreasing; the constant fit (the smoothed share of correct words)
    is used instead.
    """
    s, c = _check_sample(raw, correct)
    a, b = logistic_params(s, c)
    if a < 0:
        n_pos = int(c.sum())
        a, b = 0.0, math.log((n_pos + 1.0) / (s.size - n_pos + 1.0))
    x = np.linspace(0.0, 1.0, LOGISTIC_KNOTS)
    y = np.maximum.accumulate(sigmoid(a * x + b))  # exactly non-decreasing in floating point
    return Calibration(tuple(x), tuple(_bounded(y, s.size)), cfg.name, cfg.alpha, cfg.aggregation,
                       cfg.exclude_blank, "logistic", int(s.size))


def fit_calibration(kind: str, raw: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                    cfg: ConfidenceConfig) -> Calibration:
    """The ``kind`` fit (one of :data:`CALIBRATION_KINDS`) of raw values of ``cfg``'s measure."""
    fits = {"isotonic": fit_isotonic, "logistic": fit_logistic}
    if kind not in fits:
        raise ValueError(f"unknown calibration kind {kind!r}; expected one of {list(CALIBRATION_KINDS)}")
    return fits[kind](raw, correct, cfg)


def resolve_calibration(meta: Mapping[str, Any], cfg: ConfidenceConfig) -> tuple[Calibration | None, str | None]:
    """The calibration a checkpoint's ``meta`` carries, and whether the engine may apply it under ``cfg``.

    Returns (stored, problem): ``stored`` is None when there is none; ``problem`` is None when it
    applies, else why not (``cfg.calibrated`` off, or fitted for another measure).  A malformed stored
    calibration raises CalibrationError naming ``meta.calibration``.
    """
    if META_KEY not in meta:
        return None, None
    try:
        stored = Calibration.from_dict(meta[META_KEY])
    except CalibrationError as e:
        raise CalibrationError(f"meta.{e}") from None
    if not cfg.calibrated:
        return stored, "turned off (confidence.calibrated: false)"
    return stored, stored.mismatch(cfg)
