"""Command-line front end: ``streamd <command> ...``.

Commands (each one a thin wrapper; the work lives in the library):

* ``transcribe FILE...``: decode files through the streaming engine exactly
  as the daemon does (chunked audio, batched steps, endpointing), all files
  as concurrent streams of one Recognizer;
* ``model-info PATH``: what a checkpoint holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .engine_args import add_engine_args, engine_config_from_args, run_guarded
from .feed import transcribe_files
from .paths import model_arg

__all__ = ["main"]

def _cmd_transcribe(args: argparse.Namespace) -> int:
    from .engine import Recognizer

    cfg = engine_config_from_args(args)
    rec = Recognizer.from_checkpoint(model_arg(args.model), cfg)
    for p in args.files:
        if not Path(p).is_file():
            print(f"streamd: {p}: no such file", file=sys.stderr)
            return 2

    def on_event(path, ev):
        if args.json:
            d = ev.to_wire()
            d["file"] = path
            print(json.dumps(d), flush=True)

    events = transcribe_files(rec, args.files, on_event=on_event)
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


def _cmd_model_info(args: argparse.Namespace) -> int:
    from .decode.calibration import META_KEY, Calibration
    from .model.checkpoint import load_checkpoint

    lm = load_checkpoint(model_arg(args.path))
    from .config import to_dict

    info = {"path": lm.path, "parameters": lm.model.num_params(), "tokens": len(lm.tokens),
            "token_kind": lm.tokens.kind, "keywords": list(lm.model.cfg.keywords),
            "chunk_seconds": lm.model.cfg.encoder.chunk_size * lm.model.cfg.frame_shift_s,
            "model_config": to_dict(lm.model.cfg), "meta": lm.meta}
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print(f"path:        {info['path']}")
        print(f"parameters:  {info['parameters']:,}")
        print(f"tokens:      {info['tokens']} ({info['token_kind']})")
        print(f"keywords:    {', '.join(info['keywords']) or '-'}")
        e = lm.model.cfg.encoder
        print(f"encoder:     {e.num_layers} layers, d_model {e.d_model}, {e.num_heads} heads, chunk "
              f"{e.chunk_size} frames ({info['chunk_seconds']:.2f} s), left context {e.left_chunks} chunks")
        d = lm.model.cfg.decoder
        print(f"decoder:     {d.kind}, dim {d.dim}" + (f", context {d.context_size}" if d.kind == "stateless" else ""))
        print(f"ctc head:    {'yes' if lm.model.ctc is not None else 'no'}")
        for k, v in lm.meta.items():
            print(f"meta.{k}: {Calibration.from_dict(v).describe() if k == META_KEY else v}")
    return 0


# ---- streamd mic (owner: mic/clients) ------------------------------------------------------------


def _cmd_mic(args: argparse.Namespace) -> int:
    """Live transcription of the microphone (or of --wav FILE played as the microphone) in-process."""
    from .mic import NO_INPUT_DEVICE, WAV_HINT, MicCapture, MicError, format_devices, list_devices, run_console

    try:
        if args.list_devices:
            devices = list_devices()
            print(format_devices(devices), file=sys.stdout if devices else sys.stderr)
            return 0 if devices else 2
        source = None
        if args.wav:
            from .mic import WavSource

            source = WavSource(args.wav, speed=args.speed)
        capture = MicCapture(args.input_device, sample_rate=args.rate, source=source)
    except MicError as e:
        print(f"streamd mic: {e}{WAV_HINT if str(e) == NO_INPUT_DEVICE else ''}", file=sys.stderr)
        return 2
    from .engine import Recognizer

    ns = argparse.Namespace(**{**vars(args), "device": args.compute_device})
    rec = Recognizer.from_checkpoint(model_arg(args.model), engine_config_from_args(ns))
    color = {"auto": None, "always": True, "never": False}[args.color]
    return run_console(rec, capture, color=color)


def _add_mic_parser(sub) -> None:
    c = sub.add_parser("mic", help="live transcription of the microphone in-process")
    c.add_argument("--device", dest="input_device", metavar="N|NAME", type=lambda v: int(v) if v.lstrip("-").isdigit() else v,
                   help="input device: PortAudio index or name substring (default: the system default input)")
    c.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    c.add_argument("--wav", metavar="FILE", help="play FILE as if it were the microphone (no sound card needed)")
    c.add_argument("--speed", type=float, default=1.0, help="--wav playback speed (1 = real time, 0 = no pacing)")
    c.add_argument("--rate", type=int, default=16000, help="capture sample rate in Hz (default 16000)")
    c.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(c)
    c.add_argument("--compute-device", help="engine device: auto, cpu, cuda or cuda:N")
    c.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colored words by confidence (auto: when stdout is a terminal)")
    c.set_defaults(func=_cmd_mic)


# Commands whose modules own their argument parsing: ``streamd NAME ARGS...`` -> module.main(ARGS).
DELEGATED = {
    "train": ("streamd.train.trainer", "train the transducer (configs/train.yaml)"),
    "pretrain": ("streamd.train.pretrain", "self-supervised data2vec-style encoder pretraining on untranscribed "
                                           "audio (configs/pretrain.yaml)"),
    "average": ("streamd.train.average", "average the last checkpoints of a training run"),
    "synth": ("streamd.train.synth", "synthesize the training corpus (TTS voices + augmentation)"),
    "augment": ("streamd.train.augment_cli", "augmented copies of a manifest's audio (speaker, room, noise, channel)"),
    "eval": ("streamd.train.evaluate", "evaluate a model through the streaming engine: WER, RTF, confidence, KWS"),
    "calibrate": ("streamd.train.calibrate", "fit the word-confidence calibration (P(word correct)) on validation "
                                             "sets and store it in a copy of the model"),
    "lm": ("streamd.train.lm", "train the token n-gram for modified_beam shallow fusion"),
    "bench": ("streamd.bench", "benchmarks: bench engine (streams in real time, latency, batching gain)"),
    "label": ("streamd.train.label", "label untranscribed audio with real-speech teacher models"),
    "data": ("streamd.train.data_cli", "import real corpora into training manifests (Speech Commands, LibriSpeech, Common Voice, Kaldi, Asterisk, JSON lines)"),
}


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    ap = argparse.ArgumentParser(prog="streamd", description="Streaming speech recognizer daemon and tools")
    ap.add_argument("--version", action="version", version=f"streamd {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    t = sub.add_parser("transcribe", help="decode audio files through the streaming engine")
    t.add_argument("files", nargs="+", metavar="FILE")
    t.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(t)
    t.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    t.add_argument("--json", action="store_true", help="one JSON event per line (wire schema + 'file')")
    t.set_defaults(func=_cmd_transcribe)

    m = sub.add_parser("model-info", help="describe a checkpoint")
    m.add_argument("path", nargs="?", help="checkpoint (default: the shipped model)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_cmd_model_info)

    _add_mic_parser(sub)

    for name, (_module, helptext) in DELEGATED.items():
        sub.add_parser(name, help=helptext + f" (streamd {name} --help)", add_help=False)

    from .server import add_subcommands  # serve, check-config (the daemon; websockets imported on use)

    add_subcommands(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        return int(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return run_guarded("streamd", lambda: args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
