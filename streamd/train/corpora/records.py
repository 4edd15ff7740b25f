"""A manifest record and what every importer shares: audio headers, drop counting, pieces cut from
long files."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ...text.normalize import normalize_text


AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".au", ".aiff", ".aif")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Record:
    """One manifest entry.

    ``audio`` is an absolute path; ``duration`` in seconds and ``rate`` in Hz
    from the file header; ``text`` normalized ("" for noise or silence);
    ``extra`` holds further JSON keys as ``(key, value)`` pairs.
    """

    id: str
    audio: str
    text: str
    duration: float
    rate: int
    source: str
    speaker: str | None = None
    orig_text: str | None = None
    keyword: str | None = None
    noise: bool = False
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def to_json(self, root: str | Path | None = None) -> dict:
        """The manifest object; ``audio`` relative to ``root`` when the file lies inside it."""
        audio = self.audio
        if root is not None:
            root_abs = os.path.abspath(root)
            if os.path.commonpath([root_abs, os.path.abspath(audio)]) == root_abs:
                audio = os.path.relpath(audio, root_abs)
        d: dict[str, Any] = {"audio": audio, "text": self.text, "duration": round(self.duration, 4),
                             "keyword": self.keyword, "id": self.id, "speaker": self.speaker,
                             "source": self.source, "orig_text": self.orig_text, "rate": self.rate}
        if self.noise:
            d["noise"] = True
        for k, v in self.extra:
            d.setdefault(k, v)
        return d


def audio_info(path: str | Path) -> tuple[float, int]:
    """``(duration seconds, sample rate)`` from the header; ValueError naming the file if unreadable."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except Exception as e:  # soundfile raises RuntimeError / LibsndfileError / TypeError
        raise ValueError(f"cannot read audio file {path}: {e}") from None
    return float(info.duration), int(info.samplerate)


def _count(dropped: Counter | None, reason: str, n: int = 1) -> None:
    if dropped is not None:
        dropped[reason] += n


def _record(rid: str, audio: Path | str, written: str, source: str, *, speaker: str | None = None,
            noise: bool = False, extra: Iterable[tuple[str, Any]] = (), dropped: Counter | None = None,
            info: tuple[float, int] | None = None) -> Record | None:
    """A Record with normalized text and header duration, or None (counted) if the text has no words."""
    text = "" if noise else normalize_text(written)
    if not noise and not text:
        _count(dropped, "empty_text")
        return None
    dur, rate = info if info is not None else audio_info(audio)
    return Record(rid, os.path.abspath(audio), text, dur, rate, source, speaker, written, None, noise, tuple(extra))


def _audio_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS)


def _cut_pieces(src: Path, out_dir: Path, prefix: str, cuts: Callable[[Any, int], list[tuple[int, int]]]
                ) -> list[tuple[Path, float, float]]:
    """Write the sample ranges ``cuts(samples, rate)`` of ``src`` (samples (N, C) float32) as
    ``out_dir/<prefix>_<k>.wav`` at its own rate and subtype.

    Returns ``[(piece path, start seconds, duration seconds), ...]``; existing pieces are rewritten.
    """
    import soundfile

    info = soundfile.info(str(src))
    data, rate = soundfile.read(str(src), always_2d=True, dtype="float32")
    out_dir.mkdir(parents=True, exist_ok=True)
    subtype = info.subtype if info.subtype in soundfile.available_subtypes("WAV") else "PCM_16"
    pieces = []
    for k, (a, b) in enumerate(cuts(data, rate)):
        p = out_dir / f"{prefix}_{k:04d}.wav"
        soundfile.write(str(p), data[a:b], rate, subtype=subtype, format="WAV")
        pieces.append((p, a / rate, (b - a) / rate))
    return pieces


def _whole_pieces(piece_s: float) -> Callable[[Any, int], list[tuple[int, int]]]:
    """Cuts into whole ``piece_s`` pieces, the tail dropped (for :func:`_cut_pieces`)."""
    def cuts(data: Any, rate: int) -> list[tuple[int, int]]:
        n = int(round(piece_s * rate))
        return [(i * n, (i + 1) * n) for i in range(len(data) // n)]
    return cuts
