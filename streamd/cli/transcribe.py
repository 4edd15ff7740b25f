"""``streamd transcribe FILE...``: decode files through the streaming engine exactly as the daemon does
(chunked audio, batched steps, endpointing), all files as concurrent streams of one Recognizer
(:func:`streamd.feed.transcribe_files`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..engine_args import add_engine_args, engine_config_from_args
from ..feed import transcribe_files
from ..paths import model_arg

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    from ..engine import Recognizer
    from ..second_pass.calibration import load_second_pass

    cfg = engine_config_from_args(args)
    rec = Recognizer.from_checkpoint(model_arg(args.model), cfg)
    for p in args.files:
        if not Path(p).is_file():
            print(f"streamd: {p}: no such file", file=sys.stderr)
            return 2

    second = load_second_pass(cfg.second_pass, [p.phrase for p in cfg.decoding.hotwords], rec.calibration is not None)
    events: dict[str, list] = {p: [] for p in args.files}

    def on_event(path, ev):
        if second is not None:  # in line: a file's final waits for its second pass (docs/cli.md)
            ev = second.apply(ev) if ev.__class__.__name__ == "Final" else ev
        events[path].append(ev)
        if args.json:
            d = ev.to_wire()
            d["file"] = path
            print(json.dumps(d), flush=True)

    transcribe_files(rec, args.files, on_event=on_event)
    status = 0
    if not args.json:
        for p in args.files:
            finals = [e.text for e in events[p] if e.__class__.__name__ == "Final" and e.text]
            errors = [e for e in events[p] if e.__class__.__name__ == "Error"]
            for e in errors:
                print(f"streamd: {p}: {e.code}: {e.message}", file=sys.stderr)
                status = 1
            text = " ".join(finals)
            print(f"{p}\t{text}" if len(args.files) > 1 else text)
    return status


def add_parser(sub) -> None:
    t = sub.add_parser("transcribe", help="decode audio files through the streaming engine")
    t.add_argument("files", nargs="+", metavar="FILE")
    t.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(t)
    t.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    t.add_argument("--json", action="store_true", help="one JSON event per line (wire schema + 'file')")
    t.set_defaults(func=run)
