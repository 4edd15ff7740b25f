"""Issue 25 items 4-7: header hardening (Host allow-list, duplicate headers, HEAD, paths in ready, resource-error
logging), the minimum audio rate, the drain under load, Vosk flow control and the largest frame vs the burst.

The rules are sans-I/O and tested directly first (deterministic: time is an argument); then each once
end to end on loopback with the tiny random model."""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import logging
import os
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers

from helpers import app_config, make_app, random_audio
from streamd.config import ConfigError, LimitsConfig, ServerConfig, from_dict, AppConfig
from streamd.events import Done, Final, Partial
from streamd.server.app import App
from streamd.server.outbox import Outbox
from streamd.server.drain import ThroughputWindow, drain_plan
from streamd.server.guard import (BadRequest, HostRule, RateLimitedLog, check_request, host_name, parse_host,
                                  single_header)
from streamd.server.protocol import (CLOSE_CODES, Audio, Close, Finish, MinAudioRate, Send, TokenBucket, V1Session,
                                     bearer_token, origin_ok, public_model_info)
from streamd.server.vosk import VoskSession
from test_server_http_limits import drain, pcm16, run, until

pytestmark = pytest.mark.usefixtures("one_torch_thread")

INFO = {"name": "tiny", "methods": ["greedy"], "chunk_seconds": 0.16, "path": "/srv/models/tiny.pt",
        "lm": {"path": "/srv/models/tiny.lm.pt", "order": 3, "weight": 0.2}}


def headers(*pairs) -> Headers:
    h = Headers()
    for k, v in pairs:
        h[k] = v  # Headers appends: a repeated name keeps every value
    return h


def bad(fn, *args, **kw) -> BadRequest:
    with pytest.raises(BadRequest) as e:
        fn(*args, **kw)
    return e.value


def error_of(actions):
    assert len(actions) == 2 and isinstance(actions[0], Send) and isinstance(actions[1], Close), actions
    msg = actions[0].message
    assert msg["type"] == "error" and actions[1].code == CLOSE_CODES[msg["code"]]
    return msg["code"], msg["message"], actions[1].code


# ============================================================================= item 6: sans-I/O header rules


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


def test_rate_limited_log():
    r = RateLimitedLog(10.0)
    assert r.hit() and not r.hit() and not r.hit()  # the first is logged, then counted
    assert r.flush() == 2 and r.active  # end of the interval: one line with the count; still going
    assert not r.hit() and r.flush() == 1
    assert r.flush() == 0 and not r.active  # quiet for an interval: the next one is logged at once
    assert r.hit() and r.total == 5


def test_public_model_info():
    pub = public_model_info(INFO)
    assert pub["path"] == "tiny.pt" and pub["lm"]["path"] == "tiny.lm.pt" and pub["lm"]["order"] == 3
    assert set(pub) == set(INFO) and INFO["path"] == "/srv/models/tiny.pt"  # fields kept, input untouched
    assert public_model_info(INFO, show_paths=True) == INFO
    assert public_model_info({"path": "", "lm": None}) == {"path": "", "lm": None}


def test_config_keys_are_validated():
    assert ServerConfig().allowed_hosts == () and ServerConfig().show_model_paths is False
    assert LimitsConfig().min_audio_rate == 0.1 and LimitsConfig().min_audio_window == 30.0
    cases = [({"server": {"allowed_hosts": ["http://x"]}}, "server.allowed_hosts[0]: must be a host name"),
             ({"server": {"allowed_hosts": ["x:80"]}}, "server.allowed_hosts[0]"),
             ({"server": {"allowed_hosts": "x"}}, "server.allowed_hosts: expected a list"),
             ({"server": {"show_model_paths": "yes"}}, "server.show_model_paths: expected true/false"),
             ({"limits": {"min_audio_rate": 2}}, "limits.min_audio_rate: must be 0..1"),
             ({"limits": {"min_audio_rate": 0.5, "max_realtime": 0.25}}, "limits.min_audio_rate: must be <= max_realtime"),
             ({"limits": {"min_audio_window": 0.5}}, "limits.min_audio_window: must be >= 1 second")]
    for data, msg in cases:
        with pytest.raises(ConfigError) as e:
            from_dict(AppConfig, data)
        assert msg in str(e.value), (data, str(e.value))
    cfg = from_dict(AppConfig, {"server": {"allowed_hosts": ["asr.example.com", "[::1]", "*"]},
                                "limits": {"min_audio_rate": 0, "max_realtime": 0}})
    assert cfg.server.allowed_hosts == ("asr.example.com", "[::1]", "*") and cfg.limits.min_audio_rate == 0


