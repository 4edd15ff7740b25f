"""Raw PCM decoding, audio-file loading and sample-rate validation.

Conventions: every function returns mono ``float32`` numpy arrays with
samples nominally in [-1, 1] (16-bit integers are divided by 32768).  All
problems are reported as :class:`AudioError`, a ``ValueError`` carrying a
short machine-readable ``code`` (``bad_audio``, ``bad_format``,
``bad_sample_rate``) and a message that says exactly what was wrong; the
transport layer forwards both to the client.
"""

from __future__ import annotations

import os
import wave
from typing import Any

import numpy as np

from ..options import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, OptionError, check_stream_rate

__all__ = [
    "AudioError",
    "SUPPORTED_FORMATS",
    "MIN_SAMPLE_RATE",
    "MAX_SAMPLE_RATE",
    "decode_pcm",
    "load_audio",
    "check_sample_rate",
    "wav_truncation",
]

SUPPORTED_FORMATS = ("s16le", "f32le")
"""Raw PCM encodings accepted by :func:`decode_pcm` (little-endian, mono)."""

_SAMPLE_WIDTH = {"s16le": 2, "f32le": 4}
_MAX_ABS_F32 = 1e3  # beyond this a float sample is garbage, not a slightly hot signal


class AudioError(ValueError):
    """Invalid audio input.

    Attributes:
        code: machine-readable reason: ``bad_audio`` (undecodable or corrupt
            samples / unreadable file), ``bad_format`` (unknown encoding) or
            ``bad_sample_rate``.
    """

    def __init__(self, message: str, code: str = "bad_audio") -> None:
        super().__init__(message)
        self.code = code


def decode_pcm(data: bytes | bytearray | memoryview, fmt: str, channels: int = 1) -> np.ndarray:
    """Decode one packet of raw little-endian PCM to mono.

    Args:
        data: raw bytes; length must be a multiple of the frame size
            (sample width x ``channels``; the width is 2 for ``s16le``, 4 for ``f32le``).
        fmt: one of :data:`SUPPORTED_FORMATS`.
        channels: interleaved channels per frame (1 = mono); more are averaged
            to mono, as :func:`load_audio` does with files.

    Returns:
        ``(N,)`` float32 samples in [-1, 1] (``s16le`` is divided by 32768;
        ``f32le`` is clamped to [-1, 1]), one per frame.

    Raises:
        AudioError: ``bad_format`` for an unknown ``fmt``; ``bad_audio`` for a
            non-bytes payload, a ragged byte length, NaN/inf samples or absurd
            float magnitudes (|x| > 1e3).
    """
    if fmt not in _SAMPLE_WIDTH:
        raise AudioError(f"unknown audio format {fmt!r}; supported: {', '.join(SUPPORTED_FORMATS)}",
                         code="bad_format")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise AudioError(f"audio data must be bytes, got {type(data).__name__}")
    if isinstance(data, memoryview) and not data.contiguous:
        data = data.tobytes()
    nbytes = data.nbytes if isinstance(data, memoryview) else len(data)
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise AudioError(f"channels must be a positive integer, got {channels!r}", code="bad_format")
    width = _SAMPLE_WIDTH[fmt]
    if nbytes % (width * channels):
        if channels == 1:
            raise AudioError(f"{fmt} audio needs a multiple of {width} bytes per packet, got {nbytes} bytes")
        raise AudioError(f"{channels}-channel {fmt} audio needs a multiple of {width * channels} bytes "
                         f"(whole frames) per packet, got {nbytes} bytes")
    if nbytes == 0:
        return np.zeros(0, dtype=np.float32)
    if channels > 1:
        return decode_pcm(data, fmt).reshape(-1, channels).mean(axis=1, dtype=np.float32)
    if fmt == "s16le":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)

    x = np.frombuffer(data, dtype="<f4").astype(np.float32)  # astype copies: result is writable
    bad = ~np.isfinite(x)
    if bad.any():
        first = int(np.argmax(bad))
        raise AudioError(f"f32le audio contains {int(bad.sum())} non-finite samples (NaN/inf), "
                         f"first at sample {first}")
    big = np.abs(x) > _MAX_ABS_F32
    if big.any():
        first = int(np.argmax(big))
        raise AudioError(f"f32le audio has absurd sample values (|x| > {_MAX_ABS_F32:g}; expected [-1, 1]): "
                         f"{int(big.sum())} samples, first at sample {first} = {float(x[first]):g}")
    np.clip(x, -1.0, 1.0, out=x)
    return x


