"""The browser demo page (streamd/server/web, package data) in real headless Chromium, driven over the DevTools protocol.

Chromium captures a fake microphone that plays a WAV file (a 440 Hz tone
over speech-like noise, looped).  Two servers:

* a stand-in (test double of the daemon, for page behaviour only): serves
  the page's files, records the start message and the audio the page sends, and
  answers with scripted partial / final / wake / error events, so the
  rendering (confidence colors, tooltips, wake highlight, errors, stop ->
  eof -> done) is checked against known input;
* the real daemon (``streamd serve`` with a tiny model): the page streams to
  it, and the finals it shows must be exactly what the engine decodes from
  the audio the page sent (recorded by the page with ?record=1).

Skipped when chromium is not installed (CI: apt-get install -y chromium).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import mimetypes
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from helpers import random_audio, write_checkpoint
from helpers import write_wav as _write_wav

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "streamd" / "server" / "web"  # the page: package data of streamd.server
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")

TONE_HZ = 440.0


# ---------------------------------------------------------------------------- Chromium + DevTools


class Chromium:
    """A headless Chromium process with a fake microphone; DevTools on a free port."""

    def __init__(self, wav: str, profile: Path):
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}",
                "--disable-background-networking", "--disable-component-update", "--no-first-run",
                "--autoplay-policy=no-user-gesture-required", f"--user-data-dir={profile}",
                "--remote-debugging-port=0", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        found = threading.Event()

        def drain():  # keep reading: a full stderr pipe would block the browser
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                m = re.search(r"DevTools listening on (ws://\S+)", line)
                if m:
                    self.url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(30) or self.url is None:
            self.close()
            raise RuntimeError("chromium did not start:\n" + "\n".join(self.lines[-20:]))

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cdp:
    """Minimal DevTools client: commands by id, console messages and exceptions collected."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self.console: list[str] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self):
        async for raw in self.ws:
            m = json.loads(raw)
            if "id" in m:
                fut = self.pending.pop(m["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(m)
            elif m.get("method") == "Runtime.consoleAPICalled":
                p = m["params"]
                self.console.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description")))
                                                                       for a in p["args"]))
            elif m.get("method") == "Runtime.exceptionThrown":
                self.console.append(f"exception: {m['params']['exceptionDetails']}")

    async def send(self, method, params=None, session=None, timeout=20.0):
        i = next(self.ids)
        msg = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send(json.dumps(msg))
        m = await asyncio.wait_for(fut, timeout)
        if "error" in m:
            raise RuntimeError(f"DevTools {method}: {m['error']}")
        return m["result"]


