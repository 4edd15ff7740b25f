"""Which pass's words a segment's final carries: a logistic rule fitted on segments whose errors are known.

``select: learned`` (the default) asks a :class:`SegmentChoice` whether the second pass is expected to have
fewer errors than the first on a finished segment, from :data:`CHOICE_FEATURES` of the segment
(:func:`choice_features`):

* ``first_conf``: the mean calibrated ``conf`` of the first pass's words;
* ``second_conf``: the mean calibrated ``conf`` of the second pass's words;
* ``word_ratio``: ``log(second-pass words / first-pass words)`` (signed: more words in the second pass than
  the first is a sign of words that were not said);
* ``narrowband``: 1 for a narrowband stream (declared input rate below 16 kHz:
  :func:`streamd.second_pass.confidence.narrowband`), else 0;
* ``rescore``: the first pass's words rescored by the second model (two-pass rescoring: Sainath et al.,
  Interspeech 2019): ``log P(first pass's words) - log P(second pass's words)`` under the second model given the
  segment's audio (:attr:`streamd.events.Final.rival_gap`, nats), divided by :data:`RESCORE_NATS` and clipped
  to +-:data:`RESCORE_CLIP`; near 0 when the second model finds the first pass's words about as likely as its
  own, so a fluent sentence it wrote that was not said does not replace them.  0 where the model does not
  score texts (Whisper).

The second pass is chosen when ``features . weights + bias > 0``.  :func:`fit_segment_choice` fits the rule
on segments of training / validation sets (``streamd calibrate --second-pass``, never dev): each segment
where the two passes make a different number of errors is an example, labelled by which pass made fewer
and weighted by how many fewer (a wrong choice costs that many errors), the cross entropy minimized by
Newton's method.  The rule is stored with the second pass's word calibration (its confidences are its
inputs).  Plain Python and numpy; no model, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from streamd.decode.calibration import CalibrationError, finite_real, newton_logistic

__all__ = ["CHOICE_FEATURES", "RESCORE_CLIP", "RESCORE_NATS", "SegmentChoice", "choice_features", "fit_segment_choice",
           "margin_prefers_first"]

CHOICE_FEATURES = ("first_conf", "second_conf", "word_ratio", "narrowband", "rescore")
RESCORE_NATS = 10.0
RESCORE_CLIP = 3.0
_L2 = 1e-3


def choice_features(first_conf: Sequence[float], second_conf: Sequence[float], narrow: bool = False,
                    rival_gap: float | None = None) -> np.ndarray:
    """(len(CHOICE_FEATURES),) features of one segment from the calibrated ``conf`` of its first-pass words
    and of its second-pass words (each may be empty: mean 0, one word counted); ``narrow``: the stream is
    narrowband; ``rival_gap``: the second-pass Final's (None: rescore 0)."""
    n1, n2 = len(first_conf), len(second_conf)
    rescore = 0.0 if rival_gap is None else min(max(rival_gap / RESCORE_NATS, -RESCORE_CLIP), RESCORE_CLIP)
    return np.array([float(np.mean(first_conf)) if n1 else 0.0, float(np.mean(second_conf)) if n2 else 0.0,
                     math.log(max(n2, 1) / max(n1, 1)), 1.0 if narrow else 0.0, rescore])


def margin_prefers_first(first_conf: Sequence[float], second_conf: Sequence[float], margin: float) -> bool:
    """``select: confidence``'s rule for a segment where both passes wrote words: the first pass's mean
    calibrated ``conf`` exceeds the second pass's by more than ``margin``."""
    return sum(first_conf) / len(first_conf) > sum(second_conf) / len(second_conf) + margin


