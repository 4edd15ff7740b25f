"""``streamd bench server``: the parser (the work is :mod:`streamd.bench.server`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ...options import BEAM_RANGE, SEARCH_METHODS, beam_ok

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("server", help="the daemon under N real-time websocket clients: partial / final latency")
    _server_arguments(s)
    s.set_defaults(run=_run_server)


def _server_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``streamd bench server``."""
    p.add_argument("--clients", type=int, default=8, help="concurrent client streams (default %(default)s)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running daemon's v1 URL, e.g. ws://127.0.0.1:8765/v1/stream")
    where.add_argument("--model", help="start an in-process daemon with this checkpoint on a free loopback port "
                                       "(the default, with the shipped model, when --url is not given)")
    p.add_argument("--device", default="cpu", help="in-process daemon: engine device (default %(default)s)")
    p.add_argument("--threads", type=int, help="in-process daemon: torch threads (default: engine.num_threads, 1; "
                                               "0: torch's default, one per core)")
    p.add_argument("--seconds", type=float, default=10.0, help="audio seconds per stream (default %(default)s)")
    p.add_argument("--duration-minutes", type=float, help="soak run: every stream lasts this many minutes "
                                                          "(audio looped; overrides --seconds)")
    p.add_argument("--audio", nargs="*", help="WAV files to stream (default: the package's six sample recordings)")
    p.add_argument("--method", choices=SEARCH_METHODS,
                   help="search method (default: the server's)")
    p.add_argument("--beam", type=int, help="beam size for beam searches")
    p.add_argument("--token", help="bearer token for a daemon with auth")
    p.add_argument("--seed", type=int, default=0, help="phases and audio offsets (default %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the report")


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.clients < 1:
        return f"--clients must be >= 1, got {args.clients}"
    if not args.seconds > 0:
        return f"--seconds must be > 0, got {args.seconds}"
    if args.duration_minutes is not None and not args.duration_minutes > 0:
        return f"--duration-minutes must be > 0, got {args.duration_minutes}"
    if args.beam is not None and not beam_ok(args.beam):
        return f"--beam must be {BEAM_RANGE}, got {args.beam}"
    if args.url is not None and not args.url.startswith(("ws://", "wss://")):
        return f"--url must start with ws:// or wss://, got {args.url!r}"
    if args.threads is not None and args.threads < 0:
        return f"--threads must be >= 0, got {args.threads}"
    return None


def _run_server(args: argparse.Namespace) -> int:
    """``streamd bench server`` with parsed flags; returns the exit status."""
    from ...bench.server import AudioLoop, InProcessServer, ServerBenchResult, bench_server, format_report
    from ...paths import default_bench_audio

    err = _usage_error(args)
    if err:
        print(f"streamd bench server: {err}", file=sys.stderr)
        return 2
    files = args.audio or default_bench_audio()
    if not files:
        print("streamd bench server: no audio files: pass --audio FILE...", file=sys.stderr)
        return 2
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        print(f"streamd bench server: {missing[0]}: no such file", file=sys.stderr)
        return 2
    try:
        audio = AudioLoop.from_files(files)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"streamd bench server: cannot read the audio: {e}", file=sys.stderr)
        return 2
    seconds = args.duration_minutes * 60.0 if args.duration_minutes else args.seconds

    def go(url: str) -> ServerBenchResult:
        return asyncio.run(bench_server(url, args.clients, seconds, audio, args.method, args.beam, args.token,
                                        args.seed))

    if args.url:
        result = go(args.url)
    else:
        from ...paths import model_arg

        try:
            with InProcessServer(model_arg(args.model), args.device, max(64, args.clients + 1),
                                 args.threads) as url:
                result = go(url)
        except RuntimeError as e:
            print(f"streamd bench server: {e}", file=sys.stderr)
            return 1
    print(json.dumps(result.to_json()) if args.json else format_report(result))
    return 1 if result.errors else 0
