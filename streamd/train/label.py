"""``streamd label``: transcripts for untranscribed real speech from pretrained teacher models.

    streamd label --manifest IN.jsonl [--manifest ...] --out DIR
                  [--teachers moonshine-base,whisper-base,whisper-tiny.en]
                  [--rule agree|wer] [--min-agree 2] [--max-wer 0.1] [--limit N] [--threads 2]

Every file of the input manifests (JSON lines; ``audio`` relative to the
manifest's folder or absolute; ``speaker`` kept; a ``text`` is kept as
``orig_text`` and used only for the report) is loaded, resampled to 16 kHz
and transcribed by every teacher (:mod:`streamd.second_pass.models`).  Each
teacher's raw (written-form) output is appended to ``DIR/raw-<teacher>.jsonl``
as soon as it exists, so an interrupted run resumes where it stopped and a
run with another rule re-uses everything (delete a raw file to redo that
teacher).  Outputs are normalized to the model's spoken form
(:func:`streamd.text.normalize.normalize_text`) and an agreement rule
decides:

* ``agree`` (default): keep an utterance when at least ``--min-agree`` (2)
  teachers' normalized texts are *identical*; the label is that text.
  Independent models that make different errors rarely make the *same*
  error on a whole sentence, so exact agreement of two of three is a
  high-precision filter that needs no threshold; its cost is recall on long
  utterances (one differing word anywhere rejects).
* ``wer``: keep when the word error rate of the second-strongest teacher
  against the strongest (the registry's ``strength`` order) is at most
  ``--max-wer`` (0.1); the label is the strongest teacher's text.  It keeps
  more long utterances, at the price of label errors where the two differ
  (at most ``max-wer``, by construction, relative to the strongest one).

Under both rules an empty label (no words after normalization) is kept only
when *every* teacher heard nothing (a no-speech utterance); otherwise it is
rejected.  Labels that are not valid model text
(:func:`streamd.train.text.is_normalized`) are rejected too.

Outputs (rewritten atomically at the end of every run, in manifest order):

* ``DIR/manifest.jsonl``: ``{"audio": absolute path, "text": label,
  "duration": s, "speaker": ..., "teacher": "a+b" (the teachers that agreed,
  strongest first), "teacher_texts": {teacher: raw output}}`` plus
  ``orig_text`` when the input had one and ``teacher_wer`` under ``--rule wer``;
* ``DIR/rejected.jsonl``: the same fields without ``text``, with ``reason``;
* ``DIR/summary.json`` and the printed summary: kept / rejected counts and
  hours, reasons, pairwise WER between teachers (the stronger one as
  reference; :func:`~streamd.scoring.metrics.normalize_words` /
  :func:`~streamd.scoring.metrics.align_words` on normalized texts), each
  teacher's WER against the kept labels, and, when the input had texts,
  the WER of each teacher and of the kept labels against them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..audio.resample import load_audio_at
from ..manifest_lines import iter_json_lines, resolve_audio
from ..scoring.metrics import align_words, normalize_words

__all__ = ["Item", "Decision", "RULES", "read_manifests", "agree_rule", "wer_rule", "decide", "RawCache", "label",
           "pair_wer", "main"]

RATE = 16000
RULES = ("agree", "wer")
DEFAULT_TEACHERS = ("moonshine-base", "whisper-base", "whisper-tiny.en")


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Item:
    """One input file: absolute ``audio`` path, ``speaker`` and ``orig_text`` when the manifest had them."""

    audio: str
    speaker: str | None = None
    orig_text: str | None = None
    duration: float | None = None


def read_manifests(paths: Sequence[str | os.PathLike]) -> tuple[list[Item], int]:
    """Items of the manifests in order; a file listed twice is labeled once. Returns (items, duplicates).

    Raises ValueError naming the file and line for a malformed line or a missing audio file.
    """
    items: list[Item] = []
    seen: set[str] = set()
    dups = 0
    for mp in paths:
        mp = Path(mp)
        if not mp.is_file():
            raise ValueError(f"{mp}: no such manifest")
        root = mp.resolve().parent
        for n, where, d in iter_json_lines(mp, lambda n: f"{mp}:{n}", "not valid JSON"):
            if not isinstance(d.get("audio"), str) or not d["audio"]:
                raise ValueError(f"{where}: field 'audio' must be a non-empty string, got {d.get('audio')!r}")
            audio = os.path.normpath(resolve_audio(root, d["audio"]))
            if not os.path.isfile(audio):
                raise ValueError(f"{where}: audio file {audio!r} not found")
            if audio in seen:
                dups += 1
                continue
            seen.add(audio)
            text = d.get("text")
            if text is not None and not isinstance(text, str):
                raise ValueError(f"{where}: field 'text' must be a string, got {text!r}")
            spk = d.get("speaker")
            dur = d.get("duration")
            items.append(Item(audio, None if spk is None else str(spk), text,
                              float(dur) if isinstance(dur, (int, float)) and not isinstance(dur, bool) else None))
    return items, dups


# --------------------------------------------------------------------------- agreement rules


@dataclass(frozen=True)
class Decision:
    """A rule's verdict: ``keep``, the label ``text``, the ``teachers`` it rests on, why not (``reason``)."""

    keep: bool
    text: str = ""
    teachers: tuple[str, ...] = ()
    reason: str = ""
    wer: float | None = None


