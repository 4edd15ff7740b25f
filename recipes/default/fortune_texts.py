"""Everyday English sentences for TTS voices to read (stage 18: spelling of common words).

The real held-out sentences fail mostly on ordinary words spelled by sound ("connot", "mast all
rady"): the template text of the synthetic corpus covers a few hundred words. The Debian package
``fortunes`` (fortune-mod's BSD-licensed quotation files, /usr/share/games/fortunes) holds tens of
thousands of plain English sentences; this script cuts them into sentences of 3-16 words made only
of letters, digits and simple punctuation, in the model's spoken form, deduplicated, shuffled with a
fixed seed, and writes ``--count`` of them one per line (``streamd synth --texts``).

    python3 recipes/default/fortune_texts.py --out data/real/split/fortunes.txt --count 20000
"""
from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from streamd.text.normalize import normalize_text

# the plain-prose files (no ASCII art, no offensive sets, no code)
FILES = ("fortunes", "wisdom", "people", "platitudes", "education", "literature", "science", "work", "food",
         "kids", "pets", "sports", "love", "humorists", "miscellaneous", "computers", "news", "politics",
         "medicine", "law", "riddles", "magic", "pratchett", "men-women")
_SENT = re.compile(r"(?<=[.!?])\s+")
_PLAIN = re.compile(r"^[A-Za-z0-9 ,.;:!?'\"()-]+$")


def sentences(root: Path):
    """Yield raw sentences of every quotation in the listed files (quotations end at a ``%`` line)."""
    for name in FILES:
        path = root / name
        if not path.exists():
            continue
        for quote in path.read_text(encoding="latin-1").split("\n%\n"):
            lines = [ln.strip() for ln in quote.splitlines() if ln.strip()]
            # drop attributions ("-- Mark Twain") and indented dialogue markers
            body = " ".join(ln for ln in lines if not ln.startswith("--"))
            for s in _SENT.split(body):
                yield s.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="/usr/share/games/fortunes")
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    seen: set[str] = set()
    keep: list[str] = []
    for s in sentences(Path(args.root)):
        if not _PLAIN.match(s):
            continue
        try:
            text = normalize_text(s)
        except ValueError:  # e.g. a number too long to say
            continue
        n = len(text.split())
        if 3 <= n <= 16 and text not in seen:
            seen.add(text)
            keep.append(text)
    if not keep:
        raise SystemExit(f"no sentences under {args.root} (apt-get install fortunes)")
    random.Random(args.seed).shuffle(keep)
    keep = keep[:args.count]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(keep) + "\n", encoding="utf-8")
    print(f"{len(keep)} sentences ({len(seen)} distinct found) -> {args.out}")


if __name__ == "__main__":
    main()
