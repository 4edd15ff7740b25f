"""The one configuration error and the checks every section's validation uses (the message starts with
the dotted key path)."""

from __future__ import annotations

import math
from typing import Any

from ..options import OptionError


ConfigError = OptionError
"""A configuration value is invalid; the message starts with the key path.  The one error for an invalid
option (:class:`streamd.options.OptionError`), whether it came from a config file, a flag or a stream."""


def _fail(path: str, msg: str) -> None:
    raise ConfigError(f"{path}: {msg}" if path else msg)


def _check(cond: bool, path: str, msg: str) -> None:
    if not cond:
        _fail(path, msg)


def _one_of(value: Any, choices: tuple, path: str) -> None:
    _check(value in choices, path, f"must be one of {list(choices)}, got {value!r}")


def _positive(value: float, path: str, strict: bool = True) -> None:
    ok = value > 0 if strict else value >= 0
    _check(ok and math.isfinite(value), path, f"must be {'>' if strict else '>='} 0, got {value!r}")

def check_device(device: Any, path: str = "device") -> None:
    """ConfigError unless ``device`` names a torch device choice: auto, cpu, cuda or cuda:N."""
    _check(device in ("auto", "cpu", "cuda") or device.startswith("cuda:"), path,
           f"must be auto, cpu, cuda or cuda:N, got {device!r}")
