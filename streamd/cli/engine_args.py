"""The engine options every decoding command shares (``--config``, ``--method``, ``--beam``, the LM, wake words,
hotwords and the second pass) and the guard that turns bad input into ``PROG: message`` and status 2.

Used by the parsers of ``streamd transcribe``, ``mic``, ``eval``, ``calibrate`` and ``serve`` (the wake-model
help); imports only the configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Callable

from ..config import (HOTWORD_METHODS, HOTWORDS_HELP, SEARCH_METHODS, SECOND_PASS_HELP, WAKE_WORDS_HELP, ConfigError,
                     EngineConfig,
                     load_yaml, parse_phrases)

__all__ = ["add_engine_args", "engine_config_from_args", "run_guarded", "WAKE_MODELS_HELP", "VERIFY_WAKE_HELP"]

WAKE_MODELS_HELP = ("trained wake model files (streamd wake train), scored every 80 ms on the speech embedding "
                    "beside the other wake words (engine.kws.wake_models)")

VERIFY_WAKE_HELP = ("verify the wake models' detections with the second pass (engine.kws.verify; needs --second-pass "
                    "moonshine-base-so762): they fire at a lower threshold and are sent when the second model hears "
                    "the keyword")


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """The engine options every decoding command shares (the YAML file, then flags over it)."""
    p.add_argument("--config", help="YAML config; its 'engine' section is used")
    p.add_argument("--method", choices=SEARCH_METHODS,
                   help="search: greedy (default, fastest), modified_beam (n-gram fusion, hotwords), beam, "
                        "ctc_greedy, ctc_prefix_beam (the CTC head)")
    p.add_argument("--beam", type=int, help="hypotheses the beam searches keep (default: modified_beam 8, else 4)")
    p.add_argument("--lm", help="n-gram for modified_beam shallow fusion: auto (the model's own, default), none "
                                "or a path (streamd lm)")
    p.add_argument("--lm-weight", type=float, help="LM weight lambda (default 0.2; 0 disables fusion)")
    p.add_argument("--lm-bonus", type=float, help="per-token bonus beta added with the LM score")
    p.add_argument("--ctc-insertion-penalty", type=float,
                   help="ctc_prefix_beam: nats subtracted per token (default in the config)")
    p.add_argument("--wake-words", metavar="LIST", help=WAKE_WORDS_HELP)
    p.add_argument("--hotwords", metavar="LIST", help=HOTWORDS_HELP)
    p.add_argument("--second-pass", metavar="NAME|PATH", help=SECOND_PASS_HELP)
    p.add_argument("--wake-model", nargs="+", metavar="FILE", help=WAKE_MODELS_HELP)
    p.add_argument("--verify-wake", action="store_true", default=None, help=VERIFY_WAKE_HELP)


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """EngineConfig from ``--config`` with the given flags replacing its values (validated again).  Hotwords
    given with no ``--method``, where the configured search does not take them: ``modified_beam``, said on
    stderr."""
    cfg = EngineConfig()
    if getattr(args, "config", None):
        cfg = load_yaml(args.config, EngineConfig, section="engine")
    flags = ("method", "beam", "lm", "lm_weight", "lm_bonus", "ctc_insertion_penalty")  # the DecodingConfig fields of add_engine_args
    over = {k: getattr(args, k) for k in flags if getattr(args, k) is not None}
    if getattr(args, "hotwords", None) is not None:
        over["hotwords"] = parse_phrases(args.hotwords, "--hotwords")
        if over["hotwords"] and "method" not in over and cfg.decoding.method not in HOTWORD_METHODS:
            over["method"] = HOTWORD_METHODS[0]  # the search that takes them, rather than an error
            print(f"{_prog(args)}: --hotwords: decoding with --method {over['method']} (the search that boosts "
                  f"hotwords; the configured method is {cfg.decoding.method})", file=sys.stderr)
    dec = dataclasses.replace(cfg.decoding, **over)
    kws = cfg.kws
    if getattr(args, "wake_words", None) is not None:
        kws = dataclasses.replace(kws, wake_words=parse_phrases(args.wake_words, "--wake-words"))
    second = cfg.second_pass
    if getattr(args, "second_pass", None) is not None:
        second = dataclasses.replace(second, model=args.second_pass)
    if getattr(args, "wake_model", None):
        kws = dataclasses.replace(kws, wake_models=tuple(args.wake_model))
    if getattr(args, "verify_wake", None):
        kws = dataclasses.replace(kws, verify=True)
    return dataclasses.replace(cfg, device=args.device or cfg.device, decoding=dec, kws=kws, second_pass=second)


def _prog(args: argparse.Namespace) -> str:
    command = getattr(args, "command", None)
    return f"streamd {command}" if command else "streamd"


def run_guarded(prog: str, fn: Callable[[], int | None]) -> int:
    """``fn()``'s exit status; a ConfigError, ValueError, RuntimeError or OSError (bad input, a config or
    file problem) is printed as ``PROG: [config error: ]MESSAGE`` on stderr and gives status 2."""
    try:
        return int(fn() or 0)
    except ConfigError as e:
        print(f"{prog}: config error: {e}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
