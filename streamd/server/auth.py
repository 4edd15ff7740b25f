"""Who may open a stream: bearer tokens, the Origin allow-list, and what a request is known by afterwards.

Sans-I/O: headers and paths in, decisions out (:class:`~.guard.BadRequest` for an ambiguous request).

* :func:`load_tokens`: ``auth.tokens`` plus the lines of ``auth.token_file``;
* :func:`bearer_token`, :func:`token_ok`, :func:`origin_ok`: the checks of a websocket request;
* :func:`authorize`: all of them for one upgrade request -> :class:`RequestInfo` (route, authorized,
  client address, an id of the token for per-token quotas, never the token itself);
* :func:`check_wyoming_auth`: the Wyoming port (no authentication of its own) must not bypass the tokens.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import parse_qs, urlsplit

from ..config import AuthConfig, ConfigError, ServerConfig
from .guard import LOOPBACK_HOSTS, BadRequest, single_header

__all__ = ["RequestInfo", "load_tokens", "bearer_token", "token_ok", "origin_ok", "token_id", "authorize",
           "check_wyoming_auth"]


@dataclass
class RequestInfo:
    """What a websocket request is known by once its headers passed: attached to the connection."""

    route: str  # v1 | vosk | events
    authorized: bool
    client: str = ""  # the peer's address (per-client quota, fair share)
    token: str | None = None  # an id of the bearer token used (per-token quota), never the token itself


def load_tokens(auth: AuthConfig) -> tuple[str, ...]:
    """``auth.tokens`` plus the non-empty, non-comment lines of ``auth.token_file``."""
    tokens = list(auth.tokens)
    if auth.token_file:
        try:
            lines = Path(auth.token_file).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigError(f"auth.token_file: cannot read {auth.token_file!r}: {e.strerror or e}") from None
        for i, line in enumerate(lines, 1):
            t = line.strip()
            if t and not t.startswith("#"):
                if len(t) < 8:
                    raise ConfigError(f"auth.token_file: line {i}: token shorter than 8 characters")
                tokens.append(t)
    return tuple(tokens)


def bearer_token(headers: Mapping[str, str], path: str) -> str | None:
    """The client's token: ``Authorization: Bearer T`` header, else the ``?token=T`` query parameter.

    A repeated Authorization header or ``token`` parameter is ambiguous: :class:`~.guard.BadRequest` (400).
    """
    auth = single_header(headers, "Authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    query = parse_qs(path.split("#", 1)[0].partition("?")[2])
    vals = query.get("token")
    if vals and len(vals) > 1:
        raise BadRequest(400, "bad_header", f"the token query parameter is given {len(vals)} times")
    return vals[0] if vals else None


def token_ok(given: str | None, accepted: Iterable[str]) -> bool:
    """Constant-time comparison against every accepted token (no tokens configured: always ok)."""
    accepted = list(accepted)
    if not accepted:
        return True
    if given is None:
        return False
    g = given.encode()
    ok = False
    for t in accepted:
        ok |= hmac.compare_digest(g, t.encode())
    return ok


def origin_ok(origin: str | None, host: str | None, allowed: Iterable[str]) -> bool:
    """Origin allow-list: no Origin header (not a browser) passes; ``*`` any; ``self`` same host:port."""
    if origin is None:
        return True
    for a in allowed:
        if a == "*" or a == origin:
            return True
        if a == "self" and host:
            try:
                netloc = urlsplit(origin).netloc
            except ValueError:  # e.g. an unclosed "[": matches nothing
                continue
            if netloc and netloc.lower() == host.lower():
                return True
    return False


def token_id(token: str) -> str:
    """A short id of a token (per-token quotas, logs): never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def authorize(route: str, path: str, headers: Mapping[str, str], peer: str, tokens: tuple[str, ...],
              allowed_origins: Iterable[str]) -> RequestInfo:
    """A websocket upgrade request's identity: the Origin allow-list (403 ``origin_not_allowed``), then
    the token.  A missing or wrong token is not refused here: the stream is, with its ``unauthorized``
    error message, once the websocket is open."""
    origin = single_header(headers, "Origin")
    if not origin_ok(origin, single_header(headers, "Host"), allowed_origins):
        raise BadRequest(403, "origin_not_allowed", f"origin {origin[:100]!r} is not allowed (auth.allowed_origins)")
    given = bearer_token(headers, path)
    authorized = token_ok(given, tokens)
    return RequestInfo(route, authorized, peer, token_id(given) if authorized and tokens and given else None)


def check_wyoming_auth(server: ServerConfig, tokens: Iterable[str]) -> None:
    """ConfigError when the Wyoming port would bypass token auth (tokens set, non-loopback ``server.host``)."""
    if server.wyoming_port is None or not list(tokens):
        return
    if server.host.lower() not in LOOPBACK_HOSTS and not server.host.startswith("127."):
        raise ConfigError(f"server.wyoming_port: the Wyoming protocol has no authentication, so on "
                          f"{server.host!r} it would let anyone around auth.tokens; listen on 127.0.0.1 "
                          "(server.host) or turn the Wyoming port off")
