"""``streamd calibrate``: fit the word-confidence calibration on validation sets and store it in a checkpoint.

1. Decode every set through the streaming engine with ``streamd eval``'s
   machinery (:meth:`~streamd.evaluation.recognition.Evaluator.word_confidences`):
   per hypothesis word the configured measure's raw confidence and whether the
   alignment with the reference matches it.
2. Split the words by utterance (:func:`heldout_mask`: a hash of the
   utterance, so the split does not depend on set order, limits or runs) into
   a fit half and a held-out half; fit both kinds
   (:data:`~streamd.decode.calibration.CALIBRATION_KINDS`) on the fit half
   and report ECE / AUC / NCE of the raw and of both calibrated confidences on
   the held-out half (:func:`compare_fits`).
3. Fit the chosen kind on every word and write a copy of the checkpoint whose
   ``meta["calibration"]`` holds it (and ``meta["calibration_fit"]`` what it was
   fitted on, with the held-out figures); optionally draw the held-out
   reliability diagram.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from streamd.config import ConfidenceConfig, EngineConfig
from streamd.decode.calibration import CALIBRATION_KINDS, META_KEY, fit_calibration
from streamd.model.checkpoint import copy_with_meta, load_checkpoint
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator
from streamd.scoring.metrics import ReliabilityBins, confidence_scores, reliability
from streamd.scoring.reliability import plot_reliability, require_matplotlib

SECOND_PASS_FEATURES = "features"
"""``--kind`` of a second pass's logistic model over :data:`streamd.second_pass.confidence.FEATURES`."""

__all__ = ["CalibrateOptions", "heldout_mask", "compare_fits", "calibrate", "format_report", "calibrate_second_pass"]


@dataclass(frozen=True)
class CalibrateOptions:
    """kind: the calibration stored (``features``: a second pass's only); limit / batch_streams: as ``streamd
    eval``'s."""

    kind: str = "isotonic"
    limit: int | None = None
    batch_streams: int = 16

    def __post_init__(self) -> None:
        if self.kind not in (*CALIBRATION_KINDS, SECOND_PASS_FEATURES):
            raise ValueError(f"kind must be one of {[*CALIBRATION_KINDS, SECOND_PASS_FEATURES]}, got {self.kind!r}")


def heldout_mask(keys: Sequence[str]) -> np.ndarray:
    """(N,) bool: True for the words whose utterance key hashes into the held-out half.

    The low bit of the first SHA-256 byte of the key: words of one utterance stay together, and the
    split is the same on every run and machine.
    """
    return np.array([hashlib.sha256(k.encode("utf-8")).digest()[0] & 1 == 1 for k in keys], dtype=bool)


def compare_fits(raw: np.ndarray, correct: np.ndarray, heldout: np.ndarray, cfg: ConfidenceConfig
                 ) -> tuple[dict[str, Any], dict[str, ReliabilityBins]]:
    """Fit every kind on the words outside ``heldout``, score raw and calibrated confidences on ``heldout``.

    raw: (N,) raw word confidences; correct: (N,) bool; heldout: (N,) bool.
    Returns (figures, bins): figures ``{"heldout_words", "fit_words", "raw": scores, KIND: scores, ...}``
    with scores ``{"auc", "nce", "ece"}`` (None for every kind when either half has no words), and the
    held-out reliability bins by the same names.
    """
    fit, test = ~heldout, heldout
    figures: dict[str, Any] = {"heldout_words": int(test.sum()), "fit_words": int(fit.sum())}
    confs = {"raw": raw[test]}
    if fit.any() and test.any():
        for kind in CALIBRATION_KINDS:
            confs[kind] = fit_calibration(kind, raw[fit], correct[fit], cfg).apply(raw[test])
    for name in ("raw", *CALIBRATION_KINDS):
        figures[name] = confidence_scores(correct[test], confs[name]) if name in confs else \
            {"auc": None, "nce": None, "ece": None}
    return figures, {name: reliability(correct[test], c) for name, c in confs.items()}


