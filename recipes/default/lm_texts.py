#!/usr/bin/env python3
"""The extra text of the shipped n-gram (``streamd lm --text``), beside its 300 000 generated sentences.

    python recipes/default/lm_texts.py --out FILE [--fortunes data/real/split/fortunes.txt]
        [--asterisk data/real/split/asterisk.fit.txt] [--sc data/real/split/sc_train.fit.jsonl]

Everyday English (the Debian fortunes sentences stage 18's voices read) once, the Asterisk *fitting* prompts 10
times and the Speech Commands *fitting* split's words 5 times (never a validation or dev text): with them, LM
fusion helps real speech instead of pulling it toward the generator's sentences (docs/model_history.md,
"Language model").
"""
import argparse
import json


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--fortunes", default="data/real/split/fortunes.txt")
    p.add_argument("--asterisk", default="data/real/split/asterisk.fit.txt")
    p.add_argument("--sc", default="data/real/split/sc_train.fit.jsonl")
    a = p.parse_args()
    fortunes = [x.strip() for x in open(a.fortunes) if x.strip()]
    asterisk = [x.strip() for x in open(a.asterisk) if x.strip()]
    words = [t for t in (json.loads(x).get("text", "") for x in open(a.sc) if x.strip()) if t]
    with open(a.out, "w") as f:
        for texts, times in ((fortunes, 1), (asterisk, 10), (words, 5)):
            for _ in range(times):
                f.writelines(t + "\n" for t in texts)


if __name__ == "__main__":
    main()
