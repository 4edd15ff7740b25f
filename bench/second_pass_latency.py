"""Latency of finals with the second pass: push-to-talk utterances on concurrent real-time streams.

``--streams`` clients (default 4) each send one utterance after another, in real time (0.1 s pieces, the
streams' starts staggered), every utterance its own stream that ends with ``eof`` right after the speech
(push-to-talk: the end of the audio is the end of speech).  One engine steps every ready stream in the main
thread as the daemon's engine thread does; the second pass runs in its worker thread
(:class:`streamd.second_pass.worker.SecondPassWorker`) with each stream's events kept in order
(:class:`~streamd.second_pass.worker.FinalGate`), as in ``streamd serve``.

Per utterance that ends in speech (its last Final has words): the time from its last sample (the
``finish``) to its client-visible Final (``final_latency_s``); per Final (also those an endpoint ended
inside an utterance): the time from the engine's Final to the client's (``added_s``: what the second pass
adds); per partial: its lag from the arrival of the audio that completed its chunk.  ``--worker`` runs the
second model in the server's worker thread or in its own process (``engine.second_pass.worker``).  The same utterances run twice in one
process, without and with the second pass, side by side::

    nice -n 5 python3 bench/second_pass_latency.py --set ../shared/real/speechocean762/dev/manifest.jsonl \\
        --second-pass moonshine-base --streams 4 --utterances 15 --max-seconds 10

prints a JSON object: per run the final latency (p50 / p95 / max, seconds), the partial lag (p50 / p95),
the finals' outcomes, and the utterances' durations.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamd.config import EngineConfig, SecondPassConfig  # noqa: E402
from streamd.engine import Recognizer  # noqa: E402
from streamd.evaluation.sets import load_entries, read_eval_set  # noqa: E402
from streamd.events import Done, Final, Partial  # noqa: E402
from streamd.paths import default_model_path  # noqa: E402
from streamd.second_pass.calibration import load_second_pass  # noqa: E402
from streamd.second_pass.process import SecondPassProcess  # noqa: E402
from streamd.second_pass.worker import FinalGate, SecondPassWorker  # noqa: E402

PIECE = 0.1
LOOKAHEAD = 0.015  # the fbank window past a chunk's last frame


def pct(xs, q):
    return float(np.percentile(xs, q)) if xs else None


def run(rec: Recognizer, clips: list[list[np.ndarray]], second, spc: SecondPassConfig) -> dict:
    """Play ``clips[i]`` (16 kHz utterances) on client i in real time; the latencies."""
    results: queue.Queue = queue.Queue()
    worker = gate = None
    if second is not None:
        worker = SecondPassWorker(second, spc.max_queue, spc.max_batch, spc.max_wait_s)
        gate = FinalGate(lambda k, f: worker.submit(k, f, lambda k2, f2, s: results.put((k2, f2))))
    n = len(clips)
    # per client: index of the current utterance, its stream, samples sent, when each piece arrived
    state = [{"u": 0, "sid": None, "pos": 0, "next": 0.37 * i, "arrivals": [], "ended": None} for i in range(n)]
    owner: dict[int, int] = {}
    final_lat, added, lags, outcomes, durations = [], [], [], {}, []
    emitted: dict[tuple[int, int], float] = {}
    t0 = time.perf_counter()
    open_streams = 0

    def deliver(sid: int, ev) -> None:
        nonlocal open_streams
        now = time.perf_counter() - t0
        c = state[owner[sid]]
        if isinstance(ev, Partial):
            need = ev.end + LOOKAHEAD
            arr = [t for t, e in c["arrivals"] if e >= need - 1e-9] if c["sid"] == sid else []
            if arr:
                lags.append(now - arr[0])
        elif isinstance(ev, Final):
            added.append(now - emitted.pop((sid, ev.segment)))
            key = f"{'eos' if ev.reason == 'eos' else 'endpoint'}: {ev.second_pass or 'first pass only'}"
            outcomes[key] = outcomes.get(key, 0) + 1
            if ev.reason == "eos" and (ev.first_pass_text if ev.first_pass_text is not None else ev.text):
                final_lat.append(now - ends[sid])
        elif isinstance(ev, Done):
            open_streams -= 1

    ends: dict[int, float] = {}
    while True:
        now = time.perf_counter() - t0
        busy = False
        for i, c in enumerate(state):
            if c["u"] >= len(clips[i]) or now < c["next"]:
                continue
            x = clips[i][c["u"]]
            if c["sid"] is None:
                c["sid"] = rec.create_stream(sample_rate=16000, second_pass=second is not None)
                owner[c["sid"]] = i
                c["pos"], c["arrivals"] = 0, []
                open_streams += 1
                durations.append(x.size / 16000)
            step = int(PIECE * 16000)
            rec.accept_audio(c["sid"], x[c["pos"]:c["pos"] + step])
            c["pos"] += step
            c["arrivals"].append((now, min(c["pos"], x.size) / 16000))
            c["next"] += PIECE
            if c["pos"] >= x.size:  # end of speech: eof now
                rec.finish(c["sid"])
                ends[c["sid"]] = now
                c["sid"], c["u"] = None, c["u"] + 1
                c["next"] += 0.3  # the next utterance after a short gap
            busy = True
        if rec.pending():
            for ev in rec.step():
                if isinstance(ev, Final):
                    emitted[(ev.stream, ev.segment)] = time.perf_counter() - t0
                for sid, e in (gate.route(ev.stream, ev) if gate is not None else [(ev.stream, ev)]):
                    deliver(sid, e)
            busy = True
        while True:
            try:
                k, f = results.get_nowait()
            except queue.Empty:
                break
            for sid, e in gate.resolved(k, f):
                deliver(sid, e)
        if all(c["u"] >= len(clips[i]) for i, c in enumerate(state)) and open_streams == 0 and not rec.pending():
            break
        if not busy:
            time.sleep(0.002)
    if worker is not None:
        worker.close()
    return {"finals": len(final_lat), "final_latency_s": {"p50": pct(final_lat, 50), "p95": pct(final_lat, 95),
                                                           "max": max(final_lat) if final_lat else None},
            "added_s": {"p50": pct(added, 50), "p95": pct(added, 95), "max": max(added) if added else None},
            "partial_lag_s": {"p50": pct(lags, 50), "p95": pct(lags, 95), "partials": len(lags)},
            "outcomes": outcomes, "utterance_s": {"mean": float(np.mean(durations)), "max": float(max(durations))}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", required=True, help="JSON-lines set whose clips are the utterances")
    ap.add_argument("--second-pass", required=True, help="model name or folder")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--utterances", type=int, default=15, help="per client")
    ap.add_argument("--max-seconds", type=float, default=10.0, help="longest utterance used")
    ap.add_argument("--cpu-threads", type=int, default=1, help="the second model's threads")
    ap.add_argument("--worker", nargs="+", choices=("thread", "process"), default=["thread", "process"],
                    help="where the second model runs (engine.second_pass.worker); several: one run each, side "
                         "by side after the first pass alone")
    args = ap.parse_args()
    entries, _ = read_eval_set(args.set)
    audio = [x for x, _ in load_entries(entries, 16000) if x.size <= args.max_seconds * 16000]
    rng = np.random.default_rng(0)
    pick = rng.choice(len(audio), size=args.streams * args.utterances, replace=False)
    clips = [[audio[j] for j in pick[i::args.streams]] for i in range(args.streams)]
    spc = SecondPassConfig(model=args.second_pass, cpu_threads=args.cpu_threads)
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(device="cpu", second_pass=spc))
    rec.warm_up()
    out = {"streams": args.streams, "utterances": args.streams * args.utterances, "second_pass": args.second_pass,
           "first_pass_only": run(rec, clips, None, spc)}
    for kind in args.worker:
        if kind == "process":
            second = SecondPassProcess(EngineConfig(device="cpu", second_pass=spc), rec.calibration is not None)
        else:
            second = load_second_pass(spc, first_calibrated=rec.calibration is not None)
        second.apply(Final(0, 0, "warm up", start=0.0, end=1.0, second_pass="pending",
                           audio=(np.random.default_rng(0).standard_normal(16000) * 300).astype(np.int16)))
        out[f"second_pass_{kind}"] = run(rec, clips, second, spc)
        if kind == "process":
            second.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
