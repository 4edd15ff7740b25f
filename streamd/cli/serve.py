"""``streamd serve`` and ``streamd check-config``: the daemon's parsers (the work is in
:mod:`streamd.server.serve`, imported when the command runs, so ``websockets`` stays an optional dependency
of the other commands)."""

from __future__ import annotations

import argparse
from typing import Any

from ..config import HOTWORDS_HELP, SECOND_PASS_HELP, WAKE_WORDS_HELP
from .engine_args import VERIFY_WAKE_HELP, WAKE_MODELS_HELP

__all__ = ["add_subcommands"]


def _serve(args: argparse.Namespace) -> int:
    from ..server.serve import serve

    return serve(args.config, {"host": args.host, "port": args.port, "model": args.model, "device": args.device,
                               "vosk_port": args.vosk_port, "mic": args.mic, "mic_device": args.mic_device,
                               "wyoming_port": args.wyoming_port, "wake_words": args.wake_words,
                               "hotwords": args.hotwords, "second_pass": args.second_pass,
                               "wake_models": args.wake_model, "verify_wake": args.verify_wake,
                               "front_processes": args.front_processes},
                 null_engine=args.null_engine)


def _check_config(args: argparse.Namespace) -> int:
    from ..server.serve import check_config

    return check_config(args.file)


def add_subcommands(sub: Any) -> None:
    """Add ``serve`` and ``check-config`` to an argparse subparsers object."""
    s = sub.add_parser("serve", help="run the daemon (websocket v1 and Vosk, Wyoming, the browser page, HTTP probes, "
                                      "metrics)",
                       description="Run the streamd daemon. Precedence: flags > environment "
                                   "(STREAMD_CONFIG, STREAMD_HOST, STREAMD_PORT, STREAMD_MODEL, STREAMD_DEVICE) "
                                   "> config file > defaults.")
    s.add_argument("--config", help="YAML config (see configs/default.yaml); env STREAMD_CONFIG")
    s.add_argument("--host", help="listen address (server.host); env STREAMD_HOST")
    s.add_argument("--port", type=int, help="listen port, 0 = any free port (server.port); env STREAMD_PORT")
    s.add_argument("--model", help="checkpoint (engine.model; default: the shipped model); env STREAMD_MODEL")
    s.add_argument("--device", help="compute device: auto, cpu, cuda or cuda:N (engine.device); env STREAMD_DEVICE")
    s.add_argument("--vosk-port", type=int, help="also serve the Vosk protocol on this port, every path "
                                                 "(server.vosk_port; Vosk's default is 2700)")
    s.add_argument("--wyoming-port", type=int, help="also serve the Wyoming protocol (Home Assistant: "
                                                    "speech-to-text and wake word) on this TCP port "
                                                    "(server.wyoming_port; conventionally 10300)")
    s.add_argument("--wake-words", metavar="LIST", help=WAKE_WORDS_HELP + " (engine.kws.wake_words)")
    s.add_argument("--hotwords", metavar="LIST", help=HOTWORDS_HELP + " (engine.decoding.hotwords)")
    s.add_argument("--second-pass", metavar="NAME|PATH", help=SECOND_PASS_HELP)
    s.add_argument("--wake-model", nargs="+", metavar="FILE", help=WAKE_MODELS_HELP)
    s.add_argument("--verify-wake", action="store_true", help=VERIFY_WAKE_HELP)
    s.add_argument("--mic", action="store_true", help="decode the local microphone; events on /v1/events")
    s.add_argument("--mic-device", help="input device index or name (mic.device)")
    s.add_argument("--front-processes", type=int, metavar="N",
                   help="processes that carry the websocket connections, all feeding the one engine "
                        "(server.front_processes; default 1: the connections in the daemon's own process)")
    s.add_argument("--null-engine", action="store_true", help=argparse.SUPPRESS)  # benchmarks, tests: no model
    s.set_defaults(func=_serve)

    c = sub.add_parser("check-config", help="validate a serve config file as serve would, before anything loads "
                                            "(keys, files, ports, device, wake words and hotwords against the "
                                            "model): prints OK or the error with its key (exit 2)")
    c.add_argument("file", metavar="FILE", help="YAML config (see configs/default.yaml)")
    c.set_defaults(func=_check_config)
