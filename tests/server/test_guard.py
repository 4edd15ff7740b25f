"""streamd.server.guard: the sans-I/O request checks before any stream (repeated headers, Host syntax and
allow-list, methods, probes) and the rate-limited log.  On the wire: tests/server/test_app.py."""

from __future__ import annotations

import pytest

from tests.server.wire import bad, headers
from streamd.server.guard import HostRule, RateLimitedLog, check_request, host_name, parse_host, single_header


def test_single_header_and_host_syntax():
    assert single_header(headers(("Origin", "http://a")), "Origin") == "http://a"
    assert single_header(headers(), "Origin") is None and single_header({"Origin": "x"}, "Origin") == "x"
    e = bad(single_header, headers(("Authorization", "Bearer a"), ("authorization", "Bearer b")), "Authorization")
    assert (e.status, e.code) == (400, "bad_header") and "2 times" in e.message
    assert parse_host("LocalHost:8765") == ("localhost", 8765)
    assert parse_host("127.0.0.1") == ("127.0.0.1", None)
    assert parse_host("[::1]:80") == ("::1", 80) and parse_host("[0:0::1]") == ("::1", None)
    assert parse_host("example.com.:443") == ("example.com", 443) and parse_host("h:") == ("h", None)
    for value in ("", "::1", "[::1", "[nope]:1", "a b", "h:99999", "h:12x", "h:1:2", "évil", "a/b", "[::1%eth0]",
                  "http://h", "-"):
        with pytest.raises(ValueError):
            parse_host(value)
    assert host_name("::1") == "::1" and host_name("[::1]") == "::1" and host_name("Api.Example") == "api.example"
    with pytest.raises(ValueError):
        host_name("h:80")


def test_host_rule_defaults_and_configured():
    loop = HostRule.for_server("127.0.0.1")  # the default bind: loopback names only
    for h in ("localhost", "127.0.0.1", "::1"):
        assert loop.allows(h), h
    assert not loop.allows("evil.example") and not loop.allows("10.0.0.5")
    assert HostRule.for_server("127.0.0.2").allows("127.0.0.2")  # the listen address too
    assert HostRule.for_server("::1").allows("::1") and not HostRule.for_server("::1").allows("192.168.1.9")
    lan = HostRule.for_server("0.0.0.0")  # not loopback, nothing configured: IP literals and localhost
    assert lan.allows("192.168.1.9") and lan.allows("fe80::1") and lan.allows("localhost")
    assert not lan.allows("evil.example") and not lan.allows("asr.lan")
    assert HostRule.for_server("asr.lan").allows("asr.lan")
    named = HostRule.for_server("0.0.0.0", ["ASR.example.com", "[::1]"])  # configured: exactly these
    assert named.allows("asr.example.com") and named.allows("::1")
    assert not named.allows("localhost") and not named.allows("10.0.0.1")
    assert HostRule.for_server("127.0.0.1", ["*"]).allows("evil.example")
    assert "any IP address" in lan.describe() and "[::1]" in loop.describe()


def test_check_request():
    rule = HostRule.for_server("127.0.0.1")
    ok = headers(("Host", "127.0.0.1:8765"), ("Origin", "http://127.0.0.1:8765"), ("Authorization", "Bearer t"))
    assert check_request("GET", "/v1/stream?token=x", ok, rule) == "/v1/stream"
    assert check_request("HEAD", "http://127.0.0.1:8765/readyz?x", ok, rule) == "/readyz"  # absolute form
    assert check_request("GET", "//[x/y?z", ok, rule) == "//[x/y"  # no urlsplit surprise: just a path (404)
    e = bad(check_request, "POST", "/", ok, rule)
    assert (e.status, e.code, e.allow) == (405, "method_not_allowed", "GET, HEAD")
    for name in ("Host", "Origin", "Authorization"):
        e = bad(check_request, "GET", "/v1/stream", headers(("Host", "localhost"), (name, "a"), (name, "b")), rule)
        assert (e.status, e.code) == (400, "bad_header") and name in e.message
    e = bad(check_request, "GET", "/", headers(), rule)
    assert (e.status, e.code, e.message) == (400, "bad_header", "the Host header is missing")
    e = bad(check_request, "GET", "/", headers(("Host", "[::1")), rule)
    assert (e.status, e.code) == (400, "bad_header") and "unclosed" in e.message
    e = bad(check_request, "GET", "/v1/events", headers(("Host", "evil.example:8765")), rule)
    assert (e.status, e.code) == (403, "host_not_allowed") and "evil.example" in e.message
    e = bad(check_request, "GET", "http://[x/", headers(("Host", "localhost")), rule)
    assert e.status == 400
    probes = ("/healthz", "/readyz")  # probes: any Host, or none, but never two
    assert check_request("GET", "/healthz", headers(("Host", "pod-7.internal")), rule, probes) == "/healthz"
    assert check_request("GET", "/readyz", headers(), rule, probes) == "/readyz"
    e = bad(check_request, "GET", "/healthz", headers(("Host", "a"), ("Host", "b")), rule, probes)
    assert e.status == 400


def test_rate_limited_log():
    r = RateLimitedLog(10.0)
    assert r.hit() and not r.hit() and not r.hit()  # the first is logged, then counted
    assert r.flush() == 2 and r.active  # end of the interval: one line with the count; still going
    assert not r.hit() and r.flush() == 1
    assert r.flush() == 0 and not r.active  # quiet for an interval: the next one is logged at once
    assert r.hit() and r.total == 5
