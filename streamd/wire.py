"""The v1 wire protocol's shared vocabulary and the Host name grammar (stdlib only).

Below both the client (:mod:`streamd.client`) and the server (:mod:`streamd.server.protocol`,
:mod:`streamd.server.guard`), and the config's validation of ``server.allowed_hosts``: one definition of
each rule, imported by all of them (docs/protocol.md states the protocol).
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["SAMPLE_WIDTH", "CLOSE_CODES", "START_FIELDS", "normalize_host", "parse_host", "host_name"]

SAMPLE_WIDTH = {"s16le": 2, "f32le": 4}

# error code -> websocket close code (RFC 6455 section 7.4.1)
CLOSE_CODES: dict[str, int] = {
    "bad_json": 1008,  # policy violation: not our protocol
    "bad_message": 1008,
    "bad_request": 1008,  # engine: e.g. audio after the end of the stream
    "bad_format": 1003,  # unsupported data
    "bad_sample_rate": 1003,
    "bad_audio": 1003,
    "binary_before_start": 1003,
    "too_large": 1009,  # message too big
    "rate_limited": 1008,
    "idle_timeout": 1008,
    "unauthorized": 1008,
    "slow_consumer": 1008,
    "no_mic": 1008,
    "mic_error": 1011,
    "internal": 1011,  # internal error
    "shutting_down": 1001,  # going away
    "too_many_streams": 1013,  # try again later
    "loading": 1013,
    "audio_too_slow": 1008,  # less than limits.min_audio_rate seconds of audio per second
    "overloaded": 1013,  # at capacity (admission by cost): try again later, retry_after
    "client_limit": 1013,  # limits.max_cost_per_client / max_cost_per_token
    "backlog_exceeded": 1013,  # more than limits.max_backlog_seconds of audio waiting to be decoded
}

START_FIELDS = ("type", "sample_rate", "format", "method", "beam", "partials", "keywords", "endpointing",
                "wake_words", "hotwords", "second_pass", "wake_models")

_NAME_RE = re.compile(r"^[a-z0-9_](?:[a-z0-9._~-]*[a-z0-9_])?\.?$")


def normalize_host(host: str) -> str:
    """A host name or IP literal as compared: lower case, no trailing dot, IPv6 without brackets, compressed."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h).compressed
        except ValueError:
            return h
    return h[:-1] if h.endswith(".") and len(h) > 1 else h


def parse_host(value: str) -> tuple[str, int | None]:
    """``Host`` header value -> (normalized host, port or None); ValueError saying what is malformed."""
    v = value.strip()
    if not v:
        raise ValueError("empty Host")
    if v.startswith("["):
        end = v.find("]")
        if end < 0:
            raise ValueError(f"unclosed '[' in Host {value!r}")
        inner, rest = v[1:end], v[end + 1:]
        try:
            host = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise ValueError(f"not an IPv6 address in Host {value!r}") from None
        if "%" in inner:
            raise ValueError(f"zone id in Host {value!r}")
    else:
        name, colon, port_text = v.partition(":")
        if ":" in port_text:
            raise ValueError(f"IPv6 address without brackets (or several ports) in Host {value!r}")
        host, rest = name.lower(), colon + port_text
        if not _NAME_RE.match(host):
            raise ValueError(f"not a host name in Host {value!r}")
        host = normalize_host(host)
    if rest in ("", ":"):
        return host, None
    if not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit() and len(rest) <= 6
            and int(rest[1:]) <= 65535):
        raise ValueError(f"bad port in Host {value!r}")
    return host, int(rest[1:])


def host_name(value: str) -> str:
    """A configured host name (``server.allowed_hosts``): a name or IP address without port (IPv6 with or
    without brackets) -> normalized; ValueError otherwise."""
    v = value.strip()
    if ":" in v and not v.startswith("["):
        v = f"[{v}]"
    host, port = parse_host(v)
    if port is not None or v.endswith(":"):
        raise ValueError(f"a port in host name {value!r}")
    return host
