"""Keyword mode of ``streamd eval`` (``--keywords [LIST]``): runtime wake words (text, no retraining) on
positive and negative sets, over an exact threshold sweep (:func:`keyword_sweep`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from streamd.config import EngineConfig, PhraseSpec, parse_phrases
from streamd.engine import Recognizer
from streamd.events import Error, WakeWord
from streamd.feed import feed_streams
from streamd.model.checkpoint import LoadedModel, load_checkpoint
from streamd.scoring.metrics import normalize_words

from .decoding import finals
from .kws import FA_BUDGETS, budget_key, det_points, frr_at, kws_counts
from .options import EvalOptions
from .sets import EvalEntry, load_entries, read_eval_set

__all__ = ["keyword_sweep", "KeywordEvaluator", "run_keywords", "phrase_key", "contains_phrase"]


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


def phrase_key(phrase: str) -> str:
    """A keyword as compared with a set's ``keyword`` field: whitespace folded, case folded."""
    return " ".join(phrase.split()).casefold()


def contains_phrase(words: Sequence[str], part: Sequence[str]) -> bool:
    """``part`` (normalized words) occurs in ``words`` as a contiguous run."""
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
    decoded through the engine like :class:`~.recognition.Evaluator`'s (:func:`streamd.feed.feed_streams`:
    concurrent streams, 0.1 s pieces, endpointing on), each stream with the keywords as its ``wake_words``
    and one threshold for all of them;
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
        builtin = {phrase_key(k) for k in self.rec.keywords}
        for i, s in enumerate(specs):
            if s.threshold is not None:
                raise ValueError(f"keywords[{i}] {s.phrase!r}: the sweep sets every keyword's threshold; "
                                 "give no threshold")
            if phrase_key(s.phrase) in builtin:
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
            audio = load_entries([f.entry for f in group], self.options.resample_to)
            opts = [{"wake_words": tuple(dataclasses.replace(s, threshold=t) for s in self.keywords)}
                    for t in thresholds[g:g + n]]
            _, events = feed_streams(self.rec, audio, self.options.piece_seconds, per_item=opts, partials=False)
            for f, (x, rate), evs in zip(group, audio, events):
                if not f.seconds:  # first decode of the file
                    f.seconds = x.size / rate
                    f.hyp = " ".join(e.text for e in finals(evs))
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
                        seen.setdefault(phrase_key(e.keyword), " ".join(e.keyword.split()))
            self.keywords = self._check(parse_phrases(list(seen.values()), "keywords"))
        canon = {phrase_key(s.phrase): s.phrase for s in self.keywords}
        kw_words = [normalize_words(s.phrase) for s in self.keywords]
        files: list[_KwFile] = []
        for si, es in enumerate(entries):
            for e in es:
                if e.keyword is not None:
                    k = canon.get(phrase_key(e.keyword))
                    files.append(_KwFile(e, si, "positive" if k is not None else "ignored", k))
                else:
                    words = normalize_words(e.text)
                    files.append(_KwFile(e, si, "excluded" if any(contains_phrase(words, k) for k in kw_words)
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
            sweep = [{"threshold": t, **kws_counts([[d for d in dj[i] if keyword in (None, d.keyword)]
                                                     for i in sel], chosen, hours)}
                     for t, dj in zip(thresholds, dets)]
            at_cfg = next(s for s in sweep if s["threshold"] == kcfg.wake_threshold)
            return {"positives": sum(f.role == "positive" for f in chosen), **at_cfg,
                    **{budget_key(b): frr_at(sweep, b) for b in FA_BUDGETS}, "sweep": sweep,
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
            "keywords": [{"keyword": s.phrase, "threshold": kcfg.wake_threshold if s.threshold is None else s.threshold}
                         for s in self.keywords],
            "wake_threshold": kcfg.wake_threshold, "wake_score": kcfg.wake_score,
            "wake_settle_frames": kcfg.wake_settle_frames,
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


def run_keywords(model: str, sets: Sequence[str], config: EngineConfig, options: EvalOptions,
                 keywords: Sequence[PhraseSpec | str] | str | None) -> dict:
    """Keyword mode (:class:`KeywordEvaluator`) on ``sets`` with the checkpoint at ``model``: the report."""
    ev = KeywordEvaluator(load_checkpoint(model, "cpu"), config, options, keywords)
    return {"model": str(model), **ev.evaluate(sets)}
