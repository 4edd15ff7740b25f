"""``streamd serve`` and ``streamd check-config``: the daemon's two commands (their parser is
:mod:`streamd.cli.serve`, which imports this module when one runs, so ``websockets`` stays an optional
dependency of the other commands)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from ..config import AppConfig, ConfigError, load_yaml
from .app import App
from .auth import load_tokens
from .eventloop import run as run_event_loop
from .lane import raise_priority
from .notify import Notifier
from .settings import check_app_config, check_ports_free, mic_factory, resolve_config

__all__ = ["serve", "check_config"]


def serve(config: str | None = None, flags: Mapping[str, Any] | None = None,
          env: Mapping[str, str] | None = None, null_engine: bool = False) -> int:
    """``streamd serve``: run the daemon until SIGTERM/SIGINT, then drain; 0 on a clean stop.

    config: the YAML file (None: ``STREAMD_CONFIG`` if set); flags: the command line's values over the
    environment and the file (:func:`~.settings.resolve_config`'s keys: host, port, model, device,
    vosk_port, mic, mic_device, wyoming_port, wake_words, hotwords, second_pass, wake_models; None: not
    given); env: the environment (default ``os.environ``); null_engine: no model, the
    :class:`~.null_engine.NullRecognizer` (benchmarks and tests of the connection side only)."""
    import signal
    import sys

    from ..paths import default_model_path

    env = os.environ if env is None else env
    cfg = resolve_config(config or env.get("STREAMD_CONFIG") or None, dict(flags or {}), env)
    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cfg.server.log_level != "debug":  # two lines per connection at info: a flood (and CPU) under load
        logging.getLogger("websockets").setLevel(logging.WARNING)
    model = cfg.engine.model or str(default_model_path())
    loader = None
    if null_engine:
        from .null_engine import NullRecognizer

        model, loader = None, functools.partial(NullRecognizer, cfg.engine)
        logging.getLogger("streamd.server").warning("the null engine: no model, empty results (benchmarks only)")
    elif not Path(model).is_file():
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
        app = App(cfg, model_path=model, mic_factory=capture, notifier=Notifier.from_env(), tokens=tokens,
                  loader=loader)
        await app.run(stop)

    log = logging.getLogger("streamd.server")
    nice, why = raise_priority(cfg.server.nice)  # before the engine processes start: they inherit it
    if why:
        log.info("running at nice %d: server.nice %d not applied (%s)", nice, cfg.server.nice, why)
    else:
        log.info("running at nice %d", nice)
    run_event_loop(main(), cfg.server.event_loop)
    return 0


def check_config(path: str) -> int:
    """``streamd check-config FILE``: OK (exit 0) or the error with its key path (exit 2)."""
    import sys

    import yaml

    try:
        check_app_config(load_yaml(path, AppConfig))
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 2
    print("OK")
    return 0
