"""Microphone capture for the engine: audio blocks from a sound card (or a stand-in) into asyncio.

How it works.  An *audio source* runs on its own thread (PortAudio's callback
thread for a real microphone, a small pacing thread for a WAV file or an
iterable of blocks) and calls two functions that :class:`MicCapture` gives
it: ``on_block(samples)`` for every block of float32 mono samples and
``on_end(error_or_None)`` once when it stops.  Both only hand the data to the
event loop with ``loop.call_soon_threadsafe``; they never block, so the
PortAudio callback stays real-time safe.  On the loop the block goes into a
bounded queue: when the consumer falls behind, new blocks are dropped,
counted in :attr:`MicCapture.overflows` and logged.  :meth:`MicCapture.blocks`
is the async iterator over that queue.  Every source, the real microphone and
the injected ones used by tests and sound-card-less machines, takes exactly
this path.  Blocks always come out at the capture's ``sample_rate``: a device
that refuses that rate is opened at its default rate and a WAV file plays at
its own, and the consumer side resamples (exact streaming resampler, flushed
at the end).

Problems are :class:`MicError` with a message that says what to do: no input
device, device lost (the PortAudio stream finished on its own, or no audio for
``stall_seconds``), or the PortAudio system library is missing.  The daemon
(``streamd serve --mic``) logs them and retries.

``sounddevice`` is imported lazily: the rest of streamd works without it and
without PortAudio.  This module prints nothing: the console front end
(``streamd mic``) is :mod:`streamd.mic`, and feeding a capture into an
in-process :class:`~streamd.engine.Recognizer` is
:func:`streamd.feed.transcribe_capture`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterable, Protocol

import numpy as np

from .options import check_sample_rate

__all__ = ["MicError", "AudioSource", "DeviceSource", "ReplaySource", "WavSource", "MicCapture",
           "list_devices", "format_devices", "PORTAUDIO_MISSING", "SOUNDDEVICE_MISSING", "NO_INPUT_DEVICE"]

log = logging.getLogger("streamd.mic")  # the name daemon logs have always shown for capture

PORTAUDIO_MISSING = "sounddevice needs the system library libportaudio2 (apt-get install libportaudio2)"
SOUNDDEVICE_MISSING = "microphone capture needs the Python package sounddevice (pip install 'streamd[mic]')"
NO_INPUT_DEVICE = ("no audio input device found (PortAudio lists no device with input channels); plug in a "
                   "microphone or choose an input device (`streamd mic --list-devices`)")


class MicError(RuntimeError):
    """Microphone capture failed; the message says what is wrong and what to do."""


OnBlock = Callable[[np.ndarray], None]
OnEnd = Callable[["BaseException | None"], None]


class AudioSource(Protocol):
    """What :class:`MicCapture` drives.  ``start`` must not block; the callbacks may run on any thread.

    ``sample_rate`` is the rate of the blocks the source will deliver (known
    after ``start``).  A source whose optional ``lossless`` attribute is true
    (a file played without pacing) is never dropped from: its ``on_block``
    waits for room in the capture's queue instead (a sound card cannot
    wait, so its blocks are dropped and counted when the consumer lags).  ``on_block(x)`` gets ``(N,)`` float32 mono samples in
    [-1, 1] (a sound card also calls ``on_block.device_overflow()`` when the
    hardware flags an input overflow); ``on_end(err)`` is called once when
    the source stops (``None``: normal end, else the reason).
    """

    sample_rate: int

    def start(self, on_block: OnBlock, on_end: OnEnd, sample_rate: int, blocksize: int) -> None: ...

    def stop(self) -> None: ...


# ---------------------------------------------------------------------------- sound card


def _sounddevice() -> Any:
    """Import sounddevice lazily, turning a missing package or PortAudio into MicError."""
    try:
        import sounddevice
    except ImportError as e:
        raise MicError(SOUNDDEVICE_MISSING) from e
    except OSError as e:  # sounddevice raises OSError('PortAudio library not found') at import
        raise MicError(f"{PORTAUDIO_MISSING}; import failed with: {e}") from e
    return sounddevice


def list_devices() -> list[dict]:
    """Input devices PortAudio knows: ``index, name, hostapi, channels, default_samplerate, default``.

    Raises MicError when sounddevice or PortAudio is missing.
    """
    sd = _sounddevice()
    try:
        devices = sd.query_devices()
        default_in = sd.default.device[0]
        apis = sd.query_hostapis()
    except sd.PortAudioError as e:
        raise MicError(f"cannot list audio devices: {e}") from e
    out = []
    for d in devices:
        if d["max_input_channels"] > 0:
            out.append({"index": int(d["index"]), "name": d["name"], "hostapi": apis[d["hostapi"]]["name"],
                        "channels": int(d["max_input_channels"]),
                        "default_samplerate": float(d["default_samplerate"]),
                        "default": int(d["index"]) == default_in})
    return out


def format_devices(devices: list[dict]) -> str:
    """Human-readable table of :func:`list_devices` (``*`` marks the default input)."""
    if not devices:
        return NO_INPUT_DEVICE
    return "\n".join(f"{'*' if d['default'] else ' '} {d['index']:3d}  {d['name']}  ({d['hostapi']}, "
                     f"{d['channels']} ch, {d['default_samplerate']:.0f} Hz)" for d in devices)


class DeviceSource:
    """A sound card input through a sounddevice ``InputStream`` (mono float32, callback mode).

    ``device`` is a PortAudio index, a name substring, or None for the default
    input.  The device is resolved at construction (so a missing device fails
    fast with MicError) and opened by :meth:`start`.  If the device does not
    support the requested rate, its default rate is used (the engine
    resamples any rate 8-48 kHz).
    """

    def __init__(self, device: int | str | None = None):
        self._sd = sd = _sounddevice()
        if not list_devices():
            raise MicError(NO_INPUT_DEVICE)
        try:
            info = sd.query_devices(device, kind="input") if device is None else sd.query_devices(device)
        except ValueError as e:  # no name match, or several
            raise MicError(f"input device {device!r}: {e}; see `streamd mic --list-devices`") from e
        except sd.PortAudioError as e:
            what = "no default input device is set" if device is None else f"no audio device {device!r}"
            raise MicError(f"{what} ({e}); see `streamd mic --list-devices`") from e
        if info["max_input_channels"] < 1:
            raise MicError(f"audio device {device!r} ({info['name']}) has no input channels; "
                           "see `streamd mic --list-devices`")
        self.index = int(info["index"])
        self.name = str(info["name"])
        self.default_rate = int(info["default_samplerate"])
        self.sample_rate = 0
        self._stream = None
        self._stopping = False

    def _pick_rate(self, wanted: int) -> int:
        sd = self._sd
        try:
            sd.check_input_settings(device=self.index, channels=1, dtype="float32", samplerate=wanted)
            return wanted
        except Exception as e:  # noqa: BLE001 - PortAudioError or ValueError, both mean "not supported"
            log.info("input device %s does not take %d Hz (%s); using its default %d Hz",
                     self.name, wanted, e, self.default_rate)
            return self.default_rate

    def start(self, on_block: OnBlock, on_end: OnEnd, sample_rate: int, blocksize: int) -> None:
        sd = self._sd
        self.sample_rate = rate = self._pick_rate(sample_rate)
        blocksize = max(1, round(blocksize * rate / sample_rate))
        self._stopping = False

        def callback(indata, frames, time_info, status):  # PortAudio thread: copy and hand over, nothing else
            if status.input_overflow:
                on_block.device_overflow()
            on_block(indata[:, 0].copy())

        def finished():
            on_end(None if self._stopping else
                   MicError(f"input device {self.name!r} stopped delivering audio (device lost or unplugged?)"))

        try:
            self._stream = sd.InputStream(samplerate=rate, blocksize=blocksize, device=self.index, channels=1,
                                          dtype="float32", callback=callback, finished_callback=finished)
            self._stream.start()
        except (sd.PortAudioError, ValueError) as e:
            self._stream = None
            raise MicError(f"cannot open input device {self.index} ({self.name}) at {rate} Hz: {e}") from e

    def stop(self) -> None:
        self._stopping = True
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.abort()
                stream.close()
            except Exception as e:  # noqa: BLE001 - a lost device may fail to close; nothing to do
                log.debug("closing input stream failed: %s", e)

    def __repr__(self) -> str:
        return f"input device {self.index} ({self.name})"


# ---------------------------------------------------------------------------- stand-ins


class ReplaySource:
    """Blocks from an iterable, delivered from a thread like a sound card would.

    Args:
        blocks: iterable of ``(N,)`` (or ``(N, C)``, averaged to mono) numpy
            sample arrays in [-1, 1] at ``sample_rate``.
        sample_rate: rate of the blocks in Hz (None: the capture's requested rate).
        speed: pacing; 1.0 = real time (each block after its own duration),
            2.0 = twice as fast, 0 = as fast as the consumer takes them
            (``lossless``: the capture makes the thread wait, drops nothing).
        name: used in messages.
    """

    def __init__(self, blocks: Iterable[np.ndarray], sample_rate: int | None = None, speed: float = 1.0,
                 name: str = "replayed audio"):
        if speed < 0:
            raise ValueError(f"speed must be >= 0 (0 = as fast as possible), got {speed}")
        self._blocks = blocks
        self.sample_rate = sample_rate or 0
        self.speed = float(speed)
        self.lossless = self.speed == 0  # unpaced: nothing is lost to a slow consumer, it waits
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_block: OnBlock, on_end: OnEnd, sample_rate: int, blocksize: int) -> None:
        if not self.sample_rate:
            self.sample_rate = sample_rate
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(on_block, on_end), name="streamd-replay",
                                        daemon=True)
        self._thread.start()

    def _run(self, on_block: OnBlock, on_end: OnEnd) -> None:
        t0 = time.monotonic()
        played = 0  # samples delivered so far
        try:
            for i, b in enumerate(self._blocks):
                if self._stop.is_set():
                    break
                x = np.asarray(b, dtype=np.float32)
                if x.ndim == 2:
                    x = x.mean(axis=1, dtype=np.float32)
                if x.ndim != 1:
                    raise MicError(f"{self.name}: block {i} must be (N,) or (N, C) samples, got shape {x.shape}")
                if self.speed > 0:
                    due = t0 + (played + x.size) / self.sample_rate / self.speed
                    if self._stop.wait(max(0.0, due - time.monotonic())):
                        break
                played += x.size
                on_block(x.copy())
        except Exception as e:  # noqa: BLE001 - a failing source ends the capture with its reason
            on_end(e if isinstance(e, MicError) else MicError(f"{self.name} failed: {type(e).__name__}: {e}"))
            return
        on_end(None)

    def stop(self) -> None:
        self._stop.set()

    def __repr__(self) -> str:
        return self.name


class WavSource(ReplaySource):
    """An audio file played as if it were the microphone (real time by default), at the file's rate."""

    def __init__(self, path: str | os.PathLike, speed: float = 1.0, block_seconds: float = 0.1):
        from .audio.pcm import AudioError, load_audio

        try:
            x, rate = load_audio(path)
        except AudioError as e:
            raise MicError(str(e)) from e
        n = max(1, round(block_seconds * rate))
        super().__init__((x[i: i + n] for i in range(0, x.size, n)), rate, speed, name=f"file {os.fspath(path)}")
        self.duration = x.size / rate


# ---------------------------------------------------------------------------- capture


_END = object()


class MicCapture:
    """Captured audio as an async iterator of float32 mono blocks.

    Args:
        device: PortAudio input index or name substring; None = default input.
            Ignored when ``source`` is given.
        sample_rate: rate of the delivered blocks in Hz (sources at another
            rate, e.g. a device that refuses it or a WAV file, are resampled).
        block_seconds: block length the source delivers.
        source: None (sound card), a path to an audio file (played in real
            time, :class:`WavSource`), an :class:`AudioSource`, or an iterable
            of numpy blocks (:class:`ReplaySource` at ``sample_rate``, real time).
        queue_seconds: audio the queue holds before blocks are dropped.
        stall_seconds: no block for this long while running -> MicError
            (device lost); None disables the check.

    Attributes:
        overflows: blocks dropped because the consumer fell behind (never for a
            ``lossless`` source, which waits for room instead).
        device_overflows: blocks the sound card flagged as input overflow.
    """

    def __init__(self, device: int | str | None = None, sample_rate: int = 16000, block_seconds: float = 0.1,
                 source: Any = None, queue_seconds: float = 5.0, stall_seconds: float | None = 5.0):
        check_sample_rate(sample_rate)
        if not 0.001 <= block_seconds <= 2.0:
            raise ValueError(f"block_seconds must be 0.001..2.0, got {block_seconds!r}")
        if queue_seconds < block_seconds:
            raise ValueError(f"queue_seconds ({queue_seconds}) must hold at least one block ({block_seconds} s)")
        if source is None:
            source = DeviceSource(device)
        elif isinstance(source, (str, os.PathLike)):
            source = WavSource(source, block_seconds=block_seconds)
        elif not (hasattr(source, "start") and hasattr(source, "stop")):
            if not hasattr(source, "__iter__"):
                raise TypeError(f"source must be None, a file path, an AudioSource or an iterable of numpy "
                                f"blocks, got {type(source).__name__}")
            source = ReplaySource(source, sample_rate)
        self.source: AudioSource = source
        self.requested_rate = sample_rate
        self.block_seconds = block_seconds
        self.max_blocks = max(1, round(queue_seconds / block_seconds))
        self.stall_seconds = stall_seconds
        self.overflows = 0
        self.device_overflows = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._resampler = None
        self._started = False  # one-shot: a capture is started once (make a new one to retry)
        self._running = False  # accepting blocks (until the end marker)
        self._lossless = bool(getattr(source, "lossless", False))
        self._room = threading.Semaphore(self.max_blocks)  # free queue slots, for a lossless source

    @property
    def sample_rate(self) -> int:
        """Rate of the delivered blocks (always the requested rate)."""
        return self.requested_rate

    @property
    def source_rate(self) -> int:
        """Rate the source delivers at (known after :meth:`start`)."""
        return int(self.source.sample_rate or self.requested_rate)

    # -- thread side: never blocks, never touches the queue directly

    def _on_block(self, x: np.ndarray) -> None:
        if self._lossless:  # wait for a free slot (the consumer frees one per block it takes)
            while not self._room.acquire(timeout=0.1):
                if not self._running:
                    return
        self._post(self._put, x)

    def _on_device_overflow(self) -> None:
        self._post(self._count_device_overflow)

    def _on_end(self, err: BaseException | None) -> None:
        self._post(self._put_end, err)

    def _post(self, fn, *args) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: capture is over, drop silently
            pass

    # -- loop side

    def _put(self, x: np.ndarray) -> None:
        q = self._queue
        if q is None or not self._running:
            return
        if q.qsize() >= self.max_blocks:
            self.overflows += 1
            if self.overflows == 1 or self.overflows % 100 == 0:
                log.warning("microphone queue full (%d blocks): consumer too slow, %d block(s) dropped so far",
                            self.max_blocks, self.overflows)
            return
        q.put_nowait(x)

    def _count_device_overflow(self) -> None:
        self.device_overflows += 1
        if self.device_overflows == 1 or self.device_overflows % 100 == 0:
            log.warning("sound card reported input overflow (%d so far)", self.device_overflows)

    def _put_end(self, err: BaseException | None) -> None:
        if self._queue is not None and self._running:
            self._running = False
            self._queue.put_nowait(_END if err is None else err)  # unbounded queue: the end always fits

    def start(self) -> None:
        """Open the source (call from a running event loop); MicError if it cannot be opened.

        A capture runs once: calling start again does nothing.
        """
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()  # bounded by _put, so that the end marker always fits
        self._running = True
        blocksize = max(1, round(self.block_seconds * self.requested_rate))
        try:
            self.source.start(_BlockCallback(self._on_block, self._on_device_overflow), self._on_end,
                              self.requested_rate, blocksize)
        except Exception:
            self._running = False
            raise
        if self.source_rate != self.requested_rate:
            from .audio.resample import StreamingResampler

            log.info("%r delivers %d Hz: resampling to %d Hz", self.source, self.source_rate, self.requested_rate)
            self._resampler = StreamingResampler(self.source_rate, self.requested_rate)

    def stop(self) -> None:
        """Stop the source; :meth:`blocks` ends after the blocks already queued."""
        self.source.stop()
        if self._loop is not None and self._running:
            try:
                if asyncio.get_running_loop() is self._loop:
                    self._put_end(None)
                    return
            except RuntimeError:
                pass
            self._on_end(None)

    async def blocks(self) -> AsyncIterator[np.ndarray]:
        """``(N,)`` float32 blocks until the source ends; raises MicError on device loss."""
        self.start()
        assert self._queue is not None
        try:
            while True:
                try:
                    item = await asyncio.wait_for(self._queue.get(), self.stall_seconds)
                except asyncio.TimeoutError:
                    raise MicError(f"no audio from {self.source!r} for {self.stall_seconds:g} s "
                                   "(device lost or unplugged?)") from None
                if item is _END:
                    if self._resampler is not None:
                        tail = self._resampler.flush()
                        if tail.size:
                            yield tail
                    return
                if isinstance(item, BaseException):
                    raise item
                if self._lossless:
                    self._room.release()
                if self._resampler is not None:
                    item = self._resampler.process(item)
                    if not item.size:
                        continue
                yield item
        finally:
            self._running = False
            self.source.stop()


class _BlockCallback:
    """``on_block`` handed to sources: callable with a block, plus ``device_overflow()`` for sound cards."""

    __slots__ = ("_block", "device_overflow")

    def __init__(self, block: OnBlock, device_overflow: Callable[[], None]):
        self._block = block
        self.device_overflow = device_overflow

    def __call__(self, x: np.ndarray) -> None:
        self._block(x)

