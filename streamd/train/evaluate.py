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
FRR = missed / positives, FA/h per hour of negative audio (:func:`_kws_counts`;
:func:`frr_at` the best FRR within a false-alarm budget, :func:`det_points`
the DET curve; ``--det-plot`` draws it).

**Keyword mode** (``--keywords [LIST]``, :class:`KeywordEvaluator`): runtime
wake words (text, no retraining) instead of recognition.  Positive sets
(``keyword`` fields) and negative sets (``keyword`` null) are pooled; per
keyword the same rule gives the miss rate (FRR) on its positives and the false
alarms per hour on all negatives, over a threshold sweep that is exact
(:func:`keyword_sweep`: the keyword search resets at each detection, so a
file with detections is decoded again above its lowest score), with the miss
rate at 1, 0.5 and 0.1 FA/h and a DET plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from streamd.audio.pcm import check_sample_rate, load_audio
from streamd.audio.resample import resample
from streamd.engine_args import add_engine_args, engine_config_from_args, run_guarded
from streamd.config import EngineConfig, PhraseSpec, parse_phrases
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
           "reliability_curves", "build_parser", "run", "main", "BANK_ALPHAS", "DEFAULT_THRESHOLDS", "FA_BUDGETS",
           "frr_at", "det_points", "keyword_sweep", "KeywordEvaluator", "run_keywords", "format_keyword_report",
           "det_curves", "plot_det", "plot_det_panels"]

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


FA_BUDGETS: tuple[float, ...] = (1.0, 0.5, 0.1)
"""False alarms per hour at which the reports give the lowest FRR (miss rate) of a sweep."""


def frr_at(sweep: Sequence[dict], budget: float) -> dict | None:
    """The best operating point of a threshold sweep within a false-alarm budget.

    sweep: points with ``threshold``, ``frr`` and ``fa_per_hour`` (:func:`_kws_counts` figures).  Among the
    points with ``fa_per_hour <= budget`` the one with the lowest FRR (ties: fewer FA/h, then the lower
    threshold) as {frr, threshold, fa_per_hour}; None when no point qualifies.
    """
    ok = [s for s in sweep if s["fa_per_hour"] is not None and s["fa_per_hour"] <= budget and s["frr"] is not None]
    if not ok:
        return None
    s = min(ok, key=lambda s: (s["frr"], s["fa_per_hour"], s["threshold"]))
    return {"frr": s["frr"], "threshold": s["threshold"], "fa_per_hour": s["fa_per_hour"]}


def det_points(sweep: Sequence[dict]) -> list[list]:
    """The DET curve of a sweep: [FA/h, FRR] per point, by increasing FA/h (then decreasing FRR)."""
    return [[s["fa_per_hour"], s["frr"]]
            for s in sorted(sweep, key=lambda s: (s["fa_per_hour"] or 0.0, -(s["frr"] or 0.0)))]


def _budget_key(budget: float) -> str:
    return f"frr_at_{budget:g}_fa_per_hour"


# --------------------------------------------------------------------------- decoding


def _feed(rec: Recognizer, audio: Sequence[tuple[np.ndarray, int]], piece_seconds: float,
          per_item: Sequence[dict] | None = None, **stream_opts: Any) -> tuple[list[int], list[list[Event]]]:
    """Decode ``audio`` [(samples, rate)] as concurrent streams, like :func:`streamd.feed.transcribe_files`.

    One ``piece_seconds`` piece per live stream, then one batch step, until
    every stream is finished; then drain.  ``per_item``: stream options of
    each item, over ``stream_opts``.  Returns (stream ids, events per item).
    """
    sids = [rec.create_stream(sample_rate=rate, **{**stream_opts, **(per_item[i] if per_item else {})})
            for i, (_, rate) in enumerate(audio)]
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


