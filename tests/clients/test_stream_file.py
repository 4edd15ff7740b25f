"""clients/stream_file.py and clients/mic_client.py, run as subprocesses like a user would.

Against the real daemon (``streamd serve`` with a tiny model): the finals and
wake events it prints are exactly what ``transcribe_files`` decodes from the
same files; concurrency and error exits.  Against a stand-in server (a test
double with known timing: partials a fixed delay after the audio they cover,
the final a fixed delay after eof): the latency numbers the client reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import pytest

from helpers import random_audio, real_portaudio_without_inputs
from tests.server.wire import LocalWsServer, self_signed_cert
from helpers import write_wav as _write_wav

ROOT = Path(__file__).resolve().parents[2]
CLIENT = str(ROOT / "clients" / "stream_file.py")


def _run(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CLIENT, *args], capture_output=True, text=True, timeout=timeout)


async def _arun(*args, timeout=120) -> tuple[int, str, str]:
    p = await asyncio.create_subprocess_exec(sys.executable, CLIENT, *args, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), timeout)
    return p.returncode, out.decode(), err.decode()


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------------------- the real daemon


def _serve_available() -> bool:
    if not (ROOT / "streamd" / "server" / "app.py").is_file():
        return False
    return subprocess.run([sys.executable, "-m", "streamd.cli", "serve", "--help"], capture_output=True,
                          cwd=ROOT).returncode == 0


@pytest.fixture(scope="module")
def daemon(ckpt):
    """``streamd serve --model CKPT --port 0``; yields its v1 URL (port read from the log)."""
    if not _serve_available():
        pytest.skip("streamd serve is not available yet")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in ("STREAMD_CONFIG", "STREAMD_HOST", "STREAMD_PORT", "STREAMD_MODEL", "STREAMD_DEVICE"):
        env.pop(k, None)
    proc = subprocess.Popen([sys.executable, "-m", "streamd.cli", "serve", "--model", ckpt, "--port", "0",
                             "--host", "127.0.0.1", "--device", "cpu"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    lines, port, ready = [], [], threading.Event()

    def drain():
        for line in proc.stderr:
            lines.append(line.rstrip())
            m = re.search(r"listening on ws://[\d.]+:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
            if "ready:" in line:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        if not ready.wait(180) or not port or proc.poll() is not None:  # model loading on a busy host
            raise RuntimeError("streamd serve did not start:\n" + "\n".join(lines[-30:]))
        yield f"ws://127.0.0.1:{port[0]}/v1/stream"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("wav")
    return [_write_wav(d / "a16k.wav", random_audio(1.0, 16000, seed=1), 16000),
            _write_wav(d / "b22k.wav", random_audio(0.8, 22050, seed=2), 22050)]


def _expected(ckpt, path):
    from streamd.feed import transcribe_files
    from streamd.engine import Recognizer

    events = transcribe_files(Recognizer.from_checkpoint(ckpt), [path])[path]
    return [e.to_wire() for e in events if type(e).__name__ in ("Final", "WakeWord")]


def test_results_are_what_the_engine_decodes(daemon, ckpt, wavs):
    r = _run(*wavs, "--url", daemon, "--json", "--concurrency", "2")
    assert r.returncode == 0, r.stderr
    msgs = _lines(r.stdout)
    for path in wavs:
        mine = [m for m in msgs if m["file"] == path]
        assert mine[0]["type"] == "ready" and mine[0]["sample_rate"] == wave.open(path).getframerate()
        got = [{k: v for k, v in m.items() if k != "file"} for m in mine if m["type"] in ("final", "wake")]
        want = _expected(ckpt, path)
        assert got == want and any(m["type"] == "final" and m["text"] for m in want)
        assert [m["type"] for m in mine][-2:] == ["done", "stats"]
        stats = mine[-1]
        assert stats["ok"] and stats["finalize_latency"] >= 0 and stats["done_latency"] >= stats["finalize_latency"]
        assert stats["text"] == " ".join(m["text"] for m in want if m["type"] == "final" and m["text"])
        assert "not paced at real time" in stats["latency_note"]  # as fast as possible: no latency claims
    assert "total: 2 streams, 0 failed" in r.stderr


def test_text_output_and_concurrency_cycling_over_files(daemon, ckpt, wavs):
    r = _run(wavs[0], "--url", daemon, "--concurrency", "2")
    assert r.returncode == 0, r.stderr
    want = []
    for m in _expected(ckpt, wavs[0]):
        if m["type"] == "final" and m["text"]:
            want.append(f"{wavs[0]}: {m['text']}")
        elif m["type"] == "wake":
            want.append(f"{wavs[0]}: *** wake {m['keyword']!r} score={m['score']} at {m['start']}-{m['end']} s ***")
    assert sorted(r.stdout.splitlines()) == sorted(want * 2)
    assert [ln.split(":")[0] for ln in r.stderr.splitlines()[:2]] == [f"{wavs[0]}[{i}]" for i in range(2)]
    assert "total: 2 streams, 0 failed" in r.stderr


def test_server_error_gives_exit_status_1(daemon, tmp_path):
    bad = _write_wav(tmp_path / "slow.wav", random_audio(0.3, 6000, seed=3), 6000)
    r = _run(bad, "--url", daemon, "--json")
    assert r.returncode == 1
    err = [m for m in _lines(r.stdout) if m["type"] == "error"]
    assert err and err[0]["code"] == "bad_sample_rate" and "6000" in err[0]["message"]
    assert f"stream_file: {bad}: bad_sample_rate:" in r.stderr


# ---------------------------------------------------------------------------- stand-in with known timing


class TimedStandIn(LocalWsServer):
    """v1 test double: a partial PARTIAL_DELAY after each chunk of audio it covers; the final FINAL_DELAY after eof.

    ``every``: send only every n-th partial (like a server coalescing them).
    ``token``: required bearer token (HTTP 401 otherwise).
    ``wake``: also a wake event ending at WAKE_END, WAKE_DELAY after the audio up to it came.
    """

    CHUNK = 0.16
    PARTIAL_DELAY = 0.2
    FINAL_DELAY = 0.3
    WAKE_END, WAKE_DELAY = 0.4, 0.25  # a wake event ending at 0.4 s, sent 0.25 s after that audio came

    def __init__(self, every: int = 1, token: str | None = None, wake: bool = False):
        self.every, self.token, self.wake = every, token, wake
        self.headers = []

    def http(self, conn, request):
        self.headers.append(request.headers.get("Authorization"))
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return conn.respond(401, "unauthorized\n")
        return None

    async def handler(self, ws):
        start = json.loads(await ws.recv())
        rate = start["sample_rate"]
        await ws.send(json.dumps({"type": "ready", "session": "x", "sample_rate": rate, "format": "s16le",
                                  "model": {"chunk_seconds": self.CHUNK}}))
        got, k, tasks = 0, 0, []

        async def later(delay, msg):
            await asyncio.sleep(delay)
            await ws.send(json.dumps(msg))

        async for msg in ws:
            if isinstance(msg, bytes):
                if self.wake and got < self.WAKE_END * rate <= got + len(msg) // 2:
                    tasks.append(asyncio.create_task(later(self.WAKE_DELAY, {
                        "type": "wake", "keyword": "hey x", "score": 0.9, "start": 0.1, "end": self.WAKE_END})))
                got += len(msg) // 2
                while got >= ((k + 1) * self.CHUNK + 0.015) * rate:
                    k += 1
                    if k % self.every == 0:
                        tasks.append(asyncio.create_task(later(self.PARTIAL_DELAY, {
                            "type": "partial", "segment": 0, "text": f"p{k}", "words": []})))
            else:
                await asyncio.gather(*tasks)
                await later(self.FINAL_DELAY, {"type": "final", "segment": 0, "text": "the end", "words": [],
                                               "start": 0.0, "end": got / rate, "reason": "eos"})
                await ws.send(json.dumps({"type": "done", "audio_seconds": got / rate}))
                await ws.close(1000, "done")
                return


@pytest.fixture(scope="module")
def short_wav(tmp_path_factory):
    return _write_wav(tmp_path_factory.mktemp("w") / "s.wav", random_audio(1.0, 16000, seed=5), 16000)


def test_latency_numbers_against_known_delays(short_wav):
    async def scenario():
        async with TimedStandIn(wake=True) as srv:
            t0 = time.monotonic()
            rc, out, err = await _arun(short_wav, "--url", srv.url, "--json", "--realtime", "--chunk-ms", "40")
            return rc, out, err, time.monotonic() - t0

    rc, out, err, wall = asyncio.run(scenario())
    assert rc == 0, err
    (stats,) = [m for m in _lines(out) if m["type"] == "stats"]
    assert stats["partials"] == 6 and stats["partials_measured"] == 6 and "latency_note" not in stats
    # each partial left the server 0.2 s after the frame completing its audio arrived
    assert 0.19 <= stats["partial_latency_median"] <= stats["partial_latency_max"] < 0.6
    assert 0.29 <= stats["finalize_latency"] < 0.8
    assert stats["wakes"] == 1 and 0.24 <= stats["wake_latency_median"] == stats["wake_latency_max"] < 5
    assert wall >= 1.0  # real-time pacing of 1 s of audio
    assert "partial latency median" in err and "finalize" in err


def test_coalesced_partials_are_not_used_for_latency(short_wav):
    async def scenario():
        async with TimedStandIn(every=3) as srv:
            return await _arun(short_wav, "--url", srv.url, "--json", "--realtime", "--chunk-ms", "100")

    rc, out, err = asyncio.run(scenario())
    assert rc == 0, err
    (stats,) = [m for m in _lines(out) if m["type"] == "stats"]
    assert stats["partials"] == 2 and stats["partials_measured"] == 0 and stats["partial_latency_median"] is None
    assert stats["latency_note"] == ("2 partials for 6 chunks: the server coalesced some, partial latency not "
                                     "measured")


def test_token_is_sent_as_bearer_header(short_wav):
    async def scenario():
        async with TimedStandIn(token="s3cret") as srv:
            bad = await _arun(short_wav, "--url", srv.url, "--token", "wrong")
            good = await _arun(short_wav, "--url", srv.url, "--token", "s3cret", "--speed", "4")
            return bad, good, srv.headers

    (rc1, _, err1), (rc2, out2, err2), headers = asyncio.run(scenario())
    assert headers == ["Bearer wrong", "Bearer s3cret"]
    assert rc1 == 1 and "server refused the connection: HTTP 401" in err1
    assert rc2 == 0 and out2 == "the end\n", err2


def test_unreachable_server_and_usage_errors(short_wav, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _run(short_wav, "--url", f"ws://127.0.0.1:{port}/v1/stream", "--timeout", "5", "--retries", "0")
    assert r.returncode == 1 and f"cannot talk to ws://127.0.0.1:{port}/v1/stream" in r.stderr
    r = _run(str(tmp_path / "missing.wav"))
    assert r.returncode == 2 and "missing.wav: no such file" in r.stderr
    r = _run(short_wav, "--url", "http://x/v1/stream")
    assert r.returncode == 2 and "--url must start with ws:// or wss://" in r.stderr
    r = _run(short_wav, "--concurrency", "0")
    assert r.returncode == 2 and "--concurrency and --repeat must be >= 1" in r.stderr


class RefusingStandIn(TimedStandIn):
    """Refuses the first ``refuse`` connections as a daemon at capacity does (``overloaded``, ``retry_after``,
    close 1013), then serves as :class:`TimedStandIn`; records every start message."""

    def __init__(self, refuse: int = 0):
        super().__init__()
        self.refuse = refuse
        self.starts: list[dict] = []

    async def handler(self, ws):
        if len(self.starts) < self.refuse:
            self.starts.append(json.loads(await ws.recv()))
            await ws.send(json.dumps({"type": "error", "code": "overloaded", "retry_after": 0.2,
                                      "message": "server is taking on streams gradually: try again in 1 s"}))
            await ws.close(1013, "overloaded")
            return
        first = await ws.recv()
        self.starts.append(json.loads(first))

        class Replay:  # the start message again for TimedStandIn's handler
            def __init__(self, ws):
                self.ws, self.first = ws, first

            async def recv(self):
                first, self.first = self.first, None
                return first if first is not None else await self.ws.recv()

            async def send(self, m):
                await self.ws.send(m)

            async def close(self, *a):
                await self.ws.close(*a)

            def __aiter__(self):
                return self.ws.__aiter__()

        await super().handler(Replay(ws))


def test_refusals_are_retried_after_retry_after_and_failed_streams_are_not_counted(short_wav):
    """The documented load generator on a daemon that is taking on streams gradually: each stream is retried
    after the server's retry_after (--retries, default 10) and succeeds; with --retries 0 the refusal is a
    failure, and the summary's audio (x real time) counts only streams that were transcribed."""
    async def scenario():
        async with RefusingStandIn(refuse=2) as srv:
            t0 = time.monotonic()
            ok = await _arun(short_wav, "--url", srv.url, "--json", "--speed", "8")
            wall = time.monotonic() - t0
        async with RefusingStandIn(refuse=1) as srv:
            bad = await _arun(short_wav, short_wav, "--url", srv.url, "--retries", "0", "--speed", "8")
        return ok, wall, bad

    (rc, out, err), wall, (rc2, _, err2) = asyncio.run(scenario())
    assert rc == 0, err
    (stats,) = [m for m in _lines(out) if m["type"] == "stats"]
    assert stats["ok"] and stats["retried"] == 2 and wall >= 0.4  # waited retry_after (0.2 s) twice
    assert "ok after 2 retries" in err
    assert rc2 == 1 and "total: 2 streams, 1 failed, 1.0 s of audio transcribed" in err2, err2
    assert "overloaded" in err2


