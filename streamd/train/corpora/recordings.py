"""Untranscribed recordings cut at pauses (codec2's examples) and JSON-lines manifests."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path
from typing import Any

from ...manifest_lines import iter_json_lines, resolve_audio
from .records import _audio_files, _count, _cut_pieces, _record, audio_info, Record


# --------------------------------------------------------------------------- untranscribed recordings

CODEC2_WAV = "/usr/share/codec2/wav"
# codec2-examples recordings that repeat others: all.wav joins several of them, f2400 / m2400 are forig / morig
# through the 2400 bit/s codec
_CODEC2_REPEATS = frozenset({"all", "f2400", "m2400"})
MIN_PIECE_S = 0.5  # a shorter tail of a cut recording is dropped (short_piece)


def pause_cuts(x: Any, rate: int, max_seconds: float, frame_seconds: float = 0.02) -> list[tuple[int, int]]:
    """Sample ranges ``[(start, end), ...]`` that tile the samples ``x`` (N,) in order, none longer than
    ``max_seconds``: each cut is in the middle of the quietest ``frame_seconds`` frame (lowest mean square) of
    the second half of the span it ends, a pause between words where the span has one."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    n, m, f = len(x), int(max_seconds * rate), max(1, int(frame_seconds * rate))
    if m < 2 * f:
        raise ValueError(f"max_seconds {max_seconds} is too short for {frame_seconds} s frames")
    out, start = [], 0
    while n - start > m:
        lo = start + m // 2
        frames = (start + m - lo) // f
        energy = (x[lo:lo + frames * f].reshape(frames, f) ** 2).mean(axis=1)
        cut = lo + int(np.argmin(energy)) * f + f // 2
        out.append((start, cut))
        start = cut
    out.append((start, n))
    return out


def codec2_examples(out_dir: str | Path, root: str | Path = CODEC2_WAV, *, max_seconds: float = 15.0,
                    dropped: Counter | None = None) -> list[dict]:
    """Debian ``codec2-examples`` (LGPL-2.1): the speech recordings of its ``wav/`` folder (8 kHz: the codec's
    test sentences by several speakers, amateur-radio contacts), without transcripts, as audio-only manifest
    rows ``{"audio", "duration", "speaker", "source"}`` for ``streamd label`` (the teachers write the text).

    Recordings that repeat others (``all.wav``, the coded ``f2400`` / ``m2400``) are left out (``repeat``);
    one longer than ``max_seconds`` is cut at pauses (:func:`pause_cuts`) into ``out_dir/<name>_<k>.wav``
    (its own rate and subtype), a tail under :data:`MIN_PIECE_S` dropped (``short_piece``).  The speaker is
    the file name (the package names no speakers)."""

    def at_pauses(data: Any, rate: int) -> list[tuple[int, int]]:
        cuts = pause_cuts(data.mean(axis=1), rate, max_seconds)
        kept = [(a, b) for a, b in cuts if (b - a) / rate >= MIN_PIECE_S]
        if len(kept) < len(cuts):
            _count(dropped, "short_piece", len(cuts) - len(kept))
        return kept

    out_dir = Path(out_dir)
    rows: list[dict] = []
    for f in _audio_files(Path(root)):
        if f.stem in _CODEC2_REPEATS:
            _count(dropped, "repeat")
            continue
        dur, _ = audio_info(f)
        base = {"speaker": f.stem, "source": "codec2-examples"}
        if dur <= max_seconds:
            rows.append({"audio": os.path.abspath(f), "duration": round(dur, 4), **base})
            continue
        for piece, _, seconds in _cut_pieces(f, out_dir, f.stem, at_pauses):
            rows.append({"audio": os.path.abspath(piece), "duration": round(seconds, 4), **base})
    return rows


def jsonl(path: str | Path, *, source: str | None = None, dropped: Counter | None = None) -> list[Record]:
    """A JSON-lines manifest (any producer): texts re-normalized, paths resolved, durations filled.

    ``audio`` relative to the file's folder or absolute; ``text`` normalized
    (the original kept as ``orig_text`` unless the line already has one);
    ``duration``/``rate`` from the header; ``noise: true`` lines keep text "";
    other lines whose text normalizes to "" are dropped (``empty_text``);
    other keys are kept.  Errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"jsonl: {path}: no such file")
    root = path.resolve().parent
    out: list[Record] = []
    for n, where, obj in iter_json_lines(path, lambda n: f"jsonl: {path} line {n}"):
        if not isinstance(obj.get("audio"), str) or not isinstance(obj.get("text"), str):
            raise ValueError(f"{where}: needs an object with string 'audio' and 'text'")
        audio = resolve_audio(root, obj["audio"])
        if not os.path.isfile(audio):
            _count(dropped, "missing_audio")
            continue
        noise = bool(obj.get("noise"))
        orig = obj.get("orig_text") if isinstance(obj.get("orig_text"), str) else obj["text"]
        rid = str(obj.get("id") or os.path.splitext(obj["audio"])[0])
        known = {"audio", "text", "duration", "keyword", "id", "speaker", "source", "orig_text", "rate", "noise"}
        extra = tuple((k, v) for k, v in obj.items() if k not in known)
        r = _record(rid, audio, obj["text"], str(source or obj.get("source") or path.parent.name),
                    speaker=obj.get("speaker"), noise=noise, extra=extra, dropped=dropped)
        if r is None:
            continue
        kw = obj.get("keyword")
        out.append(dataclasses.replace(r, orig_text=orig, keyword=kw if isinstance(kw, str) else None))
    return out
