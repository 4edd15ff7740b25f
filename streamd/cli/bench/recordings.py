"""``streamd bench endpoints|flush-sweep|long-file|second-pass-latency|trim-speech``: the parsers of the
benchmarks on recordings from outside the package (the work is in :mod:`streamd.bench`, one module each)."""

from __future__ import annotations

import argparse
import json

__all__ = ["add_parsers"]


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("endpoints", help="endpoints at real pauses: prompts joined with silent gaps into one "
                                         "stream; finals, splits, merges per rule2 value")
    p.add_argument("manifest")
    p.add_argument("--count", type=int, default=64)
    p.add_argument("--min-words", type=int, default=3)
    p.add_argument("--gap", type=float, default=1.0, help="seconds of digital silence between prompts")
    p.add_argument("--rule1", type=float, default=2.4)
    p.add_argument("--rule2", default="1.2", help="comma-separated rule2_trailing_silence values")
    p.add_argument("--long-pause", type=float, default=0.8, help="a pause that should end a segment (0.8 s)")
    p.add_argument("--rate", type=int, default=16000, help="stream sample rate (8000: telephone band)")
    p.add_argument("--model", help="checkpoint (default: the shipped model)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_endpoints)

    p = sub.add_parser("flush-sweep", help="sweep the end-of-stream flush (its length and signal) through "
                                           "`streamd eval`'s own decoding")
    p.add_argument("--set", dest="sets", action="append", required=True)
    p.add_argument("--flush", default="0,0.16,0.32,0.48,0.64,0.96", help="comma-separated seconds")
    p.add_argument("--noise-db", type=float, help="white noise at this level instead of digital silence")
    p.add_argument("--method", default="greedy")
    p.add_argument("--model", help="checkpoint (default: the shipped model)")
    p.set_defaults(run=_flush_sweep)

    p = sub.add_parser("long-file", help="one long recording through a running daemon by every kind of client, "
                                         "against `streamd transcribe`")
    p.add_argument("file")
    p.add_argument("--url", default="ws://127.0.0.1:8765", help="the daemon's main port (ws://host:port)")
    p.add_argument("--vosk-url", default=None, help="a Vosk endpoint (default: URL/vosk)")
    p.add_argument("--pid", type=int, default=None, help="the daemon's pid: RSS before and after each client")
    p.add_argument("--skip-offline", action="store_true", help="no reference run (equality not checked)")
    p.set_defaults(run=_long_file)

    p = sub.add_parser("second-pass-latency", help="latency of finals with the second pass: push-to-talk "
                                                   "utterances on concurrent real-time streams")
    p.add_argument("--set", required=True, help="JSON-lines set whose clips are the utterances")
    p.add_argument("--second-pass", required=True, help="model name or folder")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--utterances", type=int, default=15, help="per client")
    p.add_argument("--max-seconds", type=float, default=10.0, help="longest utterance used")
    p.add_argument("--cpu-threads", type=int, default=1, help="the second model's threads")
    p.add_argument("--int8", choices=("true", "false"), default=None,
                   help="Moonshine's decoder in int8 (engine.second_pass.int8; default: that setting's default)")
    p.add_argument("--worker", nargs="+", choices=("thread", "process"), default=["thread", "process"],
                   help="where the second model runs (engine.second_pass.worker); several: one run each, side "
                        "by side after the first pass alone")
    p.add_argument("--max-batch", type=int, nargs="+", default=None,
                   help="segments the worker takes per round (engine.second_pass.max_batch; a Moonshine model "
                        "reads them in one batch); several: one run each (1: one segment a call)")
    p.set_defaults(run=_second_pass_latency)

    p = sub.add_parser("trim-speech", help="copy an evaluation set with every clip cut tight to its speech "
                                           "(energy-based, fixed margins)")
    p.add_argument("manifest", help="JSON lines with audio (relative to the file's folder) and text")
    p.add_argument("--out", required=True, help="output folder (manifest.jsonl and the cut audio)")
    p.add_argument("--margin", type=float, default=0.02, help="seconds kept before and after the speech (0.02)")
    p.add_argument("--above-noise", type=float, default=12.0, help="dB above the noise floor (12)")
    p.add_argument("--below-peak", type=float, default=35.0, help="dB below the loudest frame (35)")
    p.set_defaults(run=_trim_speech)


def _endpoints(a: argparse.Namespace) -> int:
    from ...bench.endpoints import bench_endpoints
    from ...paths import model_arg

    bench_endpoints(a.manifest, model_arg(a.model), _floats(a.rule2), a.count, a.min_words, a.gap, a.rule1,
                    a.long_pause, a.rate, a.json)
    return 0


def _flush_sweep(a: argparse.Namespace) -> int:
    from ...bench.flush_sweep import flush_sweep
    from ...paths import model_arg

    flush_sweep(a.sets, model_arg(a.model), _floats(a.flush), a.noise_db, a.method)
    return 0


def _long_file(a: argparse.Namespace) -> int:
    from ...bench.long_file import bench_long_file

    return bench_long_file(a.file, a.url, a.vosk_url, a.pid, a.skip_offline)


def _second_pass_latency(a: argparse.Namespace) -> int:
    from ...bench.second_pass_latency import second_pass_latency

    print(json.dumps(second_pass_latency(a.set, a.second_pass, a.streams, a.utterances, a.max_seconds,
                                         a.cpu_threads, a.worker, None if a.int8 is None else a.int8 == "true",
                                         a.max_batch), indent=1))
    return 0


def _trim_speech(a: argparse.Namespace) -> int:
    from ...bench.trim_speech import trim_speech

    trim_speech(a.manifest, a.out, a.margin, a.above_noise, a.below_peak)
    return 0
