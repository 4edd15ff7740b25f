"""One v1 stream (:class:`Stream`: connect with retries, send the source, read the events), the
:class:`Client` that opens them, and the blocking helpers."""

from __future__ import annotations

import logging
import asyncio
import contextlib
import json
import os
import time
from typing import Any, AsyncIterator, Mapping

from ..events import WIRE_TYPES, Error, Event, from_wire
from ..wire import SAMPLE_WIDTH
from .messages import (_check_options, ClientError, ConnectError, ConnectionLost, DEFAULT_URL, MAX_RETRY_AFTER,
                       Ready, RETRY_CODES, RETRY_HTTP, StreamError)
from .sources import as_source, FileSource

log = logging.getLogger("streamd.client")


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
