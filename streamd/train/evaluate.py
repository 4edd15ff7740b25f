"""``streamd eval``: score a model through the streaming engine (WER, RTF, confidence, KWS).

Every file of an evaluation set (JSON lines: ``audio`` relative to the
file's folder, ``text``, optional ``voice``, ``keyword``, ``duration``) is
decoded as the daemon would: 0.1 s pieces fed to concurrent streams of one
:class:`~streamd.engine.Recognizer` (``batch_streams`` at a time), one batch
step between rounds, endpointing on; the hypothesis is every non-empty
``Final`` joined.  Two decodes per set, both through the engine's public API:

1. **plain** (timed): the configured engine, exactly as served.  Gives the
   WER (:func:`~streamd.train.metrics.align_words`), the real-time factor
   (decode wall time / audio duration; ``rtf_single`` decodes the files one
   at a time instead) and the wake events at the configured thresholds.
2. **recording** (:mod:`streamd.train.recording`): the same engine built with
   a :class:`~streamd.train.recording.MeasureBank` as its ``measure`` and a
   :class:`~streamd.train.recording.KwsTrackRecorder` as its ``on_batch``
   observer.  Each Final's ``token_confs`` are bank tags, from which word
   confidences for every (measure, alpha, aggregation) of the study are
   recomputed without decoding again; the recorded KWS score tracks are
   replayed (:func:`~streamd.train.recording.replay_kws`) for a whole
   threshold sweep at once.  Self-checks in the report: the recording's text
   equals the plain text, and the plain engine's word confidences equal the
   recomputed ones for the configured measure (``conf_raw``, and ``conf`` =
   the calibration of it where the model's calibration applies).

Calibration: the expected calibration error (ECE, 10 bins) and the
reliability bins of the configured measure, and, when the model carries a
calibration the engine applies (:mod:`streamd.decode.calibration`), AUC, NCE,
ECE and bins of the calibrated confidences.  :meth:`Evaluator.word_confidences`
gives ``streamd calibrate`` the same scored words, from the recording decode.

Scoring conventions: see :mod:`streamd.train.metrics` (normalized words,
hypothesis words correct when matched, AUC-ROC and NCE).  KWS: a positive
file (``keyword`` set) is detected when its keyword fires at least once;
every wake event in a negative file (``keyword`` null) is a false alarm;
FRR = missed / positives, FA/h per hour of negative audio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from streamd.audio.pcm import check_sample_rate, load_audio
from streamd.audio.resample import resample
from streamd.cli import add_engine_args, engine_config_from_args, run_guarded
from streamd.config import EngineConfig
from streamd.decode.calibration import resolve_calibration
from streamd.decode.confidence import AGGREGATIONS, MEASURE_NAMES, aggregate
from streamd.engine import Recognizer
from streamd.events import Error, Event, Final, WakeWord, Word
from streamd.model.checkpoint import LoadedModel, load_checkpoint
from streamd.train.metrics import (ReliabilityBins, WordErrorCounts, align_words, auc_roc, confidence_scores, nce,
                                   normalize_words, reliability)
from streamd.train.recording import KwsTrackRecorder, MeasureBank, recording_recognizer, replay_kws, tagged_words
from streamd.train.reliability import plot_reliability, require_matplotlib

__all__ = ["EvalEntry", "read_eval_set", "EvalOptions", "WordConfidences", "Evaluator", "format_report",
           "reliability_curves", "build_parser", "run", "main", "BANK_ALPHAS", "DEFAULT_THRESHOLDS"]

BANK_ALPHAS: tuple[float, ...] = (0.25, 0.33, 0.5, 1.0)
DEFAULT_THRESHOLDS: tuple[float, ...] = tuple(round(i / 100, 2) for i in range(5, 100))


# --------------------------------------------------------------------------- evaluation sets


@dataclass(frozen=True)
class EvalEntry:
    """One line of an evaluation set; ``audio`` is resolved against the set's folder."""

    audio: str
    rel_audio: str
    text: str
    voice: str = "unknown"
    keyword: str | None = None
    source: str = ""