def pair_wer(ref: str, hyp: str) -> float | None:
    """WER of ``hyp`` against ``ref`` (both normalized with :func:`normalize_words`); None when ``ref`` has no words."""
    r, h = normalize_words(ref), normalize_words(hyp)
    if not r:
        return None
    return align_words(r, h).errors / len(r)


def _empty_check(texts: Mapping[str, str], order: Sequence[str]) -> Decision | None:
    """The no-speech case shared by the rules: every teacher empty -> keep ""; None when the label is not empty."""
    if all(texts[t] == "" for t in order):
        return Decision(True, "", tuple(order))
    return None


def agree_rule(texts: Mapping[str, str], order: Sequence[str], min_agree: int = 2) -> Decision:
    """Keep when >= ``min_agree`` teachers' normalized texts are identical (label = that text).

    ``texts``: teacher -> normalized text; ``order``: teacher names, strongest
    first.  The largest group of identical texts wins; between groups of one
    size, the one holding the stronger teacher.  An agreed empty text is kept
    only when every teacher is empty.
    """
    if len(order) < min_agree:
        raise ValueError(f"agree rule: {len(order)} teachers cannot reach --min-agree {min_agree}")
    groups: dict[str, list[str]] = {}
    for t in order:
        groups.setdefault(texts[t], []).append(t)
    best = max(groups.items(), key=lambda kv: (len(kv[1]), -order.index(kv[1][0])))
    text, members = best
    if len(members) < min_agree:
        return Decision(False, reason="no agreement")
    if text == "":
        return _empty_check(texts, order) or Decision(False, reason="empty label (only some teachers heard speech)")
    return Decision(True, text, tuple(members))


def wer_rule(texts: Mapping[str, str], order: Sequence[str], max_wer: float = 0.1) -> Decision:
    """Keep when WER(second strongest vs strongest) <= ``max_wer`` (label = the strongest teacher's text)."""
    if len(order) < 2:
        raise ValueError("wer rule: needs at least two teachers")
    a, b = order[0], order[1]
    empty = _empty_check(texts, order)
    if empty is not None:
        return empty
    if texts[a] == "":
        return Decision(False, reason="empty label (only some teachers heard speech)")
    w = pair_wer(texts[a], texts[b])
    if w is not None and w <= max_wer + 1e-12:
        return Decision(True, texts[a], (a, b), wer=w)
    return Decision(False, reason=f"{a} vs {b} WER above {max_wer:g}", wer=w)


def decide(texts: Mapping[str, str], order: Sequence[str], rule: str = "agree", min_agree: int = 2,
           max_wer: float = 0.1) -> Decision:
    """Apply ``rule`` (one of :data:`RULES`), then require the label to be valid model text."""
    from .text import is_normalized

    if rule == "agree":
        d = agree_rule(texts, order, min_agree)
    elif rule == "wer":
        d = wer_rule(texts, order, max_wer)
    else:
        raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")
    if d.keep and d.text and not is_normalized(d.text):
        return Decision(False, reason=f"label {d.text!r} is not valid model text", wer=d.wer)
    return d


