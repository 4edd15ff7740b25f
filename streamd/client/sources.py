"""Where a stream's audio comes from: raw PCM (:class:`PcmSource`), a file (:class:`FileSource`), the
microphone (:class:`MicSource`), and :func:`as_source` for anything else."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncIterator

from ..audio.pcm import load_audio
from ..wire import SAMPLE_WIDTH
from .messages import to_s16le


# ---------------------------------------------------------------------------- sources


class PcmSource:
    """Raw PCM (``s16le`` or ``f32le``, mono) at ``sample_rate``.

    ``data``: bytes (sent in ``chunk_seconds`` frames), a binary file object (read ``chunk_seconds`` at a
    time), or an iterable / async iterable of byte chunks (sent as they come, regrouped to whole
    samples; a plain iterable is read on the event loop, so use an async one for blocking reads).
    ``speed``: pacing, 1.0 = real time (frame ``i`` leaves ``i`` samples' duration after the first),
    0 = as fast as the connection takes them.  Bytes can be streamed again; iterators once.
    """

    def __init__(self, data: Any, sample_rate: int = 16000, format: str = "s16le", chunk_seconds: float = 0.1,
                 speed: float = 0.0):
        if format not in SAMPLE_WIDTH:
            raise ValueError(f"format must be one of {list(SAMPLE_WIDTH)}, got {format!r}")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
        if not chunk_seconds > 0 or not speed >= 0:
            raise ValueError(f"chunk_seconds must be > 0 and speed >= 0, got {chunk_seconds!r} and {speed!r}")
        self.width = SAMPLE_WIDTH[format]
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)
            if len(data) % self.width:
                raise ValueError(f"{len(data)} bytes is not a whole number of {self.width}-byte {format} samples")
        elif not (hasattr(data, "read") or hasattr(data, "__iter__") or hasattr(data, "__aiter__")):
            raise TypeError(f"PCM data must be bytes, a binary file object or an (async) iterable of bytes, "
                            f"got {type(data).__name__}")
        self.data = data
        self.sample_rate = sample_rate
        self.format = format
        self.chunk_seconds = chunk_seconds
        self.speed = float(speed)

    @property
    def duration(self) -> float | None:
        """Seconds of audio (None unless the data is bytes)."""
        return len(self.data) / self.width / self.sample_rate if isinstance(self.data, bytes) else None

    async def _pieces(self, step: int) -> AsyncIterator[bytes]:
        data = self.data
        if isinstance(data, bytes):
            for i in range(0, len(data), step):
                yield data[i: i + step]
        elif hasattr(data, "read"):
            while True:
                piece = data.read(step)
                if not piece:
                    return
                yield bytes(piece)
        elif hasattr(data, "__aiter__"):
            async for piece in data:
                yield bytes(piece)
        else:
            for piece in data:
                yield bytes(piece)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Binary frames of whole samples, paced at ``speed`` x real time."""
        step = max(1, round(self.sample_rate * self.chunk_seconds)) * self.width
        carry, sent, t0 = b"", 0, None
        async for piece in self._pieces(step):
            buf = carry + piece
            n = len(buf) - len(buf) % self.width
            carry = buf[n:]
            if not n:
                continue
            if self.speed > 0:
                now = time.perf_counter()
                t0 = now if t0 is None else t0
                delay = t0 + sent / self.sample_rate / self.speed - now
                if delay > 0:
                    await asyncio.sleep(delay)
            yield buf[:n]
            sent += n // self.width
        if carry:
            raise ValueError(f"the audio ends inside a sample: {len(carry)} byte(s) left of a {self.width}-byte "
                             f"{self.format} sample")


class FileSource(PcmSource):
    """An audio file (WAV; any format soundfile reads when it is installed), mono, at its own rate.

    Read at construction (``AudioError``, a ValueError, if it cannot be); streamed as ``s16le`` in
    ``chunk_seconds`` frames at ``speed`` x real time (0: as fast as possible).  Can be streamed again.
    """

    def __init__(self, path: str | os.PathLike, chunk_seconds: float = 0.1, speed: float = 0.0):
        x, rate = load_audio(path)
        super().__init__(to_s16le(x), rate, "s16le", chunk_seconds, speed)
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        return f"FileSource({self.path!r}, {self.sample_rate} Hz, {self.duration:.2f} s)"


class MicSource:
    """The microphone, through :class:`streamd.capture.MicCapture` (sounddevice and PortAudio, optional).

    ``device``: a PortAudio index or name substring (None: the default input); a device that refuses
    ``sample_rate`` is opened at its own rate and resampled.  ``file``: play an audio file in real time
    as if it were the microphone (at the file's rate; no sound card needed).  Raises
    :class:`streamd.capture.MicError` (saying what to install or plug in) when there is no usable device.
    Stop it with :meth:`stop` (e.g. on Ctrl-C): the stream then ends with what was captured.
    ``dropped``: blocks lost because the connection could not keep up.
    """

    format = "s16le"

    def __init__(self, device: int | str | None = None, *, sample_rate: int = 16000, block_seconds: float = 0.1,
                 file: str | os.PathLike | None = None, queue_seconds: float = 5.0):
        from .. import capture

        source = capture.WavSource(file, block_seconds=block_seconds) if file is not None else None
        rate = source.sample_rate if source is not None else sample_rate
        self.capture = capture.MicCapture(device, sample_rate=rate, block_seconds=block_seconds, source=source,
                                      queue_seconds=queue_seconds)

    @property
    def sample_rate(self) -> int:
        return self.capture.sample_rate

    @property
    def dropped(self) -> int:
        return self.capture.overflows

    async def open(self) -> None:
        """Start capturing (before the connection opens, so that nothing said meanwhile is lost)."""
        self.capture.start()

    async def chunks(self) -> AsyncIterator[bytes]:
        async for block in self.capture.blocks():
            yield to_s16le(block)

    def stop(self) -> None:
        self.capture.stop()


def as_source(source: Any, sample_rate: int | None = None, format: str | None = None) -> Any:
    """A path -> :class:`FileSource`; bytes, file objects, iterables -> :class:`PcmSource` (``sample_rate``
    default 16000, ``format`` s16le); a source object as it is.  A file's or source's own rate and format
    cannot be overridden (the client does not convert; the server resamples any rate 8-48 kHz)."""
    if isinstance(source, (str, os.PathLike)):
        source = FileSource(source)
    elif not hasattr(source, "chunks"):
        return PcmSource(source, 16000 if sample_rate is None else sample_rate,
                         "s16le" if format is None else format)
    for name, given in (("sample_rate", sample_rate), ("format", format)):
        own = getattr(source, name)
        if given is not None and given != own:
            raise ValueError(f"{name} {given!r} given for a source at {own!r}: a file's or a source's own "
                             f"{name} is sent (the server resamples any rate 8-48 kHz)")
    return source