def read_eval_set(path: str | Path, limit: int | None = None) -> tuple[list[EvalEntry], bool]:
    """Read a JSON-lines set; returns (entries, is_kws) where is_kws = some line has a ``keyword`` field.

    Raises ValueError naming the file, line and field for malformed lines or missing audio.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such evaluation set")
    entries: list[EvalEntry] = []
    is_kws = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if limit is not None and len(entries) >= limit:
            break
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object, got {type(d).__name__}")
        for key in ("audio", "text"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"{path}:{n}: field {key!r} must be a string, got {d.get(key)!r}")
        kw = d.get("keyword")
        if kw is not None and (not isinstance(kw, str) or not kw.strip()):
            raise ValueError(f"{path}:{n}: field 'keyword' must be a non-empty string or null, got {kw!r}")
        is_kws = is_kws or "keyword" in d
        audio = path.parent / d["audio"]
        if not audio.is_file():
            raise ValueError(f"{path}:{n}: audio file {str(audio)!r} not found")
        entries.append(EvalEntry(str(audio), d["audio"], d["text"], str(d.get("voice") or "unknown"), kw,
                                 str(d.get("source") or "")))
    if not entries:
        raise ValueError(f"{path}: no entries")
    return entries, is_kws


# --------------------------------------------------------------------------- KWS counts


def _kws_counts(dets_per_file: Sequence[Sequence[Any]], entries: Sequence[EvalEntry], neg_hours: float) -> dict:
    """FRR / false alarms from per-file wake events (objects with a ``keyword``)."""
    pos = [i for i, e in enumerate(entries) if e.keyword is not None]
    neg = [i for i, e in enumerate(entries) if e.keyword is None]
    missed = sum(not any(d.keyword == entries[i].keyword for d in dets_per_file[i]) for i in pos)
    fa = sum(len(dets_per_file[i]) for i in neg)
    return {"frr": missed / len(pos) if pos else None, "missed": missed, "false_alarms": fa,
            "fa_per_hour": fa / neg_hours if neg_hours > 0 else None}


# --------------------------------------------------------------------------- decoding


def _feed(rec: Recognizer, audio: Sequence[tuple[np.ndarray, int]], piece_seconds: float,
          **stream_opts: Any) -> tuple[list[int], list[list[Event]]]:
    """Decode ``audio`` [(samples, rate)] as concurrent streams, like ``cli.transcribe_files``.

    One ``piece_seconds`` piece per live stream, then one batch step, until
    every stream is finished; then drain.  Returns (stream ids, events per item).
    """
    sids = [rec.create_stream(sample_rate=rate, **stream_opts) for _, rate in audio]
    index = {sid: i for i, sid in enumerate(sids)}
    events: list[list[Event]] = [[] for _ in audio]
    pos = [0] * len(audio)

    def emit(evs: list[Event]) -> None:
        for ev in evs:
            events[index[ev.stream]].append(ev)

    live = list(range(len(audio)))
    while live:
        for i in list(live):
            x, rate = audio[i]
            if not rec.has_stream(sids[i]):
                live.remove(i)
                continue
            n = max(1, int(piece_seconds * rate))
            piece = x[pos[i]: pos[i] + n]
            pos[i] += n
            if piece.size:
                emit(rec.accept_audio(sids[i], piece))
            if pos[i] >= x.size and rec.has_stream(sids[i]):
                rec.finish(sids[i])
                live.remove(i)
        emit(rec.step())
    emit(rec.drain())
    return sids, events


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class EvalOptions:
    """What ``streamd eval`` does besides decoding (see the CLI flags)."""

    resample_to: int | None = None
    batch_streams: int = 16
    rtf_single: bool = False
    piece_seconds: float = 0.1
    limit: int | None = None
    alphas: tuple[float, ...] = BANK_ALPHAS
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS

    def __post_init__(self) -> None:
        if self.resample_to is not None:
            check_sample_rate(self.resample_to)
        if isinstance(self.batch_streams, bool) or not isinstance(self.batch_streams, int) or self.batch_streams < 1:
            raise ValueError(f"batch_streams must be an integer >= 1, got {self.batch_streams!r}")
        if not 0 < self.piece_seconds <= 10:
            raise ValueError(f"piece_seconds must be in (0, 10], got {self.piece_seconds!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ValueError(f"limit must be an integer >= 1, got {self.limit!r}")
        if not self.alphas or any(not a > 0 for a in self.alphas):
            raise ValueError(f"alphas must be numbers > 0, got {self.alphas!r}")
        if not self.thresholds or any(not 0 < t < 1 for t in self.thresholds):
            raise ValueError(f"thresholds must be in (0, 1), got {self.thresholds!r}")


@dataclass
class _Decoded:
    """One file's outcome: plain run (text, words, wake events, errors) and recording run."""

    text: str = ""
    words: list[Word] = dataclasses.field(default_factory=list)
    wakes: list[WakeWord] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    rec_text: str = ""
    rec_words: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)  # (word, (tokens, M) values)
    track: np.ndarray | None = None


