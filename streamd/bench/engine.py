"""``streamd bench engine``: the Recognizer without sockets (the parser is :mod:`streamd.cli.bench`).

``bench engine`` answers: how many live streams does one machine hold in
real time, and how long does a chunk wait for its result?

For each stream count N:

1. **Real-time run.** N streams replay real audio files at real-time pace:
   every stream delivers a 100 ms packet every 100 ms of wall time (phases
   spread at random, as independent clients would), and the loop calls
   ``Recognizer.step()`` whenever a stream has a full chunk, batching
   whatever is ready.  A chunk's latency is the time from the arrival of its
   last sample to the end of the step that decoded it.  ``realtime`` means
   p95 latency below the chunk duration (the engine keeps up).  ``rtf`` is
   step wall time / audio seconds decoded.
2. **Throughput, batched vs per stream.** The same audio, fed as fast as
   possible, once through the batched engine and once with ``max_batch=1``
   (one stream and its hypotheses per step: the per-stream loop of
   icefall's decode scripts), both timed; ``batched_speedup`` is the ratio
   of audio seconds decoded per wall second.

Prints a table, or with ``--json`` one JSON object per N and a summary
object (``max_realtime_streams``).

``bench engine --host-overhead`` answers a different question: how much
host (Python) time the engine spends per stream per step when the model's
arithmetic costs next to nothing.  It runs the Recognizer on a tiny random
model with the shipped model's token table and front end (:func:`tiny_model`:
one 8-wide encoder layer and joiner), N streams fed up front with noise, and times every
``step()`` until no stream has a whole chunk left.  A row reports
``us_per_stream_step`` (step wall time / streams decoded over all steps) for
one method, N and partials on / off, and the tokens the tiny model emitted per
frame (so rows of different runs compare).  On a GPU host this is the figure
that bounds how many streams one process serves.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..options import default_beam

__all__ = ["bench_engine", "bench_host_overhead", "tiny_model", "HostOverheadResult"]

PACKET_S = 0.1


@dataclass
class EngineResult:
    streams: int
    method: str
    device: str
    rtf: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    realtime: bool
    chunk_ms: float
    mean_batch: float
    throughput_batched: float  # audio seconds per wall second
    throughput_single: float
    batched_speedup: float

    def to_json(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _load_audio(paths: Sequence[str], seconds: float) -> list[np.ndarray]:
    """16 kHz clips of ``seconds`` each, cut from the files (looped if short)."""
    from ..audio.resample import load_audio_at

    clips = [load_audio_at(p, 16000) for p in paths]
    whole = np.concatenate(clips)
    n = int(seconds * 16000)
    out = []
    rnd = random.Random(0)
    for i in range(len(paths)):
        start = rnd.randrange(0, max(1, whole.size))
        idx = (start + np.arange(n)) % whole.size
        out.append(whole[idx])
    return out


def _make_rec(model_path: str, device: str, max_batch: int, wake_words: Sequence[str] = (), trace: bool = True):
    from ..config import EndpointConfig, EngineConfig, KwsConfig
    from ..engine import Recognizer

    rec = Recognizer.from_checkpoint(model_path, EngineConfig(device=device, max_batch=max_batch,
                                                              trace_encoder=trace,
                                                              endpoint=EndpointConfig(enabled=True),
                                                              kws=KwsConfig(wake_words=tuple(wake_words))))
    rec.warm_up()  # as the daemon does before "ready": one-off costs (the encoder's trace) are not timed
    return rec


def _sync(rec) -> None:
    if rec.device.type == "cuda":
        import torch

        torch.cuda.synchronize(rec.device)


def _realtime_run(rec, clips: list[np.ndarray], n: int, method: str, beam: int, seed: int):
    """Replay n streams at real-time pace; returns (latencies_s, step_time_s, audio_s, mean_batch)."""
    rnd = random.Random(seed)
    sids = [rec.create_stream(method=method, beam=beam, partials=True) for _ in range(n)]
    audio = [clips[i % len(clips)] for i in range(n)]
    pkt = int(PACKET_S * 16000)
    phase = [rnd.uniform(0, PACKET_S) for _ in range(n)]
    pos = [0] * n
    chunk_samples = rec.chunk_fbank * 160
    # packet k of stream i (samples [k*pkt, (k+1)*pkt)) arrives at phase[i] + (k+1) * PACKET_S;
    # pending[i] holds the arrival times of its complete chunks not yet decoded, oldest first
    pending: list[list[float]] = [[] for _ in range(n)]
    latencies: list[float] = []
    step_time = 0.0
    batches: list[int] = []
    t0 = time.perf_counter()
    total = audio[0].size
    decoded_chunks = [0] * n
    sid_index = {sid: i for i, sid in enumerate(sids)}
    while True:
        now = time.perf_counter() - t0
        for i in range(n):
            while pos[i] < total and phase[i] + (pos[i] // pkt + 1) * PACKET_S <= now:
                arrival = phase[i] + (pos[i] // pkt + 1) * PACKET_S
                rec.accept_audio(sids[i], audio[i][pos[i]:pos[i] + pkt])
                pos[i] += pkt
                # chunk c (0-based) is complete once the last sample of its last fbank window arrived
                while (decoded_chunks[i] + len(pending[i]) + 1) * chunk_samples + 240 <= pos[i]:
                    pending[i].append(arrival)
                if pos[i] >= total:
                    rec.finish(sids[i])
        ready = rec.ready_streams()
        if ready:
            batches.append(min(len(ready), rec.config.max_batch))
            s = time.perf_counter()
            events = rec.step()
            _sync(rec)
            e = time.perf_counter()
            step_time += e - s
            done_now = e - t0
            stepped = {ev.stream for ev in events if type(ev).__name__ in ("Partial", "Final", "Done")}
            for sid in stepped:
                i = sid_index[sid]
                if pending[i]:
                    latencies.append(done_now - pending[i].pop(0))
                decoded_chunks[i] += 1
            continue
        if all(p >= total for p in pos) and not rec.pending():
            break
        nxt = min((phase[i] + (pos[i] // pkt + 1) * PACKET_S for i in range(n) if pos[i] < total), default=None)
        if nxt is not None:
            time.sleep(max(0.0, nxt - (time.perf_counter() - t0)))
    return latencies, step_time, n * total / 16000, (float(np.mean(batches)) if batches else 0.0)


def _throughput(rec, clips: list[np.ndarray], n: int, method: str, beam: int) -> float:
    """Audio seconds decoded per wall second, everything fed up front."""
    sids = [rec.create_stream(method=method, beam=beam, partials=True) for _ in range(n)]
    audio = [clips[i % len(clips)] for i in range(n)]
    for sid, x in zip(sids, audio):
        rec.accept_audio(sid, x)
        rec.finish(sid)
    s = time.perf_counter()
    rec.drain()
    _sync(rec)
    return sum(x.size for x in audio) / 16000 / (time.perf_counter() - s)


def bench_engine(model: str, streams: Sequence[int], method: str, device: str, seconds: float,
                 audio_files: Sequence[str], beam: int | None = None, single_seconds: float | None = None,
                 seed: int = 0, wake_words: Sequence[str] = (), trace_encoder: bool = True,
                 on_result: Callable[[EngineResult], None] | None = None) -> tuple[list[EngineResult], dict]:
    """Run the engine benchmark; returns per-N results and a summary dict.

    beam: the beam searches' beam (None: the method's default, :func:`streamd.options.default_beam`).
    wake_words: runtime wake words of every stream (the keyword search runs beside recognition).
    trace_encoder: the engine's ``trace_encoder`` (false: the eager encoder, for side-by-side runs).
    single_seconds: audio seconds per stream of the two throughput runs (default ``seconds``): the unbatched
    one decodes the N streams one after another, which at thousands of streams needs shorter clips.
    on_result: called with each N's result as soon as it is measured (a long run's rows are not lost to a
    timeout)."""
    import torch

    beam = default_beam(method, beam)
    clips = _load_audio(audio_files, seconds)
    results = []  # every Recognizer is warmed up before it is timed (_make_rec)
    for n in streams:
        rec = _make_rec(model, device, max(1, n), wake_words, trace_encoder)
        lat, step_time, audio_s, mean_batch = _realtime_run(rec, clips, n, method, beam, seed)
        lat_ms = np.array(lat) * 1000 if lat else np.array([np.nan])
        chunk_ms = rec.chunk_frames * rec.frame_shift_s * 1000
        p50, p95, p99 = (float(np.percentile(lat_ms, q)) for q in (50, 95, 99))
        single_clips = [c[: int((single_seconds or seconds) * 16000)] for c in clips]
        tb = _throughput(_make_rec(model, device, max(1, n), wake_words, trace_encoder), single_clips, n, method, beam)
        ts = _throughput(_make_rec(model, device, 1, wake_words, trace_encoder), single_clips, n, method, beam)
        results.append(EngineResult(n, method, str(rec.device), step_time / audio_s, p50, p95, p99,
                                    bool(p95 < chunk_ms), chunk_ms, mean_batch, tb, ts, tb / ts))
        if on_result is not None:
            on_result(results[-1])
    rt = [r.streams for r in results if r.realtime]
    summary = {"summary": True, "method": method, "beam": beam, "device": results[0].device if results else device,
               "max_realtime_streams": max(rt) if rt else 0, "threads": torch.get_num_threads(),
               "model": model, "seconds": seconds, "single_seconds": single_seconds or seconds,
               "wake_words": len(wake_words), "encoder": "traced" if trace_encoder else "eager"}
    return results, summary


# --------------------------------------------------------------------------- host overhead


TINY_BLANK_BIAS = 0.3
"""Logit bias of blank in :func:`tiny_model`'s joiner (the rate of tokens per frame it gives is measured in
every result row)."""


TINY_FBANK = {"num_mel_bins": 8, "frame_length_ms": 10.0}
""":func:`tiny_model`'s front end (FbankConfig fields; the hop stays the shipped 10 ms)."""


