"""Python client for the streamd daemon's v1 websocket protocol (``/v1/stream``, docs/protocol.md).

::

    from streamd.client import Client, FileSource, MicSource
    from streamd.events import Final, Partial

    async with Client("ws://127.0.0.1:8765/v1/stream", token=None) as c:
        async for ev in c.stream("audio.wav", method="modified_beam"):     # a path: FileSource
            if isinstance(ev, Final):
                print(ev.text, [(w.word, w.conf) for w in ev.words])

    events = transcribe_file("ws://127.0.0.1:8765/v1/stream", "audio.wav")   # the same, blocking

One :meth:`Client.stream` is one connection, that is one stream: ``start``, ``ready``, the audio as binary
frames, ``eof``, then the server's events until ``done`` and the close.  Events are the engine's own
dataclasses (:mod:`streamd.events`: ``Partial``, ``Final``, ``WakeWord``, ``Error``, ``Done``), rebuilt
with ``from_wire``; the ``ready`` message is :attr:`Stream.ready` (:class:`Ready`).  A server ``error``
is yielded as an :class:`~streamd.events.Error` event and ends the stream; not reaching the server, an
HTTP refusal or a connection lost before ``done`` raise :class:`ClientError` subclasses.  With
``retries``, the refusals whose close code says "try again later" (1013: ``too_many_streams``,
``overloaded``, ``loading``, ...) or "going away" (1001: ``shutting_down``, a daemon draining for a
restart), HTTP 502/503/504 (a load balancer with no backend) and connection failures are retried
before any audio is sent, after the refusal's ``retry_after`` when it has one; the source is read
only after ``ready``.

Sources: a file path or :class:`FileSource` (WAV through :func:`streamd.audio.pcm.load_audio`: the
stdlib ``wave`` module, or soundfile when installed; sent at the file's own rate, the server resamples
any rate 8-48 kHz), :class:`PcmSource` (raw ``s16le`` / ``f32le`` bytes, a binary file object, or an
iterable or async iterable of byte chunks), :class:`MicSource` (the microphone through
:mod:`streamd.capture`, sounddevice optional).  Anything with ``sample_rate``, ``format`` and an async
``chunks()`` generator of PCM bytes (optionally ``open()`` and ``stop()``) is a source too.

Stream options are the start message's fields (:data:`STREAM_OPTIONS`, from the server's
:data:`~streamd.wire.START_FIELDS`): ``method``, ``beam``, ``partials``, ``keywords``,
``endpointing``, ``wake_words``, ``hotwords`` (None or absent: the server's default), and
``sample_rate`` / ``format`` for raw PCM.  Their values are checked by the server (an ``error`` event).

Needs ``websockets`` (>= 13) and numpy; it imports neither torch nor the server's I/O modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping

import numpy as np

from .audio.pcm import load_audio
from .config import ServerConfig
from .events import WIRE_TYPES, Error, Event, Final, from_wire
from .wire import CLOSE_CODES, SAMPLE_WIDTH, START_FIELDS

__all__ = ["Client", "Stream", "Ready", "FileSource", "PcmSource", "MicSource", "ClientError", "ConnectError",
           "ConnectionLost", "StreamError", "transcribe", "transcribe_file", "final_text", "to_s16le",
           "STREAM_OPTIONS", "RETRY_CODES", "DEFAULT_URL"]

log = logging.getLogger("streamd.client")

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
        from . import capture

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


# ---------------------------------------------------------------------------- streams


def _websockets() -> Any:
    try:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
    except ImportError as e:
        raise ClientError("streamd.client needs the websockets package, version 13 or later "
                          f"(pip install websockets): {e}") from None
    return connect, ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI


class Stream:
    """One stream (one connection), made by :meth:`Client.stream`; iterate it once.

    ``async for ev in stream`` gives typed events (:meth:`events`); :meth:`messages` gives the server's
    JSON messages as dicts instead, ``ready`` first.  After iterating: :attr:`ready`, :attr:`close_code`
    (1000 after ``done``; 1001 when a draining server ended the stream early, with the final and
    ``done`` for the audio it had received), :attr:`close_reason`, :attr:`attempts`.  While and after
    sending: :attr:`sent` lists ``(time.perf_counter() after the frame went out, samples sent so far)``
    per binary frame and :attr:`eof_at` when ``eof`` went out (latency measurements).  An exception
    from the source (e.g. a microphone unplugged) ends the stream with what was sent and is re-raised
    after ``done``.
    """

    def __init__(self, client: "Client", source: Any, options: Mapping[str, Any]):
        self.client = client
        self.source = source
        self.options = dict(options)
        self.ready: Ready | None = None
        self.close_code: int | None = None
        self.close_reason = ""
        self.attempts = 0
        self.sent: list[tuple[float, int]] = []
        self.eof_at: float | None = None
        self.source_error: BaseException | None = None
        self._ws: Any = None
        self._sender: asyncio.Task | None = None
        self._stop_event = asyncio.Event()
        self._used = False

    @property
    def sent_seconds(self) -> float:
        """Seconds of audio sent so far."""
        return self.sent[-1][1] / self.source.sample_rate if self.sent else 0.0

    def start_message(self) -> dict:
        return {"type": "start", "sample_rate": self.source.sample_rate, "format": self.source.format,
                **self.options}

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def __aenter__(self) -> "Stream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def events(self) -> AsyncIterator[Event]:
        """The stream's events (``Partial``, ``Final``, ``WakeWord``, ``Error``, ``Done``), as they arrive."""
        messages = self.messages()
        try:
            async for msg in messages:
                if msg.get("type") in WIRE_TYPES:
                    yield from_wire(msg)
        finally:
            await messages.aclose()

    async def messages(self) -> AsyncIterator[dict]:
        """The server's messages as dicts (``ready`` or a refusal's ``error`` first), until the close."""
        if self._used:
            raise RuntimeError("a Stream is iterated once: call Client.stream() again for another stream")
        self._used = True
        _, ConnectionClosed, *_ = _websockets()
        self.client._streams.add(self)
        try:
            opener = getattr(self.source, "open", None)
            if opener is not None:
                await opener()
            first = await self._connect()
            yield first
            ws = self._ws
            ended = first.get("type") != "ready"  # a refusal: its error, then the close
            if not ended:
                self._sender = asyncio.get_running_loop().create_task(self._send())
            try:
                async for raw in ws:
                    if isinstance(raw, bytes):
                        continue
                    msg = self._parse(raw)
                    if msg.get("type") in ("done", "error"):
                        ended = True
                        await self._stop_sending()
                    yield msg
            except ConnectionClosed:
                pass
            self.close_code, self.close_reason = ws.close_code, ws.close_reason or ""
            if not ended:
                raise ConnectionLost(f"connection closed with code {self.close_code} {self.close_reason}".strip(),
                                     self.close_code, self.close_reason)
            if self.source_error is not None:
                raise self.source_error
        finally:
            await self.aclose()

    def _parse(self, raw: str) -> dict:
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            raise ClientError(f"{self.client.url} does not speak the v1 protocol: it sent {raw[:100]!r}")
        return msg

    async def _connect(self) -> dict:
        """Open the connection and send ``start``: the ``ready`` message, or a refusal's ``error``."""
        connect, ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI = _websockets()
        c = self.client
        delay = c.retry_delay
        while True:
            self.attempts += 1
            can_retry = self.attempts <= c.retries
            err: ClientError | None
            wait = delay
            try:
                ws = await connect(c.url, additional_headers=c.headers, max_size=None, open_timeout=c.open_timeout,
                                   close_timeout=c.close_timeout, **c.connect_options)
            except InvalidStatus as e:
                status = e.response.status_code
                err = ConnectError(f"server refused the connection: HTTP {status}", status)
                can_retry &= status in RETRY_HTTP
            except InvalidURI as e:
                raise ConnectError(f"bad url {c.url!r}: {e}") from None
            except (OSError, asyncio.TimeoutError, InvalidHandshake) as e:
                err = ConnectError(f"cannot talk to {c.url}: {type(e).__name__}: {e}")
            else:
                try:
                    with contextlib.suppress(ConnectionClosed):  # a refusal may come first: it is read next
                        await ws.send(json.dumps(self.start_message()))
                    raw = await asyncio.wait_for(ws.recv(), c.ready_timeout)
                except (ConnectionClosed, asyncio.TimeoutError) as e:
                    await _close_quietly(ws)
                    why = f"no answer to the start message within {c.ready_timeout:g} s" if isinstance(
                        e, asyncio.TimeoutError) else f"connection closed before ready ({e})"
                    err = ConnectError(f"cannot talk to {c.url}: {why}")
                else:
                    try:
                        msg = self._parse(raw if isinstance(raw, str) else raw.decode("utf-8", "replace"))
                        kind, code = msg.get("type"), msg.get("code")
                        if kind == "ready":
                            self.ready = Ready.from_wire(msg)
                    except ClientError:
                        await _close_quietly(ws)
                        raise
                    except ValueError as e:  # a ready message without its fields
                        await _close_quietly(ws)
                        raise ClientError(f"{c.url} does not speak the v1 protocol: {e}") from None
                    if kind == "ready":
                        self._ws = ws
                        return msg
                    if not (kind == "error" and code in RETRY_CODES and can_retry):
                        self._ws = ws
                        return msg
                    await _close_quietly(ws)
                    err = None
                    after = msg.get("retry_after")  # the server's hint (admission control), bounded
                    if isinstance(after, (int, float)) and not isinstance(after, bool) and 0 <= after:
                        wait = min(float(after), MAX_RETRY_AFTER)
                    log.info("%s refused the stream (%s: %s); retrying in %.2f s", c.url, code, msg.get("message"),
                             wait)
            if not can_retry:
                assert err is not None
                raise err
            if err is not None:
                log.info("%s; retrying in %.2f s", err, wait)
            await asyncio.sleep(wait)
            delay = min(2 * delay, c.retry_max_delay)

    async def _send(self) -> None:
        _, ConnectionClosed, *_ = _websockets()
        ws, width = self._ws, SAMPLE_WIDTH[self.source.format]
        samples = 0
        chunks = self.source.chunks()
        stopped = asyncio.ensure_future(self._stop_event.wait())
        nxt: asyncio.Future | None = None
        try:
            while True:
                nxt = asyncio.ensure_future(chunks.__anext__())
                await asyncio.wait({nxt, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():  # stop() while the source was waiting: the audio ends here
                    break
                try:
                    chunk = nxt.result()
                except StopAsyncIteration:
                    break
                finally:
                    nxt = None
                if chunk:
                    await ws.send(chunk)
                    samples += len(chunk) // width
                    self.sent.append((time.perf_counter(), samples))
                if self._stop_event.is_set():
                    break
        except ConnectionClosed:
            return
        except Exception as e:  # noqa: BLE001 - the source failed: end the stream with what was sent
            self.source_error = e
        finally:
            stopped.cancel()
            if nxt is not None and not nxt.done():
                nxt.cancel()
                with contextlib.suppress(BaseException):
                    await nxt
            with contextlib.suppress(Exception):
                await chunks.aclose()
        try:
            await ws.send(json.dumps({"type": "eof"}))
            self.eof_at = time.perf_counter()
        except ConnectionClosed:
            pass

    def stop(self) -> None:
        """End the audio now: the stream finishes with what was sent (``eof``; final and ``done`` follow)."""
        self._stop_event.set()
        stop = getattr(self.source, "stop", None)
        if stop is not None:
            stop()

    async def reset(self) -> None:
        """Close the current segment (a ``final`` with reason ``reset`` follows)."""
        if self._ws is None:
            raise RuntimeError("the stream has not started: reset after ready")
        await self._ws.send(json.dumps({"type": "reset"}))

    async def _stop_sending(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None and not sender.done():
            sender.cancel()
        if sender is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        stop = getattr(self.source, "stop", None)
        if stop is not None:
            stop()

    async def aclose(self) -> None:
        """Stop sending and close the connection (done by the iteration's end and by ``Client``'s exit)."""
        await self._stop_sending()
        ws, self._ws = self._ws, None
        if ws is not None:
            await _close_quietly(ws)
            if self.close_code is None:
                self.close_code, self.close_reason = ws.close_code, ws.close_reason or ""
        self.client._streams.discard(self)


async def _close_quietly(ws: Any) -> None:
    with contextlib.suppress(Exception):
        await ws.close()


class Client:
    """A streamd daemon at ``url`` (``ws://`` or ``wss://``, path ``/v1/stream``).

    ``token``: sent as ``Authorization: Bearer``.  ``retries``: how often a stream is retried before
    ``ready`` (see the module doc), waiting ``retry_delay`` seconds, doubled each time up to
    ``retry_max_delay``.  ``open_timeout``: the websocket handshake; ``ready_timeout``: the answer to
    ``start``.  ``options``: default stream options (:data:`STREAM_OPTIONS`).  ``connect_options`` go to
    ``websockets.asyncio.client.connect`` (e.g. ``ssl=``).  ``async with`` closes the streams still open
    at its end; a Client may run many streams at once.
    """

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *, retries: int = 0,
                 retry_delay: float = 0.25, retry_max_delay: float = 2.0, open_timeout: float = 10.0,
                 ready_timeout: float = 10.0, close_timeout: float = 5.0, headers: Mapping[str, str] | None = None,
                 connect_options: Mapping[str, Any] | None = None, **options: Any):
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise ValueError(f"url must start with ws:// or wss://, got {url!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        self.url = url
        self.headers = dict(headers or {})
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.retries = retries
        self.retry_delay, self.retry_max_delay = retry_delay, retry_max_delay
        self.open_timeout, self.ready_timeout, self.close_timeout = open_timeout, ready_timeout, close_timeout
        self.connect_options = dict(connect_options or {})
        self.options = _check_options(options)
        self._streams: set[Stream] = set()

    def stream(self, source: Any, **options: Any) -> Stream:
        """A stream of ``source`` (a path, bytes, an iterable of bytes, or a source object) with these
        options (the Client's, then these); nothing is sent until it is iterated."""
        opts = {**self.options, **_check_options(options)}
        src = as_source(source, opts.pop("sample_rate", None), opts.pop("format", None))
        return Stream(self, src, opts)

    async def transcribe(self, source: Any, *, check: bool = True, **options: Any) -> list[Event]:
        """Every event of one stream; with ``check``, a server error raises :class:`StreamError`."""
        events = [ev async for ev in self.stream(source, **options)]
        if check and events and isinstance(events[-1], Error):
            raise StreamError(events[-1].code, events[-1].message, events)
        return events

    async def aclose(self) -> None:
        for s in list(self._streams):
            await s.aclose()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# ---------------------------------------------------------------------------- blocking helpers


def transcribe(url: str, source: Any, *, token: str | None = None, retries: int = 0, timeout: float = 10.0,
               check: bool = True, **options: Any) -> list[Event]:
    """Blocking: stream ``source`` to the daemon at ``url`` and return every event (``done`` last).

    Not from inside a running event loop (use :meth:`Client.transcribe` there).  ``timeout`` bounds
    the handshake and the wait for ``ready``; ``check``: raise :class:`StreamError` on a server error.
    """
    async def run() -> list[Event]:
        async with Client(url, token, retries=retries, open_timeout=timeout, ready_timeout=timeout) as c:
            return await c.transcribe(source, check=check, **options)

    return asyncio.run(run())


def transcribe_file(url: str, path: str | os.PathLike, **kwargs: Any) -> list[Event]:
    """Blocking: the events of one audio file (see :func:`transcribe`); ``final_text(events)`` is its text."""
    return transcribe(url, FileSource(path), **kwargs)
