"""The second pass in ``streamd eval`` (and ``streamd calibrate --second-pass``): its words scored against the
references, and the figures a report gives for it beside the first pass's."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from streamd.events import Event, Final
from streamd.train.metrics import align_words, normalize_words

from .confidence import calibration_figures
from .sets import EvalEntry
from .wer import wer_figures

__all__ = ["second_pass_words", "second_pass_figures"]


def second_pass_words(entries: Sequence[EvalEntry], events: Sequence[Sequence[Event]]
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The second-pass words of every file (finals with ``pass`` 2): (raw probability (W,), calibrated conf
    (W,), right (W,) bool by the same alignment as the WER, utterance key per word)."""
    raw, conf, right, keys = [], [], [], []
    for e, evs in zip(entries, events):
        words = [w for f in evs if isinstance(f, Final) and f.pass_no == 2 for w in f.words]
        hyp = [w.word for w in words]
        text = " ".join(f.text for f in evs if isinstance(f, Final) and f.text)
        if normalize_words(text) != normalize_words(" ".join(hyp)) or len(normalize_words(" ".join(hyp))) != len(hyp):
            continue  # a pass-1 final in between, or words the scorer splits: not labelled word by word
        ok = align_words(normalize_words(e.text), hyp).hyp_correct
        raw += [w.conf_raw for w in words]
        conf += [w.conf for w in words]
        right += list(ok)
        keys += [f"{e.rel_audio}\t{e.text}"] * len(words)
    return (np.asarray(raw, dtype=np.float64), np.asarray(conf, dtype=np.float64), np.asarray(right, dtype=bool),
            keys)


def second_pass_figures(entries: Sequence[EvalEntry], events: Sequence[Sequence[Event]], model: str,
                        calibration, seconds: float, audio_seconds: float) -> dict:
    """The report's ``second_pass`` entry: the first pass's WER on the same files, how the finals came
    (pass 2 / skipped), the second pass's own time and RTF, and its words' confidence figures."""
    finals = [[f for f in evs if isinstance(f, Final)] for evs in events]
    first = [" ".join((f.first_pass_text if f.first_pass_text is not None else f.text) for f in fs
                      if (f.first_pass_text or f.text)) for fs in finals]
    outcomes: dict[str, int] = {}
    for fs in finals:
        for f in fs:
            outcomes[f.second_pass or "none"] = outcomes.get(f.second_pass or "none", 0) + 1
    raw, conf, right, _ = second_pass_words(entries, events)
    cal = calibration_figures(right.tolist(), raw.tolist(), conf.tolist() if calibration is not None else None,
                              calibration, None)
    return {"model": model, "first_pass": wer_figures(entries, first), "finals": outcomes,
            "seconds": round(seconds, 3), "rtf": seconds / audio_seconds if audio_seconds > 0 else None,
            "words_scored": int(right.size), "confidence": cal}