def calibrate(model: str, sets: Sequence[str], out: str, config: EngineConfig,
              options: CalibrateOptions = CalibrateOptions(), plot: str | None = None) -> dict:
    """Fit ``options.kind`` on ``sets`` for ``config.confidence``'s measure, write the calibrated copy to ``out``.

    Returns the report (see :func:`format_report`).  ``out`` may be ``model`` itself (replaced atomically).
    """
    cc = config.confidence
    if not cc.exclude_blank:
        raise ValueError("confidence.exclude_blank: calibration is fitted on emitting-frame token confidences "
                         "(the recording decode of streamd eval); set it to true")
    if plot:
        require_matplotlib()
    loaded = load_checkpoint(model, "cpu")
    ev = Evaluator(loaded, config, EvalOptions(batch_streams=options.batch_streams, limit=options.limit,
                                                alphas=(cc.alpha,)))
    samples = [ev.word_confidences(s) for s in sets]
    raw = np.concatenate([s.raw for s in samples])
    correct = np.concatenate([s.correct for s in samples])
    heldout = heldout_mask([k for s in samples for k in s.keys])
    figures, bins = compare_fits(raw, correct, heldout, cc)
    cal = fit_calibration(options.kind, raw, correct, cc)
    dec = config.decoding
    fit_info = {"sets": [{"set": s.set, "utterances": s.utterances, "words": int(s.raw.size),
                          "correct": int(s.correct.sum())} for s in samples],
                "method": dec.method, "beam": dec.beam_for(dec.method), "kind": cal.kind, "heldout": figures}
    copy_with_meta(model, out, {**loaded.meta, META_KEY: cal.to_dict(), "calibration_fit": fit_info})
    if plot:
        plot_reliability(plot, [(f"{name} (held out)", b) for name, b in bins.items()],
                         f"{Path(model).name}: {figures['heldout_words']} held-out words\n{cal.describe_measure()}")
    return {"model": model, "out": out, "plot": plot, "calibration": cal.to_dict(), **fit_info}


def calibrate_second_pass(model: str, sets: Sequence[str], config: EngineConfig,
                          options: CalibrateOptions = CalibrateOptions(), out: str | None = None) -> dict:
    """Fit ``options.kind`` for the second pass ``config.second_pass.model`` on ``sets`` and store it
    (:func:`streamd.second_pass.calibration.write_calibration`; ``out`` overrides where).

    The sets are decoded as ``streamd eval`` does (the first pass through the streaming engine with the
    checkpoint ``model``, then the second pass over each final); each second-pass word is labelled right
    or wrong by the WER's alignment; the raw value is the model's word probability, so the fitted map is
    for measure ``max_prob`` with the model's aggregation.  A features calibration is stored with the segment
    choice of ``select: learned`` fitted on the same files (:func:`_with_choice`).  Returns the report
    (:func:`format_report`).
    """
    import dataclasses

    from streamd.second_pass.calibration import second_pass_for, write_calibration
    from streamd.second_pass.confidence import SecondPassCalibration, fit_second_pass_calibration
    from streamd.evaluation.decoding import timed_decode
    from streamd.evaluation.second import second_pass_words
    from streamd.evaluation.sets import load_entries, read_eval_set
    from streamd.engine import Recognizer

    config = dataclasses.replace(config, second_pass=dataclasses.replace(config.second_pass, calibrated=False,
                                                                          select="always"))
    second = second_pass_for(config)
    rec = Recognizer(load_checkpoint(model, "cpu"), config)
    raws, oks, feats, keys, info, decoded = [], [], [], [], [], []
    for path in sets:
        entries, _ = read_eval_set(path, options.limit)
        events, _ = timed_decode(rec, load_entries(entries, None), options.batch_streams, 0.1)
        both = [second.apply_events(e) for e in events]
        decoded.append((entries, events, both))
        raw, _, ok, f, k = second_pass_words(entries, both, events)
        raws.append(raw)
        oks.append(ok)
        feats.append(f)
        keys += k
        info.append({"set": path, "utterances": len(entries), "words": int(raw.size), "correct": int(ok.sum())})
    raw, correct, feat = np.concatenate(raws), np.concatenate(oks), np.concatenate(feats)
    cc = ConfidenceConfig(measure="max_prob", alpha=1.0, aggregation=second.model.aggregation, exclude_blank=True)
    held = heldout_mask(keys)
    figures, _ = compare_fits(raw, correct, held, cc)
    agg = second.model.aggregation
    if held.any() and (~held).any():
        fit = fit_second_pass_calibration(feat[~held], correct[~held], agg)
        figures["features"] = confidence_scores(correct[held], fit.apply_features(feat[held], raw[held]))
    cal = (fit_second_pass_calibration(feat, correct, agg) if options.kind == SECOND_PASS_FEATURES
           else SecondPassCalibration.of_map(fit_calibration(options.kind, raw, correct, cc)))
    choice_report = None
    if cal.single is None:  # the segment choice takes this calibration's probabilities
        cal, choice_report = _with_choice(cal, decoded, config.second_pass.select_margin)
    dest = write_calibration(config.second_pass.model, cal, out)
    return {"model": f"second pass {config.second_pass.model}", "out": str(dest), "plot": None,
            "calibration": cal.to_dict(), "sets": info, "method": config.decoding.method,
            "beam": config.decoding.beam_for(config.decoding.method), "kind": cal.describe(), "heldout": figures,
            "choice": choice_report}


