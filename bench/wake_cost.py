#!/usr/bin/env python3
"""Cost of trained wake models in the engine step, side by side in one process.

    OMP_NUM_THREADS=1 python bench/wake_cost.py [--streams 32] [--models 10] [--seconds 8] [--rounds 5]
                                                [--device cpu]

Two recognizers on the shipped model (greedy, endpointing on): one without wake models, one with
``--models`` wake models (heads of the shipped shape, hidden 32, random weights: the cost does not depend on
the weights).  Each round feeds ``--streams`` streams the same dev recordings in 0.32 s pieces (one chunk per
stream per step, every stream in every step, as a full real-time batch) and times every ``step()``; the
rounds alternate between the two recognizers.  Printed: per round the mean step time of each and their
ratio, and the median ratio over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamd.config import EngineConfig, KwsConfig  # noqa: E402
from streamd.engine import Recognizer  # noqa: E402
from streamd.model.checkpoint import load_checkpoint  # noqa: E402
from streamd.model.wake import WakeHead, save_wake_model  # noqa: E402
from streamd.paths import default_bench_audio, default_model_path  # noqa: E402


def _clips(seconds: float) -> list[np.ndarray]:
    from streamd.audio.pcm import load_audio
    from streamd.audio.resample import resample
    out = []
    for p in default_bench_audio():
        x, r = load_audio(p)
        out.append((resample(x, r, 16000) if r != 16000 else x).astype(np.float32))
    x = np.concatenate(out)
    n = int(seconds * 16000)
    return [np.roll(x, 7919 * i)[:n] for i in range(64)]


def _round(rec: Recognizer, clips: list[np.ndarray], streams: int) -> float:
    ids = [rec.create_stream(method="greedy", partials=True) for _ in range(streams)]
    piece = int(0.32 * 16000)
    n = len(clips[0])
    times = []
    for a in range(0, n, piece):
        for i, sid in enumerate(ids):
            rec.accept_audio(sid, clips[i % len(clips)][a:a + piece])
        t0 = time.perf_counter()
        rec.step()
        if rec.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    for sid in ids:
        rec.finish(sid)
    rec.drain()
    return float(np.mean(times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    loaded = load_checkpoint(str(default_model_path()), "cpu")
    tmp = Path(tempfile.mkdtemp())
    paths = []
    for i in range(a.models):
        torch.manual_seed(i)
        p = tmp / f"m{i}.wake.pt"
        save_wake_model(p, f"keyword {chr(97 + i)}", 0.99, WakeHead(32), {})
        paths.append(str(p))
    recs = {name: Recognizer(loaded, EngineConfig(device=a.device, kws=KwsConfig(wake_models=tuple(wm))))
            for name, wm in (("base", ()), ("wake", paths))}
    for r in recs.values():
        r.warm_up()
    clips = _clips(a.seconds)
    rows = []
    for k in range(a.rounds):
        base = _round(recs["base"], clips, a.streams)
        wake = _round(recs["wake"], clips, a.streams)
        rows.append({"round": k, "base_ms": round(base * 1000, 2), "wake_ms": round(wake * 1000, 2),
                     "ratio": round(wake / base, 3)})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"streams": a.streams, "models": a.models, "device": a.device,
                      "median_ratio": statistics.median(r["ratio"] for r in rows),
                      "median_base_ms": statistics.median(r["base_ms"] for r in rows),
                      "median_wake_ms": statistics.median(r["wake_ms"] for r in rows)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
