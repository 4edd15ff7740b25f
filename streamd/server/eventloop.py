"""The daemon's event loop (``server.event_loop``): the standard library's asyncio loop or uvloop's."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

from ..config import ConfigError

__all__ = ["check_event_loop", "run"]


def check_event_loop(kind: str) -> None:
    """ConfigError naming ``server.event_loop`` when ``uvloop`` is asked for and not installed."""
    if kind == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise ConfigError("server.event_loop: uvloop is not installed (pip install uvloop, or the project's "
                              "extra: pip install -e \".[server]\"; not on Windows); or set asyncio") from None


def run(main: Coroutine[Any, Any, Any], kind: str) -> Any:
    """Run ``main`` to completion on a new event loop of ``kind`` (``asyncio`` or ``uvloop``), as
    :func:`asyncio.run` does."""
    if kind == "uvloop":
        check_event_loop(kind)
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)
