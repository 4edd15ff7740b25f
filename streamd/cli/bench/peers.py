"""``streamd bench peers``: the parser (the work is :mod:`streamd.bench.peers`)."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parser"]

PROG = "streamd bench peers"


def add_parser(sub: argparse._SubParsersAction) -> None:
    ap = sub.add_parser("peers", help="WER and CPU real-time factor of pocketsphinx, streamd and teacher models on "
                                      "the same files",
                        description="WER and CPU real-time factor of pocketsphinx, streamd and teacher models on "
                                    "the same files")
    ap.add_argument("--set", help="evaluation set, JSON lines (default ../shared/eval/dev/asr.jsonl beside the "
                                  "checkout or under $STREAMD_SHARED, else the package's sample recordings)")
    ap.add_argument("--limit", type=int, help="only the first N files")
    ap.add_argument("--model", help="streamd checkpoint (default: the shipped model)")
    ap.add_argument("--method", help="streamd search method (default: the engine's)")
    ap.add_argument("--device", default="cpu", help="streamd device (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch / teacher threads (default %(default)s, as "
                                                           "pocketsphinx)")
    ap.add_argument("--systems", default="pocketsphinx,streamd",
                    help="comma-separated systems, in table order (default %(default)s; also whisper-base, "
                         "whisper-tiny.en, moonshine-base)")
    ap.add_argument("--json", action="store_true", help="one JSON object: per-system figures and per-file texts")
    ap.set_defaults(run=_run)


def _usage_error(args: argparse.Namespace) -> str | None:
    from ...bench.peers import system_names

    if args.limit is not None and args.limit < 1:
        return f"--limit must be >= 1, got {args.limit}"
    if args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    known = system_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names or len(set(names)) != len(names):
        what = f"unknown system(s) {', '.join(unknown)}" if unknown else f"--systems {args.systems!r} is empty or " \
                                                                       "lists a system twice"
        return f"{what}; known: {', '.join(known)}"
    return None


def _run(args: argparse.Namespace) -> int:
    from ...bench.peers import DEFAULT_SET, build_systems, compare, format_table, load_set, peers_json

    err = _usage_error(args)
    if err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    try:
        if not args.set:
            from ...paths import default_samples

            args.set = str(DEFAULT_SET if DEFAULT_SET.is_file() else default_samples())
            if not DEFAULT_SET.is_file():
                print(f"{PROG}: no dev set at {DEFAULT_SET}: using the sample recordings {args.set}", file=sys.stderr)
        utts = load_set(args.set, args.limit)
    except Exception as e:  # noqa: BLE001 - ValueError / AudioError: say which file
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        systems, skipped, model, device = build_systems(names, args.model, args.method, args.device, args.threads)
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    for name, why in skipped.items():
        print(f"{PROG}: skipping {name}: {why}", file=sys.stderr)
    if not systems:
        print(f"{PROG}: no system left to run", file=sys.stderr)
        return 2
    scores = compare(utts, systems)
    if args.json:
        print(json.dumps(peers_json(args.set, utts, scores, args.threads, model, device, skipped)))
    else:
        where = f"; streamd {model} on {device}" if model else ""
        print(f"{args.set}: {len(utts)} files, {sum(u.seconds for u in utts):.1f} s of audio{where}, "
              f"threads {args.threads}")
        print(format_table(scores))
    errors = [f"{s.name}: {e}" for s in scores for e in s.errors]
    for e in errors:
        print(f"{PROG}: {e}", file=sys.stderr)
    return 1 if errors else 0
