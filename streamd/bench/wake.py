"""Trained wake models measured (``streamd bench wake-cost``, ``streamd bench wake-hey-stream``; the parser is
:mod:`streamd.cli.bench.wake`; Mycroft's recordings: :mod:`.wake_mycroft`).

``wake-cost``: the cost of trained wake models in the engine step, side by side in one process.

    OMP_NUM_THREADS=1 streamd bench wake-cost [--streams 32] [--models 10] [--seconds 8] [--rounds 5]
                                              [--members 1] [--device cpu] [--precision auto]

Two recognizers on the shipped model (greedy, endpointing on): one without wake models, one with
``--models`` wake models (heads of the shipped shape, hidden 32, ``--members`` nets each, random weights: the
cost does not depend on the weights).  Each round feeds ``--streams`` streams the same dev recordings in 0.32 s pieces (one chunk per
stream per step, every stream in every step, as a full real-time batch) and times every ``step()``, in wall
time and in this process's CPU time (the figure to trust on a shared machine: other jobs stretch the wall
time, not the CPU time); the rounds alternate between the two recognizers.  Printed: per round the mean step
time of each (``*_ms`` wall, ``*_cpu_ms`` CPU) and their ratios, then the medians over the rounds.

``wake-hey-stream``: "hey stream" by the model's KWS head against a trained wake model, on the same files.

    OMP_NUM_THREADS=1 streamd bench wake-hey-stream --wake-model streamd/assets/hey_stream.wake.pt
        [--set ../shared/eval/dev/kws.jsonl] [--real-neg ../shared/real/mycroft/manifest.jsonl]
        [--real-neg ../shared/real/speech_commands/dev/manifest.jsonl] [--batch 32]

Sets: ``--set`` files with ``keyword`` fields ("hey stream" positives and negatives); ``--real-neg``
manifests whose lines without a keyword are negatives (lines with another keyword are left out).  The KWS
head: every file through the engine (greedy, 0.1 s pieces, :func:`streamd.feed.feed_streams`), its
"hey stream" events at the configured threshold.  The trained model: its score tracks
(:func:`streamd.evaluation.wake.score_tracks`, as a stream scores them) at its own threshold.  A positive is
detected when its keyword fires at least once; every detection in a negative is a false alarm.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..config import EngineConfig, KwsConfig
from ..decode.endpoint import seconds_to_frames
from ..engine import Recognizer
from ..evaluation.sets import load_entries, read_eval_set
from ..evaluation.wake import detect_frames, score_tracks
from ..events import WakeWord
from ..feed import feed_streams
from ..model.checkpoint import load_checkpoint
from ..model.wake import WakeHead, WakeScorer, load_wake_model, save_wake_model
from ..paths import default_bench_audio, default_model_path, shared_root

__all__ = ["wake_cost", "wake_hey_stream"]

KW = "hey stream"


def _clips(seconds: float) -> list[np.ndarray]:
    from ..audio.pcm import load_audio
    from ..audio.resample import resample
    out = []
    for p in default_bench_audio():
        x, r = load_audio(p)
        out.append((resample(x, r, 16000) if r != 16000 else x).astype(np.float32))
    x = np.concatenate(out)
    n = int(seconds * 16000)
    return [np.roll(x, 7919 * i)[:n] for i in range(64)]


def _round(rec: Recognizer, clips: list[np.ndarray], streams: int) -> tuple[float, float]:
    """Mean wall and CPU seconds of one ``step()`` over a round."""
    ids = [rec.create_stream(method="greedy", partials=True) for _ in range(streams)]
    piece = int(0.32 * 16000)
    n = len(clips[0])
    times, cpu = [], []
    for a in range(0, n, piece):
        for i, sid in enumerate(ids):
            rec.accept_audio(sid, clips[i % len(clips)][a:a + piece])
        t0, c0 = time.perf_counter(), time.process_time()
        rec.step()
        if rec.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    for sid in ids:
        rec.finish(sid)
    rec.drain()
    return float(np.mean(times)), float(np.mean(cpu))


def wake_cost(streams: int = 32, models: int = 10, seconds: float = 8.0, rounds: int = 5,
              device: str = "cpu", members: int = 1, precision: str = "auto") -> None:
    """Rounds alternating between the recognizers without and with ``models`` wake models; a JSON line per
    round, then the medians."""
    loaded = load_checkpoint(str(default_model_path()), "cpu")
    tmp = Path(tempfile.mkdtemp())
    paths = []
    for i in range(models):
        torch.manual_seed(i)
        p = tmp / f"m{i}.wake.pt"
        save_wake_model(p, f"keyword {chr(97 + i)}", 0.99, WakeHead(32, members=members), {})
        paths.append(str(p))
    recs = {name: Recognizer(loaded, EngineConfig(device=device, kws=KwsConfig(wake_models=tuple(wm),
                                                                               embedding_precision=precision)))
            for name, wm in (("base", ()), ("wake", paths))}
    for r in recs.values():
        r.warm_up()
    clips = _clips(seconds)
    rows = []
    for k in range(rounds):
        base, base_cpu = _round(recs["base"], clips, streams)
        wake, wake_cpu = _round(recs["wake"], clips, streams)
        rows.append({"round": k, "base_ms": round(base * 1000, 2), "wake_ms": round(wake * 1000, 2),
                     "ratio": round(wake / base, 3), "base_cpu_ms": round(base_cpu * 1000, 2),
                     "wake_cpu_ms": round(wake_cpu * 1000, 2), "cpu_ratio": round(wake_cpu / base_cpu, 3)})
        print(json.dumps(rows[-1]), flush=True)
    med = {f"median_{k}": statistics.median(r[k] for r in rows)
           for k in ("ratio", "base_ms", "wake_ms", "cpu_ratio", "base_cpu_ms", "wake_cpu_ms")}
    print(json.dumps({"streams": streams, "models": models, "members": members, "device": device, **med,
                      "load_average": [round(v, 2) for v in os.getloadavg()]}))


def wake_hey_stream(wake_model: str, sets: Sequence[str] = (), real_neg: Sequence[str] = (), batch: int = 32
                    ) -> None:
    """Per group of files (each ``sets`` file; the ``real_neg`` negatives together) misses and false alarms of
    the KWS head and the trained model; a line per group, then one JSON object."""
    root = shared_root()
    sets = list(sets) or [str(root / "eval/dev/kws.jsonl")]
    negs = list(real_neg) or [str(root / "real/mycroft/manifest.jsonl"), str(root / "real/speech_commands/dev/manifest.jsonl")]
    groups = {}
    for s in sets:
        groups[f"synthetic: {Path(s).name}"] = read_eval_set(s)[0]
    real = []
    for s in negs:
        real += [e for e in read_eval_set(s)[0] if e.keyword is None]
    groups["real negatives"] = real
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(num_threads=1))
    model = load_wake_model(wake_model)
    scorer = WakeScorer([model])
    ref = seconds_to_frames(rec.config.kws.refractory_s, scorer.frame_shift_s)
    out = {}
    for name, entries in groups.items():
        audio = load_entries(entries, None)
        head = []
        for g in range(0, len(audio), batch):
            _, evs = feed_streams(rec, audio[g:g + batch], 0.1, partials=False)
            head += [[e for e in ev if isinstance(e, WakeWord) and e.keyword == KW] for ev in evs]
        tracks = score_tracks(scorer, audio)
        trained = [detect_frames(t[:, 0], model.threshold, ref) for t in tracks]
        hours = sum(len(x) / r for (x, r), e in zip(audio, entries) if e.keyword is None) / 3600
        row = {"positives": sum(e.keyword == KW for e in entries),
               "negatives": sum(e.keyword is None for e in entries), "negative_hours": round(hours, 3)}
        for sys_name, dets in (("kws_head", head), ("trained", trained)):
            miss = sum(e.keyword == KW and not d for e, d in zip(entries, dets))
            fa = sum(len(d) for e, d in zip(entries, dets) if e.keyword is None)
            row[sys_name] = {"missed": miss, "false_alarms": fa, "fa_per_hour": round(fa / hours, 2) if hours else None}
        out[name] = row
        print(name, json.dumps(row), flush=True)
    print(json.dumps({"wake_model": wake_model, "threshold": model.threshold,
                      "kws_head_threshold": rec.config.kws.threshold, "results": out}))