def _load_entries(entries: Sequence[EvalEntry], resample_to: int | None) -> list[tuple[np.ndarray, int]]:
    """The entries' audio as (samples, rate), downsampled to ``resample_to`` where given."""
    out = []
    for e in entries:
        x, rate = load_audio(e.audio)
        if resample_to is not None and rate != resample_to:
            x, rate = resample(x, rate, resample_to), resample_to
        out.append((x, rate))
    return out


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
        return _load_entries(entries, self.options.resample_to)

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
        return {"positives": sum(e.keyword is not None for e in entries),
                "negatives": sum(e.keyword is None for e in entries), "negative_seconds": round(neg_s, 3),
                "threshold": kcfg.threshold, "per_keyword_thresholds": dict(kcfg.thresholds),
                "smoothing_frames": kcfg.smoothing_frames, "refractory_s": kcfg.refractory_s,
                "unknown_keywords": unknown, **default,
                "sweep_matches_engine": (not kcfg.thresholds and kcfg.enabled
                                         and (at_cfg["missed"], at_cfg["false_alarms"])
                                         == (default["missed"], default["false_alarms"])),
                "frr_at_1_fa_per_hour": frr_at(sweep, 1.0), "frr_at_0.1_fa_per_hour": frr_at(sweep, 0.1),
                "sweep": sweep, "det": det_points(sweep)}


# --------------------------------------------------------------------------- keyword mode (runtime wake words)


def keyword_sweep(decode: Callable[[list[int], list[float]], list[list[Any]]], n: int,
                  thresholds: Sequence[float]) -> tuple[list[list[list[Any]]], list[int]]:
    """Exact detections of ``n`` files at every threshold of a sweep, from as few decodes as the detector allows.

    The runtime keyword search (:mod:`streamd.decode.keyword_search`) resets a stream's hypotheses at each
    detection and starts its refractory clock, so what it finds after a detection depends on the
    threshold: the detections at a high threshold are not those of a low-threshold decode with the low
    scores dropped, and sweeping thresholds offline over one low-threshold decode is not exact.  This is:
    a decode at threshold ``t`` whose detections all score at least ``s`` (``s`` infinite when there are
    none) *is* the decode at every threshold ``u`` in ``[t, s]``.  Up to a detection the two runs are the
    same computation, and at each check the rule gives the same answer: a check failing at ``t`` fails at
    ``u >= t`` (the score is below ``t``, or a condition that does not involve the threshold fails), and one
    passing at ``t`` passes at ``u`` (its score is ``>= s >= u``); so they detect and reset at the same
    points.  Each file is therefore decoded at the lowest threshold, then again only at the lowest
    threshold above its lowest detection score, and so on: a file without detections (most negatives)
    once, a positive detected once about twice.

    decode(items, item_thresholds): the detections (objects with a ``score``) of each item (a file index)
    decoded with every keyword's threshold set to the item's threshold.  thresholds: strictly ascending.
    Returns (dets, runs): dets[j][i] the detections of file i at thresholds[j]; runs[i] the decodes of file i.
    """
    ts = [float(t) for t in thresholds]
    if not ts or any(b <= a for a, b in zip(ts, ts[1:])):
        raise ValueError(f"thresholds must be a non-empty, strictly ascending list, got {list(thresholds)!r}")
    dets: list[list[list[Any]]] = [[[] for _ in range(n)] for _ in ts]
    runs = [0] * n
    todo = {i: 0 for i in range(n)}  # file -> index of the lowest threshold not yet covered
    while todo:
        items = sorted(todo)
        out = decode(items, [ts[todo[i]] for i in items])
        for i, found in zip(items, out):
            runs[i] += 1
            j = todo.pop(i)
            low = min((d.score for d in found), default=float("inf"))
            if low < ts[j]:
                raise RuntimeError(f"a detection scored {low} below its decode's threshold {ts[j]}")
            while j < len(ts) and ts[j] <= low:
                dets[j][i] = list(found)
                j += 1
            if j < len(ts):
                todo[i] = j
    return dets, runs


def _phrase_key(phrase: str) -> str:
    return " ".join(phrase.split()).casefold()


def _contains(words: Sequence[str], part: Sequence[str]) -> bool:
    k = len(part)
    return k > 0 and any(list(words[i:i + k]) == list(part) for i in range(len(words) - k + 1))