def tiny_model(seed: int = 0, tokens=None):
    """A random model with the shipped model's interfaces and negligible arithmetic (a LoadedModel).

    tokens: a :class:`~streamd.tokens.TokenTable` (default: the shipped model's).  The front end has the shipped
    model's frame rate (10 ms hop, so the same samples, frames and chunks per step) with 10 ms windows and 8 mel
    bins (its FFT is a quarter of the shipped 512 points, :data:`TINY_FBANK`); the encoder is one layer of width 8,
    the decoder and joiner width 8; every search, confidence measure and word builder runs on it as on a trained
    model, so the step time is nearly all host overhead."""
    import torch

    from ..config import DecoderConfig, EncoderConfig, FbankConfig, ModelConfig
    from ..model.checkpoint import LoadedModel, load_checkpoint
    from ..model.transducer import Transducer
    from ..paths import default_model_path

    if tokens is None:
        tokens = load_checkpoint(default_model_path()).tokens
    cfg = ModelConfig(vocab_size=len(tokens), blank_id=tokens.blank_id, joiner_dim=8, ctc_head=True,
                      fbank=FbankConfig(**TINY_FBANK),
                      encoder=EncoderConfig(num_features=TINY_FBANK["num_mel_bins"], d_model=8, num_layers=1,
                                            num_heads=2, ff_dim=8, conv_kernel=3, subsampling_channels=4,
                                            dropout=0.0),
                      decoder=DecoderConfig(dim=8))
    torch.manual_seed(seed)
    model = Transducer(cfg)
    with torch.no_grad():  # blank's logit follows one joiner unit: frames and contexts emit or not, as speech does
        j = model.joiner
        for lin in (j.enc_proj, j.dec_proj, j.out):
            lin.weight.normal_(0.0, 1.0)
            lin.bias.zero_()
        j.out.weight[cfg.blank_id].zero_()
        j.out.weight[cfg.blank_id, 0] = 4.0
        j.out.bias[cfg.blank_id] = TINY_BLANK_BIAS
    return LoadedModel(model=model.eval(), tokens=tokens, meta={"tiny": True}, path="<tiny random model>")