# --------------------------------------------------------------------------- raw output caches


class RawCache:
    """``raw-<teacher>.jsonl``: one ``{"audio", "text", "duration", "decode_seconds"}`` line per transcribed file.

    Lines are appended and flushed one by one; on load a torn last line (an
    interrupted write) or a foreign line is skipped, and the next append
    starts on a fresh line.
    """

    def __init__(self, path: str | os.PathLike, teacher: str) -> None:
        self.path = Path(path)
        self.teacher = teacher
        self.entries: dict[str, dict] = {}
        self.skipped = 0
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    self.skipped += 1
                    continue
                if isinstance(d, dict) and isinstance(d.get("audio"), str) and isinstance(d.get("text"), str):
                    self.entries[d["audio"]] = d
                else:
                    self.skipped += 1
        self._fh = None

    def __contains__(self, audio: str) -> bool:
        return audio in self.entries

    def text(self, audio: str) -> str:
        return self.entries[audio]["text"]

    def add(self, audio: str, text: str, duration: float, decode_seconds: float) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torn = self.path.is_file() and self.path.stat().st_size > 0 and not self.path.read_bytes().endswith(b"\n")
            self._fh = open(self.path, "a", encoding="utf-8")
            if torn:
                self._fh.write("\n")
        d = {"audio": audio, "text": text, "duration": round(duration, 4), "decode_seconds": round(decode_seconds, 4),
             "teacher": self.teacher}
        self._fh.write(json.dumps(d, ensure_ascii=False) + "\n")
        self._fh.flush()
        self.entries[audio] = d

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


# --------------------------------------------------------------------------- the run


@dataclass
class Summary:
    kept: int = 0
    rejected: int = 0
    kept_seconds: float = 0.0
    rejected_seconds: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)
    kept_by: dict[str, int] = field(default_factory=dict)
    pairwise_wer: dict[str, float | None] = field(default_factory=dict)
    teacher_vs_label_wer: dict[str, float | None] = field(default_factory=dict)
    vs_orig_wer: dict[str, float | None] = field(default_factory=dict)
    decoded: dict[str, int] = field(default_factory=dict)
    decode_rtf: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["kept_hours"] = round(self.kept_seconds / 3600, 4)
        d["rejected_hours"] = round(self.rejected_seconds / 3600, 4)
        return d


def _corpus_wer(pairs: Sequence[tuple[str, str]]) -> float | None:
    words = errors = 0
    for ref, hyp in pairs:
        r = normalize_words(ref)
        words += len(r)
        errors += align_words(r, normalize_words(hyp)).errors
    return errors / words if words else None


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def label(items: Sequence[Item], teachers: Mapping[str, Callable[[], object]], out_dir: str | os.PathLike,
          rule: str = "agree", min_agree: int = 2, max_wer: float = 0.1,
          normalize: Callable[[str], str] | None = None,
          log: Callable[[str], None] = print) -> Summary:
    """Label ``items`` with ``teachers`` (name -> zero-argument factory, strongest first) into ``out_dir``.

    A teacher is built only when some item lacks its cached output.  Returns
    the :class:`Summary` (also written to ``out_dir/summary.json``).
    """
    if normalize is None:
        from ..text.normalize import normalize_text as normalize
    order = list(teachers)
    _check_rule(order, rule, min_agree)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    caches = {t: RawCache(out / f"raw-{t}.jsonl", t) for t in order}
    for t, c in caches.items():
        if c.skipped:
            log(f"label: {c.path}: skipped {c.skipped} unreadable line(s) (an interrupted write)")
    pending = {t: sum(it.audio not in caches[t] for it in items) for t in order}
    for t in order:
        log(f"label: {t}: {len(items) - pending[t]} of {len(items)} files cached, {pending[t]} to transcribe")
    built = {}
    for t in order:
        if pending[t]:
            t0 = time.perf_counter()
            built[t] = teachers[t]()
            log(f"label: loaded {t} in {time.perf_counter() - t0:.1f} s")
    try:
        failures, spent, decoded_audio = _transcribe(items, order, caches, built, log)
    finally:
        for c in caches.values():
            c.close()
    s = Summary()
    s.decoded = {t: pending[t] for t in order}
    s.decode_rtf = {t: round(spent[t] / decoded_audio[t], 4) if decoded_audio[t] else None for t in order}
    sorting = _Sorting(order, rule, min_agree, max_wer, s)
    for it in items:
        if it.audio in failures:
            sorting.failed(it, failures[it.audio], caches)
        else:
            sorting.decide(it, caches, normalize)
    sorting.wers()
    _write_jsonl(out / "manifest.jsonl", sorting.kept_rows)
    _write_jsonl(out / "rejected.jsonl", sorting.rej_rows)
    (out / "summary.json").write_text(json.dumps(dict(s.to_json(), rule=rule, teachers=order, min_agree=min_agree,
                                                      max_wer=max_wer), indent=1) + "\n", encoding="utf-8")
    return s


