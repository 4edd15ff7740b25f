"""A null engine for benchmarks and tests of the daemon's connection side: the Recognizer's interface as the
server uses it (:class:`~.runner.EngineRunner`, :class:`~.app.App`), with no model and no arithmetic.

Every chunk of audio a stream receives (``chunk_seconds``, the shipped model's 0.32 s by default) is
"decoded" at the next :meth:`NullRecognizer.step` into an empty :class:`~streamd.events.Partial` (when the
stream asked for partials); a reset gives an empty Final, a finish an empty Final and Done.  What is left
is the cost of the connections: reading the frames, the protocol sessions, routing, sending partials.

Not a serving path: ``streamd serve --null-engine`` (a hidden flag) and ``streamd bench stress --scenarios
connections`` use it; a checkpoint is never loaded then.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Collection

import numpy as np

from ..events import Done, Error, Event, Final, Partial
from ..wire import SAMPLE_WIDTH

__all__ = ["NullRecognizer", "NULL_CHUNK_SECONDS"]

NULL_CHUNK_SECONDS = 0.32  # the shipped model's chunk: partials as often as the real engine sends them


@dataclass
class _NullStream:
    opts: Any  # StreamOptions
    samples_in: int = 0  # at the stream's rate
    decoded: int = 0  # samples "decoded" (whole chunks)
    segment: int = 0
    seg_start: float = 0.0
    finishing: bool = False
    resetting: bool = False


class NullRecognizer:
    """The Recognizer's serving interface with instant empty results (the module's rules).

    ``config``: an :class:`~streamd.config.EngineConfig` (stream defaults, max_batch, decoding method);
    ``chunk_seconds``: audio per partial."""

    def __init__(self, config: Any, chunk_seconds: float = NULL_CHUNK_SECONDS):
        self.config = config
        self.chunk_seconds = chunk_seconds
        self._streams: dict[int, _NullStream] = {}
        self._ids = itertools.count()
        self._ready: set[int] = set()  # streams with a chunk, a reset or a finish to "decode"

    @property
    def model_info(self) -> dict:
        return {"path": "", "name": "null", "vocab_size": 0, "token_kind": "none", "keywords": [],
                "wake_words": [], "wake_models": [], "chunk_seconds": self.chunk_seconds,
                "frame_shift_seconds": 0.01, "methods": ["greedy", "modified_beam", "beam"], "device": "none",
                "parameters": 0, "calibrated": False, "lm": None, "null_engine": True}

    def warm_up(self, seconds: float = 1.0) -> None:
        """Nothing to warm up."""

    def create_stream(self, **options: Any) -> int:
        opts = self.config.stream_defaults.resolve(options)  # the real engine's option checks (ValueError)
        sid = next(self._ids)
        self._streams[sid] = _NullStream(opts)
        return sid

    def has_stream(self, sid: int) -> bool:
        return sid in self._streams

    @property
    def num_streams(self) -> int:
        return len(self._streams)

    def stream_options(self, sid: int) -> Any:
        return self._streams[sid].opts

    def backlog(self, sid: int) -> float:
        st = self._streams[sid]
        return (st.samples_in - st.decoded) / st.opts.sample_rate

    def accept_pcm(self, sid: int, data: bytes | bytearray | memoryview, fmt: str = "s16le") -> list[Event]:
        return self._take(sid, len(data) // SAMPLE_WIDTH[fmt])

    def accept_audio(self, sid: int, samples: np.ndarray) -> list[Event]:
        return self._take(sid, int(samples.size))

    def _take(self, sid: int, n: int) -> list[Event]:
        st = self._streams[sid]
        if st.finishing:
            return [Error(sid, "bad_request", "audio after finish", fatal=False)]
        st.samples_in += n
        if st.samples_in - st.decoded >= self._chunk(st):
            self._ready.add(sid)
        return []

    def _chunk(self, st: _NullStream) -> int:
        return max(1, int(round(self.chunk_seconds * st.opts.sample_rate)))

    def reset(self, sid: int) -> None:
        self._streams[sid].resetting = True
        self._ready.add(sid)

    def finish(self, sid: int) -> None:
        self._streams[sid].finishing = True
        self._ready.add(sid)

    def close(self, sid: int) -> None:
        self._streams.pop(sid, None)
        self._ready.discard(sid)

    def pending(self) -> bool:
        return bool(self._ready)

    def ready_streams(self) -> list[int]:
        return sorted(self._ready)

    @property
    def wake_stats(self) -> dict:
        return {}

    def step(self, only: Collection[int] | None = None) -> list[Event]:
        """Every ready stream (or those in ``only``): its whole chunks as one empty partial, then its reset's or
        finish's Final (and Done)."""
        ids = self.ready_streams() if only is None else [s for s in only if s in self._ready]
        events: list[Event] = []
        for sid in ids:
            self._ready.discard(sid)
            st = self._streams.get(sid)
            if st is None:
                continue
            rate, chunk = st.opts.sample_rate, self._chunk(st)
            whole = (st.samples_in - st.decoded) // chunk * chunk
            if whole:
                st.decoded += whole
                if st.opts.partials:
                    events.append(Partial(sid, st.segment, "", start=st.seg_start, end=st.decoded / rate))
            if st.resetting or st.finishing:
                st.decoded = st.samples_in  # the tail
                end = st.decoded / rate
                reason = "eos" if st.finishing else "reset"
                events.append(Final(sid, st.segment, "", start=st.seg_start, end=end, reason=reason))
                st.segment, st.seg_start, st.resetting = st.segment + 1, end, False
                if st.finishing:
                    events.append(Done(sid, audio_seconds=end))
                    self.close(sid)
        return events

    def drain(self, max_steps: int | None = None) -> list[Event]:
        out: list[Event] = []
        while self.pending():
            out += self.step()
        return out
