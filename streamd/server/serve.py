"""``streamd serve`` and ``streamd check-config``: the commands :func:`streamd.server.add_subcommands`
registers (imported when one runs, so ``websockets`` stays an optional dependency of the other commands)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from ..config import AppConfig, ConfigError, load_yaml
from .app import App
from .auth import load_tokens
from .lane import raise_priority
from .notify import Notifier
from .settings import check_app_config, check_ports_free, mic_factory, resolve_config

__all__ = ["cmd_serve", "cmd_check_config"]


def cmd_serve(args: Any) -> int:
    """``streamd serve``: run the daemon until SIGTERM/SIGINT, then drain; 0 on a clean stop."""
    import signal
    import sys

    from ..paths import default_model_path

    env = os.environ
    cfg = resolve_config(args.config or env.get("STREAMD_CONFIG") or None,
                         {"host": args.host, "port": args.port, "model": args.model, "device": args.device,
                          "vosk_port": args.vosk_port, "mic": args.mic, "mic_device": args.mic_device,
                          "wyoming_port": getattr(args, "wyoming_port", None),
                          "wake_words": getattr(args, "wake_words", None), "hotwords": getattr(args, "hotwords", None),
                          "second_pass": getattr(args, "second_pass", None),
                          "wake_models": getattr(args, "wake_model", None)},
                         env)
    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cfg.server.log_level != "debug":  # two lines per connection at info: a flood (and CPU) under load
        logging.getLogger("websockets").setLevel(logging.WARNING)
    model = cfg.engine.model or str(default_model_path())
    if not Path(model).is_file():
        what = f"model {model!r} not found" if cfg.engine.model else f"no default model at {model}"
        print(f"streamd serve: {what}; pass --model PATH or set STREAMD_MODEL (or engine.model)", file=sys.stderr)
        return 2  # as every config error
    check_app_config(cfg)  # what check-config checks, before anything loads (exit 2, the key named)
    check_ports_free(cfg.server)  # and a port another process holds
    tokens = load_tokens(cfg.auth)
    capture = mic_factory() if cfg.mic.enabled else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        app = App(cfg, model_path=model, mic_factory=capture, notifier=Notifier.from_env(), tokens=tokens)
        await app.run(stop)

    log = logging.getLogger("streamd.server")
    nice, why = raise_priority(cfg.server.nice)  # before the engine processes start: they inherit it
    if why:
        log.info("running at nice %d: server.nice %d not applied (%s)", nice, cfg.server.nice, why)
    else:
        log.info("running at nice %d", nice)
    asyncio.run(main())
    return 0


def cmd_check_config(args: Any) -> int:
    """``streamd check-config FILE``: OK (exit 0) or the error with its key path (exit 2)."""
    import sys

    import yaml

    try:
        check_app_config(load_yaml(args.file, AppConfig))
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 2
    print("OK")
    return 0