def _check_rule(order: Sequence[str], rule: str, min_agree: int) -> None:
    """ValueError unless ``rule`` is known and there are enough teachers for it."""
    if not order:
        raise ValueError("no teachers given")
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")
    if rule == "agree" and len(order) < min_agree:
        raise ValueError(f"--rule agree with --min-agree {min_agree} needs at least {min_agree} teachers, "
                         f"got {len(order)}: {', '.join(order)}")
    if rule == "wer" and len(order) < 2:
        raise ValueError(f"--rule wer needs at least two teachers, got {', '.join(order)}")


def _transcribe(items: Sequence[Item], order: Sequence[str], caches: Mapping[str, RawCache],
                built: Mapping[str, Any], log: Callable[[str], None]
                ) -> tuple[dict[str, str], dict[str, float], dict[str, float]]:
    """Every item some teacher has not cached yet, through those teachers (cached as they come): the failures
    (audio -> reason), and per teacher the seconds spent and the seconds of audio decoded."""
    failures: dict[str, str] = {}
    todo = [it for it in items if any(it.audio not in caches[t] for t in order)]
    audio_total = sum(it.duration or 0.0 for it in todo)
    done_audio = 0.0
    spent = {t: 0.0 for t in order}
    decoded_audio = {t: 0.0 for t in order}
    t_start = time.perf_counter()
    for k, it in enumerate(todo, 1):
        try:
            x = load_audio_at(it.audio, RATE)
        except ValueError as e:
            failures[it.audio] = f"bad audio: {e}"
            log(f"label: [{k}/{len(todo)}] {it.audio}: {e}")
            continue
        seconds = x.size / RATE
        for t in order:
            if it.audio in caches[t]:
                continue
            t0 = time.perf_counter()
            try:
                text = built[t].transcribe(x)
            except Exception as e:  # noqa: BLE001 - one file must not stop an hour's run; not cached: retried
                failures[it.audio] = f"{t} failed: {type(e).__name__}: {e}"
                log(f"label: {it.audio}: {failures[it.audio]}")
                continue
            dt = time.perf_counter() - t0
            spent[t] += dt
            decoded_audio[t] += seconds
            caches[t].add(it.audio, text, seconds, dt)
        done_audio += it.duration if it.duration is not None else seconds
        elapsed = time.perf_counter() - t_start
        eta = elapsed / done_audio * max(0.0, audio_total - done_audio) if done_audio > 0 and audio_total else 0
        log(f"label: [{k}/{len(todo)}] {elapsed / 60:.1f} min, ETA {eta / 60:.1f} min | {os.path.basename(it.audio)}"
            f" {seconds:.1f} s | " + " | ".join(f"{t}: {caches[t].text(it.audio)!r}" for t in order
                                                if it.audio in caches[t]))
    return failures, spent, decoded_audio


