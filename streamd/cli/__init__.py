"""Command-line front end: ``streamd <command> ...`` (imported only by ``streamd.__main__``).

A small dispatcher; each command is a thin wrapper, the work lives in the library:

* ``transcribe FILE...`` (:mod:`.transcribe`): decode files through the streaming engine exactly
  as the daemon does (chunked audio, batched steps, endpointing), all files
  as concurrent streams of one Recognizer;
* ``model-info PATH`` (:mod:`.model_info`): what a checkpoint holds;
* ``mic`` (:mod:`.mic`): live transcription of the microphone in-process (:mod:`streamd.mic`);
* ``serve``, ``check-config``: the daemon (:func:`streamd.server.add_subcommands`);
* the commands of :data:`DELEGATED`, whose modules own their argument parsing
  (``streamd NAME ARGS...`` -> ``module.main(ARGS)``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .engine_args import run_guarded
from .mic import add_parser as _add_mic
from .model_info import add_parser as _add_model_info
from .transcribe import add_parser as _add_transcribe

__all__ = ["main", "build_parser", "DELEGATED"]

# Commands whose modules own their argument parsing: ``streamd NAME ARGS...`` -> module.main(ARGS).
DELEGATED = {
    "train": ("streamd.train.trainer", "train the transducer (configs/train.yaml)"),
    "pretrain": ("streamd.train.pretrain", "self-supervised data2vec-style encoder pretraining on untranscribed "
                                           "audio (configs/pretrain.yaml)"),
    "average": ("streamd.train.average", "average the last checkpoints of a training run"),
    "synth": ("streamd.train.synth", "synthesize the training corpus (TTS voices + augmentation)"),
    "augment": ("streamd.train.augment_manifest", "augmented copies of a manifest's audio (speaker, room, noise, channel)"),
    "eval": ("streamd.cli.evaluate", "evaluate a model through the streaming engine: WER, RTF, confidence, KWS"),
    "calibrate": ("streamd.train.calibrate", "fit the word-confidence calibration (P(word correct)) on validation "
                                             "sets and store it in a copy of the model"),
    "lm": ("streamd.train.lm", "train the token n-gram for modified_beam shallow fusion"),
    "bench": ("streamd.bench.engine", "benchmarks: bench engine (streams in real time, latency, batching gain), bench server "
                               "(a daemon under websocket clients)"),
    "label": ("streamd.train.label", "label untranscribed audio with real-speech teacher models"),
    "wake": ("streamd.train.wake", "wake words on the speech embedding: `streamd wake train KEYWORD` trains one from its text"),
    "data": ("streamd.cli.data", "import real corpora into training manifests (Speech Commands, LibriSpeech, Common Voice, Kaldi, Asterisk, JSON lines)"),
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    ap = argparse.ArgumentParser(prog="streamd", description="Streaming speech recognizer daemon and tools")
    ap.add_argument("--version", action="version", version=f"streamd {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_transcribe(sub)
    _add_model_info(sub)
    _add_mic(sub)
    for name, (_module, helptext) in DELEGATED.items():
        sub.add_parser(name, help=helptext + f" (streamd {name} --help)", add_help=False)

    from ..server import add_subcommands  # serve, check-config (the daemon; websockets imported on use)

    add_subcommands(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        return int(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return run_guarded("streamd", lambda: args.func(args))