# ============================================================================= item 5: minimum audio rate (sans-I/O)

RATE = LimitsConfig(max_message_bytes=65536, max_realtime=0.0, idle_timeout=0.0, min_audio_rate=0.1,
                    min_audio_window=10.0)
TENTH = b"\0\0" * 1600  # 0.1 s of s16le at 16 kHz


def test_min_audio_rate_rule():
    r = MinAudioRate(0.1, 10.0)
    assert r.due() is None and r.check(0.0, 5.0) is None and r.due() == 15.0  # the first call starts it
    assert r.check(0.5, 14.9) is None  # the window is not over yet
    assert r.check(1.0, 15.0) is None and r.due() == 25.0  # 1 s in 10 s: exactly enough; next window
    assert "0.40 s of audio in the last 12.0 s" in r.check(1.4, 27.0)  # late check: judged over 12 s
    assert MinAudioRate(0.0, 10.0).check(0.0, 1e9) is None and MinAudioRate(0.0, 10.0).due() is None


def test_trickle_fails_and_a_steady_stream_passes():
    s = V1Session("s", RATE, INFO)
    assert s.tick(0.0) == [] and s.deadline() == 10.0  # the I/O layer starts the clock at connect
    s.receive('{"type": "start"}', 0.5)
    t = 1.0
    while t < 10.0:  # 2 bytes every 2.5 s: the idle timer never fires, but that is no stream
        assert s.receive(b"\0\0", t) == [Audio(b"\0\0", "s16le")]
        t += 2.5
    code, msg, close = error_of(s.tick(10.0))
    assert (code, close) == ("audio_too_slow", 1008) and "limits.min_audio_rate" in msg and "eof" in msg
    assert s.closed and s.deadline() is None and s.tick(99.0) == []
    s = V1Session("s", RATE, INFO)  # 0.1 s every 0.5 s: a fifth of real time, for a minute
    s.tick(0.0)
    s.receive('{"type": "start"}', 0.0)
    for i in range(120):
        t = 0.5 * (i + 1)
        if s.deadline() is not None and t >= s.deadline():
            assert s.tick(t) == []
        assert s.receive(TENTH, t) == [Audio(TENTH, "s16le")]
    assert s.receive('{"type": "eof"}', 60.1) == [Finish()]
    assert s.deadline() is None and s.tick(500.0) == []  # after eof nothing more is owed


def test_late_message_is_judged_after_the_window_and_vosk_config_spam_fails():
    s = V1Session("s", RATE, INFO)
    s.tick(0.0)
    s.receive('{"type": "start"}', 0.0)
    code, _, _ = error_of(s.receive(b"\0\0" * 16000, 11.0))  # the window ended empty before this second
    assert code == "audio_too_slow"
    v = VoskSession(RATE, 16000)  # configs forever, no audio: a held slot
    v.tick(0.0)
    for t in range(1, 10):
        assert v.receive('{"config": {"sample_rate": 16000}}', float(t)) == []
    code, _, close = error_of(v.tick(10.0))
    assert (code, close) == ("audio_too_slow", 1008)
    v = VoskSession(RATE, 16000)
    v.tick(0.0)
    v.receive(b"\0\0" * 16000, 1.0)  # 1 s of audio in the first 10 s
    assert v.tick(10.0) == [] and v.audio_seconds == 1.0
    assert v.receive('{"eof": 1}', 12.0) == [Finish()] and v.deadline() is None


# ============================================================================= item 7: burst and coalescing (sans-I/O)


