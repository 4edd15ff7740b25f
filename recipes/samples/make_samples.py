#!/usr/bin/env python3
"""Write the short sample recordings shipped in streamd/assets/samples (what `streamd eval`, `streamd bench
engine` and streamd bench peers use when no evaluation set is given, so their commands work from a plain clone).

    python recipes/samples/make_samples.py [--out streamd/assets/samples]

Fixed sentences spoken by fixed espeak-ng and flite voices (their output carries no licence terms of the
engines), 16 kHz 16-bit mono, 0.3 s of silence either side; samples.jsonl lists audio, text, voice and keyword.
These are demonstration audio, not an evaluation set: measure on real held-out sets (see the README).
Needs espeak-ng and flite (apt-get install espeak-ng flite).
"""
import argparse
import json
from pathlib import Path

import numpy as np

from streamd.train.augment import write_wav
from streamd.train.text import KEYWORD, spoken_form
from streamd.train.tts import Voice, synthesize

SAMPLES = [  # (file stem, voice, normalized text)
    ("lights", Voice("flite", "slt"), "turn on the kitchen lights"),
    ("timer", Voice("espeak", "en-us+f3"), "set a timer for twenty five minutes"),
    ("weather", Voice("flite", "rms"), "what is the weather like in boston tomorrow"),
    ("wake", Voice("espeak", "en-gb+m3"), f"{KEYWORD} play some music in the living room"),
    ("call", Voice("flite", "awb"), "call mom on her cell phone"),
    ("digits", Voice("espeak", "en-us"), "my extension is four two seven nine"),
]
RATE = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "streamd" / "assets" / "samples"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    pad = np.zeros(int(0.3 * RATE), np.float32)
    lines = []
    for stem, voice, text in SAMPLES:
        x = synthesize(voice, spoken_form(text), RATE)
        x = x * (0.3 / max(1e-6, float(np.abs(x).max())))  # peak -10 dBFS
        x = np.concatenate([pad, x.astype(np.float32), pad])
        write_wav(out / f"{stem}.wav", x, RATE)
        lines.append({"audio": f"{stem}.wav", "text": text, "voice": voice.id,
                      "keyword": KEYWORD if text.startswith(KEYWORD) else None,
                      "duration": round(x.size / RATE, 3)})
    (out / "samples.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines), encoding="utf-8")
    print(f"wrote {len(lines)} samples to {out}")


if __name__ == "__main__":
    main()