@dataclass
class _KwFile:
    """One file of keyword mode: its entry, set index, role and canonical keyword (the list's spelling)."""

    entry: EvalEntry
    set: int
    role: str  # "positive", "negative", "ignored" (a positive of an unlisted keyword), "excluded" (see below)
    keyword: str | None = None
    seconds: float = 0.0
    hyp: str = ""
    errors: list[str] = dataclasses.field(default_factory=list)


class KeywordEvaluator:
    """``streamd eval --keywords``: runtime wake words on positive and negative sets.

    keywords: the phrases (strings or :class:`~streamd.config.PhraseSpec` with an optional ``boost``; a
    comma-separated string), or None for the distinct ``keyword`` fields of the sets.  Every file is
    decoded through the engine like :class:`Evaluator`'s (concurrent streams, 0.1 s pieces, endpointing on),
    each stream with the keywords as its ``wake_words`` and one threshold for all of them;
    :func:`keyword_sweep` gives the exact detections at every threshold of ``options.thresholds`` (and the
    configured ``kws.wake_threshold``).  Only runtime-keyword events count (the model's built-in KWS
    keywords cannot be listed).

    Roles: a positive of keyword ``k`` is a file whose ``keyword`` is ``k`` (compared case- and
    space-insensitively); a file whose keyword is not listed is ignored; a negative (``keyword`` null)
    whose reference text contains a listed keyword as words is excluded (it is no negative); the other
    negatives count for every keyword.  Per keyword (and for all together) the rule of the built-in head:
    a positive is detected when its keyword fires at least once, every detection of the keyword in a
    negative is a false alarm, FRR (miss rate) = missed / positives, FA/h per hour of negative audio.
    """

    def __init__(self, loaded: LoadedModel, config: EngineConfig, options: EvalOptions | None = None,
                 keywords: Sequence[PhraseSpec | str] | str | None = None):
        if not config.kws.enabled:
            raise ValueError("keyword mode needs kws.enabled (it turns every wake-word event off)")
        self.config = config
        self.options = options or EvalOptions()
        self.rec = Recognizer(loaded, config)
        self.keywords: tuple[PhraseSpec, ...] | None = None
        if keywords is not None:
            self.keywords = self._check(parse_phrases(keywords, "keywords"))

    def _check(self, specs: tuple[PhraseSpec, ...]) -> tuple[PhraseSpec, ...]:
        """The keyword list, checked: not empty, no thresholds, no built-in keyword, spelled by the tokens."""
        if not specs:
            raise ValueError("keywords: no keywords to evaluate (give --keywords LIST or sets with 'keyword' fields)")
        builtin = {_phrase_key(k) for k in self.rec.keywords}
        for i, s in enumerate(specs):
            if s.threshold is not None:
                raise ValueError(f"keywords[{i}] {s.phrase!r}: the sweep sets every keyword's threshold; "
                                 "give no threshold")
            if _phrase_key(s.phrase) in builtin:
                raise ValueError(f"keywords[{i}] {s.phrase!r} is the model's built-in KWS keyword, whose events "
                                 "cannot be told from a runtime keyword's; evaluate it without --keywords")
        self.rec.wake_word_set(specs, "keywords")  # spelled by the tokens: ValueError names the entry
        return specs

    def _decode(self, files: Sequence[_KwFile], items: list[int], thresholds: list[float]) -> list[list[WakeWord]]:
        """Decode files ``items`` (each with its own threshold); runtime-keyword wake events per item."""
        assert self.keywords is not None
        names = {s.phrase for s in self.keywords}
        n, out = self.options.batch_streams, []
        for g in range(0, len(items), n):
            group = [files[i] for i in items[g:g + n]]
            audio = _load_entries([f.entry for f in group], self.options.resample_to)
            opts = [{"wake_words": tuple(dataclasses.replace(s, threshold=t) for s in self.keywords)}
                    for t in thresholds[g:g + n]]
            _, events = _feed(self.rec, audio, self.options.piece_seconds, per_item=opts, partials=False)
            for f, (x, rate), evs in zip(group, audio, events):
                if not f.seconds:  # first decode of the file
                    f.seconds = x.size / rate
                    f.hyp = " ".join(e.text for e in _finals(evs))
                    f.errors = [f"{e.code}: {e.message}" for e in evs if isinstance(e, Error)]
                out.append([e for e in evs if isinstance(e, WakeWord) and e.keyword in names])
        return out

    def _files(self, paths: Sequence[str | Path]) -> tuple[list[_KwFile], list[dict]]:
        entries = [read_eval_set(p, self.options.limit)[0] for p in paths]
        if self.keywords is None:
            seen: dict[str, str] = {}
            for es in entries:
                for e in es:
                    if e.keyword is not None:
                        seen.setdefault(_phrase_key(e.keyword), " ".join(e.keyword.split()))
            self.keywords = self._check(parse_phrases(list(seen.values()), "keywords"))
        canon = {_phrase_key(s.phrase): s.phrase for s in self.keywords}
        kw_words = [normalize_words(s.phrase) for s in self.keywords]
        files: list[_KwFile] = []
        for si, es in enumerate(entries):
            for e in es:
                if e.keyword is not None:
                    k = canon.get(_phrase_key(e.keyword))
                    files.append(_KwFile(e, si, "positive" if k is not None else "ignored", k))
                else:
                    words = normalize_words(e.text)
                    files.append(_KwFile(e, si, "excluded" if any(_contains(words, k) for k in kw_words)
                                         else "negative"))
        return files, [{"set": str(p), "utterances": len(es)} for p, es in zip(paths, entries)]

    def evaluate(self, paths: Sequence[str | Path]) -> dict:
        """Decode and score the sets at ``paths`` together; the figures (see the class docstring)."""
        files, sets = self._files(paths)
        assert self.keywords is not None
        kcfg = self.config.kws
        used = [i for i, f in enumerate(files) if f.role in ("positive", "negative")]
        if not any(files[i].role == "positive" for i in used):
            raise ValueError("keyword mode: the sets hold no positives of the keywords "
                             f"{[s.phrase for s in self.keywords]}")
        if not any(files[i].role == "negative" for i in used):
            raise ValueError("keyword mode: the sets hold no negatives (entries with keyword null)")
        thresholds = sorted(set(self.options.thresholds) | {kcfg.wake_threshold})
        sub = [files[i] for i in used]
        t0 = time.perf_counter()
        dets, runs = keyword_sweep(lambda items, ts: self._decode(sub, items, ts), len(sub), thresholds)
        wall = time.perf_counter() - t0
        neg_s = sum(f.seconds for f in sub if f.role == "negative")
        hours = neg_s / 3600.0

        def figures(keyword: str | None) -> dict:
            """Sweep and operating points of one keyword (None: all of them together)."""
            sel = [i for i, f in enumerate(sub) if f.role == "negative" or keyword in (None, f.keyword)]
            chosen = [sub[i] for i in sel]
            sweep = [{"threshold": t, **_kws_counts([[d for d in dj[i] if keyword in (None, d.keyword)]
                                                     for i in sel], chosen, hours)}
                     for t, dj in zip(thresholds, dets)]
            at_cfg = next(s for s in sweep if s["threshold"] == kcfg.wake_threshold)
            return {"positives": sum(f.role == "positive" for f in chosen), **at_cfg,
                    **{_budget_key(b): frr_at(sweep, b) for b in FA_BUDGETS}, "sweep": sweep,
                    "det": det_points(sweep)}

        for si, s in enumerate(sets):
            mine = [f for f in files if f.set == si]
            s.update({"positives": {k.phrase: sum(f.keyword == k.phrase for f in mine if f.role == "positive")
                                    for k in self.keywords},
                      "negatives": sum(f.role == "negative" for f in mine),
                      "negative_seconds": round(sum(f.seconds for f in mine if f.role == "negative"), 3),
                      "ignored_positives": sum(f.role == "ignored" for f in mine),
                      "excluded_negatives": sum(f.role == "excluded" for f in mine)})
        dec = self.config.decoding
        return {
            "mode": "keywords", "method": dec.method, "device": str(self.rec.device),
            "keywords": [{"keyword": s.phrase, "boost": kcfg.wake_boost if s.boost is None else s.boost}
                         for s in self.keywords],
            "wake_threshold": kcfg.wake_threshold, "wake_boost": kcfg.wake_boost, "wake_beam": kcfg.wake_beam,
            "trailing_blanks": kcfg.trailing_blanks, "refractory_s": kcfg.refractory_s,
            "sets": sets, "positives": sum(f.role == "positive" for f in sub),
            "negatives": sum(f.role == "negative" for f in sub), "negative_seconds": round(neg_s, 3),
            "negative_hours": hours, "thresholds": thresholds,
            "sweep_method": "exact: every file decoded again at the lowest threshold above its lowest detection "
                            "score (keyword_sweep)",
            "decodes": sum(runs), "files_decoded": len(sub), "decode_seconds": round(wall, 3),
            "per_keyword": {s.phrase: figures(s.phrase) for s in self.keywords}, "all": figures(None),
            "errors": [f"{f.entry.rel_audio}: {m}" for f in sub for m in f.errors],
            "files": [{"audio": f.entry.rel_audio, "set": f.set, "role": f.role, "keyword": f.keyword,
                       "ref": f.entry.text, "hyp": f.hyp, "seconds": round(f.seconds, 3), "decodes": runs[i],
                       "detections": [[d.keyword, d.score, d.start, d.end] for d in dets[0][i]]}
                      for i, f in enumerate(sub)],
        }


