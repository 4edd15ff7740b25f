"""``streamd bench second-pass-latency``: latency of finals with the second pass: push-to-talk utterances on
concurrent real-time streams.

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

    nice -n 5 streamd bench second-pass-latency --set ../shared/real/speechocean762/dev/manifest.jsonl \\
        --second-pass moonshine-base --streams 4 --utterances 15 --max-seconds 10

prints a JSON object: per run the final latency (p50 / p95 / max, seconds), the partial lag (p50 / p95),
the finals' outcomes, and the utterances' durations.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import time
from typing import Any, Sequence

import numpy as np

from ..config import EngineConfig, SecondPassConfig
from ..engine import Recognizer
from ..evaluation.sets import load_entries, read_eval_set
from ..events import Done, Final, Partial
from ..paths import default_model_path
from ..second_pass.calibration import load_second_pass
from ..second_pass.process import SecondPassProcess
from ..second_pass.worker import FinalGate, SecondPassWorker

__all__ = ["run", "second_pass_latency"]

PIECE = 0.1
LOOKAHEAD = 0.015  # the fbank window past a chunk's last frame


def pct(xs, q):
    return float(np.percentile(xs, q)) if xs else None


class _Playback:
    """The clients' utterances played in real time against one engine, and what each client saw."""

    def __init__(self, rec: Recognizer, clips: list[list[np.ndarray]], second: Any):
        self.rec, self.clips, self.second = rec, clips, second
        # per client: index of the current utterance, its stream, samples sent, when each piece arrived
        self.state = [{"u": 0, "sid": None, "pos": 0, "next": 0.37 * i, "arrivals": [], "ended": None}
                      for i in range(len(clips))]
        self.owner: dict[int, int] = {}
        self.final_lat: list[float] = []
        self.added: list[float] = []
        self.lags: list[float] = []
        self.outcomes: dict[str, int] = {}
        self.durations: list[float] = []
        self.emitted: dict[tuple[int, int], float] = {}
        self.ends: dict[int, float] = {}
        self.open_streams = 0
        self.t0 = time.perf_counter()

    def deliver(self, sid: int, ev: Any) -> None:
        """One event as its client sees it: a partial's lag, a final's latency and outcome, a done."""
        now = time.perf_counter() - self.t0
        c = self.state[self.owner[sid]]
        if isinstance(ev, Partial):
            need = ev.end + LOOKAHEAD
            arr = [t for t, e in c["arrivals"] if e >= need - 1e-9] if c["sid"] == sid else []
            if arr:
                self.lags.append(now - arr[0])
        elif isinstance(ev, Final):
            self.added.append(now - self.emitted.pop((sid, ev.segment)))
            key = f"{'eos' if ev.reason == 'eos' else 'endpoint'}: {ev.second_pass or 'first pass only'}"
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
            if ev.reason == "eos" and (ev.first_pass_text if ev.first_pass_text is not None else ev.text):
                self.final_lat.append(now - self.ends[sid])
        elif isinstance(ev, Done):
            self.open_streams -= 1

    def send_due(self) -> bool:
        """Every client whose next piece is due sends it (opening or ending its utterance's stream)."""
        now = time.perf_counter() - self.t0
        busy = False
        for i, c in enumerate(self.state):
            if c["u"] >= len(self.clips[i]) or now < c["next"]:
                continue
            x = self.clips[i][c["u"]]
            if c["sid"] is None:
                c["sid"] = self.rec.create_stream(sample_rate=16000, second_pass=self.second is not None)
                self.owner[c["sid"]] = i
                c["pos"], c["arrivals"] = 0, []
                self.open_streams += 1
                self.durations.append(x.size / 16000)
            step = int(PIECE * 16000)
            self.rec.accept_audio(c["sid"], x[c["pos"]:c["pos"] + step])
            c["pos"] += step
            c["arrivals"].append((now, min(c["pos"], x.size) / 16000))
            c["next"] += PIECE
            if c["pos"] >= x.size:  # end of speech: eof now
                self.rec.finish(c["sid"])
                self.ends[c["sid"]] = now
                c["sid"], c["u"] = None, c["u"] + 1
                c["next"] += 0.3  # the next utterance after a short gap
            busy = True
        return busy

    def finished(self) -> bool:
        return (all(c["u"] >= len(self.clips[i]) for i, c in enumerate(self.state)) and self.open_streams == 0
                and not self.rec.pending())

    def report(self) -> dict:
        fl, ad, lags = self.final_lat, self.added, self.lags
        return {"finals": len(fl), "final_latency_s": {"p50": pct(fl, 50), "p95": pct(fl, 95),
                                                       "max": max(fl) if fl else None},
                "added_s": {"p50": pct(ad, 50), "p95": pct(ad, 95), "max": max(ad) if ad else None},
                "partial_lag_s": {"p50": pct(lags, 50), "p95": pct(lags, 95), "partials": len(lags)},
                "outcomes": self.outcomes,
                "utterance_s": {"mean": float(np.mean(self.durations)), "max": float(max(self.durations))}}


