"""The HTTP side of the daemon's ports: every request's header checks (:mod:`.guard`), then the websocket
routes pass (authorized: :mod:`.auth`) and the plain HTTP routes answer (probes, metrics, the browser page).

:class:`HttpRoutes` gives the ``process_request`` of the main port (:meth:`HttpRoutes.main`) and of the Vosk
port (:meth:`HttpRoutes.vosk`); it reads the daemon's state (loading, draining, admission, metrics) from the
:class:`~.app.App` it serves.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from .auth import authorize
from .guard import BadRequest, check_request
from .metrics import CONTENT_TYPE
from .static import content_type

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("streamd.server")

V1_PATH, VOSK_PATH, EVENTS_PATH = "/v1/stream", "/vosk", "/v1/events"
WS_ROUTES = {V1_PATH: "v1", VOSK_PATH: "vosk", EVENTS_PATH: "events"}  # websocket path -> route
PROBE_PATHS = ("/healthz", "/readyz")  # answered whatever the Host (load balancers probe by any name)


class HttpRoutes:
    """The ``process_request`` callbacks of the daemon's listeners (``app``: the daemon they answer for)."""

    def __init__(self, app: App):
        self.app = app

    async def main(self, conn: ServerConnection, request: Request) -> Response | None:
        """process_request of the main port: header checks (:mod:`.guard`), then websocket routes pass and
        HTTP routes answer."""
        try:
            path = check_request(request.method, request.path, request.headers, self.app.hosts, PROBE_PATHS)
            if path in WS_ROUTES:
                return self._ws_request(conn, request, WS_ROUTES[path])
            return self._head(request, await self._http_route(conn, path))
        except BadRequest as e:
            return self._bad_request(conn, request, e)

    async def vosk(self, conn: ServerConnection, request: Request) -> Response | None:
        """process_request of the Vosk port: every path is the Vosk protocol (after the header checks)."""
        try:
            check_request(request.method, request.path, request.headers, self.app.hosts)
            return self._ws_request(conn, request, "vosk")
        except BadRequest as e:
            return self._bad_request(conn, request, e)

    @staticmethod
    def _respond(conn: ServerConnection, status: int, body: bytes, ctype: str) -> Response:
        r = conn.respond(status, "")
        r.body = body
        del r.headers["Content-Length"]
        del r.headers["Content-Type"]
        r.headers["Content-Length"] = str(len(body))
        r.headers["Content-Type"] = ctype
        r.headers["Cache-Control"] = "no-cache"
        return r

    def _ws_request(self, conn: ServerConnection, request: Request, route: str) -> Response | None:
        """A websocket route after :func:`check_request`: HEAD refused, Origin allow-list, token (BadRequest)."""
        if request.method != "GET":
            raise BadRequest(405, "method_not_allowed", f"{request.method} cannot open a websocket (GET)",
                             allow="GET")
        peer = conn.remote_address
        app = self.app
        conn.streamd = authorize(route, request.path, request.headers,  # type: ignore[attr-defined]
                                 str(peer[0]) if peer else "", app.tokens, app.config.auth.allowed_origins)
        return None

    def _bad_request(self, conn: ServerConnection, request: Request, e: BadRequest) -> Response:
        """The HTTP answer to a request refused by the checks (counted in ``streamd_errors_total{code}``,
        logged at debug level only: a flood of bad requests must not flood the log)."""
        self.app.metrics.errors.labels(e.code).inc()
        log.debug("refused %s %.80r: HTTP %d %s", request.method, request.path, e.status, e.message)
        r = conn.respond(e.status, e.message + "\n")
        if e.allow:
            r.headers["Allow"] = e.allow
        return self._head(request, r)

    @staticmethod
    def _head(request: Request, response: Response) -> Response:
        """A HEAD answer: the GET answer's status and headers (Content-Length included), no body."""
        if request.method == "HEAD":
            response.body = b""
        return response

    async def _http_route(self, conn: ServerConnection, path: str) -> Response:
        """The plain HTTP routes: probes, metrics, static files."""
        app = self.app
        if path == "/healthz":
            return conn.respond(200, "ok\n")
        if path == "/readyz":
            if app.loading:
                return conn.respond(503, "loading\n")
            if app.draining:
                return conn.respond(503, "draining\n")
            over = app.admission.overloaded(time.monotonic())
            if over is not None:  # a load balancer routes elsewhere meanwhile
                r = conn.respond(503, "overloaded\n")
                r.headers["Retry-After"] = str(math.ceil(over.retry_after))
                return r
            return conn.respond(200, "ready\n")
        if path == "/metrics":
            return self._respond(conn, 200, await app.metrics_text(), CONTENT_TYPE)
        file = app.static.find(path)
        if file is None:
            return conn.respond(404, f"not found: {path}\n")
        try:
            body = await asyncio.to_thread(file.read_bytes)
        except OSError as e:  # e.g. out of file descriptors: an answer, not a traceback
            app.resource_errors.report("reading a static file", e)
            return conn.respond(503, f"cannot read {path}: {e.strerror or e}\n")
        return self._respond(conn, 200, body, content_type(file.name))