def test_one_largest_frame_always_fits_the_burst():
    b = TokenBucket(4.0, 30.0)
    assert b.take(32.768, 0.0, oversize=True)  # a full bucket admits a frame larger than the burst ...
    assert not b.take(0.1, 0.0, oversize=True)  # ... and owes the difference
    assert not b.take(32.768, 8.0, oversize=True)  # refilled to 29.2 only
    assert b.take(32.768, 8.2, oversize=True)  # full again after (32.768 - 30 + 30) / 4 s
    assert not TokenBucket(4.0, 30.0).take(32.768, 0.0)  # without oversize: the plain bucket (reference)
    lim = LimitsConfig()  # the defaults: 1 MiB frames, 30 s burst
    mib = b"\0" * lim.max_message_bytes
    s = V1Session("s", lim, INFO)
    s.receive('{"type": "start"}', 0.0)
    assert s.receive(mib, 0.0) == [Audio(mib, "s16le")]  # 32.8 s of 16 kHz s16le
    assert error_of(s.receive(TENTH, 0.0))[0] == "rate_limited"  # the average stays bounded
    s = V1Session("s", lim, INFO)
    s.receive('{"type": "start", "sample_rate": 8000}', 0.0)
    assert s.receive(mib, 0.0)[0] == Audio(mib, "s16le")  # 65.5 s at 8 kHz
    v = VoskSession(lim, 8000)
    assert v.receive(mib, 0.0)[-1] == Audio(mib, "s16le", ack=True)


def test_vosk_partial_replies_coalesce_only_when_the_client_is_behind():
    async def body():
        s = VoskSession(LimitsConfig(max_realtime=0.0), 16000)
        for _ in range(400):  # 400 frames in one engine cycle (a client that sends without reading)
            s.receive(TENTH, 0.0)
        s.event(Partial(1, 0, "he"))
        s.event(Final(1, 0, "hello", (), reason="endpoint:rule2"))
        s.event(Partial(1, 1, "wo"))
        acts = s.applied(400)
        assert len(acts) == 400 and acts[0].message == {"result": [], "text": "hello"} and not acts[0].droppable
        assert all(a == Send({"partial": "wo"}, droppable=True, when_behind=True) for a in acts[1:])
        box = Outbox(256)
        for a in acts:
            assert box.put(json.dumps(a.message), a.droppable, a.when_behind, a.last)  # never overflows
        assert len(box) == 128 and box.dropped == 272  # one reply per frame until half full, then coalesced
        s.receive('{"eof": 1}', 0.0)
        while len(box) < 256:  # fill the outbox with results the client does not read
            assert box.put('{"text": "x"}')
        assert not box.put('{"text": "one too many"}')
        s.event(Final(1, 1, "world", (), reason="eos"))
        final, close = s.event(Done(1, 2.0))
        assert final == Send({"result": [], "text": "world"}, last=True) and close == Close(1000, "done")
        assert box.put(json.dumps(final.message), final.droppable, final.when_behind, final.last)  # forced
        box.close(close.code, close.reason)
        got = [await box.get() for _ in range(len(box))]
        assert len(got) == 257 and json.loads(got[-1]) == {"result": [], "text": "world"}
        assert await box.get() == close
        box = Outbox(8)  # a lock-step client (one reply waiting at a time) gets every one
        for i in range(20):
            assert box.put(str(i), True, True) and await box.get() == str(i)
        assert box.dropped == 0

    asyncio.run(asyncio.wait_for(body(), 5))


# ============================================================================= item 4: drain plan (sans-I/O)


def test_drain_plan_and_throughput():
    w = ThroughputWindow(10.0)
    assert w.rate(0.0) is None
    w.add(0.0, 0.5, 2.0)
    w.add(5.0, 0.5, 6.0)
    assert w.rate(5.0) == pytest.approx(8.0)
    w.add(20.0, 1.0, 1.0)  # the old steps leave the window
    assert w.rate(20.0) == pytest.approx(1.0) and w.rate(40.0) is None
    assert drain_plan({1: 50.0, 2: 1.0}, None, 10.0) == set()  # idle engine: no measure, nobody ended
    assert drain_plan({1: 3.0, 2: 4.0}, 1.0, 10.0) == set()  # 7 s fit into 0.8 * 10 s
    # 8 s of budget: the shortest backlogs first (ties: the older key), the rest ended now
    assert drain_plan({1: 5.0, 2: 2.0, 3: 2.0, 4: 4.0, 5: 0.0}, 1.0, 10.0) == {1}
    assert drain_plan({1: 5.0, 2: 3.0, 3: 3.0, 4: 4.0}, 1.0, 10.0) == {1, 4}
    assert drain_plan({3: 3.0, 2: 3.0}, 1.0, 6.0) == {3}  # 4.8 s: one of two equal backlogs, the older
    assert drain_plan({7: 9.0}, 1.0, 10.0) == {7} and drain_plan({}, 1.0, 10.0) == set()


