"""Trained wake models (:mod:`streamd.model.wake`) in keyword mode: miss rate against false alarms per hour.

A wake model's score track does not depend on its threshold, and its detector (:class:`streamd.decode.kws.
KwsDetector`, ``smoothing_frames`` 1: fire when the score reaches the threshold and the last firing is at
least ``refractory_s`` back) is a function of the track and the threshold, so one pass over each file
gives the exact detections at every threshold of a sweep.  Each file is scored as a stream would be:
after the model's silent prefix, with :data:`streamd.model.wake.TAIL_SAMPLES` of silence at its end (what
the engine feeds at a stream's end).

Roles are those of :class:`~.keywords.KeywordEvaluator`, per model: a positive is a file whose ``keyword``
is the model's (case- and space-insensitive); a negative a file with ``keyword`` null whose text does not
hold the keyword as words; other positives are ignored.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from streamd.decode.endpoint import seconds_to_frames
from streamd.model.wake import TAIL_SAMPLES, WakeModel, WakeScorer
from streamd.scoring.metrics import normalize_words

from .keywords import contains_phrase, phrase_key
from .kws import FA_BUDGETS, budget_key, det_points, frr_at, kws_counts
from .sets import EvalEntry

__all__ = ["WAKE_THRESHOLDS", "VERIFY_WAKE_THRESHOLDS", "VERIFY_GAPS", "detect_frames", "file_roles", "score_tracks",
           "verified_sweep", "wake_model_figures"]

WAKE_THRESHOLDS: tuple[float, ...] = tuple(round(0.01 * i, 2) for i in range(1, 100)) + tuple(
    round(1 - 10 ** -(2 + 0.125 * i), 7) for i in range(1, 25))
"""The sweep of trained models: 0.01..0.99, then 1 - 10^-x for x in 2.125..5 (calibrated heads sit in the first
part; uncalibrated ones, and a keyword whose negatives score near its positives, need the second)."""


@dataclass(frozen=True)
class _Det:
    keyword: str
    score: float
    frame: int


def detect_frames(track: np.ndarray, threshold: float, refractory_frames: int) -> list[int]:
    """Frames at which a score track (T,) fires: score >= threshold and no firing in the last
    ``refractory_frames`` frames (the runtime detector's rule with smoothing 1)."""
    out: list[int] = []
    for k in np.nonzero(track >= threshold)[0]:
        if not out or k - out[-1] >= refractory_frames:
            out.append(int(k))
    return out


@torch.no_grad()
def score_tracks(scorer: WakeScorer, audio: Sequence[tuple[np.ndarray, int]]) -> list[np.ndarray]:
    """Per file (samples, rate), the (T, K) score tracks of every model (resampled to 16 kHz, the stream's
    silent tail included)."""
    from streamd.audio.resample import resample
    out = []
    for x, rate in audio:
        x = np.asarray(x, dtype=np.float32)
        if rate != 16000:
            x = resample(x, rate, 16000).astype(np.float32)
        t = torch.from_numpy(np.concatenate([x, np.zeros(TAIL_SAMPLES, np.float32)]))[None].to(scorer.device)
        out.append(scorer.offline_scores(t)[0].cpu().numpy())
    return out


def file_roles(keyword: str, entries: Sequence[EvalEntry], seconds: Sequence[float]
           ) -> tuple[list[int], list[EvalEntry], float]:
    """The files that count for a model of ``keyword`` (the module's roles): their indices, their entries (a
    positive's ``keyword`` spelled as the model's) and the negatives' hours."""
    kw_words = normalize_words(keyword)
    sel, ents = [], []
    for i, e in enumerate(entries):
        if e.keyword is not None:
            if phrase_key(e.keyword) == phrase_key(keyword):
                sel.append(i)
                ents.append(dataclasses.replace(e, keyword=keyword))
        elif not contains_phrase(normalize_words(e.text), kw_words):
            sel.append(i)
            ents.append(e)
    return sel, ents, sum(seconds[i] for i, e in zip(sel, ents) if e.keyword is None) / 3600.0


def wake_model_figures(models: Sequence[WakeModel], entries: Sequence[EvalEntry], tracks: Sequence[np.ndarray],
                       seconds: Sequence[float], refractory_s: float, frame_shift_s: float,
                       thresholds: Sequence[float] = WAKE_THRESHOLDS) -> dict:
    """Per model keyword: positives, figures at the model's own threshold, miss at each FA/h budget, the
    sweep and the DET points (the keyword-mode report's shape)."""
    ref = seconds_to_frames(refractory_s, frame_shift_s)
    out = {}
    for k, m in enumerate(models):
        sel, ents, neg_h = file_roles(m.keyword, entries, seconds)
        ts = sorted(set(thresholds) | {m.threshold})
        sweep = []
        for t in ts:
            dets = [[_Det(m.keyword, float(tracks[i][f, k]), f) for f in detect_frames(tracks[i][:, k], t, ref)]
                    for i in sel]
            sweep.append({"threshold": t, **kws_counts(dets, ents, neg_h)})
        at_own = next(s for s in sweep if s["threshold"] == m.threshold)
        out[m.keyword] = {"model": m.path, "positives": sum(e.keyword is not None for e in ents),
                          "negatives": sum(e.keyword is None for e in ents), "negative_hours": neg_h,
                          "threshold": m.threshold, **at_own,
                          **{budget_key(b): frr_at(sweep, b) for b in FA_BUDGETS},
                          "sweep": sweep, "det": det_points(sweep)}
    return out


VERIFY_WAKE_THRESHOLDS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Wake thresholds of :func:`verified_sweep` (a verifier lets the wake model fire early)."""
VERIFY_GAPS: tuple[float, ...] = (-20.0, -16.0, -12.0, -10.0, -8.0, -6.0, -5.0, -4.0, -3.0, -2.0)
"""Verifier thresholds of :func:`verified_sweep`: log P(keyword) - log P(the verifier's own text), nats."""


def verified_sweep(model: int, keyword: str, entries: Sequence[EvalEntry], tracks: Sequence[np.ndarray],
                   seconds: Sequence[float], gap, refractory_frames: int,
                   wake_thresholds: Sequence[float] = VERIFY_WAKE_THRESHOLDS,
                   gaps: Sequence[float | None] = (None, *VERIFY_GAPS)) -> list[dict]:
    """A wake model (column ``model`` of each (T, K) track) followed by a verifier: a detection at frame f of
    file i stands when ``gap(i, f)`` >= the verifier threshold (None: no verifier).  Roles as
    :func:`file_roles`.  Returns one point per (wake threshold, verifier threshold):
    ``wake_threshold``, ``gap``, ``verified`` (how many detections the verifier was asked about),
    ``positives`` and :func:`~.kws.kws_counts`' figures.  ``gap`` is called once per distinct detection (the caller caches)."""
    sel, ents, neg_h = file_roles(keyword, entries, seconds)
    positives = sum(e.keyword is not None for e in ents)
    out = []
    for t in wake_thresholds:
        fired = {i: detect_frames(tracks[i][:, model], t, refractory_frames) for i in sel}
        asked = sum(len(v) for v in fired.values())
        for v in gaps:
            dets = [[_Det(keyword, float(tracks[i][f, model]), f) for f in fired[i] if v is None or gap(i, f) >= v]
                    for i in sel]
            out.append({"wake_threshold": t, "gap": v, "verified": asked if v is not None else 0,
                        "positives": positives, **kws_counts(dets, ents, neg_h)})
    return out


def evaluate_wake_models(models: Sequence[WakeModel], entries: Sequence[EvalEntry],
                         audio: Sequence[tuple[np.ndarray, int]], refractory_s: float = 1.0,
                         device: str = "cpu", precision: str = "auto") -> dict:
    """Score every file with every model (one embedding per file, computing as ``precision`` says) and report
    :func:`wake_model_figures`."""
    scorer = WakeScorer(models, device=device, precision=precision)
    t0 = time.perf_counter()
    tracks = score_tracks(scorer, audio)
    secs = [len(x) / r for x, r in audio]
    wall = time.perf_counter() - t0
    figs = wake_model_figures(models, entries, tracks, secs, refractory_s, scorer.frame_shift_s)
    return {"per_model": figs, "score_seconds": round(wall, 3), "audio_seconds": round(sum(secs), 3)}


def run_wake_models(paths: Sequence[str], sets: Sequence[str], options, refractory_s: float,
                    precision: str = "auto") -> dict:
    """``streamd eval --keywords ... --wake-model FILE...``: the trained models' figures on the same sets
    (positives and negatives by :func:`wake_model_figures`'s roles); ``options``: the run's
    :class:`~.options.EvalOptions` (``limit``)."""
    from streamd.model.wake import load_wake_model

    from .sets import load_entries, read_eval_set
    models = []
    for i, p in enumerate(paths):
        try:
            models.append(load_wake_model(p))
        except (OSError, ValueError) as e:
            raise ValueError(f"--wake-model[{i}]: {e}") from None
    entries = [e for s in sets for e in read_eval_set(s, options.limit)[0]]
    return evaluate_wake_models(models, entries, load_entries(entries, None), refractory_s, precision=precision)
