"""The fuzz scenario: random v1 / Vosk / Wyoming sessions and raw HTTP requests with header variants."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

from ..server import RATE
from .context import Ctx, cfg
from .faults import raw_http


def _rand_value(rnd: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "float", "str", "bool", "none", "list", "dict", "big", "neg"]
    k = rnd.choice(kinds if depth < 2 else kinds[:5])
    if k == "int":
        return rnd.choice([0, 1, 8000, 16000, 48000, 7999, 48001, 64, 65, -1, 2 ** 31, 2 ** 63])
    if k == "float":
        return rnd.choice([0.5, 16000.0, 1e308, -0.0, 3.14])
    if k == "str":
        return rnd.choice(["", "greedy", "modified_beam", "beam", "s16le", "f32le", "x" * 300, "\u00e9\u2603",
                           "hey stream", "ctc_prefix_beam", "\x00"])
    if k == "bool":
        return rnd.choice([True, False])
    if k == "none":
        return None
    if k == "list":
        return [_rand_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    if k == "dict":
        return {rnd.choice(["phrase", "boost", "threshold", "x"]): _rand_value(rnd, depth + 1)
                for _ in range(rnd.randint(0, 3))}
    if k == "big":
        return 10 ** rnd.randint(5, 400)
    return -rnd.randint(1, 10 ** 6)


def fuzz_v1_messages(rnd: random.Random, pcm: bytes) -> list[str | bytes]:
    fields = ["sample_rate", "format", "method", "beam", "partials", "keywords", "endpointing", "wake_words",
              "hotwords", "bogus"]
    msgs: list[str | bytes] = []
    for _ in range(rnd.randint(1, 6)):
        r = rnd.random()
        if r < 0.35:
            start = {"type": "start"}
            for f in rnd.sample(fields, rnd.randint(0, 4)):
                start[f] = _rand_value(rnd)
            msgs.append(json.dumps(start))
        elif r < 0.6:
            n = rnd.choice([0, 1, 2, 3, 320, 3200, 32001, 1048576, 1048577])
            msgs.append(pcm[:n] if n <= len(pcm) else os.urandom(n))
        elif r < 0.7:
            msgs.append(rnd.choice(['{"type": "eof"}', '{"type": "reset"}', '{"type": "eof", "x": 1}',
                                    '{"type": "nope"}', '{}', '[]', '"x"', 'null', '{"type": 5}']))
        elif r < 0.8:
            msgs.append(rnd.choice(["{", "not json", "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
                                    "[" * 5000 + "]" * 5000, "{\"type\": \"start\"" + " " * 70000 + "}"]))
        elif r < 0.9:
            msgs.append(os.urandom(rnd.randint(1, 9)))
        else:
            msgs.append(json.dumps({"type": "start", "wake_words": [rnd.choice(["computer", "", "9", "x" * 200])] *
                                    rnd.randint(0, 300)}))
    return msgs


def fuzz_vosk_messages(rnd: random.Random, pcm: bytes) -> list[str | bytes]:
    msgs: list[str | bytes] = []
    for _ in range(rnd.randint(1, 6)):
        r = rnd.random()
        if r < 0.3:
            c = {k: _rand_value(rnd) for k in rnd.sample(["sample_rate", "words", "max_alternatives", "phrase_list",
                                                           "x"], rnd.randint(0, 3))}
            msgs.append(json.dumps({"config": rnd.choice([c, _rand_value(rnd)])}))
        elif r < 0.7:
            n = rnd.choice([0, 1, 2, 3, 320, 1600, 8001, 1048577])
            msgs.append(pcm[:n] if n <= len(pcm) else os.urandom(n))
        else:
            msgs.append(rnd.choice(['{"eof" : 1}', "{'eof': 1}", '{"eof": 0}', "{", "[]", '{"x": 1}', "eof"]))
    return msgs


CLOSE_CODES_OK = {1000, 1001, 1003, 1008, 1009, 1013}


async def fuzz_ws_case(url: str, msgs: list[str | bytes], eof: str) -> str | None:
    """None when the server behaved: ends with done/close 1000, or an error message whose code maps to the
    close code; else what went wrong."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from streamd.server.protocol import CLOSE_CODES

    got: list[Any] = []
    try:
        async with connect(url, compression=None, max_size=None, open_timeout=20, close_timeout=5) as ws:
            try:
                for m in msgs:
                    await ws.send(m)
                await ws.send(eof)
            except ConnectionClosed:
                pass

            async def read_all() -> None:
                try:
                    async for raw in ws:
                        try:
                            got.append(json.loads(raw))
                        except ValueError:
                            got.append(raw)
                except ConnectionClosed:
                    pass

            await asyncio.wait_for(read_all(), 30)
        code = ws.close_code
    except asyncio.TimeoutError:
        return "no close within 30 s"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    errors = [m for m in got if isinstance(m, dict) and m.get("type") == "error"]
    if code == 1011 or code not in CLOSE_CODES_OK:
        return f"close code {code} ({errors[-1] if errors else 'no error message'})"
    if code != 1000:
        if not errors:
            return f"close {code} without an error message"
        if CLOSE_CODES.get(errors[-1].get("code")) != code or not errors[-1].get("message"):
            return f"error {errors[-1]} then close {code}"
    return None


