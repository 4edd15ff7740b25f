"""Kaldi data dirs (``lhotse.kaldi.load_kaldi_data_dir``; ``segments`` cut into files)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from .records import _count, _record, audio_info, Record


# --------------------------------------------------------------------------- Kaldi data dirs

_KALDI_COPY = ("text", "utt2spk", "segments", "spk2gender", "utt2lang", "reco2dur")


def _kaldi_lines(path: Path) -> list[tuple[str, str]]:
    """``key rest`` lines of a Kaldi table (rest may be ""), blank lines skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split(maxsplit=1)
        if parts:
            out.append((parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return out


def kaldi_dir(data_dir: str | Path, *, segments_dir: str | Path | None = None,
              dropped: Counter | None = None) -> list[Record]:
    """A Kaldi data directory, loaded with ``lhotse.kaldi.load_kaldi_data_dir``.

    Files: ``wav.scp`` (``<recording> <path>``, required), ``text``
    (``<utt> <transcript>``, required), optional ``utt2spk``, ``segments``
    (``<utt> <recording> <start> <end>``), ``spk2gender``, ``reco2dur``.
    ``wav.scp`` entries must be plain audio paths (absolute, or relative to the
    current folder, the data dir's grandparent -- the recipe folder, Kaldi's
    convention -- or the data dir itself); piped commands (``... |``) are
    refused: extract them to files first.  Utterances without a transcript
    are dropped (``empty_text``).  With ``segments`` each segment is cut into
    ``segments_dir/<utt>.wav`` (the manifest has no offsets) unless it spans
    its whole recording.
    """
    d = Path(data_dir)
    if not (d / "wav.scp").is_file():
        raise ValueError(f"kaldi: {d} has no wav.scp")
    if not (d / "text").is_file():
        raise ValueError(f"kaldi: {d} has no text file (transcripts)")
    wavs = _kaldi_wavs(d)
    texts = dict(_kaldi_lines(d / "text"))
    loaded = _load_kaldi(d, wavs, texts, dropped)
    if loaded is None:
        return []
    recs, sups = loaded
    has_spk = (d / "utt2spk").is_file()
    out: list[Record] = []
    infos: dict[str, tuple[float, int]] = {}
    for sup in sorted(sups, key=lambda s: s.id):
        rec = recs[sup.recording_id]
        path = rec.sources[0].source
        if path not in infos:
            infos[path] = audio_info(path)
        full_dur, src_rate = infos[path]
        whole = sup.start <= 1e-3 and abs(sup.start + sup.duration - full_dur) <= 0.01
        extra: list[tuple[str, Any]] = [("recording", sup.recording_id)]
        if whole:
            audio, info = path, infos[path]
        else:
            if segments_dir is None:
                raise ValueError("kaldi: the segments file needs an output folder for the cut segments")
            audio, info = _cut_segment(path, sup.start, sup.duration, Path(segments_dir) / f"{sup.id}.wav")
            extra.append(("start", round(sup.start, 4)))
        r = _record(sup.id, audio, texts[sup.id], "kaldi", speaker=sup.speaker if has_spk else None,
                    extra=extra, dropped=dropped, info=info)
        if r is not None:
            out.append(r)
    return out


def _kaldi_wavs(d: Path) -> dict[str, str]:
    """``wav.scp`` of Kaldi data dir ``d``: recording -> the audio file's resolved path (ValueError for a piped
    command, a missing path or a file found in none of the places :func:`kaldi_dir` looks)."""
    bases = [Path.cwd(), d.resolve().parent.parent, d.resolve()]
    wavs = {}
    for n, (rid, p) in enumerate(_kaldi_lines(d / "wav.scp"), 1):
        if p.endswith("|") or p.startswith("|"):
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): piped commands are not supported; "
                             f"write the audio to files first (e.g. wav-copy scp:wav.scp ark,scp:...) and list "
                             f"their paths")
        if not p:
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): no path")
        cands = [Path(p)] if os.path.isabs(p) else [b / p for b in bases]
        hit = next((c for c in cands if c.is_file()), None)
        if hit is None:
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): audio {p} not found "
                             f"(looked in {', '.join(str(c) for c in cands)})")
        wavs[rid] = str(hit.resolve())
    return wavs


def _load_kaldi(d: Path, wavs: dict[str, str], texts: dict[str, str], dropped: Counter | None
                ) -> tuple[Any, Any] | None:
    """Lhotse's (recordings, supervisions) of the transcribed utterances of Kaldi data dir ``d`` (a copy of it
    with the resolved ``wavs`` and only those utterances; the others counted in ``dropped``), or None when
    none is left."""
    from lhotse.kaldi import load_kaldi_data_dir

    has_segments = (d / "segments").is_file()
    rate = audio_info(next(iter(wavs.values())))[1] if wavs else 16000
    with tempfile.TemporaryDirectory(prefix="streamd-kaldi-") as tmp:
        t = Path(tmp)
        for name in _KALDI_COPY:
            if (d / name).is_file():
                shutil.copyfile(d / name, t / name)
        keep = {u for u, txt in texts.items() if txt}
        _count(dropped, "empty_text", sum(1 for txt in texts.values() if not txt))
        if has_segments:
            segs = [(u, rest) for u, rest in _kaldi_lines(d / "segments") if u in keep]
            _count(dropped, "no_transcript", sum(1 for u, _ in _kaldi_lines(d / "segments") if u not in texts))
            (t / "segments").write_text("".join(f"{u} {rest}\n" for u, rest in segs))
        else:
            missing = [r for r in wavs if r not in keep]
            _count(dropped, "no_transcript", sum(1 for r in missing if r not in texts))
            wavs = {r: p for r, p in wavs.items() if r in keep}
            spk = dict(_kaldi_lines(d / "utt2spk"))
            (t / "utt2spk").write_text("".join(f"{r} {spk.get(r, r)}\n" for r in wavs))
        (t / "text").write_text("".join(f"{u} {txt}\n" for u, txt in texts.items() if u in keep))
        (t / "wav.scp").write_text("".join(f"{r} {p}\n" for r, p in wavs.items()))
        if (t / "reco2dur").is_file():  # must match wav.scp line for line
            r2d = dict(_kaldi_lines(d / "reco2dur"))
            (t / "reco2dur").write_text("".join(f"{r} {r2d[r]}\n" for r in wavs if r in r2d))
            if len(r2d.keys() & wavs.keys()) != len(wavs):
                (t / "reco2dur").unlink()
        if not wavs:
            return None
        recs, sups, _ = load_kaldi_data_dir(t, sampling_rate=rate, num_jobs=1)
    return None if sups is None else (recs, sups)


def _cut_segment(src: str, start: float, duration: float, dst: Path) -> tuple[Path, tuple[float, int]]:
    import soundfile

    info = soundfile.info(src)
    a = int(round(start * info.samplerate))
    b = min(info.frames, a + int(round(duration * info.samplerate)))
    data, rate = soundfile.read(src, start=a, stop=b, always_2d=True, dtype="float32")
    dst.parent.mkdir(parents=True, exist_ok=True)
    subtype = info.subtype if info.subtype in soundfile.available_subtypes("WAV") else "PCM_16"
    soundfile.write(str(dst), data, rate, subtype=subtype, format="WAV")
    return dst, (len(data) / rate, int(rate))
