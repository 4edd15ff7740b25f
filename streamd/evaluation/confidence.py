"""Word-confidence quality of a set's recording decode: AUC and NCE of every (measure, alpha, aggregation) of
the study, and the calibration figures (ECE, reliability bins) of the engine's setting, raw and calibrated.

A hypothesis word is correct when the alignment with the reference matches it
(:func:`streamd.scoring.metrics.align_words`, ``hyp_correct``); its confidences are recomputed from the bank
values of its tokens (:mod:`streamd.scoring.recording`), so one decode scores every measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from streamd.config import ConfidenceConfig
from streamd.decode.calibration import Calibration
from streamd.decode.confidence import AGGREGATIONS, aggregate
from streamd.scoring.metrics import align_words, auc_roc, confidence_scores, nce, normalize_words, reliability

from .decoding import Decoded
from .sets import EvalEntry

__all__ = ["Scored", "scored_words", "word_confs", "WordConfidences", "confidence_figures", "calibration_figures"]


@dataclass(frozen=True)
class Scored:
    """The scored hypothesis words of a set's recording decode (N words, M bank measures).

    labels: (N,) correct or not; values: N arrays (tokens, M) of the word's tokens' bank values;
    utterance: (N,) index of each word's entry; mismatched: entries whose recording text differs.
    """

    labels: list[bool]
    values: list[np.ndarray]
    utterance: list[int]
    mismatched: int


def word_confs(values: Sequence[np.ndarray], m: int, how: str) -> list[float]:
    """Word confidences of bank measure ``m`` aggregated with ``how``: one per (tokens, M) array."""
    return [aggregate(v[:, m].tolist(), how) for v in values]


def scored_words(entries: Sequence[EvalEntry], out: Sequence[Decoded]) -> Scored:
    """Label the recording's hypothesis words against the references (one scored word per normalized word)."""
    labels: list[bool] = []
    token_vals: list[np.ndarray] = []  # per scored hypothesis word: (tokens, M)
    utterance: list[int] = []
    mismatched = 0
    for i, (e, d) in enumerate(zip(entries, out)):
        mismatched += d.rec_text != d.text
        hyp, vals = [], []
        for word, v in d.rec_words:
            for piece in normalize_words(word):  # a word may split (hyphen) or vanish (punctuation)
                hyp.append(piece)
                vals.append(v)
        labels += align_words(normalize_words(e.text), hyp).hyp_correct
        token_vals += vals
        utterance += [i] * len(hyp)
    return Scored(labels, token_vals, utterance, mismatched)


@dataclass(frozen=True)
class WordConfidences:
    """The configured measure's raw confidence of every scored hypothesis word of one set.

    raw: (N,) float64 word confidences (as the uncalibrated engine gives them); correct: (N,) bool
    (the word is matched in the alignment with the reference); keys: (N,) the word's utterance
    (``audio`` as written in the set, a tab, its reference text).
    """

    set: str
    utterances: int
    raw: np.ndarray
    correct: np.ndarray
    keys: tuple[str, ...]


def confidence_figures(entries: Sequence[EvalEntry], out: Sequence[Decoded], cc: ConfidenceConfig,
                       specs: Sequence[tuple[str, float]], alphas: Sequence[float],
                       calibration: Calibration | None, stored: Calibration | None,
                       calibration_problem: str | None) -> dict:
    """The report's ``confidence`` figures of one set.

    cc: the engine's confidence setting (the table's ``default`` row); specs: the bank's (measure, alpha)
    columns, of which the table shows those with an alpha of ``alphas`` and the engine's; calibration: the one
    the engine applies (None: none, or not for this measure); stored, calibration_problem: the model's stored
    calibration and why it is not applied (:func:`streamd.decode.calibration.resolve_calibration`).
    """
    sc = scored_words(entries, out)
    labels = sc.labels
    table = []
    default = (cc.name, cc.alpha, cc.aggregation)
    confs_of: dict[tuple[str, float, str], list[float]] = {}
    for m, (name, alpha) in enumerate(specs):
        if alpha not in alphas and (name, alpha) != (cc.name, cc.alpha):
            continue
        for how in AGGREGATIONS:
            confs = word_confs(sc.values, m, how)
            confs_of[(name, alpha, how)] = confs
            table.append({"measure": name, "alpha": alpha, "aggregation": how, "auc": auc_roc(labels, confs),
                          "nce": nce(labels, confs), "default": (name, alpha, how) == default})
    raw = confs_of[default]
    probs = calibration.apply(raw).tolist() if calibration is not None else None
    conf = raw if probs is None else probs  # what the engine's word conf should be
    # self-check: the plain engine's word confidences equal the ones recomputed from the recording
    diff = None
    if cc.exclude_blank:
        k = 0
        for d in out:
            n_scored = sum(len(normalize_words(w)) for w, _ in d.rec_words)
            if d.rec_text == d.text:
                engine = [w for w in d.words for _ in normalize_words(w.word)]
                for j, w in enumerate(engine[:n_scored]):
                    diff = max(diff or 0.0, abs(w.conf_raw - raw[k + j]), abs(w.conf - conf[k + j]))
            k += n_scored
    return {"words": len(labels), "correct": int(sum(labels)), "exclude_blank": True,
            "recording_text_mismatches": sc.mismatched, "engine_conf_max_abs_diff": diff, "table": table,
            **calibration_figures(labels, raw, probs, stored, calibration_problem)}


def calibration_figures(labels: Sequence[bool], raw: Sequence[float], probs: Sequence[float] | None,
                        stored: Calibration | None, calibration_problem: str | None) -> dict:
    """ECE and reliability bins of the configured measure, before and (``probs``) after calibration."""
    info = None
    if stored is not None:
        info = {"kind": stored.kind, "measure": stored.measure, "alpha": stored.alpha,
                "aggregation": stored.aggregation, "exclude_blank": stored.exclude_blank, "words": stored.words,
                "knots": len(stored.x), "applied": probs is not None, "not_applied": calibration_problem,
                **(confidence_scores(labels, probs) if probs is not None else {"auc": None, "nce": None,
                                                                                "ece": None})}
    raw_bins = reliability(labels, raw)
    return {"ece": raw_bins.ece, "calibration": info,
            "reliability": {"raw": raw_bins.to_dict(),
                            "calibrated": reliability(labels, probs).to_dict() if probs is not None else None}}
