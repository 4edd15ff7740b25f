"""Calibrated confidence of second-pass words, knowing whether the first pass wrote the same word.

A second model's word probability alone is not P(word right): on a one-word command the real-speech model
may be as sure of a wrong word as of a right one.  Whether the streaming first pass wrote the same word at
that place (:func:`.align.agreement`) is independent evidence, so a :class:`SecondPassCalibration` holds two
monotone maps of the model's word probability: one for the words both passes wrote (``agree``), one for the
others (``disagree``).  One stored map (a file written before the split, or a user's own) serves both.

Stored form (``to_dict``): ``{"version": 1, "by": "first_pass_agreement", "agree": {...}, "disagree": {...}}``,
each part a :class:`~streamd.decode.calibration.Calibration`'s own dict; a plain Calibration dict reads as
one map for both.  Plain Python and numpy; no model, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from streamd.decode.calibration import Calibration, CalibrationError

__all__ = ["SecondPassCalibration", "BY_AGREEMENT"]

BY_AGREEMENT = "first_pass_agreement"
_VERSION = 1


@dataclass(frozen=True)
class SecondPassCalibration:
    """P(right) of a second-pass word from its probability and whether the first pass wrote it too.

    agree, disagree: the maps for the two kinds of word; they must be fitted for the same measure and
    aggregation (the model's)."""

    agree: Calibration
    disagree: Calibration

    def __post_init__(self) -> None:
        a, d = self.agree, self.disagree
        if (a.measure, a.alpha, a.aggregation, a.exclude_blank) != (d.measure, d.alpha, d.aggregation,
                                                                    d.exclude_blank):
            raise CalibrationError(f"second-pass calibration: agree is for {a.describe_measure()}, disagree for "
                                   f"{d.describe_measure()}")

    @classmethod
    def single(cls, cal: Calibration) -> "SecondPassCalibration":
        """One map for every word."""
        return cls(cal, cal)

    @property
    def split(self) -> bool:
        """Whether the two kinds of word have their own maps."""
        return self.agree is not self.disagree and self.agree != self.disagree

    @property
    def aggregation(self) -> str:
        return self.agree.aggregation

    @property
    def words(self) -> int:
        return self.agree.words + self.disagree.words if self.split else self.agree.words

    def apply(self, raw: Sequence[float] | np.ndarray, agree: Sequence[bool] | np.ndarray) -> np.ndarray:
        """(W,) calibrated probabilities of the words' raw probabilities ``raw`` (W,); ``agree`` (W,) bool."""
        raw = np.asarray(raw, dtype=np.float64)
        flags = np.asarray(agree, dtype=bool)
        if raw.shape != flags.shape:
            raise ValueError(f"raw {raw.shape} and agree {flags.shape} differ in shape")
        return np.where(flags, self.agree.apply(raw), self.disagree.apply(raw))

    def describe(self) -> str:
        if not self.split:
            return self.agree.describe()
        return f"by first-pass agreement: agree {self.agree.describe()}; disagree {self.disagree.describe()}"

    def to_dict(self) -> dict[str, Any]:
        if not self.split:
            return self.agree.to_dict()
        return {"version": _VERSION, "by": BY_AGREEMENT, "agree": self.agree.to_dict(),
                "disagree": self.disagree.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SecondPassCalibration":
        """Inverse of :meth:`to_dict` (a plain Calibration dict: one map); CalibrationError names what is wrong."""
        if not isinstance(d, Mapping):
            raise CalibrationError(f"second-pass calibration: expected a mapping, got {type(d).__name__}")
        if "by" not in d:
            return cls.single(Calibration.from_dict(d))
        if d.get("by") != BY_AGREEMENT or d.get("version") != _VERSION:
            raise CalibrationError(f"second-pass calibration: by {d.get('by')!r} version {d.get('version')!r}; "
                                   f"this streamd reads by {BY_AGREEMENT!r} version {_VERSION}")
        unknown = sorted(set(d) - {"version", "by", "agree", "disagree"})
        if unknown:
            raise CalibrationError(f"second-pass calibration.{unknown[0]}: unknown field")
        for part in ("agree", "disagree"):
            if part not in d:
                raise CalibrationError(f"second-pass calibration: missing field {part!r}")
        return cls(Calibration.from_dict(d["agree"]), Calibration.from_dict(d["disagree"]))
