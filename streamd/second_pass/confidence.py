"""Calibrated confidence of second-pass words: the model's word probability and what the segment says about it.

A second model's word probability alone is not P(word right): on a one-word command the real-speech model is
as sure of a wrong word as of a right one, and how sure the streaming first pass was of the same segment says
how familiar its speech is.  A :class:`SecondPassCalibration` is a logistic model over :data:`FEATURES` of each
word (:func:`word_features`):

* ``logit_prob``: the logit of the model's word probability (its tokens' softmax probabilities aggregated);
* ``first_pass_conf``: the mean calibrated ``conf`` of the first pass's words of the segment;
* ``one_word``: 1 when the second pass wrote one word for the segment (a command), else 0;
* ``log_words``: the log of the number of words it wrote for the segment;
* ``narrowband``: 1 when the stream's declared input rate is below 16 kHz (:func:`narrowband`: telephone
  audio, 8 kHz, has nothing above 4 kHz), else 0 (also when the rate is not known);
* ``count_gap``: ``|log(second-pass words / first-pass words)|`` of the segment (first-pass words at least
  1): the two passes disagreeing on how many words were said is evidence that one of them wrote words
  that were not said or missed some.

A calibration names the features it uses (a subset of :data:`FEATURES`, in its stored ``features``), so a
map stored before a feature was added still loads and applies with its own.

A stored plain :class:`~streamd.decode.calibration.Calibration` (one monotone map of the probability, what
``--kind isotonic`` or ``logistic`` stores) is applied alone.  Stored form (``to_dict``):
``{"version": 1, "by": "features", "features": [...], "weights": [...], "bias": b, "measure": "max_prob",
"aggregation": ..., "words": N[, "choice": {...}]}`` (``choice``: the segment choice fitted with it,
:class:`~.choice.SegmentChoice`).  :func:`fit_second_pass_calibration` fits one (Newton's method on the
L2-regularized cross entropy).  Plain Python and numpy; no model, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from streamd.decode.calibration import Calibration, CalibrationError, finite_real, newton_logistic, sigmoid
from streamd.decode.confidence import AGGREGATIONS

from .choice import SegmentChoice

__all__ = ["SecondPassCalibration", "FEATURES", "narrowband", "word_features", "fit_second_pass_calibration",
           "logistic_weights"]

FEATURES = ("logit_prob", "first_pass_conf", "one_word", "log_words", "narrowband", "count_gap")
WIDEBAND_RATE = 16000
"""The input rate (Hz) from which a stream is wideband; below it the ``narrowband`` feature is 1."""
_VERSION = 1
_EPS = 1e-4  # word probabilities are clipped to [_EPS, 1 - _EPS] before their logit


def narrowband(sample_rate: int | None) -> bool:
    """A stream declared at ``sample_rate`` Hz is narrowband: below :data:`WIDEBAND_RATE` (None: not known,
    False)."""
    return sample_rate is not None and sample_rate < WIDEBAND_RATE


def word_features(probs: Sequence[float], first_conf: Sequence[float], sample_rate: int | None = None
                  ) -> np.ndarray:
    """(W, len(FEATURES)) features of one segment's W second-pass words with probabilities ``probs`` (W,);
    ``first_conf``: the ``conf`` of the first pass's words of the segment, one per word (mean 0 when it has
    none); ``sample_rate``: the stream's declared input rate (:attr:`streamd.events.Final.sample_rate`)."""
    p = np.clip(np.asarray(probs, dtype=np.float64), _EPS, 1 - _EPS)
    w = p.size
    mean = float(np.mean(first_conf)) if len(first_conf) else 0.0
    out = np.empty((w, len(FEATURES)))
    out[:, 0] = np.log(p / (1 - p))
    out[:, 1] = mean
    out[:, 2] = 1.0 if w == 1 else 0.0
    out[:, 3] = math.log(max(w, 1))
    out[:, 4] = 1.0 if narrowband(sample_rate) else 0.0
    out[:, 5] = abs(math.log(max(w, 1) / max(len(first_conf), 1)))
    return out


