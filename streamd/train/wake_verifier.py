"""A wake model's own verifier threshold, measured on held-out real negatives of the training splits.

A verified wake model (``engine.kws.verify``) fires at ``verify_wake_threshold`` and a detection stands when
the second pass's gap, log P(keyword) - log P(its own text) (:func:`streamd.second_pass.models.keyword_gap`),
reaches a threshold.  How close other speech comes to a keyword depends on the keyword (a common word has
sound-alikes the second model reads as it; a rare one gets low gaps even when said), so one threshold for
all keywords is too strict for some and too loose for others.  :func:`fit_verifier_gaps` gives each model
its own: the wake model runs over the real training-split audio held out from its training
(:func:`held_out_negatives`: never ``mycroft``, never a dev split), every detection at
``verify_wake_threshold`` is verified as the engine would (the same clip around it), and the threshold is
``max(floor, the rank-th highest negative gap + margin)`` (:func:`streamd.model.wake.own_gap`; rank r > 1 does not let one or
two odd negatives decide: a second model sometimes reads a one-second clip as a long made-up sentence, and
against that reading any keyword scores close).  The result is written into the model file (``verify_gap``, and
``info["verifier"]``: the verifier, the rule, the negatives' hours, detections and highest gaps), where the
engine takes it in place of ``kws.verify_gap``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from streamd.config import KwsConfig
from streamd.model.wake import VERIFY_GAP_FLOOR, VERIFY_GAP_MARGIN, VERIFY_GAP_RANK, own_gap

__all__ = ["TOP_KEPT", "held_out_negatives", "negative_gaps", "fit_verifier_gaps"]

TOP_KEPT = 10
"""Highest held-out negative gaps recorded in the file (``info["verifier"]["top_negative_gaps"]``)."""

RATE = 16000
REFRACTORY_S = 1.0


def held_out_negatives(keyword: str, root: Path | None = None) -> list[tuple[str, str]]:
    """(path, name) of the real training-split files a wake model of ``keyword`` never trained on: the speech
    and negative-noise files of :func:`streamd.train.wake.real_negative_files` that its held-out rule keeps
    for the threshold (``_held_out``: a quarter of them, by name)."""
    from streamd.train.wake import _held_out, real_negative_files

    files = real_negative_files(keyword, root)
    noise = files["noise"][: len(files["noise"]) // 2]  # the other half is the training's background noise bank
    return [(p, n) for p, n in files["speech"] + noise if _held_out(n)]


def negative_gaps(models: Sequence, audio: Sequence[np.ndarray], verifier, kcfg: KwsConfig = KwsConfig(),
                  batch: int = 8, progress: Callable[[int, int], None] | None = None) -> list[list[float]]:
    """Per model, the verifier's gap of every detection it makes on ``audio`` (16 kHz clips, none holding its
    keyword) at ``kcfg.verify_wake_threshold`` (refractory 1 s, as the engine's detector), each on the clip
    the engine would send (:func:`streamd.model.wake.verify_clip` with ``verify_before_s`` / ``verify_after_s``);
    ``batch`` detections a model call (the verifier's ``recognize_many``)."""
    from streamd.decode.endpoint import seconds_to_frames
    from streamd.evaluation.wake import detect_frames, score_tracks
    from streamd.model.wake import WakeScorer, verify_clip
    from streamd.second_pass.models import keyword_check

    if not getattr(verifier, "scores_rivals", False):
        raise ValueError("the verifier must score texts (a Moonshine model)")
    scorer = WakeScorer(list(models))
    tracks = score_tracks(scorer, [(np.asarray(x, np.float32), RATE) for x in audio])
    ref = seconds_to_frames(REFRACTORY_S, scorer.frame_shift_s)
    jobs = [(k, verify_clip(np.asarray(audio[i], np.float32), (f + 1) * scorer.frame_shift_s, kcfg.verify_before_s,
                            kcfg.verify_after_s))
            for k in range(len(models)) for i, tr in enumerate(tracks)
            for f in detect_frames(tr[:, k], kcfg.verify_wake_threshold, ref)]
    gaps: list[list[float]] = [[] for _ in models]
    many = getattr(verifier, "recognize_many", None)
    for lo in range(0, len(jobs), batch):
        part = jobs[lo:lo + batch]
        items = [keyword_check(clip, models[k].keyword) for k, clip in part]
        res = many(items) if many is not None else [verifier.recognize(x, rival=r) for x, _, r in items]
        for (k, _), r in zip(part, res):
            gaps[k].append(-float("inf") if r.rival_gap is None else float(r.rival_gap))
        if progress is not None:
            progress(min(lo + batch, len(jobs)), len(jobs))
    return gaps


def fit_verifier_gaps(paths: Sequence[str | Path], verifier_name: str, floor: float = VERIFY_GAP_FLOOR,
                      margin: float = VERIFY_GAP_MARGIN, rank: int = VERIFY_GAP_RANK,
                      kcfg: KwsConfig = KwsConfig(), root: Path | None = None,
                      log: Callable[[str], None] | None = None, verifier=None) -> list[dict]:
    """Give each wake model file its own verifier threshold (:func:`own_gap` of :func:`negative_gaps` on its
    :func:`held_out_negatives`), written into the file in place (atomically); returns each file's ``info["verifier"]``.
    Models whose keywords leave out the same files share one scoring pass; ``verifier``: the model already
    loaded by :func:`~streamd.second_pass.models.load_verifier` (else it is loaded here)."""
    from streamd.audio.resample import load_audio_at
    from streamd.model.wake import load_wake_model, save_wake_model
    from streamd.second_pass.models import load_verifier

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    models = [load_wake_model(p) for p in paths]
    verifier = verifier if verifier is not None else load_verifier(verifier_name)
    groups: dict[tuple, list[int]] = {}
    for k, m in enumerate(models):
        groups.setdefault(tuple(held_out_negatives(m.keyword, root)), []).append(k)
    out: list[dict] = [{} for _ in models]
    for files, ks in groups.items():
        t0 = time.monotonic()
        audio = [load_audio_at(p, RATE) for p, _ in files]
        hours = sum(len(x) for x in audio) / RATE / 3600
        shown = [0]

        def progress(done: int, total: int) -> None:  # a line every tenth of the detections
            if done == total or 10 * done >= (shown[0] + 1) * total:
                shown[0] = 10 * done // total
                log(f"verifying held-out detections: {done} / {total}")

        gaps = negative_gaps([models[k] for k in ks], audio, verifier, kcfg, progress=progress)
        for k, g in zip(ks, gaps):
            m = models[k]
            thr = own_gap(g, floor, margin, rank)
            top = [round(x, 4) for x in sorted(g, reverse=True)[:TOP_KEPT] if x > -float("inf")]
            rec = {"model": verifier_name, "verify_gap": round(thr, 4), "floor": floor, "margin": margin, "rank": rank,
                   "wake_threshold": kcfg.verify_wake_threshold, "verify_before_s": kcfg.verify_before_s,
                   "verify_after_s": kcfg.verify_after_s, "negative_files": len(files),
                   "negative_hours": round(hours, 3), "detections": len(g),
                   "top_negative_gaps": top,
                   "seconds": round(time.monotonic() - t0, 1)}
            tmp = Path(m.path).with_name(f".{Path(m.path).name}.{os.getpid()}.tmp")  # the file whole or not at all
            save_wake_model(tmp, m.keyword, m.threshold, m.head, {**m.info, "verifier": rec}, verify_gap=thr)
            os.replace(tmp, m.path)
            out[k] = rec
            log(f"{m.keyword!r}: {len(g)} held-out detections ({hours:.2f} h), highest gaps "
                f"{', '.join(f'{x:.2f}' for x in top[:3]) or 'none'} -> verify_gap {thr:.2f} ({m.path})")
    return out
