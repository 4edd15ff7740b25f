"""streamd.server.auth: the token and Origin checks (never raising on client input), what a websocket request
is known by once its headers passed, and the Wyoming port's auth rule.  On the wire: tests/server/test_app.py."""

from __future__ import annotations

import pytest

from tests.server.wire import bad, headers
from streamd.config import AppConfig, ConfigError, ServerConfig
from streamd.server import auth, protocol
from streamd.server.auth import (RequestInfo, authorize, bearer_token, check_wyoming_auth, origin_ok, token_id,
                                 token_ok)
from streamd.server.guard import BadRequest
from streamd.server.settings import resolve_config

TOKENS = ("secret-token-1", "secret-token-2")


def test_authorize_gives_the_route_client_and_a_token_id_never_the_token():
    info = authorize("v1", "/v1/stream", {"Authorization": "Bearer secret-token-2"}, "10.0.0.7", TOKENS, ["self"])
    assert info == RequestInfo("v1", True, "10.0.0.7", token_id("secret-token-2"))
    assert len(info.token) == 16 and "secret" not in info.token and token_id("secret-token-1") != info.token
    # the query parameter (browsers) counts the same; a wrong or missing token is not refused here
    assert authorize("vosk", "/vosk?token=secret-token-1", {}, "", TOKENS, []).token == token_id("secret-token-1")
    assert authorize("v1", "/v1/stream?token=nope", {}, "h", TOKENS, []) == RequestInfo("v1", False, "h", None)
    assert authorize("events", "/v1/events", {}, "h", (), []) == RequestInfo("events", True, "h", None)  # no auth


def test_authorize_refuses_a_foreign_origin_and_ambiguous_tokens():
    with pytest.raises(BadRequest) as e:
        authorize("v1", "/v1/stream", {"Origin": "http://evil.example", "Host": "127.0.0.1:8765"}, "h", TOKENS,
                  ["self"])
    assert (e.value.status, e.value.code) == (403, "origin_not_allowed")
    ok = authorize("v1", "/v1/stream?token=secret-token-1", {"Origin": "http://127.0.0.1:8765",
                                                              "Host": "127.0.0.1:8765"}, "h", TOKENS, ["self"])
    assert ok.authorized
    with pytest.raises(BadRequest) as e:
        authorize("v1", "/v1/stream?token=a&token=b", {}, "h", TOKENS, [])
    assert (e.value.status, e.value.code) == (400, "bad_header")


def test_the_old_homes_still_export_the_auth_helpers():
    assert protocol.bearer_token is auth.bearer_token and protocol.token_ok is auth.token_ok
    assert protocol.origin_ok is auth.origin_ok
    pytest.importorskip("wyoming", reason="the wyoming package is not installed")
    from streamd.server import wyoming_io

    assert wyoming_io.check_wyoming_auth is auth.check_wyoming_auth


def test_tokens_and_origins():
    assert bearer_token({"Authorization": "Bearer abcdefgh"}, "/v1/stream") == "abcdefgh"
    assert bearer_token({"Authorization": "bearer  xyz12345 "}, "/v1/stream") == "xyz12345"
    assert bearer_token({}, "/v1/stream?token=qq%2Bqqqqqq&x=1") == "qq+qqqqqq"
    assert bearer_token({"Authorization": "Basic Zm9v"}, "/v1/stream") is None
    assert token_ok(None, []) and token_ok("anything", [])
    assert token_ok("secret-2", ["secret-1", "secret-2"]) and not token_ok("secret-3", ["secret-1"])
    assert not token_ok(None, ["secret-1"])
    assert origin_ok(None, "h:1", [])  # not a browser
    assert origin_ok("http://h:1", "h:1", ["self"]) and not origin_ok("http://evil:1", "h:1", ["self"])
    assert origin_ok("https://app.example", "h:1", ["https://app.example"])
    assert origin_ok("http://evil", "h:1", ["*"]) and not origin_ok("http://evil", "h:1", [])


def test_token_and_origin_helpers_never_raise_on_client_input():
    assert bearer_token(headers(("Authorization", "Bearer abcdefgh")), "/v1/stream") == "abcdefgh"
    assert bearer_token(headers(), "/v1/stream?token=a%2Bb#frag") == "a+b"
    assert bearer_token(headers(), "//[x?token=t") == "t"
    e = bad(bearer_token, headers(("Authorization", "Bearer a"), ("Authorization", "Bearer b")), "/")
    assert e.status == 400
    e = bad(bearer_token, headers(), "/v1/stream?token=a&token=b")
    assert e.status == 400 and "token" in e.message
    for origin in ("http://[evil", "null", "", "evil", "http://"):
        assert not origin_ok(origin, "127.0.0.1:8765", ["self"]), origin
    assert origin_ok("http://127.0.0.1:8765", "127.0.0.1:8765", ["self"])


def test_config_flag_and_auth_rule():
    cfg = resolve_config(None, {"wyoming_port": 10300}, {})
    assert cfg.server.wyoming_port == 10300 and AppConfig().server.wyoming_port is None
    with pytest.raises(ConfigError, match="wyoming_port"):
        ServerConfig(wyoming_port=70000)
    check_wyoming_auth(ServerConfig(wyoming_port=10300), ["a-token-123"])  # loopback: fine
    check_wyoming_auth(ServerConfig(host="0.0.0.0", wyoming_port=10300), [])  # no auth configured: fine
    with pytest.raises(ConfigError, match="no authentication"):
        check_wyoming_auth(ServerConfig(host="0.0.0.0", wyoming_port=10300), ["a-token-123"])
