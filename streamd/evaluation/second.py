"""The second pass in ``streamd eval`` (and ``streamd calibrate --second-pass``): its words scored against the
references, and the figures a report gives for it beside the first pass's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from streamd.events import Event, Final
from streamd.scoring.metrics import align_words, confidence_scores, normalize_words, word_errors
from streamd.second_pass.choice import CHOICE_FEATURES, choice_features, margin_prefers_first
from streamd.second_pass.confidence import FEATURES, SecondPassCalibration, narrowband, word_features

from .confidence import calibration_figures
from .sets import EvalEntry
from .wer import wer_figures

__all__ = ["second_pass_words", "second_pass_figures", "ChoiceSegments", "choice_segments"]


def second_pass_words(entries: Sequence[EvalEntry], events: Sequence[Sequence[Event]],
                      first: Sequence[Sequence[Event]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                  list[str]]:
    """The second-pass words of every file (finals with ``pass`` 2 in ``events``; ``first``: the same files'
    engine events, the first pass's finals): (raw probability (W,), calibrated conf (W,), right (W,) bool by
    the same alignment as the WER, the words' calibration features (W, len(FEATURES))
    (:func:`streamd.second_pass.confidence.word_features`), utterance key per word)."""
    raw, conf, right, feats, keys = [], [], [], [], []
    for e, evs, evs1 in zip(entries, events, first):
        finals = [f for f in evs if isinstance(f, Final) and f.pass_no == 2]
        words = [w for f in finals for w in f.words]
        hyp = [w.word for w in words]
        text = " ".join(f.text for f in evs if isinstance(f, Final) and f.text)
        if normalize_words(text) != normalize_words(" ".join(hyp)) or len(normalize_words(" ".join(hyp))) != len(hyp):
            continue  # a pass-1 final in between, or words the scorer splits: not labelled word by word
        ok = align_words(normalize_words(e.text), hyp).hyp_correct
        before = {(f.stream, f.segment): f for f in evs1 if isinstance(f, Final)}
        for f in finals:
            fp = before.get((f.stream, f.segment))
            feats.append(word_features([w.conf_raw for w in f.words], [w.conf for w in fp.words] if fp else [],
                                       f.sample_rate))
        raw += [w.conf_raw for w in words]
        conf += [w.conf for w in words]
        right += list(ok)
        keys += [f"{e.rel_audio}\t{e.text}"] * len(words)
    return (np.asarray(raw, dtype=np.float64), np.asarray(conf, dtype=np.float64), np.asarray(right, dtype=bool),
            np.concatenate(feats) if feats else np.zeros((0, len(FEATURES))), keys)


@dataclass(frozen=True)
class ChoiceSegments:
    """Segments on which the pass choice can be fitted or scored: one per file with exactly one segment where
    both passes wrote words (the second pass ``done``); the file's other finals are the same in both.

    feats: (S, len(CHOICE_FEATURES)) (:func:`streamd.second_pass.choice.choice_features`, both passes' words
    calibrated); first_errors, second_errors: (S,) word errors of the file with that segment's first-pass /
    second-pass words; margin_first: (S,) bool, ``select: confidence`` at the given margin keeps the first
    pass; keys: the files' utterance keys."""

    feats: np.ndarray
    first_errors: np.ndarray
    second_errors: np.ndarray
    margin_first: np.ndarray
    keys: list[str]


def choice_segments(entries: Sequence[EvalEntry], first: Sequence[Sequence[Event]],
                    second: Sequence[Sequence[Event]], cal: SecondPassCalibration, margin: float) -> ChoiceSegments:
    """:class:`ChoiceSegments` of the files from the engine's events ``first`` and the same with every Final the
    second pass's (``second``, uncalibrated: each word's ``conf_raw`` is mapped with ``cal``)."""
    feats, e1, e2, keep, keys = [], [], [], [], []
    for e, evs1, evs2 in zip(entries, first, second):
        f1 = [f for f in evs1 if isinstance(f, Final)]
        f2 = [f for f in evs2 if isinstance(f, Final)]
        both = [i for i, (a, b) in enumerate(zip(f1, f2)) if b.second_pass == "done" and a.words and b.words]
        if len(f1) != len(f2) or len(both) != 1:
            continue
        a, b = f1[both[0]], f2[both[0]]
        c1 = [w.conf for w in a.words]
        c2 = cal.apply([w.conf_raw for w in b.words], c1, b.sample_rate).tolist()
        feats.append(choice_features(c1, c2, narrowband(b.sample_rate), b.rival_gap))
        text1 = " ".join(f.text for f in f1 if f.text)
        text2 = " ".join(f.text for f in f2 if f.text)
        e1.append(word_errors([e.text], [text1]).errors)
        e2.append(word_errors([e.text], [text2]).errors)
        keep.append(margin_prefers_first(c1, c2, margin))
        keys.append(f"{e.rel_audio}\t{e.text}")
    return ChoiceSegments(np.array(feats).reshape(-1, len(CHOICE_FEATURES)), np.array(e1, dtype=np.int64),
                          np.array(e2, dtype=np.int64), np.array(keep, dtype=bool), keys)


SELECT_GRID = (-0.3, -0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 0.3)
"""Margins at which the report gives the WER of ``select: confidence`` (choose the margin on training data)."""


def second_pass_figures(entries: Sequence[EvalEntry], first: Sequence[Sequence[Event]],
                        second: Sequence[Sequence[Event]], sp, seconds: float, audio_seconds: float) -> dict:
    """The report's ``second_pass`` entry from the engine's events ``first`` and the same events with every
    Final the second pass's whatever ``select`` says (``second``; ``sp``: the :class:`SecondPass`): the WER
    of the first pass, of the second pass always, and of ``select: confidence`` at each margin of
    :data:`SELECT_GRID`; the outcomes; the second pass's own time and RTF; its words' confidence figures."""
    def texts(per_file):
        return [" ".join(f.text for f in evs if isinstance(f, Final) and f.text) for evs in per_file]

    def chosen(margin):
        return [[sp.choose(a, b, margin) if isinstance(a, Final) else b for a, b in zip(x, y)]
                for x, y in zip(first, second)]

    outcomes: dict[str, int] = {}  # of the finals as served (select applied)
    for evs in chosen(None):
        for f in evs:
            if isinstance(f, Final):
                outcomes[f.second_pass or "none"] = outcomes.get(f.second_pass or "none", 0) + 1
    raw, conf, right, _, _ = second_pass_words(entries, second, first)
    cal = calibration_figures(right.tolist(), raw.tolist(), conf.tolist() if sp.calibration is not None else None,
                              sp.calibration.single if sp.calibration is not None else None, None)
    if sp.calibration is not None and sp.calibration.single is None:  # a logistic model over features
        cal["calibration"] = {"kind": "features", "describe": sp.calibration.describe(),
                              "words": sp.calibration.words, "applied": True, "not_applied": None,
                              **confidence_scores(right.tolist(), conf.tolist())}
    select = None
    if sp.first_calibrated and sp.calibration is not None:
        select = {f"{m:g}": wer_figures(entries, texts(chosen(m)))["wer"] for m in SELECT_GRID}
    return {"model": sp.cfg.model, "select": sp.cfg.select, "select_margin": sp.cfg.select_margin,
            "first_pass": wer_figures(entries, texts(first)), "second_pass_always": wer_figures(entries, texts(second)),
            "select_wer_by_margin": select, "finals": outcomes,
            "seconds": round(seconds, 3), "rtf": seconds / audio_seconds if audio_seconds > 0 else None,
            "words_scored": int(right.size), "confidence": cal}
