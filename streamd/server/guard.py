"""Sans-I/O checks of an HTTP request before any stream exists, and rate-limited logging.

No sockets, no asyncio, no clock.  The I/O layer (:mod:`streamd.server.app`)
calls :func:`check_request` first thing in its ``process_request`` hook, for
every route, and answers a :class:`BadRequest` with its HTTP status and a
one-line text body; nothing here raises anything else on client input.

* A request names each of ``Host``, ``Origin`` and ``Authorization`` at most
  once (:func:`single_header`): two values are ambiguous (a proxy may check one
  and the server use the other), so they are a 400, not a guess.
* ``Host`` is required and must be ``name[:port]``, ``IPv4[:port]`` or
  ``[IPv6][:port]`` (:func:`parse_host`); its name must be one the server
  answers to (:class:`HostRule`, ``server.allowed_hosts``), else 403.  This
  closes DNS rebinding: a page from ``http://evil.example`` whose name later
  resolves to the server sends ``Host: evil.example``, so the ``self`` origin
  rule (Origin host equals Host) can no longer be met by a name the attacker
  chose.
* Only ``GET`` and ``HEAD`` (405 otherwise; the I/O layer strips the body of
  ``HEAD`` answers).  The ``Sec-WebSocket-*`` headers are checked by the
  websockets library's own handshake (400 for a missing, repeated or malformed
  key / version / protocol list), after these checks.

:class:`RateLimitedLog` turns a storm of identical failures (the listening
socket's ``accept()`` running out of file descriptors) into one log line per
interval with a count.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from ..wire import host_name, normalize_host, parse_host

__all__ = ["BadRequest", "HostRule", "RateLimitedLog", "single_header", "parse_host", "host_name", "normalize_host",
           "request_path", "check_request", "UNIQUE_HEADERS", "LOOPBACK_HOSTS"]

UNIQUE_HEADERS = ("Host", "Origin", "Authorization")  # each at most once (Host exactly once)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "*")
METHODS = ("GET", "HEAD")


class BadRequest(ValueError):
    """A request refused before any stream exists: HTTP ``status`` (400, 403, 405), a ``code`` for
    ``streamd_errors_total{code}``, a message for the response body and the debug log, and for a 405
    the ``allow``ed methods."""

    def __init__(self, status: int, code: str, message: str, allow: str = ""):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.allow = allow


def single_header(headers: Mapping[str, str] | Any, name: str) -> str | None:
    """The value of header ``name`` (None if absent); :class:`BadRequest` 400 ``bad_header`` if repeated.

    ``headers``: websockets' ``Headers`` (``get_all``) or a plain mapping (one value per name).
    """
    get_all = getattr(headers, "get_all", None)
    if get_all is None:
        return headers.get(name)
    values = get_all(name)
    if len(values) > 1:
        raise BadRequest(400, "bad_header", f"the {name} header is given {len(values)} times")
    return values[0] if values else None











def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostRule:
    """Which ``Host`` names the server answers to (any port): see :meth:`for_server`."""

    names: frozenset[str] = frozenset()  # normalized host names / IP literals
    any_ip: bool = False  # every IP literal (cannot come from DNS rebinding)
    any_host: bool = False  # "*": no check (DNS rebinding possible; use tokens)

    @classmethod
    def for_server(cls, listen_host: str, allowed_hosts: Iterable[str] = ()) -> "HostRule":
        """``server.allowed_hosts`` if configured (``*`` = any); otherwise ``localhost``, ``127.0.0.1``,
        ``[::1]`` and the listen address, plus every IP literal when the server listens on a
        non-loopback address (a DNS name then has to be listed)."""
        allowed = tuple(allowed_hosts)
        if allowed:
            if "*" in allowed:
                return cls(any_host=True)
            return cls(frozenset(normalize_host(h) for h in allowed))
        listen = normalize_host(listen_host)
        names = set(LOOPBACK_HOSTS)
        if listen not in WILDCARD_BINDS and listen:
            names.add(listen)
        return cls(frozenset(names), any_ip=not _is_loopback(listen))

    def allows(self, host: str) -> bool:
        """``host``: a normalized name (:func:`parse_host`)."""
        return self.any_host or host in self.names or (self.any_ip and _is_ip(host))

    def describe(self) -> str:
        if self.any_host:
            return "any host"
        names = ", ".join(f"[{n}]" if ":" in n else n for n in sorted(self.names))
        return names + (" and any IP address" if self.any_ip else "")


def request_path(target: str) -> str:
    """The path of a request target (origin form ``/p?q`` or absolute form ``http://h/p``); never raises
    except :class:`BadRequest` 400 for an absolute form that does not parse."""
    if target.startswith(("http://", "https://", "ws://", "wss://")):
        try:
            return urlsplit(target).path or "/"
        except ValueError:
            raise BadRequest(400, "bad_request", f"malformed request target {target[:80]!r}") from None
    return target.split("#", 1)[0].split("?", 1)[0]


def check_request(method: str, target: str, headers: Mapping[str, str] | Any, hosts: HostRule,
                  open_paths: Iterable[str] = ()) -> str:
    """Every check before routing: the request's path, or :class:`BadRequest`.

    405 ``method_not_allowed`` for a method other than GET / HEAD; 400 ``bad_header`` for a repeated
    Host, Origin or Authorization or a missing or malformed Host; 403 ``host_not_allowed`` for a Host
    the rule does not allow.  ``open_paths`` (the health probes) may omit Host and use any name.
    """
    if method not in METHODS:
        raise BadRequest(405, "method_not_allowed", f"method {method[:20]!r} is not allowed (GET or HEAD)",
                         allow=", ".join(METHODS))
    path = request_path(target)
    for name in UNIQUE_HEADERS:
        single_header(headers, name)
    host = single_header(headers, "Host")
    if path in open_paths:
        return path
    if host is None:
        raise BadRequest(400, "bad_header", "the Host header is missing")
    try:
        name, _port = parse_host(host)
    except ValueError as e:
        raise BadRequest(400, "bad_header", str(e)) from None
    if not hosts.allows(name):
        raise BadRequest(403, "host_not_allowed",
                         f"host {host[:80]!r} is not allowed (server.allowed_hosts: {hosts.describe()})")
    return path


class RateLimitedLog:
    """One log line per interval for a repeating failure: the first occurrence is logged at once
    (:meth:`hit` True), the next ones are only counted until the transport's timer calls :meth:`flush`
    after ``interval`` seconds, which returns the count to log (and keeps the interval going while the
    failure repeats; 0: quiet again, the next occurrence is logged at once)."""

    def __init__(self, interval: float):
        self.interval = interval
        self.active = False
        self.count = 0
        self.total = 0

    def hit(self) -> bool:
        """One occurrence; True: log it now (and start the interval timer)."""
        self.total += 1
        if self.active:
            self.count += 1
            return False
        self.active = True
        return True

    def flush(self) -> int:
        """The interval is over: occurrences not logged since the last line (0: the failure stopped)."""
        n, self.count = self.count, 0
        self.active = n > 0
        return n