class Page:
    def __init__(self, cdp: Cdp, session: str, target: str):
        self.cdp, self.session, self.target = cdp, session, target

    async def eval(self, expr: str, gesture: bool = False):
        r = await self.cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True,
                                                     "userGesture": gesture}, self.session)
        if "exceptionDetails" in r:
            raise AssertionError(f"JavaScript error in {expr!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def wait(self, expr: str, what: str, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while True:
            v = await self.eval(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                state = await self.eval("JSON.stringify({state: streamd.state, errors: streamd.errors, "
                                        "sent: streamd.sent, log: streamd.log.slice(-5)})")
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; page: {state}; "
                                     f"console: {self.cdp.console[-10:]}")
            await asyncio.sleep(0.1)

    async def click(self, element_id: str):
        await self.eval(f"document.getElementById({element_id!r}).click()", gesture=True)

    async def dom(self) -> dict:
        """What the page shows: status, partial, finals (words with tooltip/color), wake entries, error."""
        return await self.eval("""(() => {
            const q = (s) => Array.from(document.querySelectorAll(s));
            return {
              status: document.getElementById('status').textContent,
              partial: document.getElementById('partial').textContent,
              error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
              banner: document.getElementById('wake-banner').hidden ? null
                      : document.getElementById('wake-banner').textContent,
              startDisabled: document.getElementById('start').disabled,
              stopDisabled: document.getElementById('stop').disabled,
              finals: q('#finals .final').map(f => ({
                time: f.querySelector('.time').textContent,
                words: Array.from(f.querySelectorAll('.word')).map(w => ({
                  text: w.textContent, title: w.title, conf: w.dataset.conf,
                  color: getComputedStyle(w).color})),
              })),
              wakes: q('#finals .wake').map(w => w.textContent),
            };
          })()""")


class Browser:
    """DevTools connection to a running Chromium (one per test: asyncio.run per test)."""

    def __init__(self, chromium: Chromium):
        self.chromium = chromium

    async def __aenter__(self):
        from websockets.asyncio.client import connect

        self._conn = connect(self.chromium.url, max_size=None, open_timeout=20)
        self.cdp = Cdp(await self._conn.__aenter__())
        return self

    async def __aexit__(self, *exc):
        self.cdp.reader.cancel()
        await self._conn.__aexit__(*exc)

    async def open(self, url: str) -> Page:
        target = (await self.cdp.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await self.cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        page = Page(self.cdp, session, target)
        await self.cdp.send("Runtime.enable", session=session)
        await self.cdp.send("Page.enable", session=session)
        await self.cdp.send("Page.navigate", {"url": url}, session)
        await page.wait("document.readyState === 'complete' && !!window.streamd && streamd.state === 'idle'",
                        "the page to load")
        return page

    async def close_page(self, page: Page):
        await self.cdp.send("Target.closeTarget", {"targetId": page.target})


@pytest.fixture(scope="module")
def fake_mic_wav(tmp_path_factory):
    rate = 16000
    t = np.arange(int(2.0 * rate)) / rate
    x = 0.4 * np.sin(2 * np.pi * TONE_HZ * t) + 0.5 * random_audio(2.0, rate, seed=11)
    return _write_wav(tmp_path_factory.mktemp("mic") / "fake_mic.wav", x, rate)


@pytest.fixture(scope="module")
def chromium(fake_mic_wav, tmp_path_factory):
    c = Chromium(fake_mic_wav, tmp_path_factory.mktemp("chromium-profile"))
    yield c
    c.close()


# ---------------------------------------------------------------------------- stand-in daemon (test double)

W = lambda word, s, e, c: {"word": word, "start": s, "end": e, "conf": c}  # noqa: E731
SCRIPT = [
    {"type": "partial", "segment": 0, "text": "turn on", "words": [W("turn", 0.1, 0.3, 0.9), W("on", 0.3, 0.5, 0.7)]},
    {"type": "final", "segment": 0, "text": "turn on the light", "start": 0.0, "end": 1.1, "reason": "endpoint:rule2",
     "words": [W("turn", 0.1, 0.3, 0.95), W("on", 0.3, 0.5, 0.8), W("the", 0.5, 0.6, 0.5), W("light", 0.6, 1.0, 0.1)]},
    {"type": "wake", "keyword": "hey stream", "score": 0.97, "start": 1.2, "end": 1.6},
    {"type": "partial", "segment": 1, "text": "and", "words": [W("and", 1.7, 1.9, 0.6)]},
]
LAST = [{"type": "final", "segment": 1, "text": "and more", "start": 1.1, "end": 2.5, "reason": "eos",
         "words": [W("and", 1.7, 1.9, 0.6), W("more", 2.0, 2.3, 0.66)]},
        {"type": "done", "audio_seconds": 2.5}]


class StandIn:
    """Serves the page (WEB) and speaks v1: ready, SCRIPT after 0.5 s of audio, LAST after eof, close 1000.

    A start with method "explode" gets an error and close 1003 instead; with
    ``refuse`` the websocket handshake is answered with HTTP 403.
    """

    def __init__(self, refuse: bool = False):
        self.refuse = refuse
        self.paths: list[str] = []
        self.start: dict | None = None
        self.audio = bytearray()
        self.eof_after: int | None = None

    async def __aenter__(self):
        from websockets.asyncio.server import serve

        self.server = await serve(self.handler, "127.0.0.1", 0, process_request=self.http)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    def http(self, conn, request):
        path = urlsplit(request.path).path
        if path == "/v1/stream":
            self.paths.append(request.path)
            return conn.respond(403, "refused\n") if self.refuse else None
        f = WEB / (path.lstrip("/") or "index.html")
        if not f.is_file():
            return conn.respond(404, "not found\n")
        r = conn.respond(200, "")
        r.body = f.read_bytes()
        del r.headers["Content-Type"], r.headers["Content-Length"]
        r.headers["Content-Type"] = mimetypes.guess_type(f.name)[0]
        r.headers["Content-Length"] = str(len(r.body))
        return r

    async def handler(self, ws):
        self.start = json.loads(await ws.recv())
        if self.start.get("method") == "explode":
            await ws.send(json.dumps({"type": "error", "code": "bad_sample_rate",
                                      "message": "sample_rate must be an integer 8000..48000, got 5"}))
            await ws.close(1003, "bad_sample_rate")
            return
        rate = self.start["sample_rate"]
        await ws.send(json.dumps({"type": "ready", "session": "s-1", "sample_rate": rate, "format": "s16le",
                                  "method": self.start.get("method", "greedy"), "model": {"name": "stand-in"}}))
        scripted = False
        async for msg in ws:
            if isinstance(msg, bytes):
                self.audio += msg
                if not scripted and len(self.audio) >= rate:  # 0.5 s of s16le
                    scripted = True
                    for ev in SCRIPT:
                        await ws.send(json.dumps(ev))
            elif json.loads(msg).get("type") == "eof":
                self.eof_after = len(self.audio)
                for ev in LAST:
                    await ws.send(json.dumps(ev))
                await ws.close(1000, "done")
                return


def _rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return r, g, b


def test_page_streams_the_microphone_and_renders_events(chromium):
    async def scenario():
        async with StandIn() as srv, Browser(chromium) as br:
            page = await br.open(f"http://127.0.0.1:{srv.port}/?token=s3cret%2F1&method=greedy")
            await page.click("start")
            await page.wait("streamd.state === 'listening'", "ready")
            await page.wait("streamd.log.some(m => m.type === 'wake')", "the scripted events")
            await page.wait("document.getElementById('partial').textContent === 'and'", "the last partial")
            shown = await page.dom()
            await page.click("stop")
            await page.wait("streamd.state === 'done' && streamd.closeCode === 1000", "done and close 1000")
            after = await page.dom()
            sent = await page.eval("JSON.stringify({s: streamd.sent, rate: streamd.sampleRate})")
            await br.close_page(page)
            return srv, shown, after, json.loads(sent)

    srv, shown, after, sent = asyncio.run(asyncio.wait_for(scenario(), 90))
    # what the page sent: start (with the context's rate, s16le, the ?method), token as a query parameter
    assert parse_qs(urlsplit(srv.paths[0]).query) == {"token": ["s3cret/1"]}
    assert srv.start == {"type": "start", "sample_rate": sent["rate"], "format": "s16le", "partials": True,
                         "keywords": True, "method": "greedy"}
    assert sent["s"]["eof"] and srv.eof_after == len(srv.audio) == sent["s"]["bytes"]  # all audio, then eof
    x = np.frombuffer(bytes(srv.audio), "<i2").astype(np.float64) / 32768
    rate = sent["rate"]
    assert x.size > 0.5 * rate
    spec = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    peak = np.fft.rfftfreq(x.size, 1 / rate)[int(np.argmax(spec))]
    assert abs(peak - TONE_HZ) < 5, f"the fake microphone's {TONE_HZ} Hz tone should dominate, got {peak:.1f} Hz"
    assert 0.05 < float(np.sqrt(np.mean(x ** 2))) < 0.8
    # what the page showed while streaming
    assert shown["status"] == "listening" and shown["partial"] == "and" and shown["error"] is None
    assert shown["startDisabled"] and not shown["stopDisabled"]
    (final,) = shown["finals"]
    assert final["time"] == "0.00–1.10"
    assert [w["text"] for w in final["words"]] == ["turn", "on", "the", "light"]
    assert [w["title"] for w in final["words"]] == ["conf 0.95 · 0.10–0.30 s", "conf 0.80 · 0.30–0.50 s",
                                                    "conf 0.50 · 0.50–0.60 s", "conf 0.10 · 0.60–1.00 s"]
    rgb = [_rgb(w["color"]) for w in final["words"]]
    assert rgb[0][1] > rgb[0][0] and rgb[3][0] > rgb[3][1]  # confident: green, unsure: red
    greenness = [g - r for r, g, _ in rgb]
    assert greenness == sorted(greenness, reverse=True)
    assert shown["wakes"] == ["wake word “hey stream” · score 0.97 · 1.20–1.60 s"]
    assert shown["banner"] == "“hey stream”"
    # after stop: the tail final, done, buttons back
    assert [[w["text"] for w in f["words"]] for f in after["finals"]] == [["turn", "on", "the", "light"],
                                                                           ["and", "more"]]
    assert after["status"] == "done" and after["partial"] == "" and after["error"] is None
    assert not after["startDisabled"] and after["stopDisabled"]


def test_page_shows_server_errors(chromium):
    async def scenario():
        async with StandIn() as srv, Browser(chromium) as br:
            page = await br.open(f"http://127.0.0.1:{srv.port}/?method=explode")
            await page.click("start")
            await page.wait("streamd.state === 'error' && streamd.closeCode !== null", "the error")
            shown = await page.dom()
            await br.close_page(page)
            return shown

    shown = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert shown["error"] == "server error bad_sample_rate: sample_rate must be an integer 8000..48000, got 5"
    assert shown["status"] == "bad_sample_rate" and not shown["startDisabled"] and shown["stopDisabled"]


def test_page_reports_a_refused_connection(chromium):
    async def scenario():
        async with StandIn(refuse=True) as srv, Browser(chromium) as br:
            page = await br.open(f"http://127.0.0.1:{srv.port}/")
            await page.click("start")
            await page.wait("streamd.state === 'error'", "the connection error")
            shown = await page.dom()
            await br.close_page(page)
            return shown

    shown = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert shown["error"] == ("connection closed with code 1006 (the server is unreachable, refused the "
                              "connection, or it was lost)")
    assert shown["status"] == "closed (1006)" and not shown["startDisabled"]


# ---------------------------------------------------------------------------- the real daemon


def _serve_available() -> bool:
    if not (ROOT / "streamd" / "server" / "app.py").is_file():
        return False
    r = subprocess.run([sys.executable, "-m", "streamd.cli", "serve", "--help"], capture_output=True, cwd=ROOT)
    return r.returncode == 0


class Daemon:
    """``streamd serve --model CKPT --port 0`` as a subprocess; the port is read from its log."""

    def __init__(self, ckpt: str):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for k in ("STREAMD_CONFIG", "STREAMD_HOST", "STREAMD_PORT", "STREAMD_MODEL", "STREAMD_DEVICE"):
            env.pop(k, None)
        self.proc = subprocess.Popen([sys.executable, "-m", "streamd.cli", "serve", "--model", ckpt, "--port", "0",
                                      "--host", "127.0.0.1", "--device", "cpu"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        self.port: int | None = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                m = re.search(r"listening on ws://[\d.]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                if "ready:" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(180) or self.port is None or self.proc.poll() is not None:  # a busy host
            self.close()
            raise RuntimeError("streamd serve did not start:\n" + "\n".join(self.lines[-30:]))

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_page_against_streamd_serve_shows_what_the_engine_decodes(chromium, tmp_path):
    if not _serve_available():
        pytest.skip("streamd serve is not available yet")
    from streamd.feed import transcribe_files
    from streamd.engine import Recognizer

    ckpt = write_checkpoint(tmp_path / "m.pt", seed=3)
    daemon = Daemon(ckpt)
    try:
        async def scenario():
            async with Browser(chromium) as br:
                page = await br.open(f"http://127.0.0.1:{daemon.port}/?record=1")
                await page.click("start")
                await page.wait("streamd.state === 'listening'", "ready from streamd serve", timeout=30)
                await page.wait("streamd.sent.bytes >= 2 * 1.5 * streamd.sampleRate", "1.5 s of audio sent")
                await page.wait("streamd.log.some(m => m.type === 'partial')", "a partial", timeout=30)
                await page.click("stop")
                await page.wait("streamd.state === 'done' && streamd.closeCode === 1000", "done", timeout=60)
                res = json.loads(await page.eval("JSON.stringify({log: streamd.log, rate: streamd.sampleRate, "
                                                 "errors: streamd.errors, sent: streamd.sent})"))
                res["audio"] = await page.eval("streamd.sentAudioBase64()")
                res["dom"] = await page.dom()
                await br.close_page(page)
                return res

        res = asyncio.run(asyncio.wait_for(scenario(), 150))
    finally:
        daemon.close()
    assert res["errors"] == [] and res["sent"]["eof"]
    log = [{k: v for k, v in m.items() if k != "_t"} for m in res["log"]]
    assert log[0]["type"] == "ready" and log[-1]["type"] == "done"
    finals = [m for m in log if m["type"] == "final"]
    assert finals and finals[-1]["reason"] == "eos"
    assert any(f["text"] for f in finals), "the test model should decode some text from this audio"
    # the page renders exactly the finals it received
    shown = [[w["text"] for w in f["words"]] for f in res["dom"]["finals"]]
    assert shown == [[w["word"] for w in f["words"]] or [f["text"]] for f in finals if f["text"]]
    assert all(w["title"].startswith("conf ") for f in res["dom"]["finals"] for w in f["words"])
    # ... and they are what the engine decodes from the audio the page sent
    pcm = base64.b64decode(res["audio"])
    assert len(pcm) == res["sent"]["bytes"]
    wav = str(tmp_path / "sent.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(res["rate"])
        w.writeframes(pcm)
    events = transcribe_files(Recognizer.from_checkpoint(ckpt), [wav])[wav]
    want = [e.to_wire() for e in events if type(e).__name__ in ("Final", "WakeWord")]
    assert [m for m in log if m["type"] in ("final", "wake")] == want
    assert log[-1]["audio_seconds"] == pytest.approx(len(pcm) / 2 / res["rate"], abs=1e-3)