@dataclass(frozen=True)
class SecondPassCalibration:
    """P(right) of a second-pass word: ``sigmoid(features . weights + bias)``, or one stored map of the
    probability (``single``; the other fields unused).

    features: the names of the features it uses (distinct, of :data:`FEATURES`; a map fitted before some
    existed uses fewer); weights: (len(features),); aggregation: the model's (its word probability's);
    words: fitted on; choice: the rule that picks a segment's pass (``select: learned``, fitted with the
    features calibration on the same sets; :mod:`.choice`), None when none was fitted."""

    weights: tuple[float, ...] = ()
    bias: float = 0.0
    aggregation: str = "min"
    words: int = 0
    single: Calibration | None = None
    features: tuple[str, ...] = FEATURES
    choice: SegmentChoice | None = None

    def __post_init__(self) -> None:
        if self.single is not None:
            object.__setattr__(self, "aggregation", self.single.aggregation)
            object.__setattr__(self, "words", self.single.words)
            if self.choice is not None:
                raise CalibrationError("second-pass calibration: a segment choice is stored only with a features "
                                       "calibration (its inputs are that calibration's probabilities)")
            return
        names = tuple(self.features)
        if not set(names) <= set(FEATURES) or len(set(names)) != len(names):
            raise CalibrationError(f"second-pass calibration: features {list(names)!r}; this streamd computes "
                                   f"{list(FEATURES)} (each at most once)")
        object.__setattr__(self, "features", names)
        if len(self.weights) != len(names) or not all(finite_real(v) for v in (*self.weights, self.bias)):
            raise CalibrationError(f"second-pass calibration: weights must be {len(names)} finite numbers "
                                   f"({', '.join(names)}) and bias one, got {self.weights!r}, {self.bias!r}")
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

    def apply(self, probs: Sequence[float], first_conf: Sequence[float], sample_rate: int | None = None
              ) -> np.ndarray:
        """(W,) calibrated probabilities of one segment's words (:func:`word_features`' arguments)."""
        if self.single is not None:
            return self.single.apply(np.asarray(probs, dtype=np.float64))
        return self.apply_features(word_features(probs, first_conf, sample_rate), np.asarray(probs))

    def apply_features(self, feats: np.ndarray, probs: np.ndarray) -> np.ndarray:
        """(N,) calibrated probabilities from precomputed ``feats`` (N, len(FEATURES)) and ``probs`` (N,)."""
        if self.single is not None:
            return self.single.apply(probs)
        return sigmoid(np.asarray(feats, dtype=np.float64)[:, _columns(self.features)] @ np.asarray(self.weights)
                       + self.bias)

    def describe(self) -> str:
        if self.single is not None:
            return self.single.describe()
        terms = ", ".join(f"{n} {w:+.3f}" for n, w in zip(self.features, self.weights))
        return f"logistic over {terms}, bias {self.bias:+.3f} (fitted on {self.words} words)"

    def to_dict(self) -> dict[str, Any]:
        if self.single is not None:
            return self.single.to_dict()
        out = {"version": _VERSION, "by": "features", "features": list(self.features), "weights": list(self.weights),
               "bias": self.bias, "measure": "max_prob", "aggregation": self.aggregation, "words": self.words}
        if self.choice is not None:
            out["choice"] = self.choice.to_dict()
        return out

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
        unknown = sorted(set(d) - known - {"choice"})
        if unknown:
            raise CalibrationError(f"second-pass calibration.{unknown[0]}: unknown field")
        missing = sorted(known - set(d))
        if missing:
            raise CalibrationError(f"second-pass calibration: missing field {missing[0]!r}")
        if (d["measure"] != "max_prob" or not isinstance(d["features"], (list, tuple))
                or not all(isinstance(n, str) for n in d["features"])):
            raise CalibrationError(f"second-pass calibration: features {d['features']!r} of {d['measure']!r}; this "
                                   f"streamd computes {list(FEATURES)} of 'max_prob'")
        choice = SegmentChoice.from_dict(d["choice"]) if d.get("choice") is not None else None
        return cls(tuple(d["weights"]), d["bias"], d["aggregation"], d["words"], features=tuple(d["features"]),
                   choice=choice)


def _columns(names: Sequence[str]) -> list[int]:
    """The columns of :func:`word_features`' matrix that hold the features ``names``."""
    return [FEATURES.index(n) for n in names]


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
                                l2: float = 1e-3, features: Sequence[str] = FEATURES) -> SecondPassCalibration:
    """A :class:`SecondPassCalibration` over ``features`` (names of :data:`FEATURES`) fitted on ``feats``
    (N, len(FEATURES)) with ``correct`` (N,) bool."""
    feats = np.asarray(feats, dtype=np.float64)
    if feats.ndim != 2 or feats.shape[1] != len(FEATURES):
        raise ValueError(f"features must be (N, {len(FEATURES)}), got {feats.shape}")
    names = tuple(features)
    if not set(names) <= set(FEATURES):
        raise ValueError(f"features must be of {list(FEATURES)}, got {list(names)}")
    theta = logistic_weights(feats[:, _columns(names)], correct, l2)
    return SecondPassCalibration(tuple(theta[:-1]), float(theta[-1]), aggregation, int(feats.shape[0]),
                                 features=names)

