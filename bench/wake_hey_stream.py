#!/usr/bin/env python3
""""hey stream": the model's KWS head against a trained wake model, on the same files.

    OMP_NUM_THREADS=1 python bench/wake_hey_stream.py --wake-model streamd/assets/hey_stream.wake.pt
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

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamd.config import EngineConfig  # noqa: E402
from streamd.decode.endpoint import seconds_to_frames  # noqa: E402
from streamd.engine import Recognizer  # noqa: E402
from streamd.evaluation.sets import load_entries, read_eval_set  # noqa: E402
from streamd.evaluation.wake import detect_frames, score_tracks  # noqa: E402
from streamd.events import WakeWord  # noqa: E402
from streamd.feed import feed_streams  # noqa: E402
from streamd.model.wake import WakeScorer, load_wake_model  # noqa: E402
from streamd.paths import default_model_path  # noqa: E402

KW = "hey stream"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wake-model", required=True)
    ap.add_argument("--set", action="append", default=None)
    ap.add_argument("--real-neg", action="append", default=None)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    root = Path(__file__).resolve().parents[2] / "shared"
    sets = a.set or [str(root / "eval/dev/kws.jsonl")]
    negs = a.real_neg or [str(root / "real/mycroft/manifest.jsonl"), str(root / "real/speech_commands/dev/manifest.jsonl")]
    groups = {}
    for s in sets:
        groups[f"synthetic: {Path(s).name}"] = read_eval_set(s)[0]
    real = []
    for s in negs:
        real += [e for e in read_eval_set(s)[0] if e.keyword is None]
    groups["real negatives"] = real
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(num_threads=1))
    model = load_wake_model(a.wake_model)
    scorer = WakeScorer([model])
    ref = seconds_to_frames(rec.config.kws.refractory_s, scorer.frame_shift_s)
    out = {}
    for name, entries in groups.items():
        audio = load_entries(entries, None)
        head = []
        for g in range(0, len(audio), a.batch):
            _, evs = feed_streams(rec, audio[g:g + a.batch], 0.1, partials=False)
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
    print(json.dumps({"wake_model": a.wake_model, "threshold": model.threshold,
                      "kws_head_threshold": rec.config.kws.threshold, "results": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
