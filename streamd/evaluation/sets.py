"""Evaluation sets: JSON lines of ``audio`` (relative to the file's folder), ``text`` and optional ``voice``,
``keyword``, ``source``; and their audio, as the streams will be fed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.manifest_lines import iter_json_lines

__all__ = ["EvalEntry", "read_eval_set", "load_entries"]


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
    lines = iter_json_lines(path, lambda n: f"{path}:{n}", "not valid JSON") if limit is None or limit > 0 else ()
    for n, _, d in lines:
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
        if limit is not None and len(entries) >= limit:
            break  # before reading the next line: what lies past the limit is not checked
    if not entries:
        raise ValueError(f"{path}: no entries")
    return entries, is_kws


def load_entries(entries: Sequence[EvalEntry], resample_to: int | None) -> list[tuple[np.ndarray, int]]:
    """The entries' audio as (samples, rate), downsampled to ``resample_to`` where given."""
    out = []
    for e in entries:
        x, rate = load_audio(e.audio)
        if resample_to is not None and rate != resample_to:
            x, rate = resample(x, rate, resample_to), resample_to
        out.append((x, rate))
    return out
