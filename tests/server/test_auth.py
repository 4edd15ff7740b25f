"""streamd.server.auth: what a websocket request is known by once its headers passed (the token checks
themselves are tested in test_server_protocol.py and test_server_hardening.py, on the wire too)."""

from __future__ import annotations

import pytest

from streamd.server import auth, protocol
from streamd.server.auth import RequestInfo, authorize, token_id
from streamd.server.guard import BadRequest

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
