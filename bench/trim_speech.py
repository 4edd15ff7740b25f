#!/usr/bin/env python3
"""Copy an evaluation set with every clip cut tight to its speech (energy-based, fixed margins).

    python3 bench/trim_speech.py ../shared/real/speech_commands/dev/manifest.jsonl --out /work/data/sc_dev_trimmed

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

import argparse
import json
from pathlib import Path

import soundfile as sf

from streamd.audio.trim import speech_span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest", help="JSON lines with audio (relative to the file's folder) and text")
    ap.add_argument("--out", required=True, help="output folder (manifest.jsonl and the cut audio)")
    ap.add_argument("--margin", type=float, default=0.02, help="seconds kept before and after the speech (0.02)")
    ap.add_argument("--above-noise", type=float, default=12.0, help="dB above the noise floor (12)")
    ap.add_argument("--below-peak", type=float, default=35.0, help="dB below the loudest frame (35)")
    a = ap.parse_args()
    src = Path(a.manifest).resolve()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    lines, cut_s, kept_s = [], 0.0, 0.0
    for line in src.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        x, rate = sf.read(src.parent / d["audio"], dtype="float32", always_2d=False)
        if x.ndim > 1:
            x = x.mean(axis=1)
        s, e = speech_span(x, rate, a.above_noise, a.below_peak, a.margin)
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


if __name__ == "__main__":
    main()