@dataclass
class HostOverheadResult:
    """One row of ``bench engine --host-overhead``: times in us per stream-step.

    ``cpu_us_per_stream_step`` splits into ``front_end_us`` (the tiny model's fbank), ``model_us`` (encoder and
    heads), ``search_us`` (the search's step: its tensor work and its per-step, not per-stream, label loop) and
    ``host_us``, the rest: sample windows, batching, partials, words, endpoints; the per-stream Python that a GPU
    does not take off the host.  ``shipped_front_end_us``: the shipped model's front end (80 mel bins, 25 ms
    windows) on the same batches, timed beside the run (on a GPU host it runs on the device)."""

    method: str
    streams: int
    partials: bool
    us_per_stream_step: float
    steps: int
    stream_steps: int
    tokens_per_frame: float
    cpu_us_per_stream_step: float = 0.0  # the same in CPU time of this process (robust on a shared machine)
    front_end_us: float = 0.0
    model_us: float = 0.0
    search_us: float = 0.0
    host_us: float = 0.0
    shipped_front_end_us: float = 0.0
    phases: int = 1

    def to_json(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


class _CpuTimed:
    """A callable that adds the CPU time of every call of ``fn`` to ``spent[key]``."""

    def __init__(self, fn: Callable, spent: dict, key: str) -> None:
        self.fn, self.spent, self.key = fn, spent, key

    def __call__(self, *args, **kwargs):
        c = time.process_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.spent[self.key] += time.process_time() - c


def _time_stages(rec) -> dict:
    """Wrap the Recognizer's front end, model and searches (this instance only) with CPU timers."""
    spent = {"front_end": 0.0, "model": 0.0, "search": 0.0}
    rec.fbank = _CpuTimed(rec.fbank, spent, "front_end")
    rec.encoder.forward_chunk = _CpuTimed(rec.encoder.forward_chunk, spent, "model")
    rec.model.heads = _CpuTimed(rec.model.heads, spent, "model")
    for search in rec.searches.values():
        search.step = _CpuTimed(search.step, spent, "search")
    return spent


def _shipped_front_end_cpu(rows: int, frames: int, steps: int, rng: np.random.Generator) -> float:
    """CPU seconds of ``steps`` calls of the shipped front end on ``rows`` windows of ``frames`` frames."""
    import torch

    from ..audio.fbank import Fbank
    from ..config import FbankConfig

    cfg = FbankConfig()
    fbank = Fbank(cfg)
    x = torch.from_numpy((rng.standard_normal((rows, cfg.frame_length + (frames - 1) * cfg.frame_shift))
                          * 0.05).astype(np.float32))
    with torch.inference_mode():
        fbank(x[:1])
        c = time.process_time()
        for _ in range(steps):
            fbank(x)
        return time.process_time() - c


def bench_host_overhead(streams: Sequence[int], methods: Sequence[str] = ("greedy", "modified_beam"),
                        seconds: float = 2.0, beam: int | None = None, partials: Sequence[bool] = (True, False),
                        seed: int = 0, phases: int = 1, on_result: Callable[[HostOverheadResult], None] | None = None
                        ) -> list[HostOverheadResult]:
    """Time ``Recognizer.step()`` on :func:`tiny_model` (CPU, one thread); one result per method, N, partials.

    Every stream gets ``seconds`` of low-level noise (different per stream).  ``phases`` 1: all of it up front,
    the steps run until no stream has a whole chunk left.  ``phases`` G > 1: stream i starts ``i % G`` G-ths of a
    chunk ahead, then every round gives each stream 1/G chunk of audio and runs one step, so each step takes
    about N / G streams and another set than the last (a real-time server's pattern).  No finish: finals and
    their words are not part of the figure."""
    from ..config import EndpointConfig, EngineConfig
    from ..engine import Recognizer

    if phases < 1:
        raise ValueError(f"phases must be >= 1, got {phases}")
    loaded = tiny_model(seed)
    rng = np.random.default_rng(seed)
    results = []
    for method in methods:
        b = default_beam(method, beam)
        for n in streams:
            audio = (rng.standard_normal((n, int(seconds * 16000))) * 0.05).astype(np.float32)
            for part in partials:
                rec = Recognizer(loaded, EngineConfig(device="cpu", max_batch=max(1, n), trace_encoder=False,
                                                      endpoint=EndpointConfig(enabled=False)))
                rec.warm_up()
                stages = _time_stages(rec)
                sids = [rec.create_stream(method=method, beam=b, partials=part) for _ in range(n)]
                packet = rec.chunk_fbank * rec.model.cfg.fbank.frame_shift // phases
                fed = [0 if phases == 1 else (i % phases) * packet for i in range(n)]
                for sid, x, k in zip(sids, audio, fed):
                    rec.accept_audio(sid, x if phases == 1 else x[:k])
                steps = stream_steps = 0
                spent = cpu = 0.0
                while True:
                    if phases > 1:  # one round of packets
                        for i, (sid, x) in enumerate(zip(sids, audio)):
                            rec.accept_audio(sid, x[fed[i]:fed[i] + packet])
                            fed[i] += packet
                    ready = len(rec.ready_streams())
                    if not ready:
                        if phases == 1 or min(fed) >= audio.shape[1]:
                            break
                        continue
                    t, c = time.perf_counter(), time.process_time()
                    rec.step()
                    spent += time.perf_counter() - t
                    cpu += time.process_time() - c
                    steps += 1
                    stream_steps += min(ready, rec.config.max_batch)
                frames = sum(rec._get(sid).frames_done for sid in sids)  # noqa: SLF001 - bench reads the count
                stages = dict(stages)  # the timed steps' share (the drain below is not timed)
                for sid in sids:
                    rec.finish(sid)
                emitted = sum(len(ev.text.replace(" ", "")) for ev in rec.drain() if type(ev).__name__ == "Final")
                per = 1e6 / max(1, stream_steps)
                shipped = _shipped_front_end_cpu(max(1, round(stream_steps / max(1, steps))), rec.chunk_fbank,
                                                 steps, rng)  # batches of the run's mean size
                results.append(HostOverheadResult(
                    method, n, part, spent * per, steps, stream_steps, emitted / max(1, frames), cpu * per,
                    stages["front_end"] * per, stages["model"] * per, stages["search"] * per,
                    (cpu - sum(stages.values())) * per, shipped * per, phases))
                if on_result is not None:
                    on_result(results[-1])
    return results
