"""``streamd bench trim-speech``: copy an evaluation set with every clip cut tight to its speech (energy-based,
fixed margins).

    streamd bench trim-speech ../shared/real/speech_commands/dev/manifest.jsonl --out /work/data/sc_dev_trimmed

For streams that start and end right at the speech (push-to-talk, Wyoming satellites, IVR prompts): the
recognizer must not lose the first or the last word (docs/benchmarks.md, "Streams cut at the speech").

Per clip, deterministic and blind to the transcript: frame energies in dB (20 ms windows every 10 ms); the
speech is the span from the first to the last frame louder than ``max(noise + --above-noise, peak -
--below-peak)`` dB, the noise being the 10th percentile of the frame energies and the peak the loudest frame;
the cut keeps ``--margin`` seconds (20 ms) on either side. A clip with no frame that loud (no speech found,
e.g. some of the noise clips) stays whole; the other noise clips are cut like speech (the transcript is not
looked at). Writes DIR/manifest.jsonl
(the input's lines, ``audio`` pointing at the cut FLAC, ``duration`` the new length, ``trimmed_from`` the
original [start, end) seconds kept) and the audio files beneath DIR in the input's layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf

from ..audio.trim import speech_span

__all__ = ["trim_speech"]


def trim_speech(manifest: str, out_dir: str, margin: float = 0.02, above_noise: float = 12.0,
                below_peak: float = 35.0) -> None:
    """Write ``out_dir``/manifest.jsonl and the cut audio; print one summary line."""
    src = Path(manifest).resolve()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines, cut_s, kept_s = [], 0.0, 0.0
    for line in src.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        x, rate = sf.read(src.parent / d["audio"], dtype="float32", always_2d=False)
        if x.ndim > 1:
            x = x.mean(axis=1)
        s, e = speech_span(x, rate, above_noise, below_peak, margin)
        rel = Path(d["audio"]).with_suffix(".flac")
        if rel.is_absolute() or ".." in rel.parts:  # absolute paths: the file's folder and name, beneath DIR
            rel = Path(*rel.parts[-2:])
        rel = str(rel)
        if not (out / rel).resolve().is_relative_to(out.resolve()):
            raise SystemExit(f"{d['audio']}: would be written outside {out}")
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(out / rel, x[s:e], rate, subtype="PCM_16")
        d.update(audio=rel, duration=round((e - s) / rate, 3), trimmed_from=[round(s / rate, 3), round(e / rate, 3)])
        lines.append(json.dumps(d) + "\n")
        cut_s += (x.size - (e - s)) / rate
        kept_s += (e - s) / rate
    (out / "manifest.jsonl").write_text("".join(lines), encoding="utf-8")
    print(f"{src}: {len(lines)} clips -> {out}/manifest.jsonl ({kept_s:.1f} s kept, {cut_s:.1f} s cut)")

