"""Calibrated confidence of second-pass words: the model's word probability and what the segment says about it.

A second model's word probability alone is not P(word right): on a one-word command the real-speech model is
as sure of a wrong word as of a right one, and how sure the streaming first pass was of the same segment says
how familiar its speech is.  A :class:`SecondPassCalibration` is a logistic model over :data:`FEATURES` of each
word (:func:`word_features`):

* ``logit_prob``: the logit of the model's word probability (its tokens' softmax probabilities aggregated);
* ``first_pass_conf``: the mean calibrated ``conf`` of the first pass's words of the segment;
* ``one_word``: 1 when the second pass wrote one word for the segment (a command), else 0;
* ``log_words``: the log of the number of words it wrote for the segment.

A stored plain :class:`~streamd.decode.calibration.Calibration` (one monotone map of the probability, what
``--kind isotonic`` or ``logistic`` stores) is applied alone.  Stored form (``to_dict``):
``{"version": 1, "by": "features", "features": [...], "weights": [...], "bias": b, "measure": "max_prob",
"aggregation": ..., "words": N}``.  :func:`fit_second_pass_calibration` fits one (Newton's method on the
L2-regularized cross entropy).  Plain Python and numpy; no model, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from streamd.decode.calibration import Calibration, CalibrationError, finite_real, newton_logistic, sigmoid
from streamd.decode.confidence import AGGREGATIONS

__all__ = ["SecondPassCalibration", "FEATURES", "word_features", "fit_second_pass_calibration", "logistic_weights"]

FEATURES = ("logit_prob", "first_pass_conf", "one_word", "log_words")
_VERSION = 1
_EPS = 1e-4  # word probabilities are clipped to [_EPS, 1 - _EPS] before their logit


def word_features(probs: Sequence[float], first_conf: Sequence[float]) -> np.ndarray:
    """(W, len(FEATURES)) features of one segment's W second-pass words with probabilities ``probs`` (W,);
    ``first_conf``: the ``conf`` of the first pass's words of the segment (0 when it has none)."""
    p = np.clip(np.asarray(probs, dtype=np.float64), _EPS, 1 - _EPS)
    w = p.size
    mean = float(np.mean(first_conf)) if len(first_conf) else 0.0
    out = np.empty((w, len(FEATURES)))
    out[:, 0] = np.log(p / (1 - p))
    out[:, 1] = mean
    out[:, 2] = 1.0 if w == 1 else 0.0
    out[:, 3] = math.log(max(w, 1))
    return out