def _finals(events: Sequence[Event]) -> list[Final]:
    return [e for e in events if isinstance(e, Final) and e.text]


@dataclass(frozen=True)
class _Scored:
    """The scored hypothesis words of a set's recording decode (N words, M bank measures).

    labels: (N,) correct or not; values: N arrays (tokens, M) of the word's tokens' bank values;
    utterance: (N,) index of each word's entry; mismatched: entries whose recording text differs.
    """

    labels: list[bool]
    values: list[np.ndarray]
    utterance: list[int]
    mismatched: int


def _word_confs(values: Sequence[np.ndarray], m: int, how: str) -> list[float]:
    """Word confidences of bank measure ``m`` aggregated with ``how``: one per (tokens, M) array."""
    return [aggregate(v[:, m].tolist(), how) for v in values]


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
        self.recording = recording_recognizer(loaded, config, self.bank, self.kws_tracks)
        self.keywords = self.plain.keywords
        self._warm = False

    # ---- decoding

    def _load(self, entries: Sequence[EvalEntry]) -> list[tuple[np.ndarray, int]]:
        out = []
        for e in entries:
            x, rate = load_audio(e.audio)
            target = self.options.resample_to
            if target is not None and rate != target:
                x, rate = resample(x, rate, target), target
            out.append((x, rate))
        return out

    def _timed(self, audio: Sequence[tuple[np.ndarray, int]], per_group: int) -> tuple[list[list[Event]], float]:
        rec, opts = self.plain, self.options
        if not self._warm:  # first-call overheads are not decoding time
            _feed(rec, [(np.zeros(16000, dtype=np.float32), 16000)], opts.piece_seconds)
            self._warm = True
        events: list[list[Event]] = []
        wall = 0.0
        for g in range(0, len(audio), per_group):
            _sync(rec.device)
            t0 = time.perf_counter()
            _, evs = _feed(rec, audio[g:g + per_group], opts.piece_seconds)
            _sync(rec.device)
            wall += time.perf_counter() - t0
            events += evs
        return events, wall

    def _record(self, audio: Sequence[tuple[np.ndarray, int]], out: list[_Decoded], keywords: bool) -> None:
        """The recording decode: per file the final words with their tokens' bank values, and KWS tracks.

        Streams run without the wake-word detector (``keywords=False``): the
        tracks come from the KWS head's scores that the recorder observes.
        """
        rec, bank, recorder = self.recording, self.bank, self.kws_tracks
        n = self.options.batch_streams
        recorder.enabled = keywords
        try:
            for g in range(0, len(audio), n):
                bank.reset()
                sids, evs = _feed(rec, audio[g:g + n], self.options.piece_seconds, partials=False, keywords=False)
                finals = [_finals(e) for e in evs]
                words = [[w for f in fs for w in tagged_words(f, rec.tokens, rec.frame_shift_s, bank)]
                         for fs in finals]  # per file
                vals = bank.lookup([t for ws in words for w in ws for t in w.tags])
                tracks = recorder.take_tracks()
                pos = 0
                for i, (sid, fs, ws) in enumerate(zip(sids, finals, words)):
                    d = out[g + i]
                    d.rec_text = " ".join(f.text for f in fs)
                    for w in ws:
                        d.rec_words.append((w.word, vals[pos:pos + len(w.tags)]))
                        pos += len(w.tags)
                    if keywords:
                        d.track = tracks.get(sid, np.zeros((0, len(self.keywords))))
        finally:
            recorder.enabled = False
            recorder.take_tracks()  # drop anything left by a failed run
            bank.reset()

    # ---- scoring

    def evaluate(self, path: str | Path) -> dict:
        """Decode and score the set at ``path``; returns the figures (see the module docstring)."""
        opts = self.options
        entries, is_kws = read_eval_set(path, opts.limit)
        audio = self._load(entries)
        seconds = [x.size / rate for x, rate in audio]
        total = sum(seconds)
        out = [_Decoded() for _ in entries]

        events, wall = self._timed(audio, opts.batch_streams)
        for d, evs in zip(out, events):
            fs = _finals(evs)
            d.text = " ".join(f.text for f in fs)
            d.words = [w for f in fs for w in f.words]
            d.wakes = [e for e in evs if isinstance(e, WakeWord)]
            d.errors = [f"{e.code}: {e.message}" for e in evs if isinstance(e, Error)]
        rtf_single = None
        if opts.rtf_single:
            _, wall1 = self._timed(audio, 1)
            rtf_single = wall1 / total if total > 0 else None
        self._record(audio, out, keywords=is_kws and bool(self.keywords))

        result: dict[str, Any] = {"set": str(path), "utterances": len(entries), "audio_seconds": round(total, 3)}
        result.update(self._wer(entries, out))
        result.update({"rtf": wall / total if total > 0 else None, "rtf_single": rtf_single,
                       "decode_seconds": round(wall, 3), "batch_streams": opts.batch_streams,
                       "sample_rate": opts.resample_to or "native"})
        result["errors"] = [f"{e.rel_audio}: {m}" for e, d in zip(entries, out) for m in d.errors]
        result["confidence"] = self._confidence(entries, out)
        result["kws"] = self._kws(entries, out, seconds) if is_kws and self.keywords else None
        if is_kws and not self.keywords:
            result["kws_skipped"] = "the model has no keywords (KWS head)"
        result["files"] = [{"audio": e.rel_audio, "voice": e.voice, "ref": e.text, "hyp": d.text,
                            "errors": align_words(normalize_words(e.text), normalize_words(d.text)).errors,
                            "wakes": len(d.wakes)} for e, d in zip(entries, out)]
        return result

    @staticmethod
    def _wer(entries: Sequence[EvalEntry], out: Sequence[_Decoded]) -> dict:
        tot = WordErrorCounts()
        voices: dict[str, WordErrorCounts] = {}
        sources: dict[str, WordErrorCounts] = {}
        for e, d in zip(entries, out):
            ref = normalize_words(e.text)
            a = align_words(ref, normalize_words(d.text))
            groups = [tot, voices.setdefault(e.voice, WordErrorCounts())]
            if e.source:
                groups.append(sources.setdefault(e.source, WordErrorCounts()))
            for acc in groups:
                acc.add(len(ref), a)

        def rates(acc: WordErrorCounts) -> dict:
            return {"wer": acc.wer, "ser": acc.ser, "exact": None if acc.ser is None else 1.0 - acc.ser,
                    "ref_words": acc.words, "sub": acc.subs, "del": acc.dels, "ins": acc.ins, "hits": acc.hits,
                    "utterances": acc.utts}

        res = rates(tot)
        res.pop("utterances")
        res["per_voice"] = {v: rates(acc) for v, acc in sorted(voices.items())}
        res["per_source"] = {v: rates(acc) for v, acc in sorted(sources.items())}
        return res

    @staticmethod
    def _scored(entries: Sequence[EvalEntry], out: Sequence[_Decoded]) -> _Scored:
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
        return _Scored(labels, token_vals, utterance, mismatched)

    def word_confidences(self, path: str | Path) -> WordConfidences:
        """Decode the set at ``path`` (the recording decode only) and score its hypothesis words.

        The labels are :meth:`evaluate`'s (``align_words(...).hyp_correct``); the raw values are those of
        the configured measure, which the report's ``default`` table row scores.
        """
        entries, _ = read_eval_set(path, self.options.limit)
        out = [_Decoded() for _ in entries]
        self._record(self._load(entries), out, keywords=False)
        sc = self._scored(entries, out)
        cc = self.config.confidence
        raw = _word_confs(sc.values, self.bank.specs.index((cc.name, float(cc.alpha))), cc.aggregation)
        return WordConfidences(str(path), len(entries), np.asarray(raw, dtype=np.float64),
                               np.asarray(sc.labels, dtype=bool),
                               tuple(f"{entries[i].rel_audio}\t{entries[i].text}" for i in sc.utterance))

    def _confidence(self, entries: Sequence[EvalEntry], out: Sequence[_Decoded]) -> dict:
        cc = self.config.confidence
        sc = self._scored(entries, out)
        labels = sc.labels
        table = []
        default = (cc.name, cc.alpha, cc.aggregation)
        word_confs: dict[tuple[str, float, str], list[float]] = {}
        for m, (name, alpha) in enumerate(self.bank.specs):
            if alpha not in self.options.alphas and (name, alpha) != (cc.name, cc.alpha):
                continue
            for how in AGGREGATIONS:
                confs = _word_confs(sc.values, m, how)
                word_confs[(name, alpha, how)] = confs
                table.append({"measure": name, "alpha": alpha, "aggregation": how, "auc": auc_roc(labels, confs),
                              "nce": nce(labels, confs), "default": (name, alpha, how) == default})
        raw = word_confs[default]
        cal = self.plain.calibration  # the one the engine applies (None: none, or not for this measure)
        probs = cal.apply(raw).tolist() if cal is not None else None
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
                **self._calibration_figures(labels, raw, probs)}

    def _calibration_figures(self, labels: Sequence[bool], raw: Sequence[float],
                             probs: Sequence[float] | None) -> dict:
        """ECE and reliability bins of the configured measure, before and (``probs``) after calibration."""
        stored = self.stored_calibration
        info = None
        if stored is not None:
            info = {"kind": stored.kind, "measure": stored.measure, "alpha": stored.alpha,
                    "aggregation": stored.aggregation, "exclude_blank": stored.exclude_blank, "words": stored.words,
                    "knots": len(stored.x), "applied": probs is not None, "not_applied": self.calibration_problem,
                    **(confidence_scores(labels, probs) if probs is not None else {"auc": None, "nce": None,
                                                                                    "ece": None})}
        raw_bins = reliability(labels, raw)
        return {"ece": raw_bins.ece, "calibration": info,
                "reliability": {"raw": raw_bins.to_dict(),
                                "calibrated": reliability(labels, probs).to_dict() if probs is not None else None}}

    def _kws(self, entries: Sequence[EvalEntry], out: Sequence[_Decoded], seconds: Sequence[float]) -> dict:
        kcfg = self.config.kws
        neg_s = sum(s for e, s in zip(entries, seconds) if e.keyword is None)
        hours = neg_s / 3600.0
        unknown = sorted({e.keyword for e in entries if e.keyword is not None and e.keyword not in self.keywords})
        default = _kws_counts([d.wakes for d in out], entries, hours)
        thresholds = sorted(set(self.options.thresholds) | {kcfg.threshold})
        dets = replay_kws([d.track for d in out], self.keywords, kcfg, self.plain.frame_shift_s, thresholds)
        sweep = [{"threshold": t, **_kws_counts(dt, entries, hours)} for t, dt in zip(thresholds, dets)]
        at_cfg = next(s for s in sweep if s["threshold"] == kcfg.threshold)

        def best(budget: float) -> dict | None:
            ok = [s for s in sweep if s["fa_per_hour"] is not None and s["fa_per_hour"] <= budget
                  and s["frr"] is not None]
            if not ok:
                return None
            s = min(ok, key=lambda s: (s["frr"], s["fa_per_hour"], s["threshold"]))
            return {"frr": s["frr"], "threshold": s["threshold"], "fa_per_hour": s["fa_per_hour"]}

        return {"positives": sum(e.keyword is not None for e in entries),
                "negatives": sum(e.keyword is None for e in entries), "negative_seconds": round(neg_s, 3),
                "threshold": kcfg.threshold, "per_keyword_thresholds": dict(kcfg.thresholds),
                "smoothing_frames": kcfg.smoothing_frames, "refractory_s": kcfg.refractory_s,
                "unknown_keywords": unknown, **default,
                "sweep_matches_engine": (not kcfg.thresholds and kcfg.enabled
                                         and (at_cfg["missed"], at_cfg["false_alarms"])
                                         == (default["missed"], default["false_alarms"])),
                "frr_at_1_fa_per_hour": best(1.0), "frr_at_0.1_fa_per_hour": best(0.1),
                "sweep": sweep, "det": [[s["fa_per_hour"], s["frr"]] for s in
                                        sorted(sweep, key=lambda s: (s["fa_per_hour"] or 0.0, -(s["frr"] or 0.0)))]}


