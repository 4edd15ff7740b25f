"""What a transport asks of the engine runner: one typed request per stream action, applied in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Command"]


@dataclass
class Command:
    """One request for the engine, applied in queue order in the worker thread.

    ``op``: open (arg: StreamOptions dict), audio (arg: (bytes, fmt)), samples
    (arg: float32 (N,) at the stream's rate), reset, finish, close.
    ``ack``: count it in :attr:`CycleResult.acks` once applied.  ``client``
    (open): who opened the stream, for the fair share under overload.
    """

    op: str
    key: int
    arg: Any = None
    ack: bool = False
    client: str | None = None
