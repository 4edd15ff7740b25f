#!/usr/bin/env python3
"""Long stretches of real background noise with empty transcripts, for teaching the model that noise is not speech.

    python recipes/default/noise_stretches.py NOISE.jsonl --out DIR [--count 300] [--min-clips 4] [--max-clips 12]
        [--gain-db LO HI] [--every N --offset K]

NOISE.jsonl is a noise manifest (the recipe's: the Speech Commands *training* split's ``_silence_`` clips, never the
dev split's). Each output file joins a random run of its clips, each at a random gain (``--gain-db``, default
-12..+6 dB), some joined by hard cuts (a 1 s clip boundary is an onset the model must not take for a word: the
stage-15 model wrote "on", "off", "down" there), some cross-faded over 50 ms, and some with a stretch of digital
silence between. Writes DIR/<n>.wav (16 kHz) and DIR/manifest.jsonl (``text`` "", ``noise`` true). Seeded, so a
rerun writes the same files.
``--every N --offset K`` keeps only the clips at positions K, K+N, K+2N... of the manifest (the others held out, e.g.
to measure words written into louder noise than the model was trained on).
"""
import argparse
import json
from pathlib import Path

import numpy as np

from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.train.augment import write_wav
from streamd.manifest_lines import iter_audio_lines

RATE = 16000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("noise_manifest")
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--min-clips", type=int, default=4)
    p.add_argument("--max-clips", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gain-db", type=float, nargs=2, default=(-12.0, 6.0), metavar=("LO", "HI"))
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--offset", type=int, default=0)
    a = p.parse_args()
    if not a.gain_db[0] <= a.gain_db[1] or a.every < 1 or not 0 <= a.offset < a.every:
        p.error("need --gain-db LO <= HI, --every >= 1 and 0 <= --offset < --every")
    # the clips at their recorded levels (NoiseBank would scale each to unit RMS; the stretches keep real levels)
    bank = []
    for n, (_, _, _, audio) in enumerate(iter_audio_lines(a.noise_manifest, "noise manifest")):
        if n % a.every != a.offset:
            continue
        x, rate = load_audio(audio)
        bank.append((resample(x, rate, RATE) if rate != RATE else x).astype(np.float32))
    rng = np.random.default_rng(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    fade = int(0.05 * RATE)
    with open(out / "manifest.jsonl", "w", encoding="utf-8") as f:
        for n in range(a.count):
            k = int(rng.integers(a.min_clips, a.max_clips + 1))
            join = rng.choice(["cut", "fade", "gap"])
            x = np.zeros(0, np.float32)
            for i in rng.choice(len(bank), size=k):
                y = bank[i] * np.float32(10 ** (rng.uniform(*a.gain_db) / 20))
                if join == "fade" and x.size >= fade and y.size >= fade:
                    ramp = np.linspace(0, 1, fade, dtype=np.float32)
                    x[-fade:] = x[-fade:] * (1 - ramp) + y[:fade] * ramp
                    y = y[fade:]
                elif join == "gap" and x.size:
                    x = np.concatenate([x, np.zeros(int(rng.uniform(0.1, 1.0) * RATE), np.float32)])
                x = np.concatenate([x, y])
            path = out / f"{n:04d}.wav"
            write_wav(path, np.clip(x, -1, 1), RATE)
            f.write(json.dumps({"audio": str(path.resolve()), "text": "", "duration": round(x.size / RATE, 3),
                                "id": f"noise_stretch/{n:04d}", "source": "speech_commands_noise", "noise": True})
                    + "\n")


if __name__ == "__main__":
    main()