def _soundfile() -> Any:
    """The optional ``soundfile`` module, or None when it is not installed."""
    try:
        import soundfile
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return soundfile


def _load_wave(path: str) -> tuple[np.ndarray, int]:
    """stdlib fallback: integer PCM WAV (8-, 16- or 32-bit), any channel count."""
    try:
        with wave.open(path, "rb") as w:
            channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except (wave.Error, EOFError) as e:  # e.g. "unknown format: 3" (float WAV), "file does not start with RIFF id"
        raise AudioError(f"cannot read audio file {path!r} ({e}): without the soundfile package only 8/16/32-bit "
                         "integer PCM WAV files can be read; pip install soundfile (FLAC, OGG, float and 24-bit "
                         "WAV, ...)") from None
    if width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise AudioError(f"{path}: {8 * width}-bit WAV is not supported without the soundfile package "
                         "(only 8/16/32-bit integer PCM): pip install soundfile")
    usable = len(x) - len(x) % channels
    return x[:usable].reshape(-1, channels).mean(axis=1, dtype=np.float32), rate


def load_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Read an audio file as mono float32.

    Uses ``soundfile`` when it is importable (WAV, FLAC, OGG, ...), else the
    stdlib ``wave`` module (integer PCM WAV only).  Multi-channel audio is
    averaged over channels.  The sample rate is returned as-is (resample
    with :mod:`streamd.audio.resample`).

    Returns:
        ``(samples, sample_rate)``: samples ``(N,)`` float32 in [-1, 1],
        sample_rate in Hz.

    Raises:
        AudioError: ``bad_audio`` if the file is missing, cannot be decoded or is a truncated WAV
        (:func:`wav_truncation`; both readers would decode what is there without a word).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise AudioError(f"cannot read audio file {path!r}: no such file")
    short = wav_truncation(path)
    if short:
        raise AudioError(f"cannot read audio file {path!r}: {short}")
    sf = _soundfile()
    try:
        if sf is not None:
            data, rate = sf.read(path, dtype="float32", always_2d=True)
            x = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
            x = np.ascontiguousarray(x, dtype=np.float32)
        else:
            x, rate = _load_wave(path)
    except AudioError:
        raise
    except Exception as e:  # soundfile/wave raise many types (RuntimeError, wave.Error, EOFError...)
        raise AudioError(f"cannot read audio file {path!r}: {e}") from e
    return x, int(rate)


# a data chunk size at least this large is a streaming writer's "length unknown" (0xFFFFFFFF, sox's 0x7FFFF000...)
_WAV_UNKNOWN_LENGTH = 0x7FFFF000


def wav_truncation(path: str | os.PathLike) -> str | None:
    """Why the RIFF/WAVE file at ``path`` is truncated (its ``data`` chunk announces more bytes than the file
    holds), or None: not a WAV, complete, or written with an unknown length (a stream's header)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        offset = 12
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                return None  # no data chunk: the reader says what is wrong
            cid, n = chunk[:4], int.from_bytes(chunk[4:], "little")
            offset += 8
            if cid == b"data":
                have = size - offset
                if n < _WAV_UNKNOWN_LENGTH and n > have:
                    return (f"truncated WAV: its header announces {n} bytes of audio, the file holds {max(0, have)} "
                            f"({100 * max(0, have) / n:.0f} %)")
                return None
            offset += n + (n & 1)  # chunks are padded to an even size
            f.seek(offset)


def check_sample_rate(rate: Any) -> int:
    """Validate a client-declared sample rate (Hz): :func:`streamd.options.check_stream_rate`.

    Returns:
        the rate as a Python int.

    Raises:
        AudioError: ``bad_sample_rate`` unless ``rate`` is an integer in
            :data:`~streamd.options.SAMPLE_RATE_RANGE` inclusive.
    """
    try:
        return check_stream_rate(rate)
    except OptionError as e:
        raise AudioError(str(e), code=e.code) from None
