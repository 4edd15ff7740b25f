#!/usr/bin/env python3
"""Debian codec2-examples' speech recordings as an audio-only manifest for ``streamd label`` (no transcripts).

    python recipes/default/codec2_audio.py --out DIR [--root /usr/share/codec2/wav] [--max-seconds 15]

Writes DIR/manifest.jsonl (``audio``, ``duration``, ``speaker``, ``source``) and, for recordings longer than
--max-seconds, their pieces cut at pauses (DIR/<name>_<k>.wav); see streamd.train.corpora.codec2_examples.
"""
import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from streamd.train.corpora import CODEC2_WAV, codec2_examples


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--root", default=CODEC2_WAV)
    p.add_argument("--max-seconds", type=float, default=15.0)
    a = p.parse_args()
    if not Path(a.root).is_dir():
        raise SystemExit(f"no recordings under {a.root} (apt-get install codec2-examples)")
    dropped: Counter = Counter()
    rows = codec2_examples(a.out, a.root, max_seconds=a.max_seconds, dropped=dropped)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    with open(Path(a.out) / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"codec2-examples: {len(rows)} files, {sum(r['duration'] for r in rows) / 60:.2f} min; left out "
          f"{dict(dropped)}", file=sys.stderr)


if __name__ == "__main__":
    main()
