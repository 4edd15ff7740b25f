"""``streamd bench engine``: the parser (the work is :mod:`streamd.bench.engine`)."""

from __future__ import annotations

import argparse
import json
import sys

from ...options import SEARCH_METHODS

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("engine", help="Recognizer throughput and chunk latency at N real-time streams")
    e.add_argument("--model", help="checkpoint (default: the shipped model)")
    e.add_argument("--streams", default=None,
                   help="comma-separated stream counts (default 1,8,32,128; with --host-overhead 256,1024,4096)")
    e.add_argument("--method", default=None, choices=SEARCH_METHODS,
                   help="search (default greedy; with --host-overhead greedy and modified_beam)")
    e.add_argument("--beam", type=int, help="beam of the beam searches (default: the method's own, as the engine's)")
    e.add_argument("--device", default="cpu")
    e.add_argument("--seconds", type=float, default=10.0, help="audio seconds per stream")
    e.add_argument("--single-seconds", type=float, default=None,
                   help="audio seconds per stream of the throughput runs (default --seconds; the unbatched run "
                        "decodes the streams one after another)")
    e.add_argument("--audio", nargs="*", help="WAV files to replay (default: the package's six sample recordings; "
                                              "docs/benchmarks.md names the files its figures replayed)")
    e.add_argument("--wake-words", metavar="LIST", default="",
                   help="comma-separated runtime wake words of every stream (default none)")
    e.add_argument("--eager-encoder", action="store_true",
                   help="run the encoder eager (engine.trace_encoder false), to compare with the traced default")
    e.add_argument("--host-overhead", action="store_true",
                   help="microseconds of step time per stream-step on a tiny random model (host overhead: the "
                        "engine's Python per stream), for --method (default: greedy and modified_beam), "
                        "partials on and off; --seconds default 2")
    e.add_argument("--phases", type=int, default=1,
                   help="with --host-overhead: the streams' chunks fall in this many phase groups (packets of "
                        "1/PHASES chunk to every stream, a step after each round: each step takes another set of "
                        "streams, as on a real-time server); default 1: all audio up front, all streams in step")
    e.add_argument("--json", action="store_true")
    e.set_defaults(run=_run_engine)

def _run_engine(args: argparse.Namespace) -> int:
    """``streamd bench engine`` with parsed flags; returns the exit status."""
    from ...bench.engine import bench_engine
    from ...paths import default_bench_audio, model_arg

    if args.host_overhead:
        return _host_overhead_main(args)
    audio = args.audio or default_bench_audio()
    if not audio:
        print("streamd bench: no audio files: pass --audio FILE...", file=sys.stderr)
        return 2
    streams = [int(s) for s in (args.streams or "1,8,32,128").split(",") if s.strip()]
    from ...config import parse_phrases

    wake_words = [s.phrase for s in parse_phrases(args.wake_words, "--wake-words")]
    if args.single_seconds is not None and not 0 < args.single_seconds <= args.seconds:
        print("streamd bench: --single-seconds must be in (0, --seconds]", file=sys.stderr)
        return 2
    row = (lambda r: print(json.dumps(r.to_json()), flush=True)) if args.json else None
    args.method = args.method or "greedy"
    results, summary = bench_engine(model_arg(args.model), streams, args.method, args.device, args.seconds, audio,
                                    beam=args.beam, single_seconds=args.single_seconds, wake_words=wake_words,
                                    trace_encoder=not args.eager_encoder, on_result=row)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{'streams':>7} {'rtf':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'batch':>6} "
              f"{'realtime':>8} {'x batched':>9}   ({args.method}, {summary['device']}, chunk "
              f"{results[0].chunk_ms:.0f} ms, {len(wake_words)} runtime wake words, {summary['encoder']} encoder)")
        for r in results:
            print(f"{r.streams:>7} {r.rtf:>7.4f} {r.p50_ms:>8.1f} {r.p95_ms:>8.1f} {r.p99_ms:>8.1f} "
                  f"{r.mean_batch:>6.1f} {str(r.realtime):>8} {r.batched_speedup:>9.2f}")
        print(f"max real-time streams: {summary['max_realtime_streams']}")
    return 0


def _host_overhead_main(args: argparse.Namespace) -> int:
    from ...bench.engine import bench_host_overhead

    streams = [int(s) for s in (args.streams or "256,1024,4096").split(",") if s.strip()]
    methods = (args.method,) if args.method else ("greedy", "modified_beam")
    seconds = 2.0 if args.seconds == 10.0 else args.seconds
    if args.json:
        row = lambda r: print(json.dumps(r.to_json()), flush=True)  # noqa: E731
    else:
        print(f"{'method':>14} {'streams':>7} {'partials':>8} {'us/stream-step':>14} {'cpu us':>8} {'host us':>8} "
              f"{'steps':>6} {'tok/frame':>9}   (tiny random model, cpu, 1 thread, {seconds:g} s per stream, "
              f"{args.phases} phase group(s))")
        row = lambda r: print(f"{r.method:>14} {r.streams:>7} {str(r.partials):>8} {r.us_per_stream_step:>14.1f} "  # noqa: E731
                              f"{r.cpu_us_per_stream_step:>8.1f} {r.host_us:>8.1f} {r.steps:>6} "
                              f"{r.tokens_per_frame:>9.3f}", flush=True)
    bench_host_overhead(streams, methods, seconds, beam=args.beam, phases=args.phases, on_result=row)
    return 0
