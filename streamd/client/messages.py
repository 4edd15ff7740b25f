"""The client's vocabulary: the default URL and stream options, when to retry, its errors, the
``ready`` message, and the helpers on events and samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..config import ServerConfig
from ..events import Final
from ..wire import CLOSE_CODES, START_FIELDS


DEFAULT_URL = f"ws://{ServerConfig.host}:{ServerConfig.port}/v1/stream"
STREAM_OPTIONS = tuple(f for f in START_FIELDS if f != "type")
"""The start message's fields a stream may set."""
RETRY_CODES = frozenset(code for code, close in CLOSE_CODES.items() if close in (1001, 1013))
"""Refusals before ``ready`` that a retry (here or on another server) may overcome."""
RETRY_HTTP = (502, 503, 504)
MAX_RETRY_AFTER = 30.0  # the longest wait a server's retry_after may ask for


# ---------------------------------------------------------------------------- errors


class ClientError(Exception):
    """The stream could not run: the server cannot be reached, refused it, or the connection broke."""


class ConnectError(ClientError):
    """No stream was opened: connection failure (``status`` None) or an HTTP refusal (``status``)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ConnectionLost(ClientError):
    """The connection closed before ``done`` or an ``error`` (``code`` / ``reason``: the close)."""

    def __init__(self, message: str, code: int | None = None, reason: str = ""):
        super().__init__(message)
        self.code, self.reason = code, reason


class StreamError(ClientError):
    """The server ended the stream with an ``error`` event (raised by the blocking helpers).

    ``events`` holds every event received, the :class:`~streamd.events.Error` last."""

    def __init__(self, code: str, message: str, events: list):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.events = code, message, events


# ---------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Ready:
    """The server's ``ready`` message: the stream's resolved options and the model it runs on."""

    session: str
    sample_rate: int
    format: str
    method: str
    beam: int
    partials: bool
    keywords: bool
    endpointing: bool
    model: Mapping[str, Any] = field(default_factory=dict)
    wake_words: tuple | None = None  # present when the start message set them
    hotwords: tuple | None = None

    @property
    def chunk_seconds(self) -> float | None:
        """Audio per decoded chunk (one partial each), from ``model.chunk_seconds``."""
        return self.model.get("chunk_seconds")

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any]) -> "Ready":
        if msg.get("type") != "ready":
            raise ValueError(f"expected a 'ready' message, got type {msg.get('type')!r}")
        missing = [f for f in ("session", "sample_rate", "format") if f not in msg]
        if missing:
            raise ValueError(f"ready message has no {missing[0]!r} field: {dict(msg)!r:.200}")
        phrases = {k: tuple(msg[k]) for k in ("wake_words", "hotwords") if isinstance(msg.get(k), list)}
        return cls(msg["session"], msg["sample_rate"], msg["format"], msg.get("method", ""), msg.get("beam", 0),
                   msg.get("partials", True), msg.get("keywords", True), msg.get("endpointing", True),
                   dict(msg.get("model") or {}), **phrases)


def final_text(events) -> str:
    """The transcript: the non-empty final texts of ``events``, joined by spaces."""
    return " ".join(e.text for e in events if isinstance(e, Final) and e.text)


def to_s16le(x: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as 16-bit little-endian PCM (rounded, clipped)."""
    return np.clip(np.round(np.asarray(x, dtype=np.float64) * 32768), -32768, 32767).astype("<i2").tobytes()


def _check_options(options: Mapping[str, Any]) -> dict:
    unknown = sorted(set(options) - set(STREAM_OPTIONS))
    if unknown:
        raise TypeError(f"unknown stream option {unknown[0]!r} (the start message's fields: "
                        f"{', '.join(STREAM_OPTIONS)})")
    return {k: v for k, v in options.items() if v is not None}