class _Sorting:
    """Items into kept and rejected rows by the rule (counted in the :class:`Summary`), and the pairs the
    summary's WERs are computed from."""

    def __init__(self, order: Sequence[str], rule: str, min_agree: int, max_wer: float, summary: Summary):
        self.order, self.rule, self.min_agree, self.max_wer, self.s = list(order), rule, min_agree, max_wer, summary
        self.kept_rows: list[dict] = []
        self.rej_rows: list[dict] = []
        self.norm_all: list[dict[str, str]] = []
        self.label_pairs: dict[str, list[tuple[str, str]]] = {t: [] for t in self.order}
        self.orig_pairs: dict[str, list[tuple[str, str]]] = {t: [] for t in self.order + ["labels"]}

    def failed(self, it: Item, reason: str, caches: Mapping[str, RawCache]) -> None:
        """An item whose audio or some teacher failed: rejected with the reason."""
        s = self.s
        row = dict(audio=it.audio, duration=it.duration, speaker=it.speaker, reason=reason,
                   teacher_texts={t: caches[t].text(it.audio) for t in self.order if it.audio in caches[t]})
        if it.orig_text is not None:
            row["orig_text"] = it.orig_text
        self.rej_rows.append(row)
        s.rejected += 1
        s.rejected_seconds += it.duration or 0.0
        s.reasons[row["reason"].split(":")[0]] = s.reasons.get(row["reason"].split(":")[0], 0) + 1

    def decide(self, it: Item, caches: Mapping[str, RawCache], normalize: Callable[[str], str]) -> None:
        """An item every teacher transcribed: kept or rejected by :func:`decide`."""
        s, order = self.s, self.order
        raw = {t: caches[t].text(it.audio) for t in order}
        norm = {t: normalize(raw[t]) for t in order}
        self.norm_all.append(norm)
        dur = next((caches[t].entries[it.audio].get("duration") for t in order
                    if caches[t].entries[it.audio].get("duration") is not None), it.duration)
        d = decide(norm, order, self.rule, self.min_agree, self.max_wer)
        row = dict(audio=it.audio, text=d.text, duration=dur, speaker=it.speaker, teacher="+".join(d.teachers),
                   teacher_texts=raw)
        if it.orig_text is not None:
            row["orig_text"] = it.orig_text
            for t in order:
                self.orig_pairs[t].append((it.orig_text, norm[t]))
        if self.rule == "wer":
            row["teacher_wer"] = None if d.wer is None else round(d.wer, 4)
        if d.keep:
            self.kept_rows.append(row)
            s.kept += 1
            s.kept_seconds += dur or 0.0
            s.kept_by[row["teacher"]] = s.kept_by.get(row["teacher"], 0) + 1
            for t in order:
                self.label_pairs[t].append((d.text, norm[t]))
            if it.orig_text is not None:
                self.orig_pairs["labels"].append((it.orig_text, d.text))
        else:
            del row["text"], row["teacher"]
            row["reason"] = d.reason
            row["normalized"] = norm
            self.rej_rows.append(row)
            s.rejected += 1
            s.rejected_seconds += dur or 0.0
            s.reasons[d.reason] = s.reasons.get(d.reason, 0) + 1

    def wers(self) -> None:
        """The summary's WERs: teachers pairwise, each teacher against the labels and against the original texts."""
        s, order = self.s, self.order
        for i, a in enumerate(order):
            for b in order[i + 1:]:
                s.pairwise_wer[f"{b} vs {a}"] = _round(_corpus_wer([(n[a], n[b]) for n in self.norm_all]))
        s.teacher_vs_label_wer = {t: _round(_corpus_wer(self.label_pairs[t])) for t in order}
        if any(self.orig_pairs[t] for t in order):
            s.vs_orig_wer = {t: _round(_corpus_wer(p)) for t, p in self.orig_pairs.items()}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def format_summary(s: Summary, out_dir: str | os.PathLike) -> str:
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    total = s.kept + s.rejected
    lines = [f"kept {s.kept} of {total} utterances ({s.kept_seconds / 3600:.3f} h), rejected {s.rejected} "
             f"({s.rejected_seconds / 3600:.3f} h) -> {Path(out_dir) / 'manifest.jsonl'}"]
    for r, n in sorted(s.reasons.items(), key=lambda kv: -kv[1]):
        lines.append(f"  rejected: {n:5d}  {r}")
    for t, n in sorted(s.kept_by.items(), key=lambda kv: -kv[1]):
        lines.append(f"  kept by:  {n:5d}  {t or '(all empty)'}")
    lines.append("pairwise WER between teachers (hyp vs ref, all utterances):")
    lines += [f"  {k:<36} {pct(v)}" for k, v in s.pairwise_wer.items()]
    lines.append("teacher WER against the kept labels:")
    lines += [f"  {k:<36} {pct(v)}" for k, v in s.teacher_vs_label_wer.items()]
    if s.vs_orig_wer:
        lines.append("WER against the input manifests' own texts:")
        lines += [f"  {k:<36} {pct(v)}" for k, v in s.vs_orig_wer.items()]
    rtf = {t: v for t, v in s.decode_rtf.items() if v is not None}
    if rtf:
        lines.append("decode RTF this run: " + ", ".join(f"{t} {v:.3f}" for t, v in rtf.items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="streamd label", description="label untranscribed audio with real-speech "
                                                                   "teacher models (see streamd.train.label)")
    ap.add_argument("--manifest", action="append", required=True, metavar="IN.jsonl",
                    help="input manifest (JSON lines with 'audio'); repeatable")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (raw caches, manifest.jsonl, ...)")
    ap.add_argument("--teachers", default=",".join(DEFAULT_TEACHERS),
                    help="comma-separated teacher names (default %(default)s)")
    ap.add_argument("--rule", choices=RULES, default="agree",
                    help="agree: >= --min-agree identical normalized texts (default); "
                         "wer: the two strongest teachers within --max-wer, label = the strongest")
    ap.add_argument("--min-agree", type=int, default=2, help="agree rule: teachers that must agree (default 2)")
    ap.add_argument("--max-wer", type=float, default=0.1, help="wer rule: largest WER between the two strongest "
                                                               "teachers (default 0.1)")
    ap.add_argument("--limit", type=int, help="only the first N files")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per teacher (default 2)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from ..second_pass import models as tmod

    args = build_parser().parse_args(argv)
    err = lambda msg: print(f"streamd label: {msg}", file=sys.stderr) or 2  # noqa: E731
    names = [n.strip() for n in args.teachers.split(",") if n.strip()]
    unknown = [n for n in names if n not in tmod.TEACHERS]
    if unknown:
        return err(f"unknown teacher(s) {', '.join(unknown)}; known: {', '.join(tmod.teacher_names())}")
    if len(set(names)) != len(names):
        return err(f"a teacher is listed twice in --teachers {args.teachers}")
    if not names:
        return err("--teachers is empty")
    if args.limit is not None and args.limit < 1:
        return err(f"--limit must be >= 1, got {args.limit}")
    if args.threads < 1:
        return err(f"--threads must be >= 1, got {args.threads}")
    if args.min_agree < 2:
        return err(f"--min-agree must be >= 2, got {args.min_agree}")
    if not (0 <= args.max_wer < 1) or math.isnan(args.max_wer):
        return err(f"--max-wer must be in [0, 1), got {args.max_wer}")
    names.sort(key=lambda n: tmod.TEACHERS[n].strength)
    try:
        items, dups = read_manifests(args.manifest)
    except ValueError as e:
        return err(str(e))
    if args.limit is not None:
        items = items[:args.limit]
    if not items:
        return err("the manifests list no audio")
    print(f"label: {len(items)} files ({sum(i.duration or 0 for i in items) / 3600:.3f} h listed)"
          + (f", {dups} duplicate(s) skipped" if dups else "") + f"; teachers {', '.join(names)}; rule {args.rule}",
          flush=True)
    factories = {n: (lambda n=n: tmod.load_teacher(n, args.threads)) for n in names}
    log = lambda m: print(m, flush=True)  # noqa: E731
    try:
        s = label(items, factories, args.out, args.rule, args.min_agree, args.max_wer, log=log)
    except tmod.TeacherUnavailable as e:
        return err(str(e))
    except (ValueError, OSError) as e:
        return err(str(e))
    print(format_summary(s, args.out))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
