"""Writing what the importers read: hold-out splits, manifest files, a manifest's statistics."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ...manifest_lines import iter_json_lines, resolve_audio
from .records import audio_info, Record


# --------------------------------------------------------------------------- splits and writing


def holdout_of(key: str, fraction: float) -> bool:
    """True for a deterministic share ``fraction`` of keys: ``sha1(key)`` as a number in [0, 1)."""
    h = int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:15], 16) / float(16 ** 15)
    return h < fraction


def split_holdout(records: Sequence[Record], fraction: float, by: str = "id") -> tuple[list[Record], list[Record]]:
    """``(train, dev)``: dev = records whose ``by`` key (``id`` or ``speaker``) falls in the hold-out share.

    With ``by="speaker"`` the split is speaker-disjoint (records without a speaker use their id).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {fraction}")
    if by not in ("id", "speaker"):
        raise ValueError(f"holdout key must be id or speaker, got {by!r}")
    train, dev = [], []
    for r in records:
        key = (r.speaker or r.id) if by == "speaker" else r.id
        (dev if holdout_of(key, fraction) else train).append(r)
    return train, dev


def write_manifest(records: Iterable[Record], path: str | Path) -> int:
    """Write records as JSON lines (audio relative to the file's folder when inside it); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_json(path.parent), ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_import(records: Sequence[Record], out_dir: str | Path, holdout: float | None = None,
                 by: str = "id") -> dict[str, int]:
    """``out_dir/manifest.jsonl``, or with ``holdout`` ``train.jsonl`` + ``dev.jsonl`` + ``all.jsonl``.

    Returns file name -> number of records written.
    """
    out = Path(out_dir)
    if holdout is None:
        return {"manifest.jsonl": write_manifest(records, out / "manifest.jsonl")}
    train, dev = split_holdout(records, holdout, by)
    return {"train.jsonl": write_manifest(train, out / "train.jsonl"),
            "dev.jsonl": write_manifest(dev, out / "dev.jsonl"),
            "all.jsonl": write_manifest(records, out / "all.jsonl")}


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class ManifestStats:
    """Totals of one manifest: ``sources`` maps source -> (utterances, seconds); ``rates`` Hz -> count."""

    path: str
    utterances: int
    seconds: float
    speakers: int
    words: int
    vocabulary: int
    noise: int
    rates: tuple[tuple[int, int], ...]
    sources: tuple[tuple[str, int, float], ...]

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    def to_dict(self) -> dict:
        return {"path": self.path, "utterances": self.utterances, "hours": round(self.hours, 4),
                "seconds": round(self.seconds, 2), "speakers": self.speakers, "words": self.words,
                "vocabulary": self.vocabulary, "noise": self.noise, "rates": dict(self.rates),
                "sources": {s: {"utterances": n, "hours": round(sec / 3600, 4)} for s, n, sec in self.sources}}


def manifest_stats(path: str | Path) -> ManifestStats:
    """Utterances, duration, speakers, words, sample rates and per-source totals of a JSON-lines manifest.

    ``duration`` / ``rate`` missing from a line are read from the audio header.
    """
    path = Path(path)
    root = path.resolve().parent
    n = noise = words = 0
    seconds = 0.0
    speakers: set = set()
    vocab: set = set()
    rates: Counter = Counter()
    src_n: Counter = Counter()
    src_s: Counter = Counter()
    for _, _, obj in iter_json_lines(path, lambda line_no: f"{path} line {line_no}"):
        dur, rate = obj.get("duration"), obj.get("rate")
        if dur is None or rate is None:
            hdur, hrate = audio_info(resolve_audio(root, obj["audio"]))
            dur = hdur if dur is None else dur
            rate = hrate if rate is None else rate
        n += 1
        seconds += float(dur)
        rates[int(rate)] += 1
        if obj.get("speaker"):
            speakers.add(obj["speaker"])
        ws = str(obj.get("text", "")).split()
        words += len(ws)
        vocab.update(ws)
        noise += bool(obj.get("noise")) or not ws
        s = str(obj.get("source") or "-")
        src_n[s] += 1
        src_s[s] += float(dur)
    return ManifestStats(str(path), n, seconds, len(speakers), words, len(vocab), noise,
                         tuple(sorted(rates.items())), tuple((s, src_n[s], src_s[s]) for s in sorted(src_n)))
