"""The websocket side of the daemon's listeners: each connection that passed the HTTP checks (:mod:`.routes`)
is refused (unauthorized, draining, loading, at a limit: an error message and its close code) or becomes a
:class:`~.conn.Conn` with its protocol session (v1: :class:`~.protocol.V1Session`, Vosk:
:class:`~.vosk.VoskSession`) until it ends; ``/v1/events`` subscribers hear the microphone.

:class:`WsHandlers` reads and updates the daemon's state (its connections, subscribers, admission, metrics)
on the :class:`~.app.App` it serves.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from .auth import RequestInfo
from .commands import CloseStream
from .conn import Conn, discard
from .protocol import CLOSE_CODES, V1Session
from .vosk import VoskSession

if TYPE_CHECKING:
    from .app import App


class WsHandlers:
    """The websocket handler of the daemon's listeners (:meth:`connection`; ``app``: the daemon)."""

    def __init__(self, app: App):
        self.app = app

    def _refusal(self, info: RequestInfo, count: int) -> tuple[str, str] | tuple[str, str, dict] | None:
        """Why a new connection of ``info`` is refused ((code, message[, extra fields])), ``count`` its route's
        connections now; None: it may go on."""
        app = self.app
        if not info.authorized:
            return ("unauthorized", "missing or invalid token: send 'Authorization: Bearer TOKEN' or ?token=TOKEN")
        if app.draining:
            return ("shutting_down", "server is shutting down; no new streams")
        if app.loading:
            return ("loading", "the model is still loading; try again shortly")
        if count >= app.config.limits.max_streams:
            return ("too_many_streams", f"server is at its limit of {app.config.limits.max_streams} "
                                        "concurrent streams; try again later")
        if info.route != "events":  # the cheapest stream (greedy) would not fit: refused before its start message
            r = app.admission.check(time.monotonic(), 1.0, info.client, info.token)
            if r is not None:
                return (r.code, r.message, {"retry_after": r.retry_after})
        return None

    async def _refuse(self, ws: ServerConnection, code: str, message: str, extra: dict | None = None) -> None:
        """The error message, then the close with the code's close code (counted in streamd_errors_total)."""
        app = self.app
        app.metrics.errors.labels(code).inc()
        try:
            await ws.send(json.dumps({"type": "error", "code": code, "message": message, **(extra or {})}))
            await ws.close(CLOSE_CODES[code], code)
        except ConnectionClosed:
            pass

    async def connection(self, ws: ServerConnection) -> None:
        """The websockets handler: one v1 or Vosk stream (a :class:`~.conn.Conn`) or an events subscriber, from
        its admission to its end."""
        app = self.app
        info: RequestInfo = getattr(ws, "streamd", RequestInfo("vosk", False))
        app.metrics.connections.labels(info.route).inc()
        if info.route == "events":
            await self._serve_events(ws, info)
            return
        refusal = self._refusal(info, app.stream_count())
        if refusal:
            await self._refuse(ws, *refusal)
            return
        key = app.new_key()
        if info.route == "v1":
            dec = app.engine_config.decoding
            proto: V1Session | VoskSession = V1Session(secrets.token_hex(8), app.config.limits, app.model_info,
                                                       dec.method, dec.beam)
        else:
            proto = VoskSession(app.config.limits, app.config.server.vosk_sample_rate,
                                app.engine_config.decoding.beam)
        conn = Conn(app, ws, key, proto)
        app.conns[key] = conn
        done = app.conn_done[key] = asyncio.Event()
        app.streams_changed()
        conn.start()
        try:
            if await conn.read_loop():
                # input is over (eof, error, draining): keep reading and discarding, or a client that is
                # still sending would block the closing handshake until close_timeout
                rest = asyncio.ensure_future(discard(ws))
                await asyncio.wait({conn.sender, rest}, return_when=asyncio.FIRST_COMPLETED)
                rest.cancel()
        finally:
            if not conn.sender.done():
                conn.sender.cancel()
            app.submit(CloseStream(key))
            del app.conns[key]
            app.conn_done.pop(key, None)
            done.set()
            app.streams_changed()

    async def _serve_events(self, ws: ServerConnection, info: RequestInfo) -> None:
        """A ``/v1/events`` subscriber: the microphone's events until it leaves."""
        app = self.app
        refusal = self._refusal(info, len(app.subscribers))
        if refusal is None and not app.config.mic.enabled:
            refusal = ("no_mic", "no microphone stream: start the server with --mic (mic.enabled)")
        if refusal:
            await self._refuse(ws, *refusal)
            return
        sub = Conn(app, ws, -1, None)
        app.subscribers.add(sub)
        sub.start()
        if app.mic_error is not None:  # a broken microphone: every subscriber hears why, not only the first
            sub.send(app.mic_error)
        try:
            async for _ in ws:  # server-to-client only: client messages are ignored
                pass
        except ConnectionClosed:
            pass
        finally:
            app.subscribers.discard(sub)
            if not sub.sender.done():
                sub.sender.cancel()