def test_hotwords_and_wake_words_go_into_the_start_message(short_wav):
    async def scenario():
        async with RefusingStandIn() as srv:
            r = await _arun(short_wav, "--url", srv.url, "--speed", "8", "--method", "modified_beam",
                            "--hotwords", "streamd, kubernetes", "--wake-words", "computer,hey jarvis")
            return r, srv.starts

    (rc, _, err), starts = asyncio.run(scenario())
    assert rc == 0, err
    assert starts[0]["hotwords"] == ["streamd", "kubernetes"] and starts[0]["wake_words"] == ["computer", "hey jarvis"]
    assert starts[0]["method"] == "modified_beam"


def test_float_wav_needs_soundfile_and_says_so(short_wav, tmp_path):
    """A float WAV (the stdlib reads integer PCM only) streams with soundfile; without it the client names the
    package to install instead of 'unknown format: 3'."""
    sf = pytest.importorskip("soundfile", reason="writing a float WAV needs soundfile")
    x = random_audio(1.0, 16000, seed=8)
    path = str(tmp_path / "float.wav")
    sf.write(path, x, 16000, subtype="FLOAT")
    hide = tmp_path / "no_soundfile"
    hide.mkdir()
    (hide / "soundfile.py").write_text("raise ImportError('soundfile hidden for this test')\n")

    async def scenario():
        async with RefusingStandIn() as srv:
            with_sf = await _arun(path, "--url", srv.url, "--speed", "8")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hide), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        p = await asyncio.create_subprocess_exec(sys.executable, CLIENT, path, "--url", "ws://127.0.0.1:9/v1/stream",
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                 env=env)
        out, err = await asyncio.wait_for(p.communicate(), 120)
        return with_sf, (p.returncode, err.decode())

    (rc, _, err), (rc2, err2) = asyncio.run(scenario())
    assert rc == 0, err
    assert rc2 == 2 and "pip install soundfile" in err2 and "float" in err2, err2


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_cafile_and_insecure_for_a_self_signed_server(short_wav, tmp_path):
    import ssl

    cert, key = self_signed_cert(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))

    class TlsStandIn(RefusingStandIn):
        async def __aenter__(self):
            from websockets.asyncio.server import serve

            self.server = await serve(self.handler, "127.0.0.1", 0, process_request=self.http, ssl=ctx)
            self.url = f"wss://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/stream"
            return self

    async def scenario():
        async with TlsStandIn() as srv:
            plain = await _arun(short_wav, "--url", srv.url, "--retries", "0", "--timeout", "5")
            ca = await _arun(short_wav, "--url", srv.url, "--cafile", str(cert), "--speed", "8")
            insecure = await _arun(short_wav, "--url", srv.url, "--insecure", "--speed", "8")
            return plain, ca, insecure

    plain, ca, insecure = asyncio.run(scenario())
    assert plain[0] == 1 and "CERTIFICATE_VERIFY_FAILED" in plain[2]
    assert ca[0] == 0 and ca[1] == "the end\n", ca[2]
    assert insecure[0] == 0 and insecure[1] == "the end\n", insecure[2]


