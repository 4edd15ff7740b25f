#!/usr/bin/env python3
"""Hold out validation data from a real training manifest (and its augmented copies), deterministically.

    python recipes/default/split_valid.py IN.jsonl [AUG.jsonl ...] --by speaker|id --share 0.1 --out DIR

A line goes to validation when sha1(key) mod 1000 < share * 1000, the key being its ``speaker`` (``--by speaker``:
speaker-disjoint; lines without a speaker, such as noise clips, use their ``id`` or audio path) or its ``id``.
Augmented copies (``streamd augment`` keeps ``speaker`` and ``id``) follow their source line, so no validation
speaker or prompt is ever trained on. Writes DIR/<name>.fit.jsonl and DIR/<name>.valid.jsonl per input (audio
paths made absolute).
"""
import argparse
import hashlib
import json
import os
from pathlib import Path


def key_of(d: dict, by: str) -> str:
    k = d.get(by) if by == "speaker" else None
    return str(k or d.get("id") or d.get("source_audio") or d["audio"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("manifests", nargs="+")
    p.add_argument("--by", choices=("speaker", "id"), default="speaker")
    p.add_argument("--share", type=float, default=0.1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for m in a.manifests:
        root = Path(m).resolve().parent
        fit, valid = [], []
        for line in open(m, encoding="utf-8"):
            if not line.strip():
                continue
            d = json.loads(line)
            if not os.path.isabs(d["audio"]):
                d["audio"] = str(root / d["audio"])
            h = int(hashlib.sha1(key_of(d, a.by).encode()).hexdigest(), 16) % 1000
            (valid if h < a.share * 1000 else fit).append(json.dumps(d) + "\n")
        name = Path(m).parent.name + ("" if Path(m).stem in ("manifest", "train") else "_" + Path(m).stem)
        (out / f"{name}.fit.jsonl").write_text("".join(fit), encoding="utf-8")
        (out / f"{name}.valid.jsonl").write_text("".join(valid), encoding="utf-8")
        print(f"{m}: {len(fit)} fit, {len(valid)} valid -> {out}/{name}.{{fit,valid}}.jsonl")


if __name__ == "__main__":
    main()
