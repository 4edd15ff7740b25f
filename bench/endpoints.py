#!/usr/bin/env python3
"""Endpoints at real pauses: real prompts joined with silent gaps into one stream; finals, splits, merges.

    python3 bench/endpoints.py ../shared/real/speechocean762/train/manifest.jsonl --count 64 --gap 1.0 \\
        --rule2 0.5,0.6,0.8,1.2 [--rule1 2.4] [--model PATH] [--rate 16000] [--json]

Prompts: every k-th line of the manifest (sorted by audio path) whose text has at least ``--min-words`` words,
``--count`` of them, each cut to its speech (:func:`streamd.audio.trim.speech_span`, 20 ms margins) so
that the pause between two prompts is the gap (digital silence, ``--gap`` seconds) plus 40 ms; the pauses
inside a prompt are the reader's own. The joined recording is decoded as one stream (greedy, endpointing on,
0.1 s pieces) once per rule2 value; per value:

* finals: Finals with text (the one at the end of the stream included); each word belongs to the prompt
  nearest to its middle;
* merges: prompt boundaries inside one Final (a pause that got no Final);
* splits: a prompt whose words run from one Final into the next (a Final inside a sentence), with the
  silence between the two Finals' words; ``splits_at_short_pauses``: those where it is under ``--long-pause``
  (0.8 s: the reader's own pauses of 0.8 s or more inside a sentence should get a Final too);
* which rule closed each Final (``endpoint:rule1|2|3``, ``eos``).

Train splits only: the endpoint defaults are chosen on these figures, never on a dev set.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.config import EndpointConfig, EngineConfig
from streamd.engine import Recognizer
from streamd.audio.trim import speech_span
from streamd.events import Final
from streamd.paths import default_model_path


def joined_prompts(manifest: Path, count: int, min_words: int, gap: float, rate: int
                   ) -> tuple[np.ndarray, list[tuple[float, float]], list[str]]:
    """(audio (N,) at ``rate``, [(start, end) seconds of each prompt's speech], texts)."""
    lines = [json.loads(l) for l in manifest.read_text(encoding="utf-8").splitlines() if l.strip()]
    lines = sorted((d for d in lines if len(d["text"].split()) >= min_words), key=lambda d: d["audio"])
    step = max(1, len(lines) // count)
    picked = lines[::step][:count]
    pieces, spans, texts, t = [], [], [], 0.0
    silence = np.zeros(round(gap * rate), np.float32)
    for d in picked:
        x, r = load_audio(str(manifest.parent / d["audio"]))
        if r != rate:
            x = resample(x, r, rate)
        s, e = speech_span(x, rate)
        cut = x[s:e].astype(np.float32)
        spans.append((t + 0.02, t + cut.size / rate - 0.02))
        pieces += [cut, silence]
        texts.append(d["text"])
        t += (cut.size + silence.size) / rate
    return np.concatenate(pieces[:-1]), spans, texts


def measure(rec: Recognizer, x: np.ndarray, rate: int, spans: list[tuple[float, float]],
            long_pause: float = 0.8) -> dict:
    sid = rec.create_stream(sample_rate=rate, method="greedy", partials=False)
    events = []
    piece = rate // 10
    for i in range(0, x.size, piece):
        rec.accept_audio(sid, x[i:i + piece])
        events += rec.step()
    rec.finish(sid)
    events += rec.drain()
    finals = [e for e in events if isinstance(e, Final) and e.text]
    mids = np.array([(s + e) / 2 for s, e in spans])
    # each Final's words, by the prompt nearest to each word's middle
    owners = [[int(np.argmin(np.abs(mids - (w.start + w.end) / 2))) for w in f.words] for f in finals]
    owners = [o for o in owners if o]
    merges = sum(max(o) - min(o) for o in owners)  # prompt boundaries inside one Final
    worded = [f for f in finals if f.words]
    # a prompt ends in one Final and goes on in the next: the silence between their words (40 ms resolution)
    gaps = [b.words[0].start - a.words[-1].end for a, b, oa, ob in zip(worded, worded[1:], owners, owners[1:])
            if oa[-1] == ob[0]]
    return {"finals": len(finals), "merges": merges, "splits": len(gaps),
            "splits_at_short_pauses": sum(1 for g in gaps if g < long_pause),
            "split_pauses_s": [round(g, 2) for g in gaps],
            "rules": dict(Counter(f.reason for f in finals)),
            "longest_final_s": round(max((f.end - f.start for f in finals), default=0.0), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--min-words", type=int, default=3)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds of digital silence between prompts")
    ap.add_argument("--rule1", type=float, default=2.4)
    ap.add_argument("--rule2", default="1.2", help="comma-separated rule2_trailing_silence values")
    ap.add_argument("--long-pause", type=float, default=0.8, help="a pause that should end a segment (0.8 s)")
    ap.add_argument("--rate", type=int, default=16000, help="stream sample rate (8000: telephone band)")
    ap.add_argument("--model", default=str(default_model_path()))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    x, spans, texts = joined_prompts(Path(a.manifest), a.count, a.min_words, a.gap, a.rate)
    head = {"manifest": a.manifest, "prompts": len(texts), "audio_s": round(x.size / a.rate, 1), "gap_s": a.gap,
            "rate": a.rate}
    if not a.json:
        print(" ".join(f"{k}={v}" for k, v in head.items()))
    rows = []
    for r2 in (float(v) for v in a.rule2.split(",")):
        cfg = EngineConfig(device="cpu", endpoint=EndpointConfig(rule1_trailing_silence=max(a.rule1, r2),
                                                                 rule2_trailing_silence=r2))
        row = {"rule1": max(a.rule1, r2), "rule2": r2, **measure(Recognizer.from_checkpoint(a.model, cfg), x,
                                                                  a.rate, spans, a.long_pause)}
        rows.append(row)
        if not a.json:
            print(json.dumps(row), flush=True)
    if a.json:
        print(json.dumps({**head, "rows": rows}))


if __name__ == "__main__":
    main()