def det_curves(report: dict) -> list[tuple[str, list[list]]]:
    """(label, DET points) per keyword of a keyword-mode report, or per set with a KWS head of an evaluation."""
    if report.get("mode") == "keywords":
        return [(f"{k} ({v['positives']} positives)", v["det"]) for k, v in report["per_keyword"].items()]
    return [(f"{'/'.join(Path(r['set']).parts[-2:])}: built-in head ({r['kws']['positives']} positives)",
             r["kws"]["det"]) for r in report["sets"] if r.get("kws")]


def plot_det(path: str | Path, curves: Sequence[tuple[str, Sequence[Sequence[float | None]]]],
             negative_hours: float, title: str) -> Path:
    """Write a DET plot (PNG): miss rate against false alarms per hour (log axis), one curve per label.

    curves: (label, [[fa_per_hour, frr], ...]) as :func:`det_points` gives; points without an FRR are
    skipped.  Zero false alarms cannot sit on a log axis: such points are drawn at half a false alarm
    over the negative audio (``0.5 / negative_hours``), left of the dotted line at one false alarm.
    """
    return plot_det_panels(path, [(title, curves, negative_hours)])


def plot_det_panels(path: str | Path, panels: Sequence[tuple[str, Sequence, float]]) -> Path:
    """:func:`plot_det` of several runs side by side: panels are (title, curves, negative_hours)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ValueError("plot_det: no panels to draw")
    fig = Figure(figsize=(7.0 * len(panels), 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, curves, negative_hours) in zip(axes, panels):
        if not curves:
            raise ValueError("plot_det: no curves to draw")
        if not negative_hours > 0:
            raise ValueError(f"plot_det: negative_hours must be > 0, got {negative_hours!r}")
        floor = 0.5 / negative_hours
        top = floor
        for label, pts in curves:
            xy = [(max(fa, floor), 100.0 * frr) for fa, frr in pts if fa is not None and frr is not None]
            if xy:
                top = max(top, max(x for x, _ in xy))
                ax.plot([x for x, _ in xy], [y for _, y in xy], drawstyle="steps-post", marker=".", label=label)
        ax.axvline(1.0 / negative_hours, linestyle=":", color="0.5",
                   label=f"1 false alarm in {negative_hours:.2f} h")
        ax.set_xscale("log")
        ax.set(xlim=(floor / 1.5, top * 1.5), ylim=(0, 100), ylabel="miss rate (%)",
               xlabel="false alarms per hour (0 drawn at 0.5 / hours)")
        ax.set_title(title, fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small", loc="lower left")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


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


def format_keyword_report(report: dict) -> str:
    """Readable text of a keyword-mode report (:meth:`KeywordEvaluator.evaluate`)."""
    kw = ", ".join(f"{k['keyword']} (boost {k['boost']:g})" for k in report["keywords"])
    ts = report["thresholds"]
    lines = [f"model {report['model']}  method {report['method']}  device {report['device']}",
             f"runtime keywords: {kw}; wake_beam {report['wake_beam']}, trailing_blanks {report['trailing_blanks']}, "
             f"refractory {report['refractory_s']:g} s"]
    for s in report["sets"]:
        pos = ", ".join(f"{k} {n}" for k, n in s["positives"].items() if n)
        lines.append(f"  {s['set']}: {s['utterances']} utterances; positives: {pos or 'none'}; negatives "
                     f"{s['negatives']} ({s['negative_seconds'] / 60:.1f} min)"
                     + (f"; {s['ignored_positives']} positives of other keywords ignored" if s["ignored_positives"]
                        else "")
                     + (f"; {s['excluded_negatives']} negatives excluded (their text holds a keyword)"
                        if s["excluded_negatives"] else ""))
    lines += [f"negatives: {report['negatives']} files, {report['negative_hours']:.3f} h (one false alarm = "
              f"{_num(1 / report['negative_hours'] if report['negative_hours'] else None, '.2f')} FA/h); "
              f"{len(ts)} thresholds {ts[0]:g}..{ts[-1]:g}, exact sweep: {report['decodes']} decodes of "
              f"{report['files_decoded']} files ({report['decode_seconds']:.0f} s)", "",
              f"  {'keyword':24s} {'pos':>5s} {'miss@' + format(report['wake_threshold'], 'g'):>10s} {'FA/h':>7s}"
              + "".join(f"   {'miss@' + format(b, 'g') + 'FA/h (thr)':>22s}" for b in FA_BUDGETS)]
    rows = list(report["per_keyword"].items()) + [("(all keywords)", report["all"])]
    for name, k in rows:
        cells = []
        for b in FA_BUDGETS:
            op = k[_budget_key(b)]
            cells.append("none" if op is None else f"{_pct(op['frr']).strip()} ({op['threshold']:.2f})")
        lines.append(f"  {name:24s} {k['positives']:5d} {_pct(k['frr']):>10s} {_num(k['fa_per_hour'], '.2f'):>7s}"
                     + "".join(f"   {c:>22s}" for c in cells))
    for e in report["errors"]:
        lines.append(f"  error: {e}")
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
    ap.add_argument("--keywords", nargs="?", const="", metavar="LIST",
                    help="keyword mode: evaluate runtime wake words instead of recognition: LIST of comma-separated "
                         "phrases (without LIST: every 'keyword' of the sets); per keyword the miss rate on its "
                         "positives and false alarms per hour on all negatives (keyword null) over an exact "
                         "threshold sweep, and the miss rate at 1, 0.5 and 0.1 FA/h")
    ap.add_argument("--thresholds", metavar="LO:HI:STEP", type=_threshold_grid,
                    help="the threshold sweep (default 0.05:0.99:0.01), or a comma-separated list")
    ap.add_argument("--det-plot", metavar="PNG", help="write a DET plot (miss rate against false alarms per hour, "
                    "log axis; one curve per keyword, or per set of the built-in head) to PNG (needs matplotlib)")
    return ap


def _threshold_grid(text: str) -> tuple[float, ...]:
    """``LO:HI:STEP`` (both ends included) or a comma-separated list of thresholds in (0, 1)."""
    try:
        if ":" in text:
            lo, hi, step = (float(x) for x in text.split(":"))
            if not step > 0 or hi < lo:
                raise ValueError
            n = int(round((hi - lo) / step))
            out = tuple(round(lo + i * step, 6) for i in range(n + 1))
        else:
            out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI:STEP or a comma-separated list, got {text!r}") from None
    if not out or any(not 0 < t < 1 for t in out):
        raise argparse.ArgumentTypeError(f"thresholds must be in (0, 1), got {text!r}")
    return tuple(sorted(set(out)))


def run(model: str, sets: Sequence[str], config: EngineConfig, options: EvalOptions) -> dict:
    """Evaluate ``sets`` with the checkpoint at ``model``: the full report as a dict."""
    loaded = load_checkpoint(model, "cpu")
    ev = Evaluator(loaded, config, options)
    dec = config.decoding
    return {"model": str(model), "method": dec.method, "beam": dec.beam, "device": str(ev.plain.device),
            "confidence_default": {"measure": config.confidence.name, "alpha": config.confidence.alpha,
                                   "aggregation": config.confidence.aggregation},
            "sets": [ev.evaluate(s) for s in sets]}


def run_keywords(model: str, sets: Sequence[str], config: EngineConfig, options: EvalOptions,
                 keywords: Sequence[PhraseSpec | str] | str | None) -> dict:
    """Keyword mode (:class:`KeywordEvaluator`) on ``sets`` with the checkpoint at ``model``: the report."""
    ev = KeywordEvaluator(load_checkpoint(model, "cpu"), config, options, keywords)
    return {"model": str(model), **ev.evaluate(sets)}


def _run_keywords(args: argparse.Namespace, model: str, options: EvalOptions) -> int:
    if not args.sets:
        raise ValueError("keyword mode needs --set: positive sets (keyword fields) and negative sets (keyword null)")
    if args.wake_words is not None:
        raise ValueError("keyword mode evaluates the --keywords list; --wake-words would not be used")
    if args.reliability_plot:
        raise ValueError("--reliability-plot is for recognition (word confidence), not keyword mode")
    if args.det_plot:
        require_matplotlib()
    report = run_keywords(model, args.sets, engine_config_from_args(args), options, args.keywords or None)
    if args.det_plot:
        plot_det(args.det_plot, det_curves(report), report["negative_hours"],
                 f"runtime wake words: {Path(model).name}, boost {report['wake_boost']:g}, "
                 f"{report['negative_hours']:.2f} h of negatives")
    print(json.dumps(report) if args.json else format_keyword_report(report))
    for e in report["errors"]:
        print(f"streamd eval: {e}", file=sys.stderr)
    return 1 if report["errors"] else 0


def _run(args: argparse.Namespace) -> int:
    if args.model:
        model = args.model
    else:
        from streamd.paths import default_model_path

        model = str(default_model_path())
        if not Path(model).is_file():
            raise ValueError(f"no model given and no default model at {model}; pass --model PATH")
    extra = {"thresholds": args.thresholds} if args.thresholds else {}
    if args.keywords is not None:
        return _run_keywords(args, model, EvalOptions(resample_to=args.resample_to, batch_streams=args.batch_streams,
                                                      limit=args.limit, **extra))
    if not args.sets:
        from streamd.paths import default_samples

        args.sets = [str(default_samples())]
        print(f"streamd eval: no --set given: using the sample recordings {args.sets[0]} "
              "(six TTS sentences: a smoke test, not an evaluation)", file=sys.stderr)
    options = EvalOptions(resample_to=args.resample_to, batch_streams=args.batch_streams,
                          rtf_single=args.rtf_single, limit=args.limit, **extra)
    if args.reliability_plot or args.det_plot:
        require_matplotlib()
    report = run(model, args.sets, engine_config_from_args(args), options)
    if args.reliability_plot:
        plot_reliability(args.reliability_plot, reliability_curves(report),
                         f"word confidence: {Path(model).name}, {report['method']}")
    if args.det_plot:
        curves = det_curves(report)
        if not curves:
            raise ValueError("--det-plot: no set has wake-word figures (keyword fields and a model KWS head)")
        hours = min(r["kws"]["negative_seconds"] for r in report["sets"] if r.get("kws")) / 3600
        if not hours > 0:
            raise ValueError("--det-plot: a set with keyword fields has no negatives (keyword null)")
        plot_det(args.det_plot, curves, hours, f"built-in wake word: {Path(model).name}")
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