def _with_choice(cal, decoded: list, margin: float) -> tuple[Any, dict | None]:
    """``cal`` with a segment choice (:func:`streamd.second_pass.choice.fit_segment_choice`) fitted on every set's
    segments where the passes' errors differ, and the report's ``choice`` entry: the word errors of the held-out
    half's segments (:func:`heldout_mask` of their files) with the first pass, the second pass, ``select:
    confidence`` at ``margin`` and a choice fitted on the other half.  ``cal`` alone (and None) when there are
    not segments where each pass made fewer errors."""
    import dataclasses

    from streamd.evaluation.second import choice_segments
    from streamd.second_pass.choice import fit_segment_choice

    parts = [choice_segments(entries, first, both, cal, margin) for entries, first, both in decoded]
    feats = np.concatenate([p.feats for p in parts])
    e1, e2 = np.concatenate([p.first_errors for p in parts]), np.concatenate([p.second_errors for p in parts])
    keep_first = np.concatenate([p.margin_first for p in parts])
    held = heldout_mask([k for p in parts for k in p.keys])
    differ = e1 != e2
    try:
        choice = fit_segment_choice(feats[differ], e2[differ] < e1[differ], np.abs(e1 - e2)[differ])
        half = fit_segment_choice(feats[differ & ~held], (e2 < e1)[differ & ~held], np.abs(e1 - e2)[differ & ~held])
    except ValueError:
        return cal, None
    second_h = half.score(feats[held]) > 0
    report = {"segments": int(feats.shape[0]), "fitted_on": choice.segments, "heldout_segments": int(held.sum()),
              "heldout_errors": {"first_pass": int(e1[held].sum()), "second_pass": int(e2[held].sum()),
                                 f"confidence_margin_{margin:g}": int(np.where(keep_first[held], e1[held],
                                                                                 e2[held]).sum()),
                                 "learned": int(np.where(second_h, e2[held], e1[held]).sum())},
              "describe": choice.describe()}
    return dataclasses.replace(cal, choice=choice), report


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def format_report(report: dict) -> str:
    """Readable text of :func:`calibrate`'s report."""
    c = report["calibration"]
    lines = [f"model {report['model']}  method {report['method']} (beam {report['beam']})  measure {c['measure']} "
             f"alpha {c.get('alpha', 1.0)} {c['aggregation']}"]
    for s in report["sets"]:
        share = f"{100 * s['correct'] / s['words']:.1f} % correct" if s["words"] else "no words"
        lines.append(f"  {s['set']}: {s['utterances']} utterances, {s['words']} hypothesis words, {share}")
    h = report["heldout"]
    lines += [f"held out: {h['heldout_words']} words; fitted on the other {h['fit_words']}",
              f"  {'':10s} {'ECE':>7s} {'AUC':>7s} {'NCE':>8s}"]
    for name, f in h.items():
        if isinstance(f, dict):
            lines.append(f"  {name:10s} {_num(f['ece']):>7s} {_num(f['auc']):>7s} {_num(f['nce']):>8s}")
    if c.get("by") == "features":
        lines.append(f"stored: {report['kind']} -> {report['out']}")
    else:
        lines.append(f"stored: {c['kind']} fitted on all {c['words']} words, {len(c['x'])} knots -> {report['out']}")
    ch = report.get("choice")
    if ch:
        errs = ", ".join(f"{k} {v}" for k, v in ch["heldout_errors"].items())
        lines += [f"segment choice (select: learned): {ch['describe']}",
                  f"  held-out half, {ch['heldout_segments']} segments, word errors: {errs}"]
    if report["plot"]:
        lines.append(f"reliability diagram (held-out words) -> {report['plot']}")
    return "\n".join(lines)
