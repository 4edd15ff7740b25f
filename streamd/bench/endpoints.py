"""``streamd bench endpoints``: endpoints at real pauses: real prompts joined with silent gaps into one stream;
finals, splits, merges.

    streamd bench endpoints ../shared/real/speechocean762/train/manifest.jsonl --count 64 --gap 1.0 \\
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

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from ..audio.pcm import load_audio
from ..audio.resample import resample
from ..config import EndpointConfig, EngineConfig
from ..engine import Recognizer
from ..audio.trim import speech_span
from ..events import Final

__all__ = ["joined_prompts", "measure", "bench_endpoints"]


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


def bench_endpoints(manifest: str, model: str, rule2: Sequence[float], count: int = 64, min_words: int = 3,
                    gap: float = 1.0, rule1: float = 2.4, long_pause: float = 0.8, rate: int = 16000,
                    as_json: bool = False) -> None:
    """Decode the joined prompts once per ``rule2`` value; print a row each (``as_json``: one object)."""
    x, spans, texts = joined_prompts(Path(manifest), count, min_words, gap, rate)
    head = {"manifest": manifest, "prompts": len(texts), "audio_s": round(x.size / rate, 1), "gap_s": gap,
            "rate": rate}
    if not as_json:
        print(" ".join(f"{k}={v}" for k, v in head.items()))
    rows = []
    for r2 in rule2:
        cfg = EngineConfig(device="cpu", endpoint=EndpointConfig(rule1_trailing_silence=max(rule1, r2),
                                                                 rule2_trailing_silence=r2))
        row = {"rule1": max(rule1, r2), "rule2": r2, **measure(Recognizer.from_checkpoint(model, cfg), x,
                                                                rate, spans, long_pause)}
        rows.append(row)
        if not as_json:
            print(json.dumps(row), flush=True)
    if as_json:
        print(json.dumps({**head, "rows": rows}))
