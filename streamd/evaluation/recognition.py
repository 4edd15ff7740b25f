"""Recognition evaluation of one set (:class:`Evaluator`): WER, RTF, word-confidence quality and calibration,
and the built-in KWS head's figures, from a plain and a recording decode (see :mod:`streamd.evaluation`)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from streamd.config import EngineConfig, SecondPassConfig
from streamd.decode.calibration import resolve_calibration
from streamd.decode.confidence import MEASURE_NAMES
from streamd.engine import Recognizer
from streamd.events import Error, Event, Final, WakeWord
from streamd.model.checkpoint import LoadedModel, load_checkpoint
from streamd.second_pass.calibration import second_pass_for
from streamd.scoring.metrics import align_words, normalize_words
from streamd.scoring.recording import KwsTrackRecorder, MeasureBank, recording_recognizer

from .confidence import WordConfidences, confidence_figures, scored_words, word_confs
from .decoding import Decoded, finals, record_decode, timed_decode
from .kws import builtin_kws_figures
from .options import EvalOptions
from .second import second_pass_figures
from .sets import EvalEntry, load_entries, read_eval_set
from .wer import wer_figures

__all__ = ["Evaluator", "run"]


class Evaluator:
    """Loads a model once; :meth:`evaluate` scores one evaluation set (a dict of figures)."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig, options: EvalOptions | None = None):
        self.config = config
        self.options = options or EvalOptions()
        cc = config.confidence
        alphas = sorted(set(self.options.alphas) | {cc.alpha})
        specs = [(n, a) for n in MEASURE_NAMES for a in alphas]
        self.bank = MeasureBank(specs)
        self.kws_tracks = KwsTrackRecorder(enabled=False)
        self.plain = Recognizer(loaded, config)
        self.stored_calibration, self.calibration_problem = resolve_calibration(loaded.meta, cc)
        self.recording = recording_recognizer(loaded, dataclasses.replace(config, second_pass=SecondPassConfig()),
                                              self.bank, self.kws_tracks)  # the first pass's words only
        self.keywords = self.plain.keywords
        self.second = second_pass_for(config, self.plain.calibration is not None)
        self._warm = False

    # ---- decoding

    def _load(self, entries: Sequence[EvalEntry]) -> list[tuple[np.ndarray, int]]:
        return load_entries(entries, self.options.resample_to)

    def _timed(self, audio: Sequence[tuple[np.ndarray, int]], per_group: int) -> tuple[list[list[Event]], float]:
        if not self._warm:  # first-call overheads are not decoding time
            self.plain.warm_up()  # every method once (and the encoder's graph recorded), untimed
            self._warm = True
        return timed_decode(self.plain, audio, per_group, self.options.piece_seconds)

    def _record(self, audio: Sequence[tuple[np.ndarray, int]], out: list[Decoded], keywords: bool) -> None:
        """The recording decode (:func:`~.decoding.record_decode`) into ``out``."""
        record_decode(self.recording, self.bank, self.kws_tracks, audio, out, self.options.batch_streams,
                      self.options.piece_seconds, keywords, len(self.keywords))

    def _second_pass(self, events: Sequence[Sequence[Event]], batch: int) -> list[list[Event]]:
        """Every file's events with its Finals read by the second pass (``choose=False``: its own Final): one
        at a time (``batch`` 1), or in rounds of ``batch`` segments, the files' first segments first, then their
        second ones and so on, as concurrent streams end them
        (:meth:`~streamd.second_pass.rescore.SecondPass.apply_all`: one model call a round for a model that
        batches), as the daemon's worker reads them when ``batch`` segments wait."""
        assert self.second is not None
        out = [list(evs) for evs in events]
        if batch == 1:
            return [[self.second.apply(e, choose=False) if isinstance(e, Final) else e for e in evs] for evs in out]
        at = sorted((n, f, i) for f, evs in enumerate(out)  # (n-th final of file f, f, its index in the file)
                    for n, i in enumerate(i for i, e in enumerate(evs) if isinstance(e, Final)))
        for k in range(0, len(at), batch):
            rnd = at[k:k + batch]
            for (_, f, i), e in zip(rnd, self.second.apply_all([out[f][i] for _, f, i in rnd], choose=False)):
                out[f][i] = e
        return out

    # ---- scoring

    def evaluate(self, path: str | Path) -> dict:
        """Decode and score the set at ``path``; returns the figures (see :mod:`streamd.evaluation`)."""
        opts = self.options
        entries, is_kws = read_eval_set(path, opts.limit)
        audio = self._load(entries)
        seconds = [x.size / rate for x, rate in audio]
        total = sum(seconds)
        out = [Decoded() for _ in entries]

        events, wall = self._timed(audio, opts.batch_streams)
        second = None
        if self.second is not None:  # in line, after the first pass (its RTF stays the first pass's)
            t0 = time.perf_counter()
            always = self._second_pass(events, opts.second_pass_batch)
            spent = time.perf_counter() - t0  # not ``seconds``: those are the files' durations (kws figures)
            second = second_pass_figures(entries, events, always, self.second, spent, total)
            events = [[self.second.choose(a, b) if isinstance(a, Final) else b for a, b in zip(evs, two)]
                      for evs, two in zip(events, always)]
        for d, evs in zip(out, events):
            fs = finals(evs)
            d.text = " ".join(f.text for f in fs)
            d.words = [w for f in fs for w in f.words]
            d.wakes = [e for e in evs if isinstance(e, WakeWord)]
            if self.second is not None:  # kws.verify: each pending detection verified; those that stand count
                d.wakes = [w for w in map(self.second.verify, d.wakes) if w.stands]
            d.errors = [f"{e.code}: {e.message}" for e in evs if isinstance(e, Error)]
        rtf_single = None
        if opts.rtf_single:
            _, wall1 = self._timed(audio, 1)
            rtf_single = wall1 / total if total > 0 else None
        self._record(audio, out, keywords=is_kws and bool(self.keywords))

        result: dict[str, Any] = {"set": str(path), "utterances": len(entries), "audio_seconds": round(total, 3)}
        result.update(wer_figures(entries, [d.text for d in out]))
        result.update({"rtf": wall / total if total > 0 else None, "rtf_single": rtf_single,
                       "decode_seconds": round(wall, 3), "batch_streams": opts.batch_streams,
                       "sample_rate": opts.resample_to or "native"})
        if second is not None:
            result["second_pass"] = second
        result["errors"] = [f"{e.rel_audio}: {m}" for e, d in zip(entries, out) for m in d.errors]
        result["confidence"] = confidence_figures(entries, out, self.config.confidence, self.bank.specs,
                                                  opts.alphas, self.plain.calibration, self.stored_calibration,
                                                  self.calibration_problem)
        result["kws"] = (builtin_kws_figures(entries, [d.wakes for d in out], [d.track for d in out], seconds,
                                             self.keywords, self.config.kws, opts.thresholds,
                                             self.plain.frame_shift_s)
                         if is_kws and self.keywords else None)
        if is_kws and not self.keywords:
            result["kws_skipped"] = "the model has no keywords (KWS head)"
        result["files"] = [{"audio": e.rel_audio, "voice": e.voice, "ref": e.text, "hyp": d.text,
                            "errors": align_words(normalize_words(e.text), normalize_words(d.text)).errors,
                            "wakes": len(d.wakes)} for e, d in zip(entries, out)]
        return result

    def word_confidences(self, path: str | Path) -> WordConfidences:
        """Decode the set at ``path`` (the recording decode only) and score its hypothesis words.

        The labels are :meth:`evaluate`'s (``align_words(...).hyp_correct``); the raw values are those of
        the configured measure, which the report's ``default`` table row scores.
        """
        entries, _ = read_eval_set(path, self.options.limit)
        out = [Decoded() for _ in entries]
        self._record(self._load(entries), out, keywords=False)
        sc = scored_words(entries, out)
        cc = self.config.confidence
        raw = word_confs(sc.values, self.bank.specs.index((cc.name, float(cc.alpha))), cc.aggregation)
        return WordConfidences(str(path), len(entries), np.asarray(raw, dtype=np.float64),
                               np.asarray(sc.labels, dtype=bool),
                               tuple(f"{entries[i].rel_audio}\t{entries[i].text}" for i in sc.utterance))


def run(model: str, sets: Sequence[str], config: EngineConfig, options: EvalOptions) -> dict:
    """Evaluate ``sets`` with the checkpoint at ``model``: the full report as a dict."""
    loaded = load_checkpoint(model, "cpu")
    ev = Evaluator(loaded, config, options)
    dec = config.decoding
    return {"model": str(model), "method": dec.method, "beam": dec.beam_for(dec.method), "device": str(ev.plain.device),
            "confidence_default": {"measure": config.confidence.name, "alpha": config.confidence.alpha,
                                   "aggregation": config.confidence.aggregation},
            "sets": [ev.evaluate(s) for s in sets]}