# --------------------------------------------------------------------------- report


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:6.2f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _calibration_line(c: dict) -> str:
    """The report's calibration line: ECE of the engine setting's raw measure, then of the calibrated conf."""
    line = f"  ECE ({len(c['reliability']['raw']['counts'])} bins) of * (raw): {_num(c['ece'])};"
    cal = c["calibration"]
    if cal is None:
        return line + " the model has no calibration (streamd calibrate)"
    if not cal["applied"]:
        return line + f" the model's {cal['kind']} calibration is not applied: {cal['not_applied']}"
    return line + (f" calibrated ({cal['kind']}, {cal['knots']} knots): ECE {_num(cal['ece'])}  "
                   f"AUC {_num(cal['auc'])}  NCE {_num(cal['nce'])}")


def reliability_curves(report: dict) -> list[tuple[str, ReliabilityBins]]:
    """(label, bins) of every set's raw and (where applied) calibrated confidences, for the diagram."""
    curves = []
    for r in report["sets"]:
        name = "/".join(Path(r["set"]).parts[-2:])
        for which, bins in r["confidence"]["reliability"].items():
            if bins is not None:
                curves.append((f"{name} {which}", ReliabilityBins.from_dict(bins)))
    return curves


def format_report(report: dict) -> str:
    """Readable text of :meth:`Evaluator.evaluate` results (the ``report`` of :func:`run`)."""
    lines = [f"model {report['model']}  method {report['method']} (beam {report['beam']})  device {report['device']}"]
    for r in report["sets"]:
        lines += ["", f"== {r['set']}: {r['utterances']} utterances, {r['audio_seconds']:.1f} s of audio "
                      f"(sample rate {r['sample_rate']})",
                  f"WER {_pct(r['wer'])}  (sub {r['sub']}, del {r['del']}, ins {r['ins']} / {r['ref_words']} words)"
                  f"   SER {_pct(r['ser'])}   exact {_pct(r['exact'])}"]
        for title, groups in (("voice", r["per_voice"]), ("source", r.get("per_source", {}))):
            if title == "source" and len(groups) < 2:  # a single source repeats the set line
                continue
            if title == "source":
                lines.append("  per source:")
            for v, pv in groups.items():
                lines.append(f"    {v:32s} WER {_pct(pv['wer'])}  SER {_pct(pv['ser'])}  "
                             f"({pv['ref_words']} words, {pv['utterances']} utts)")
        lines.append(f"RTF {_num(r['rtf'], '.4f')} ({r['batch_streams']} concurrent streams), "
                     f"single stream {_num(r['rtf_single'], '.4f')}")
        for e in r["errors"]:
            lines.append(f"  error: {e}")
        c = r["confidence"]
        lines.append(f"Confidence: {c['words']} hypothesis words, {c['correct']} correct "
                     f"(* = engine setting; engine check max |diff| {_num(c['engine_conf_max_abs_diff'], '.2g')})")
        lines.append(f"  {'measure':22s} {'alpha':>5s} {'agg':>5s} {'AUC':>7s} {'NCE':>8s}")
        for t in c["table"]:
            lines.append(f"{'*' if t['default'] else ' '} {t['measure']:22s} {t['alpha']:5.2f} {t['aggregation']:>5s} "
                         f"{_num(t['auc']):>7s} {_num(t['nce']):>8s}")
        lines.append(_calibration_line(c))
        k = r["kws"]
        if k is None:
            continue
        lines.append(f"KWS: {k['positives']} positives, {k['negatives']} negatives ({k['negative_seconds'] / 60:.1f} "
                     f"min); threshold {k['threshold']}: FRR {_pct(k['frr'])}, {k['false_alarms']} false alarms "
                     f"= {_num(k['fa_per_hour'], '.2f')} FA/h")
        for budget, key in (("1", "frr_at_1_fa_per_hour"), ("0.1", "frr_at_0.1_fa_per_hour")):
            b = k[key]
            lines.append(f"  FRR at <= {budget} FA/h: " + ("none of the thresholds" if b is None else
                         f"{_pct(b['frr'])} (threshold {b['threshold']}, {_num(b['fa_per_hour'], '.2f')} FA/h)"))
        points = [f"{s['threshold']:.2f}: {_pct(s['frr']).strip()}, {_num(s['fa_per_hour'], '.2f')} FA/h"
                  for s in k["sweep"] if round(s["threshold"] * 100) % 5 == 0]
        lines.append("  DET (threshold: FRR, FA/h; every 0.05 of the sweep):")
        lines += ["    " + "   ".join(points[i:i + 4]) for i in range(0, len(points), 4)]
    if len(report["sets"]) > 1:
        lines += ["", "== summary", f"  {'set':56s} {'utts':>5s} {'WER':>7s} {'exact':>7s} {'RTF':>7s}"]
        for r in report["sets"]:
            name = r["set"] if len(r["set"]) <= 56 else "..." + r["set"][-53:]
            lines.append(f"  {name:56s} {r['utterances']:5d} {_pct(r['wer'])} {_pct(r['exact'])} "
                         f"{_num(r['rtf'], '.4f'):>7s}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="streamd eval", description="Evaluate a model through the streaming engine: "
                                 "WER, real-time factor, confidence quality (AUC, NCE), wake words (FRR, FA/h).")
    ap.add_argument("--set", dest="sets", action="append", metavar="PATH.jsonl",
                    help="evaluation set (JSON lines: audio, text[, voice, keyword]); repeatable "
                         "(default: the package's sample recordings, a smoke test, not an evaluation)")
    ap.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(ap)
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--resample-to", type=int, metavar="RATE",
                    help="downsample the audio to RATE Hz first and stream it at that rate (e.g. 8000)")
    ap.add_argument("--batch-streams", type=int, default=16, metavar="N", help="concurrent streams (default 16)")
    ap.add_argument("--rtf-single", action="store_true", help="also time the files one at a time (one stream)")
    ap.add_argument("--limit", type=int, metavar="N", help="only the first N entries of each set")
    ap.add_argument("--json", action="store_true", help="one JSON object with every figure")
    ap.add_argument("--reliability-plot", metavar="PNG", help="write a reliability diagram of word confidence "
                    "(raw and calibrated, every set) to PNG (needs matplotlib)")
    return ap