@dataclass(frozen=True)
class SecondPassCalibration:
    """P(right) of a second-pass word: ``sigmoid(features . weights + bias)``, or one stored map of the
    probability (``single``; the other fields unused).

    weights: (len(FEATURES),); aggregation: the model's (its word probability's); words: fitted on."""

    weights: tuple[float, ...] = ()
    bias: float = 0.0
    aggregation: str = "min"
    words: int = 0
    single: Calibration | None = None

    def __post_init__(self) -> None:
        if self.single is not None:
            object.__setattr__(self, "aggregation", self.single.aggregation)
            object.__setattr__(self, "words", self.single.words)
            return
        if len(self.weights) != len(FEATURES) or not all(finite_real(v) for v in (*self.weights, self.bias)):
            raise CalibrationError(f"second-pass calibration: weights must be {len(FEATURES)} finite numbers "
                                   f"({', '.join(FEATURES)}) and bias one, got {self.weights!r}, {self.bias!r}")
        object.__setattr__(self, "weights", tuple(float(v) for v in self.weights))
        object.__setattr__(self, "bias", float(self.bias))
        if self.aggregation not in AGGREGATIONS:
            raise CalibrationError(f"second-pass calibration.aggregation: must be one of {list(AGGREGATIONS)}, "
                                   f"got {self.aggregation!r}")
        if isinstance(self.words, bool) or not isinstance(self.words, int) or self.words < 0:
            raise CalibrationError(f"second-pass calibration.words: must be an integer >= 0, got {self.words!r}")

    @classmethod
    def of_map(cls, cal: Calibration) -> "SecondPassCalibration":
        """One monotone map of the word probability, nothing else."""
        return cls(single=cal)

    def apply(self, probs: Sequence[float], first_conf: Sequence[float]) -> np.ndarray:
        """(W,) calibrated probabilities of one segment's words (:func:`word_features`' arguments)."""
        if self.single is not None:
            return self.single.apply(np.asarray(probs, dtype=np.float64))
        return sigmoid(word_features(probs, first_conf) @ np.asarray(self.weights) + self.bias)

    def apply_features(self, feats: np.ndarray, probs: np.ndarray) -> np.ndarray:
        """(N,) calibrated probabilities from precomputed ``feats`` (N, len(FEATURES)) and ``probs`` (N,)."""
        if self.single is not None:
            return self.single.apply(probs)
        return sigmoid(np.asarray(feats, dtype=np.float64) @ np.asarray(self.weights) + self.bias)

    def describe(self) -> str:
        if self.single is not None:
            return self.single.describe()
        terms = ", ".join(f"{n} {w:+.3f}" for n, w in zip(FEATURES, self.weights))
        return f"logistic over {terms}, bias {self.bias:+.3f} (fitted on {self.words} words)"

    def to_dict(self) -> dict[str, Any]:
        if self.single is not None:
            return self.single.to_dict()
        return {"version": _VERSION, "by": "features", "features": list(FEATURES), "weights": list(self.weights),
                "bias": self.bias, "measure": "max_prob", "aggregation": self.aggregation, "words": self.words}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SecondPassCalibration":
        """Inverse of :meth:`to_dict` (a plain Calibration dict: :meth:`of_map`); CalibrationError says what is
        wrong."""
        if not isinstance(d, Mapping):
            raise CalibrationError(f"second-pass calibration: expected a mapping, got {type(d).__name__}")
        if "by" not in d:
            return cls.of_map(Calibration.from_dict(d))
        if d.get("by") != "features" or d.get("version") != _VERSION:
            raise CalibrationError(f"second-pass calibration: by {d.get('by')!r} version {d.get('version')!r}; "
                                   f"this streamd reads by 'features' version {_VERSION}")
        known = {"version", "by", "features", "weights", "bias", "measure", "aggregation", "words"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CalibrationError(f"second-pass calibration.{unknown[0]}: unknown field")
        missing = sorted(known - set(d))
        if missing:
            raise CalibrationError(f"second-pass calibration: missing field {missing[0]!r}")
        if list(d["features"]) != list(FEATURES) or d["measure"] != "max_prob":
            raise CalibrationError(f"second-pass calibration: features {d['features']!r} of {d['measure']!r}; this "
                                   f"streamd computes {list(FEATURES)} of 'max_prob'")
        return cls(tuple(d["weights"]), d["bias"], d["aggregation"], d["words"])


def logistic_weights(feats: np.ndarray, correct: np.ndarray, l2: float = 1e-3, iterations: int = 100
                     ) -> np.ndarray:
    """(K + 1,) weights and bias last minimizing the mean cross entropy of ``sigmoid(feats @ w + b)`` against
    ``correct`` (N,) plus ``l2 / 2 * |w|^2`` (the bias unpenalized); ``feats`` (N, K)
    (:func:`streamd.decode.calibration.newton_logistic`)."""
    x = np.c_[np.asarray(feats, dtype=np.float64), np.ones(len(feats))]
    t = np.asarray(correct, dtype=np.float64)
    if x.shape[0] == 0 or t.shape != (x.shape[0],):
        raise ValueError(f"need N >= 1 words with one label each, got features {x.shape} and labels {t.shape}")
    reg = np.full(x.shape[1], l2)
    reg[-1] = 0.0
    return newton_logistic(x, t, reg, iterations=iterations)


def fit_second_pass_calibration(feats: np.ndarray, correct: np.ndarray, aggregation: str,
                                l2: float = 1e-3) -> SecondPassCalibration:
    """A :class:`SecondPassCalibration` fitted on ``feats`` (N, len(FEATURES)) with ``correct`` (N,) bool."""
    feats = np.asarray(feats, dtype=np.float64)
    if feats.ndim != 2 or feats.shape[1] != len(FEATURES):
        raise ValueError(f"features must be (N, {len(FEATURES)}), got {feats.shape}")
    theta = logistic_weights(feats, correct, l2)
    return SecondPassCalibration(tuple(theta[:-1]), float(theta[-1]), aggregation, int(feats.shape[0]))

