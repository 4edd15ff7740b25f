"""``streamd lm``: train the token n-gram used for shallow fusion (:mod:`streamd.decode.lm`).

The text is the corpus text generator's (:class:`~streamd.train.text.TextGenerator`,
mixed like ``streamd synth``: wake-word positives, confusable negatives and
plain sentences), drawn with its own seed, so the LM sees far more sentences
than the speech corpus holds (hundreds of thousands against a few thousand);
``--text FILE`` adds lines of your own domain text (normalized like the
model's tokens: the same characters, numbers spelled out).  Nothing is read
from the evaluation sets.

The tokens come from a checkpoint (``--model``, default the shipped one), so
the LM speaks the model's token ids; the engine refuses an LM built for
another token table.  The report gives the held-out per-token perplexity on
sentences of another seed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

from streamd.decode.lm import NgramLM, build_ngram, save_lm
from streamd.tokens import TokenTable
from streamd.train.synth import choose_text
from streamd.train.text import TextGenerator

__all__ = ["generated_sentences", "encode_all", "perplexity", "main"]


def generated_sentences(n: int, seed: int, kws_fraction: float = 0.25, negatives_fraction: float = 0.15,
                        slot_focus: float = 0.0) -> list[str]:
    """n sentences of the domain generator, mixed as ``streamd synth`` mixes them."""
    gen, rng = TextGenerator(seed, slot_focus), random.Random(seed)
    return [choose_text(gen, rng.random(), kws_fraction, negatives_fraction)[0] for _ in range(n)]


def encode_all(tokens: TokenTable, lines: Iterable[str], where: str = "text") -> list[list[int]]:
    """Token ids of each non-empty line (ValueError names the line that cannot be encoded)."""
    out = []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(tokens.encode(line))
        except ValueError as e:
            raise ValueError(f"{where} line {i}: {e}") from None
    return out


def perplexity(lm: NgramLM, seqs: Sequence[Sequence[int]]) -> float:
    """Per-token perplexity (</s> counted as a token) of id sequences."""
    total, n = 0.0, 0
    for s in seqs:
        total += lm.sequence_logprob(s)
        n += len(s) + 1
    return math.exp(-total / max(n, 1))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="streamd lm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="LM file to write (for a model x.pt, x.lm.pt is found by "
                                                 "decoding.lm: auto)")
    ap.add_argument("--model", help="checkpoint whose token table the LM uses (default: the shipped model)")
    ap.add_argument("--sentences", type=int, default=300000, help="generated sentences (default 300000)")
    ap.add_argument("--seed", type=int, default=7, help="text generator seed (default 7)")
    ap.add_argument("--slot-focus", type=float, default=0.0,
                    help="share of name/place/grocery/artist drill sentences, as streamd synth (default 0)")
    ap.add_argument("--text", action="append", default=[], metavar="FILE", help="extra text, one sentence per line")
    ap.add_argument("--order", type=int, default=8, help="n-gram order (default 8)")
    ap.add_argument("--min-count", type=int, default=5, help="prune histories seen fewer times (default 5)")
    args = ap.parse_args(argv)
    from streamd.paths import model_arg
    from streamd.model.checkpoint import load_checkpoint

    t0 = time.monotonic()
    tokens = load_checkpoint(model_arg(args.model)).tokens
    try:
        seqs = encode_all(tokens, generated_sentences(args.sentences, args.seed, slot_focus=args.slot_focus),
                          "generated")
        for path in args.text:
            with open(path, encoding="utf-8") as f:
                seqs += encode_all(tokens, f, path)
        lm = build_ngram(seqs, len(tokens), tokens.blank_id, args.order, args.min_count, tokens.to_lines())
    except (ValueError, OSError) as e:
        print(f"streamd lm: {e}", file=sys.stderr)
        return 2
    held = encode_all(tokens, generated_sentences(2000, args.seed + 1_000_003))
    ppl = perplexity(lm, held)
    meta = {"order": args.order, "min_count": args.min_count, "sentences": len(seqs), "seed": args.seed,
            "slot_focus": args.slot_focus,
            "text_files": [Path(p).name for p in args.text], "held_out_perplexity": round(ppl, 4)}
    save_lm(lm, args.out, meta)
    print(f"wrote {args.out}: order {args.order}, {lm.num_states} states, {os.path.getsize(args.out) / 1e6:.1f} MB, "
          f"{len(seqs)} sentences, held-out perplexity {ppl:.3f} per token, {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
