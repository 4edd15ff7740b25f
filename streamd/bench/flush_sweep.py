"""``streamd bench flush-sweep``: sweep the end-of-stream flush (its length and signal) through ``streamd eval``'s
own decoding.

    streamd bench flush-sweep --set /work/data/sc_valid_trimmed/manifest.jsonl --set /work/data/sc_split/train.valid.jsonl \\
        --flush 0,0.16,0.32,0.48,0.64,0.96 [--noise-db -60] [--method greedy]

Per flush length (seconds after the last sample, :data:`streamd.engine.TAIL_PADDING_SECONDS`), every set is
decoded by :class:`streamd.evaluation.recognition.Evaluator` with the shipped model (or ``--model``) and its
greedy errors printed (sub-del-ins). ``--noise-db``: the flush is white noise at that RMS level (dBFS, seed 0)
instead of digital silence. Validation sets only: docs/model_history.md, "End of stream", chose 0.32 s this way.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from .. import engine
from ..config import EngineConfig
from ..evaluation.options import EvalOptions
from ..evaluation.recognition import Evaluator
from ..model.checkpoint import load_checkpoint

__all__ = ["flush_sweep"]


def flush_sweep(sets: Sequence[str], model: str, flush: Sequence[float], noise_db: float | None = None,
                method: str = "greedy") -> None:
    """Per flush length, every set's greedy errors through :class:`Evaluator`, one printed line."""
    loaded = load_checkpoint(model, "cpu")
    base = EngineConfig()
    cfg = dataclasses.replace(base, decoding=dataclasses.replace(base.decoding, method=method))
    silence = engine.tail_padding
    for seconds in flush:
        if noise_db is None:
            engine.tail_padding = silence
        else:
            level = 10 ** (noise_db / 20)
            engine.tail_padding = lambda s: (level * np.random.default_rng(0).standard_normal(round(s * 16000))
                                             ).astype(np.float32)
        engine.TAIL_PADDING_SECONDS = seconds  # read when the Recognizer is built
        ev = Evaluator(loaded, cfg, EvalOptions())
        cells = []
        for path in sets:
            r = ev.evaluate(path)
            cells.append(f"{path}: {100 * r['wer']:.2f} % ({r['sub']}-{r['del']}-{r['ins']})")
        print(f"flush {seconds:.2f} s" + ("" if noise_db is None else f" noise {noise_db} dBFS"), " | ".join(cells),
              flush=True)