def test_a_long_file_at_full_speed_is_paced_not_cut_off(daemon, ckpt, tmp_path):
    """100 s of audio without --realtime (beyond the 30 s burst at 4x real time): the daemon's flow control
    slows the client down; every final is what the engine decodes from the file."""
    import numpy as np

    path = _write_wav(tmp_path / "long.wav", np.concatenate([random_audio(10.0, 16000, seed=s) for s in range(10)]),
                      16000)
    r = _run(path, "--url", daemon, "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    got = [{k: v for k, v in m.items() if k != "file"} for m in _lines(r.stdout) if m["type"] in ("final", "wake")]
    assert got == _expected(ckpt, path)
    assert "total" not in r.stderr and ": ok; audio 100.00 s" in r.stderr


# ---------------------------------------------------------------------------- mic_client.py

MIC_CLIENT = str(ROOT / "clients" / "mic_client.py")


def test_mic_client_without_a_device_says_so():
    real_portaudio_without_inputs()
    for extra in ([], ["--list-devices"]):
        r = subprocess.run([sys.executable, MIC_CLIENT, "--url", "ws://127.0.0.1:9/v1/stream", *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2
        assert r.stderr.startswith("mic_client: no audio input device found") and "--wav FILE" in r.stderr


def test_mic_client_streams_a_file_as_the_microphone(daemon, ckpt, tmp_path):
    wav = _write_wav(tmp_path / "m.wav", random_audio(0.8, 16000, seed=7), 16000)
    r = subprocess.run([sys.executable, MIC_CLIENT, "--url", daemon, "--wav", wav, "--partials", "always"],
                       capture_output=True, timeout=120)  # bytes: text mode would turn the partials' \r into newlines
    stdout, stderr = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, stderr
    lines = [ln.rsplit("\r", 1)[-1] for ln in stdout.split("\n") if ln.rsplit("\r", 1)[-1]]
    want = []
    for m in _expected(ckpt, wav):
        if m["type"] == "final" and m["text"]:
            want.append(f"[{m['start']:7.2f}-{m['end']:7.2f}] " + " ".join(f"{w['word']}[{w['conf']:.2f}]"
                                                                          for w in m["words"]))
        elif m["type"] == "wake":
            want.append(f"*** WAKE {m['keyword']!r} score={m['score']:.2f} at {m['start']:.2f}-{m['end']:.2f} s ***")
    assert lines == want and want
    assert "... " in stdout  # live partials
    assert "mic_client: streaming 16000 Hz to" in stderr
    piped = subprocess.run([sys.executable, MIC_CLIENT, "--url", daemon, "--wav", wav], capture_output=True,
                           timeout=120)  # by default a pipe gets no partial lines
    assert piped.returncode == 0 and "... " not in piped.stdout.decode()
    assert [ln for ln in piped.stdout.decode().split("\n") if ln] == want
