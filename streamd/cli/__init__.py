"""Command-line front end: ``streamd <command> ...`` (imported only by ``streamd.__main__``, the console
script and the ``__main__`` blocks of script modules).

Every argparse parser of the package lives here, one module per command group; the library modules below
take plain arguments (functions, dataclasses) and import nothing from this package:

* :mod:`.transcribe` ``transcribe FILE...``: decode files through the streaming engine exactly as the daemon
  does (chunked audio, batched steps, endpointing), all files as concurrent streams of one Recognizer;
* :mod:`.model_info` ``model-info PATH``: what a checkpoint holds;
* :mod:`.mic`        ``mic``: live transcription of the microphone in-process (:mod:`streamd.mic`);
* :mod:`.serve`      ``serve``, ``check-config``: the daemon (:mod:`streamd.server.serve`);
* :mod:`.train`      ``train``, ``pretrain``, ``average``, ``lm``, ``adapt``;
* :mod:`.data`       ``data``, ``synth``, ``augment``, ``label``;
* :mod:`.evaluate`   ``eval``, ``calibrate``;
* :mod:`.wake`       ``wake`` (``train``, ``convert-embedding``);
* :mod:`.bench`      ``bench NAME``: every benchmark (engine, server, stress, peers, ...; :mod:`streamd.bench`);
* :mod:`.engine_args` the engine flags every decoding command shares, and the ``PROG: message`` guard.

The commands of :data:`DELEGATED` build their own parser (``streamd NAME ARGS...`` -> ``function(ARGS)``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .engine_args import run_guarded
from .mic import add_parser as _add_mic
from .model_info import add_parser as _add_model_info
from .serve import add_subcommands as _add_serve
from .transcribe import add_parser as _add_transcribe

__all__ = ["main", "build_parser", "DELEGATED"]

# Commands that build their own parser: ``streamd NAME ARGS...`` -> MODULE.FUNCTION(ARGS).
DELEGATED = {
    "train": ("streamd.cli.train", "train_main", "train the transducer (configs/train.yaml)"),
    "pretrain": ("streamd.cli.train", "pretrain_main", "self-supervised data2vec-style encoder pretraining on "
                                                       "untranscribed audio (configs/pretrain.yaml)"),
    "average": ("streamd.cli.train", "average_main", "average the last checkpoints of a training run"),
    "synth": ("streamd.cli.data", "synth_main", "synthesize the training corpus (TTS voices + augmentation)"),
    "augment": ("streamd.cli.data", "augment_main", "augmented copies of a manifest's audio (speaker, room, noise, "
                                                    "channel)"),
    "eval": ("streamd.cli.evaluate", "eval_main", "evaluate a model through the streaming engine: WER, RTF, "
                                                  "confidence, KWS"),
    "calibrate": ("streamd.cli.evaluate", "calibrate_main", "fit the word-confidence calibration (P(word correct)) "
                                                            "on validation sets and store it in a copy of the model"),
    "lm": ("streamd.cli.train", "lm_main", "train the token n-gram for modified_beam shallow fusion"),
    "adapt": ("streamd.cli.train", "adapt_main", "fine-tune Moonshine (the second pass) on transcribed speech into "
                                                 "a small adapter file"),
    "bench": ("streamd.cli.bench", "bench_main", "benchmarks: bench engine (streams in real time, latency, batching "
                                                 "gain), bench server (a daemon under websocket clients), bench "
                                                 "stress, bench peers, ... (streamd bench --help lists them)"),
    "label": ("streamd.cli.data", "label_main", "label untranscribed audio with real-speech teacher models"),
    "wake": ("streamd.cli.wake", "wake_main", "wake words on the speech embedding: `streamd wake train KEYWORD` "
                                              "trains one from its text; `streamd wake convert-embedding` "
                                              "converts the embedding again"),
    "data": ("streamd.cli.data", "data_main", "import real corpora into training manifests (Speech Commands, "
                                              "LibriSpeech, Common Voice, Kaldi, Asterisk, JSON lines)"),
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    ap = argparse.ArgumentParser(prog="streamd", description="Streaming speech recognizer daemon and tools")
    ap.add_argument("--version", action="version", version=f"streamd {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_transcribe(sub)
    _add_model_info(sub)
    _add_mic(sub)
    for name, (_module, _function, helptext) in DELEGATED.items():
        sub.add_parser(name, help=helptext + f" (streamd {name} --help)", add_help=False)

    _add_serve(sub)  # serve, check-config (the daemon; websockets imported on use)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        module, function, _ = DELEGATED[argv[0]]
        return int(getattr(importlib.import_module(module), function)(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return run_guarded("streamd", lambda: args.func(args))
