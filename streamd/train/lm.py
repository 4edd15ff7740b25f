"""``streamd lm``: train the token n-gram used for shallow fusion (:mod:`streamd.decode.lm`).

The text is the corpus text generator's (:class:`~streamd.train.text.TextGenerator`,
mixed like ``streamd synth``: wake-word positives, confusable negatives and
plain sentences), drawn with its own seed, so the LM sees far more sentences
than the speech corpus holds (hundreds of thousands against a few thousand);
``--text FILE`` (``text_files``) adds lines of your own domain text (normalized like the
model's tokens: the same characters, numbers spelled out).  Nothing is read
from the evaluation sets.

The tokens come from a checkpoint (``--model``, default the shipped one), so
the LM speaks the model's token ids; the engine refuses an LM built for
another token table.  The report gives the held-out per-token perplexity on
sentences of another seed.
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Iterable, Sequence

from streamd.decode.lm import NgramLM, build_ngram, save_lm
from streamd.tokens import TokenTable
from streamd.train.synth import choose_text
from streamd.train.text import TextGenerator

__all__ = ["generated_sentences", "encode_all", "perplexity", "train_lm"]


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


def train_lm(tokens: TokenTable, out: str | os.PathLike, *, sentences: int = 300000, seed: int = 7,
             slot_focus: float = 0.0, text_files: Sequence[str | os.PathLike] = (), order: int = 8,
             min_count: int = 5) -> str:
    """Build the n-gram over ``sentences`` generated sentences (seed ``seed``) and the lines of ``text_files``
    in ``tokens``' ids, write it to ``out`` with its metadata; returns the one-line summary.  A line that
    cannot be encoded raises ValueError naming it; an unreadable file OSError."""
    t0 = time.monotonic()
    seqs = encode_all(tokens, generated_sentences(sentences, seed, slot_focus=slot_focus), "generated")
    for path in text_files:
        with open(path, encoding="utf-8") as f:
            seqs += encode_all(tokens, f, str(path))
    lm = build_ngram(seqs, len(tokens), tokens.blank_id, order, min_count, tokens.to_lines())
    held = encode_all(tokens, generated_sentences(2000, seed + 1_000_003))
    ppl = perplexity(lm, held)
    meta = {"order": order, "min_count": min_count, "sentences": len(seqs), "seed": seed, "slot_focus": slot_focus,
            "text_files": [Path(p).name for p in text_files], "held_out_perplexity": round(ppl, 4)}
    save_lm(lm, out, meta)
    return (f"wrote {out}: order {order}, {lm.num_states} states, {os.path.getsize(out) / 1e6:.1f} MB, "
            f"{len(seqs)} sentences, held-out perplexity {ppl:.3f} per token, {time.monotonic() - t0:.0f} s")
