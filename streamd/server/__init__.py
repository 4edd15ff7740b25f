"""The streamd daemon: websocket server (v1 and Vosk protocols), Wyoming, HTTP probes, metrics, sd_notify.

Modules, by purpose, from the bottom up (a module imports only those above it in this list):

* :mod:`.guard`     sans-I/O request checks before any stream (repeated headers, Host allow-list), log rate limit;
* :mod:`.auth`      sans-I/O tokens (``auth.tokens``, ``auth.token_file``), bearer token, Origin allow-list;
* :mod:`.states`    session states as data: enums and their tables of allowed transitions;
* :mod:`.protocol`  sans-I/O v1 protocol session, error/close codes, limits (token bucket, minimum rate);
* :mod:`.vosk`      sans-I/O Vosk-compatible session (lock-step replies);
* :mod:`.wyoming`   sans-I/O Wyoming session (Home Assistant: describe, transcribe, detect);
* :mod:`.admission` sans-I/O admission by capacity and cost, fair share of bursts, per-client quotas;
* :mod:`.drain`     sans-I/O drain decisions under load (which streams the grace period can finish);
* :mod:`.commands`  the typed engine commands transports submit (open, audio, samples, reset, finish, close);
* :mod:`.runner`    the engine side: the runner that owns the Recognizer (one worker thread), the batching task;
* :mod:`.lane`      engine runners in child processes of their own (the main engine, the light lane);
* :mod:`.outbox`    a client's bounded queue of outgoing messages;
* :mod:`.conn`      websocket connections and the daemon's microphone stream (event loop);
* :mod:`.wyoming_io` the Wyoming TCP transport on ``server.wyoming_port`` (the ``wyoming`` package's framing);
* :mod:`.settings`  configuration resolution (file, environment, flags), TLS context, check-config checks;
* :mod:`.static`    the browser page (package data ``streamd/server/web``) and static file lookup;
* :mod:`.metrics`   Prometheus metrics (one registry per server);
* :mod:`.notify`    systemd notify protocol;
* :mod:`.exhaustion` out of file descriptors: counted, logged once per interval;
* :mod:`.app`       the App: listeners, HTTP routes, routing of engine results, lifecycle;
* :mod:`.serve`     the ``streamd serve`` / ``streamd check-config`` commands.

This package imports nothing heavy at import time; :func:`add_subcommands`
registers ``streamd serve`` and ``streamd check-config`` (the work happens in
:mod:`.serve`, imported when the command runs, so ``websockets`` stays an
optional dependency of the other commands).  docs/protocol.md is the wire
reference.
"""

from __future__ import annotations

from typing import Any

from ..config import HOTWORDS_HELP, SECOND_PASS_HELP, WAKE_WORDS_HELP
from ..cli.engine_args import WAKE_MODELS_HELP

__all__ = ["add_subcommands"]


def _serve(args: Any) -> int:
    from .serve import cmd_serve

    return cmd_serve(args)


def _check_config(args: Any) -> int:
    from .serve import cmd_check_config

    return cmd_check_config(args)


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
    s.add_argument("--mic", action="store_true", help="decode the local microphone; events on /v1/events")
    s.add_argument("--mic-device", help="input device index or name (mic.device)")
    s.set_defaults(func=_serve)

    c = sub.add_parser("check-config", help="validate a serve config file as serve would, before anything loads "
                                            "(keys, files, ports, device, wake words and hotwords against the "
                                            "model): prints OK or the error with its key (exit 2)")
    c.add_argument("file", metavar="FILE", help="YAML config (see configs/default.yaml)")
    c.set_defaults(func=_check_config)