# ============================================================================= end to end


async def raw_http(port: int, head: str) -> tuple[int, dict, bytes]:
    """Send ``head`` (request line + headers, \\r\\n separated, no blank line) and read the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode("latin-1") + b"\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    hdrs = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


def upgrade(path: str, host: str, *extra: str) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    return "\r\n".join([f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
                        f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *extra])


def test_header_hardening_on_the_wire(tiny_ckpt, tmp_path, caplog):
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<!doctype html><title>streamd</title>")
    caplog.set_level(logging.INFO)  # the daemon's default log level

    async def body():
        async with make_app(tiny_ckpt, server={"web_root": str(web), "vosk_port": 0},
                            auth={"tokens": ["s3cret-token"]}) as app:
            p, h = app.port, f"127.0.0.1:{app.port}"
            ok = "Authorization: Bearer s3cret-token"
            for head, want in [
                (upgrade("/v1/stream", h, ok, ok), 400),  # the report's case: two Authorization headers
                (upgrade("/v1/stream", h, ok, f"Origin: http://{h}", f"Origin: http://{h}"), 400),
                (upgrade("/v1/stream", h, ok, f"Host: {h}"), 400),  # two Host headers
                (upgrade("/v1/stream", "[::1", ok), 400),
                (upgrade("/v1/stream?token=s3cret-token&token=x", h), 400),
                # DNS rebinding: the attacker's name in Host and Origin; refused before any stream exists
                (upgrade("/v1/stream", f"evil.example:{p}", ok, f"Origin: http://evil.example:{p}"), 403),
                (upgrade("/v1/events", f"evil.example:{p}", f"Origin: http://evil.example:{p}"), 403),
                (f"GET / HTTP/1.1\r\nHost: evil.example:{p}", 403),
                (f"GET /metrics HTTP/1.1\r\nHost: evil.example:{p}", 403),
                (upgrade("/v1/stream", h, ok, f"Origin: http://evil.example:{p}"), 403),  # origin_not_allowed
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA=="), 400),  # websockets
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Version: 13"), 400),
                (upgrade("/v1/stream", h, ok, "Sec-WebSocket-Protocol: a,,=b"), 400),
                (f"GET /v1/stream HTTP/1.1\r\nHost: {h}", 426),  # no upgrade at all
                ("GET / HTTP/1.1", 400),  # no Host
                (f"POST /healthz HTTP/1.1\r\nHost: {h}", 405),
                (f"GET //[x/y HTTP/1.1\r\nHost: {h}", 404),
                (f"GET /healthz HTTP/1.1\r\nHost: pod-7.internal:{p}", 200),  # probes answer any name
            ]:
                status, hdrs, text = await raw_http(p, head)
                assert status == want, (head, status, text)
                assert status == 426 or text.endswith(b"\n") and b"Traceback" not in text
            # the Vosk port checks the same headers
            assert (await raw_http(app.vosk_port, upgrade("/", h, ok, ok)))[0] == 400
            assert (await raw_http(app.vosk_port, upgrade("/", f"evil.example:{app.vosk_port}", ok)))[0] == 403
            # HEAD: the GET answer's status and headers, no body
            status, hdrs, text = await raw_http(p, f"HEAD / HTTP/1.1\r\nHost: localhost:{p}")
            assert (status, text) == (200, b"") and int(hdrs["content-length"]) > 0
            assert hdrs["content-type"].startswith("text/html")
            assert (await raw_http(p, f"HEAD /healthz HTTP/1.1\r\nHost: {h}"))[::2] == (200, b"")
            assert (await raw_http(p, f"HEAD /nope HTTP/1.1\r\nHost: {h}"))[::2] == (404, b"")
            status, hdrs, text = await raw_http(p, f"HEAD /v1/stream HTTP/1.1\r\nHost: {h}")
            assert (status, text, hdrs["allow"]) == (405, b"", "GET")
            assert (await raw_http(p, f"PUT / HTTP/1.1\r\nHost: {h}"))[1]["allow"] == "GET, HEAD"
            # the server still serves, by every allowed name
            for url in (f"ws://127.0.0.1:{p}/v1/stream", f"ws://localhost:{p}/v1/stream"):
                async with connect(url, additional_headers={"Authorization": "Bearer s3cret-token"},
                                   origin=url.replace("ws://", "http://").rsplit("/", 2)[0]) as ws:
                    await ws.send('{"type": "start"}')
                    assert json.loads(await ws.recv())["type"] == "ready"
            return app.metrics.render().decode()

    metrics = run(body())
    for code, n in (("bad_header", 7), ("host_not_allowed", 5), ("origin_not_allowed", 1),
                    ("method_not_allowed", 3)):
        assert f'streamd_errors_total{{code="{code}"}} {float(n)}' in metrics, (code, metrics)
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [(r.name, r.getMessage()) for r in noisy]


def test_ready_sends_file_names_unless_configured(tiny_ckpt):
    async def ready(app):
        async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as ws:
            await ws.send('{"type": "start"}')
            return json.loads(await ws.recv())["model"]

    async def body():
        async with make_app(tiny_ckpt) as app:
            hidden = await ready(app)
        async with make_app(tiny_ckpt, server={"show_model_paths": True}) as app:
            shown = await ready(app)
        return hidden, shown

    hidden, shown = run(body())
    assert hidden["path"] == Path(tiny_ckpt).name == "tiny.pt" and shown["path"] == tiny_ckpt
    assert set(hidden) == set(shown) and Path(shown["path"]).is_absolute()


def test_resource_errors_are_logged_once_per_interval(tiny_ckpt, caplog):
    caplog.set_level(logging.DEBUG)

    async def body():
        async with make_app(tiny_ckpt) as app:
            app._resource_log.interval = 0.3
            loop = asyncio.get_running_loop()
            for _ in range(500):  # what asyncio reports for every accept() once file descriptors run out
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
            first = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            await asyncio.sleep(0.45)
            second = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            await asyncio.sleep(0.4)
            third = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            loop.call_exception_handler({"message": "something else", "exception": ValueError("x")})
            return first, second, third, app.metrics.render().decode()

    first, second, third, metrics = run(body())
    assert len(first) == 1 and "socket.accept() out of system resource" in first[0] and "LimitNOFILE" in first[0]
    assert len(second) == 2 and second[1].startswith("499 more failures") and third == second
    assert 'streamd_errors_total{code="resource_exhausted"} 500.0' in metrics
    assert not [r for r in caplog.records if r.name == "streamd.server" and r.exc_info]
    assert any(r.name == "asyncio" and "something else" in r.getMessage() for r in caplog.records)


def test_trickling_clients_lose_their_slot(tiny_ckpt):
    """2 bytes every 0.2 s (v1) or configs only (Vosk) below a 0.5 x real-time minimum over 1 s windows: closed
    with audio_too_slow / 1008, their slots free again; a client streaming at real time is not affected."""
    x = pcm16(random_audio(2.5, seed=3))

    async def trickle(url, first, piece):
        async with connect(url) as ws:
            if first:
                await ws.send(first)
            msgs = []
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < 5:
                    await ws.send(piece)
                    try:
                        msgs.append(json.loads(await asyncio.wait_for(ws.recv(), 0.2)))
                    except asyncio.TimeoutError:
                        pass
            except Exception:  # noqa: BLE001 - the server closed the connection
                pass
            msgs += await drain(ws)
            return msgs, ws.close_code, time.monotonic() - t0

    async def steady(url):
        async with connect(url) as ws:
            await ws.send('{"type": "start", "partials": false}')
            for i in range(0, len(x), 3200):  # 0.1 s every 0.1 s
                await ws.send(x[i:i + 3200])
                await asyncio.sleep(0.1)
            await ws.send('{"type": "eof"}')
            return await drain(ws), ws.close_code

    async def body():
        async with make_app(tiny_ckpt, limits={"max_streams": 3, "min_audio_rate": 0.5,
                                               "min_audio_window": 1.0}) as app:
            base = f"ws://127.0.0.1:{app.port}"
            res = await asyncio.gather(trickle(f"{base}/v1/stream", '{"type": "start"}', b"\0\0"),
                                       trickle(f"{base}/vosk", None, '{"config": {"sample_rate": 16000}}'),
                                       steady(f"{base}/v1/stream"))
            await until(lambda: not app.conns)
            return res

    (v1, v1_code, v1_t), (vk, vk_code, vk_t), (ok, ok_code) = run(body())
    for msgs, code, took in ((v1, v1_code, v1_t), (vk, vk_code, vk_t)):
        errors = [m for m in msgs if m.get("type") == "error"]
        assert [e["code"] for e in errors] == ["audio_too_slow"] and code == 1008, msgs
        assert "min_audio_rate" in errors[0]["message"] and 0.5 < took < 3.0
    assert ok[-1]["type"] == "done" and ok[-1]["audio_seconds"] == pytest.approx(2.5) and ok_code == 1000


def slowed(rec, seconds):
    """Make every batch step of ``rec`` take ``seconds`` longer (an overloaded engine)."""
    real = rec.step

    def step(*args, **kw):  # the runner may restrict a step to some streams (Recognizer.step(only))
        time.sleep(seconds)
        return real(*args, **kw)

    rec.step = step
    return rec


def test_drain_under_load_ends_every_stream_with_done_or_shutting_down(tiny_ckpt, caplog):
    """SIGTERM while the engine is behind: the streams the grace cannot decode are told at once (a step of
    at least 0.04 s decodes at most 4 x 0.16 s of audio: 12.8 s within the 0.8 s grace, while 18 s are
    queued), the short one is finished, and nothing ends in silence."""
    from streamd.engine import Recognizer

    cfg = app_config(server={"grace_seconds": 0.8, "close_timeout": 1.0, "max_steps_per_cycle": 1})
    long, short = pcm16(random_audio(6.0, seed=5)), pcm16(random_audio(0.3, seed=6))

    async def client(port, audio, sent):
        ws = await connect(f"ws://127.0.0.1:{port}/v1/stream")
        await ws.send('{"type": "start"}')
        for i in range(0, len(audio), 32000):
            await ws.send(audio[i:i + 32000])
        sent.set()
        return ws

    async def body():
        rec = slowed(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), 0.04)
        app = App(cfg, recognizer=rec)
        await app.start()
        events = [asyncio.Event() for _ in range(4)]
        clients = [await client(app.port, long, events[i]) for i in range(3)]
        await until(lambda: app.throughput.rate(time.monotonic()) is not None)
        clients.append(await client(app.port, short, events[3]))
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        stopping = asyncio.create_task(app.shutdown())
        results = [await drain(ws) for ws in clients]
        await stopping
        return results, [ws.close_code for ws in clients], time.monotonic() - t0

    results, codes, took = asyncio.run(asyncio.wait_for(body(), 60))
    assert codes == [1001] * 4  # every stream is told, none ends in silence
    for msgs in results[:3]:  # 6 s of audio each at an engine this slow: the grace cannot finish them
        assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "shutting_down", msgs[-3:]
        assert "shutting down" in msgs[-1]["message"]
    assert [m["type"] for m in results[3]][-2:] == ["final", "done"]  # the short one is decoded to its end
    assert took < 0.8 + 1.0 + 2.0
    assert any("cannot be decoded within the grace period; ending them now" in r.getMessage() for r in caplog.records)


def test_vosk_client_sending_faster_than_one_cycle_is_not_cut_off(tiny_ckpt):
    """400 frames of 10 ms land in one engine cycle: the partial replies coalesce (no slow_consumer), the
    final result arrives, close 1000."""
    from streamd.engine import Recognizer

    cfg = app_config(limits={"max_realtime": 0})
    pcm = pcm16(random_audio(4.0, seed=8))

    async def body():
        rec = slowed(Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), 0.2)
        async with App(cfg, recognizer=rec) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                await ws.send('{"config": {"sample_rate": 16000}}')
                for i in range(0, len(pcm), 320):
                    await ws.send(pcm[i:i + 320])
                await ws.send('{"eof": 1}')
                msgs = await drain(ws)
                return msgs, ws.close_code, app.metrics.render().decode()

    msgs, code, metrics = asyncio.run(asyncio.wait_for(body(), 60))
    assert code == 1000 and "slow_consumer" not in metrics
    assert not [m for m in msgs if m.get("type") == "error"]
    assert all(set(m) <= {"partial", "result", "text"} for m in msgs) and "text" in msgs[-1]
    assert 1 < len(msgs) < 401  # coalesced, yet more than the final alone
