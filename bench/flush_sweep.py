#!/usr/bin/env python3
"""Sweep the end-of-stream flush (its length and signal) through ``streamd eval``'s own decoding.

    python3 bench/flush_sweep.py --set /work/data/sc_valid_trimmed/manifest.jsonl --set /work/data/sc_split/train.valid.jsonl \\
        --flush 0,0.16,0.32,0.48,0.64,0.96 [--noise-db -60] [--method greedy]

Per flush length (seconds after the last sample, :data:`streamd.engine.TAIL_PADDING_SECONDS`), every set is
decoded by :class:`streamd.evaluation.recognition.Evaluator` with the shipped model (or ``--model``) and its
greedy errors printed (sub-del-ins). ``--noise-db``: the flush is white noise at that RMS level (dBFS, seed 0)
instead of digital silence. Validation sets only: docs/model_history.md, "End of stream", chose 0.32 s this way.
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import streamd.engine as engine
from streamd.config import EngineConfig
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator
from streamd.model.checkpoint import load_checkpoint
from streamd.paths import model_arg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", dest="sets", action="append", required=True)
    ap.add_argument("--flush", default="0,0.16,0.32,0.48,0.64,0.96", help="comma-separated seconds")
    ap.add_argument("--noise-db", type=float, help="white noise at this level instead of digital silence")
    ap.add_argument("--method", default="greedy")
    ap.add_argument("--model", help="checkpoint (default: the shipped model)")
    a = ap.parse_args()
    loaded = load_checkpoint(model_arg(a.model), "cpu")
    base = EngineConfig()
    cfg = dataclasses.replace(base, decoding=dataclasses.replace(base.decoding, method=a.method))
    silence = engine.tail_padding
    for seconds in (float(v) for v in a.flush.split(",")):
        if a.noise_db is None:
            engine.tail_padding = silence
        else:
            level = 10 ** (a.noise_db / 20)
            engine.tail_padding = lambda s: (level * np.random.default_rng(0).standard_normal(round(s * 16000))
                                             ).astype(np.float32)
        engine.TAIL_PADDING_SECONDS = seconds  # read when the Recognizer is built
        ev = Evaluator(loaded, cfg, EvalOptions())
        cells = []
        for path in a.sets:
            r = ev.evaluate(path)
            cells.append(f"{path}: {100 * r['wer']:.2f} % ({r['sub']}-{r['del']}-{r['ins']})")
        print(f"flush {seconds:.2f} s" + ("" if a.noise_db is None else f" noise {a.noise_db} dBFS"), " | ".join(cells),
              flush=True)


if __name__ == "__main__":
    main()