def header_cases(rnd: random.Random, port: int) -> list[bytes]:
    host = f"127.0.0.1:{port}"
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    variants = [
        [("Host", host)], [("Host", host), ("Host", host)], [("Host", "evil.example")], [("Host", "")],
        [("Host", "[::1")], [("Host", host), ("Origin", "http://evil.example")],
        [("Host", host), ("Origin", f"http://{host}"), ("Origin", f"http://{host}")],
        [("Host", host), ("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
        [("Host", host), ("Authorization", "Basic xyz")], [("Host", "localhost:99999")],
        [("Host", host), ("Sec-WebSocket-Key", "short")], [("Host", host), ("Sec-WebSocket-Version", "8")],
        [("Host", host), ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Key", key)],
        [("Host", "h\u00e9".encode("utf-8").decode("latin-1"))], [("Host", host), ("X-Big", "a" * 9000)],
        [("Host", host), ("Sec-WebSocket-Protocol", ",,,")], [("Host", host), ("Connection", "close")],
        [], [("Host", host), ("Upgrade", "h2c")], [("host", host), ("HOST", host)],
    ]
    paths = ["/v1/stream", "/vosk", "/v1/events", "/readyz", "/healthz", "/metrics", "/", "/nope",
             "/v1/stream?token=a&token=b", "http://evil.example/v1/stream", "/%00", "/../../etc/passwd", "*",
             "/v1/stream?" + "x" * 5000]
    methods = ["GET", "HEAD", "POST", "OPTIONS", "G\u00c9T", "PUT"]
    cases = []
    for _ in range(400):
        method, path = rnd.choice(methods), rnd.choice(paths)
        hdrs = list(rnd.choice(variants))
        if rnd.random() < 0.6:
            hdrs += [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
                     ("Sec-WebSocket-Key", key)]
        rnd.shuffle(hdrs)
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
        cases.append(head.encode("latin-1", "replace"))
    cases += [b"\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n", b"GARBAGE\r\n\r\n", b"GET /\r\n\r\n",
              b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Length: 5\r\n\r\nhello"]
    return cases


def wyoming_cases(rnd: random.Random, pcm: bytes) -> list[bytes]:
    out = []
    types = ["describe", "transcribe", "audio-start", "audio-chunk", "audio-stop", "detect", "ping",
             "select-program", "nope", ""]
    for _ in range(150):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            t = rnd.choice(types)
            data = {k: _rand_value(rnd) for k in rnd.sample(["rate", "width", "channels", "name", "language",
                                                              "names", "timestamp", "text"], rnd.randint(0, 4))}
            payload = pcm[: rnd.choice([0, 1, 2, 3, 320, 3200])] if t == "audio-chunk" else b""
            body = json.dumps(data).encode()
            header: dict[str, Any] = {"type": t, "data_length": len(body), "payload_length": len(payload)}
            if rnd.random() < 0.2:
                header[rnd.choice(["data_length", "payload_length"])] = _rand_value(rnd)
            line = json.dumps(header).encode() + b"\n"
            if rnd.random() < 0.1:
                line = rnd.choice([b"{\n", b"[]\n", b"\xff\xfe\n", b"x" * 70000 + b"\n"])
            parts.append(line + (body if isinstance(header.get("data_length"), int) else b"") + payload)
        out.append(b"".join(parts))
    return out


async def wyoming_case(port: int, blob: bytes) -> str | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(blob + b'{"type": "describe"}\n')
        await writer.drain()
        t0 = time.monotonic()
        buf = b""
        while b'"info"' not in buf and time.monotonic() - t0 < 20:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 20)
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
        writer.close()
        return None  # answered or closed: the server is alive (checked below with a clean describe)
    except OSError as e:
        return f"{type(e).__name__}: {e}"


async def scenario_fuzz(ctx: Ctx, cases_per_protocol: int = 350) -> dict:
    rnd = random.Random(25)
    pcm = ctx.audio.read(0, 3 * RATE)
    failures: list[str] = []
    counts: dict[str, int] = {}
    with ctx.daemon("fuzz", cfg(max_streams=4000, idle_timeout=5.0), wyoming=True) as d:
        vosk_url = f"ws://127.0.0.1:{d.port}/vosk"
        sem = asyncio.Semaphore(16)

        async def bounded(name: str, coro: Any) -> None:
            async with sem:
                r = await coro
                counts[name] = counts.get(name, 0) + 1
                if r is not None:
                    failures.append(f"{name}: {r}")

        jobs = [bounded("v1", fuzz_ws_case(d.url, fuzz_v1_messages(rnd, pcm), '{"type": "eof"}'))
                for _ in range(cases_per_protocol)]
        jobs += [bounded("vosk", fuzz_ws_case(vosk_url, fuzz_vosk_messages(rnd, pcm), '{"eof" : 1}'))
                 for _ in range(cases_per_protocol)]
        for raw in header_cases(rnd, d.port):
            async def one(raw: bytes = raw) -> str | None:
                try:
                    status, head = await raw_http(d.port, raw)
                except (OSError, asyncio.TimeoutError) as e:
                    return f"{type(e).__name__}: {e} for {raw[:80]!r}"
                if status is not None and status >= 500 and b"/readyz" not in raw:
                    return f"HTTP {status} for {raw[:80]!r}"
                return None
            jobs.append(bounded("headers", one()))
        wy_ok = d.wyoming_port is not None
        if wy_ok:
            jobs += [bounded("wyoming", wyoming_case(d.wyoming_port, blob)) for blob in wyoming_cases(rnd, pcm)]
        t0 = time.monotonic()
        await asyncio.gather(*jobs)
        alive = d.readyz()[0] in (200, 503)
        errors = d.errors()
        if wy_ok and await wyoming_case(d.wyoming_port, b"") is not None:
            failures.append("wyoming: no answer to a clean describe after the fuzz")
        ctx.done_with(d)
    total = sum(counts.values())
    r = {"cases": total, "by_protocol": counts, "failures": len(failures), "failure_examples": failures[:10],
         "alive_after": alive, "elapsed_s": round(time.monotonic() - t0, 1),
         "errors_by_code": errors}
    print(f"  fuzz: {total} cases, {len(failures)} failures {failures[:3]}", flush=True)
    return r
