"""What a transport asks of the engine runner: one typed command per stream action, applied in queue order.

The vocabulary is closed: :data:`Command` is the union of the six frozen dataclasses below, and
:meth:`streamd.server.runner.EngineRunner.cycle` dispatches on their types (never on a string).  Every
command names its stream by ``key``, a per-connection number the event loop hands out; engine stream ids
never leave the worker thread.  ``op`` is each command's name for logs and error messages only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Union

import numpy as np

__all__ = ["Command", "OpenStream", "FeedPcm", "FeedSamples", "ResetStream", "FinishStream", "CloseStream"]


@dataclass(frozen=True)
class OpenStream:
    """Create the engine stream of ``key`` with ``options`` (StreamOptions fields; the engine's defaults for
    what they leave out).  ``client``: who opened it, for the fair share under overload (None: the daemon
    fills it in from the admission, ``"local"`` for streams no admission rule saw)."""

    key: int
    options: Mapping[str, Any] = field(default_factory=dict)
    client: str | None = None
    op: ClassVar[str] = "open"


@dataclass(frozen=True)
class FeedPcm:
    """PCM bytes in format ``fmt`` (``s16le`` / ``f32le``) at the stream's rate.  ``ack``: count it in
    :attr:`streamd.server.runner.CycleResult.acks` once applied (the Vosk lock-step replies)."""

    key: int
    data: bytes
    fmt: str
    ack: bool = False
    op: ClassVar[str] = "audio"


@dataclass(frozen=True, eq=False)
class FeedSamples:
    """float32 samples (N,) at the stream's rate (the daemon's microphone)."""

    key: int
    samples: np.ndarray
    op: ClassVar[str] = "samples"


@dataclass(frozen=True)
class ResetStream:
    """Close the open segment (a Final follows)."""

    key: int
    op: ClassVar[str] = "reset"


@dataclass(frozen=True)
class FinishStream:
    """No more audio: decode the tail, Final, Done."""

    key: int
    op: ClassVar[str] = "finish"


@dataclass(frozen=True)
class CloseStream:
    """Forget the stream now (no more events for it); a no-op once it has ended."""

    key: int
    op: ClassVar[str] = "close"


Command = Union[OpenStream, FeedPcm, FeedSamples, ResetStream, FinishStream, CloseStream]