def run(model: str, sets: Sequence[str], config: EngineConfig, options: EvalOptions) -> dict:
    """Evaluate ``sets`` with the checkpoint at ``model``: the full report as a dict."""
    loaded = load_checkpoint(model, "cpu")
    ev = Evaluator(loaded, config, options)
    dec = config.decoding
    return {"model": str(model), "method": dec.method, "beam": dec.beam, "device": str(ev.plain.device),
            "confidence_default": {"measure": config.confidence.name, "alpha": config.confidence.alpha,
                                   "aggregation": config.confidence.aggregation},
            "sets": [ev.evaluate(s) for s in sets]}


def _run(args: argparse.Namespace) -> int:
    if args.model:
        model = args.model
    else:
        from streamd.cli import default_model_path

        model = str(default_model_path())
        if not Path(model).is_file():
            raise ValueError(f"no model given and no default model at {model}; pass --model PATH")
    if not args.sets:
        from streamd.cli import default_samples

        args.sets = [str(default_samples())]
        print(f"streamd eval: no --set given: using the sample recordings {args.sets[0]} "
              "(six TTS sentences: a smoke test, not an evaluation)", file=sys.stderr)
    options = EvalOptions(resample_to=args.resample_to, batch_streams=args.batch_streams,
                          rtf_single=args.rtf_single, limit=args.limit)
    if args.reliability_plot:
        require_matplotlib()
    report = run(model, args.sets, engine_config_from_args(args), options)
    if args.reliability_plot:
        plot_reliability(args.reliability_plot, reliability_curves(report),
                         f"word confidence: {Path(model).name}, {report['method']}")
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report))
    errors = [e for r in report["sets"] for e in r["errors"]]
    for e in errors:
        print(f"streamd eval: {e}", file=sys.stderr)
    return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded("streamd eval", lambda: _run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