@dataclass(frozen=True)
class SegmentChoice:
    """``second pass expected better = features . weights + bias > 0`` over :data:`CHOICE_FEATURES`.

    weights: (len(CHOICE_FEATURES),); segments: how many examples it was fitted on."""

    weights: tuple[float, ...]
    bias: float
    segments: int = 0

    def __post_init__(self) -> None:
        if len(self.weights) != len(CHOICE_FEATURES) or not all(finite_real(v) for v in (*self.weights, self.bias)):
            raise CalibrationError(f"second-pass choice: weights must be {len(CHOICE_FEATURES)} finite numbers "
                                   f"({', '.join(CHOICE_FEATURES)}) and bias one, got {self.weights!r}, "
                                   f"{self.bias!r}")
        if isinstance(self.segments, bool) or not isinstance(self.segments, int) or self.segments < 0:
            raise CalibrationError(f"second-pass choice.segments: must be an integer >= 0, got {self.segments!r}")
        object.__setattr__(self, "weights", tuple(float(v) for v in self.weights))
        object.__setattr__(self, "bias", float(self.bias))

    def score(self, feats: np.ndarray) -> np.ndarray:
        """(N,) decision values of ``feats`` (N, len(CHOICE_FEATURES)) (or one value of a (len,) row)."""
        return np.asarray(feats, dtype=np.float64) @ np.asarray(self.weights) + self.bias

    def second_better(self, first_conf: Sequence[float], second_conf: Sequence[float], narrow: bool = False,
                      rival_gap: float | None = None) -> bool:
        """True when the rule expects the second pass's words to have fewer errors (:func:`choice_features`)."""
        return bool(self.score(choice_features(first_conf, second_conf, narrow, rival_gap)) > 0.0)

    def describe(self) -> str:
        terms = ", ".join(f"{n} {w:+.3f}" for n, w in zip(CHOICE_FEATURES, self.weights))
        return f"second pass when {terms}, bias {self.bias:+.3f} > 0 (fitted on {self.segments} segments)"

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(CHOICE_FEATURES), "weights": list(self.weights), "bias": self.bias,
                "segments": self.segments}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SegmentChoice":
        """Inverse of :meth:`to_dict`; CalibrationError says what is wrong.  A rule fitted over the first
        features only (one stored before ``rescore`` existed) reads with weight 0 for the rest: the same
        decisions."""
        if not isinstance(d, Mapping) or set(d) != {"features", "weights", "bias", "segments"}:
            raise CalibrationError(f"second-pass choice: expected features, weights, bias and segments, got {d!r}")
        names = list(d["features"]) if isinstance(d["features"], (list, tuple)) else None
        if not names or names != list(CHOICE_FEATURES[:len(names)]):
            raise CalibrationError(f"second-pass choice: features {d['features']!r}; this streamd computes "
                                   f"{list(CHOICE_FEATURES)}")
        if not isinstance(d["weights"], (list, tuple)) or len(d["weights"]) != len(names):
            raise CalibrationError(f"second-pass choice: weights must be a list of {len(names)}, got {d['weights']!r}")
        return cls(tuple(d["weights"]) + (0.0,) * (len(CHOICE_FEATURES) - len(names)), d["bias"], d["segments"])


def fit_segment_choice(feats: np.ndarray, second_fewer: np.ndarray, error_gap: np.ndarray) -> SegmentChoice:
    """A :class:`SegmentChoice` fitted on N segments: ``feats`` (N, len(CHOICE_FEATURES)), ``second_fewer`` (N,)
    bool (the second pass made fewer errors), ``error_gap`` (N,) > 0 (by how many errors the passes differ:
    each segment's weight in the cross entropy).  ValueError without both kinds of example."""
    x = np.asarray(feats, dtype=np.float64)
    t = np.asarray(second_fewer, dtype=np.float64)
    w = np.asarray(error_gap, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(CHOICE_FEATURES) or t.shape != (x.shape[0],) or w.shape != t.shape:
        raise ValueError(f"need (N, {len(CHOICE_FEATURES)}) features with N labels and N weights, got "
                         f"{x.shape}, {t.shape}, {w.shape}")
    if not (0 < t.sum() < t.size) or (w <= 0).any():
        raise ValueError("need segments where each pass made fewer errors, with positive error gaps")
    xb = np.c_[x, np.ones(len(x))]
    reg = np.full(xb.shape[1], _L2)
    reg[-1] = 0.0
    theta = newton_logistic(xb, t, reg, sample_weight=w / w.mean())
    return SegmentChoice(tuple(theta[:-1]), float(theta[-1]), int(x.shape[0]))