def run(rec: Recognizer, clips: list[list[np.ndarray]], second, spc: SecondPassConfig) -> dict:
    """Play ``clips[i]`` (16 kHz utterances) on client i in real time; the latencies."""
    results: queue.Queue = queue.Queue()
    worker = gate = None
    if second is not None:
        worker = SecondPassWorker(second, spc.max_queue, spc.max_batch, spc.max_wait_s)
        gate = FinalGate(lambda k, f: worker.submit(k, f, lambda k2, f2, s: results.put((k2, f2))))
    play = _Playback(rec, clips, second)
    while True:
        busy = play.send_due()
        if rec.pending():
            for ev in rec.step():
                if isinstance(ev, Final):
                    play.emitted[(ev.stream, ev.segment)] = time.perf_counter() - play.t0
                for sid, e in (gate.route(ev.stream, ev) if gate is not None else [(ev.stream, ev)]):
                    play.deliver(sid, e)
            busy = True
        while True:
            try:
                k, f = results.get_nowait()
            except queue.Empty:
                break
            for sid, e in gate.resolved(k, f):
                play.deliver(sid, e)
        if play.finished():
            break
        if not busy:
            time.sleep(0.002)
    if worker is not None:
        worker.close()
    return play.report()


def second_pass_latency(set_path: str, second_pass: str, streams: int = 4, utterances: int = 15,
                        max_seconds: float = 10.0, cpu_threads: int = 1,
                        workers: Sequence[str] = ("thread", "process"), int8: bool | None = None,
                        max_batches: Sequence[int] | None = None) -> dict:
    """The same utterances without the second pass, then with it in each of ``workers``: the JSON object.
    ``int8``: ``engine.second_pass.int8`` (None: its default); ``max_batches``: one run per
    ``engine.second_pass.max_batch`` (keys ``second_pass_<worker>_batch<n>``, ``..._2`` for a repeated one;
    None: its default, keys ``second_pass_<worker>``); each run its own model (process)."""
    entries, _ = read_eval_set(set_path)
    audio = [x for x, _ in load_entries(entries, 16000) if x.size <= max_seconds * 16000]
    rng = np.random.default_rng(0)
    pick = rng.choice(len(audio), size=streams * utterances, replace=False)
    clips = [[audio[j] for j in pick[i::streams]] for i in range(streams)]
    spc = SecondPassConfig(model=second_pass, cpu_threads=cpu_threads)
    if int8 is not None:
        spc = dataclasses.replace(spc, int8=int8)
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(device="cpu", second_pass=spc))
    rec.warm_up()
    out = {"streams": streams, "utterances": streams * utterances, "second_pass": second_pass, "int8": spc.int8,
           "first_pass_only": run(rec, clips, None, spc)}
    runs: collections.Counter[str] = collections.Counter()
    for kind in workers:
        for n in max_batches or (None,):  # a model per run: closing a run's worker stops its process
            if kind == "process":
                second = SecondPassProcess(EngineConfig(device="cpu", second_pass=spc), rec.calibration is not None)
            else:
                second = load_second_pass(spc, first_calibrated=rec.calibration is not None)
            second.apply(Final(0, 0, "warm up", start=0.0, end=1.0, second_pass="pending",
                               audio=(np.random.default_rng(0).standard_normal(16000) * 300).astype(np.int16)))
            key = f"second_pass_{kind}" if n is None else f"second_pass_{kind}_batch{n}"
            runs[key] += 1
            key += f"_{runs[key]}" if runs[key] > 1 else ""  # a repeated run
            out[key] = run(rec, clips, second, spc if n is None else dataclasses.replace(spc, max_batch=n))
            if kind == "process":
                second.close()
    return out
