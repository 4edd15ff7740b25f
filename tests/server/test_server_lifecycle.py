"""Lifecycle: graceful drain (in-process and SIGTERM on `python -m streamd serve`), sd_notify, the
microphone broadcast, configuration files and `streamd check-config`."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers import random_audio
from streamd.cli import main
from streamd.config import AppConfig, ConfigError, from_dict, load_yaml, to_dict
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.server.app import App, resolve_config
from streamd.server.notify import Notifier, watchdog_interval

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 40


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def app_config(**sections) -> AppConfig:
    data = {k: dict(v) for k, v in sections.items()}
    data.setdefault("server", {}).setdefault("port", 0)
    data.setdefault("engine", {}).setdefault("device", "cpu")
    return from_dict(AppConfig, data)


def pcm16(x):
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


async def drain(ws) -> list[dict]:
    out = []
    try:
        while True:
            out.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return out


async def http_status(port, path):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame (RFC 6455)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    body = (np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)).tobytes()
    return head + mask + body


async def raw_client(port, path):
    """A websocket client that never answers the closing handshake."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    return reader, writer


# ----------------------------------------------------------------------------- drain


def test_drain_finishes_live_streams(tiny_ckpt):
    """Shutdown: readyz 503, new streams refused (shutting_down), live ones get final + done, close 1001."""
    cfg = app_config(server={"grace_seconds": 10, "close_timeout": 1.0})
    x = pcm16(random_audio(1.5, seed=4))

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine))
        await app.start()
        clients = []
        for _ in range(2):
            ws = await connect(f"ws://127.0.0.1:{app.port}/v1/stream")
            await ws.send('{"type": "start", "partials": false}')
            assert json.loads(await ws.recv())["type"] == "ready"
            for i in range(0, len(x), 4000):
                await ws.send(x[i:i + 4000])
            clients.append(ws)
        reader, writer = await raw_client(app.port, "/v1/stream")  # holds the drain for close_timeout
        writer.write(ws_frame(1, b'{"type": "start"}') + ws_frame(2, x[:16000]))
        await writer.drain()
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        stopping = asyncio.create_task(app.shutdown())
        await asyncio.sleep(0.1)
        assert await http_status(app.port, "/readyz") == (503, b"draining\n")
        async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as late:
            msgs = await drain(late)
        assert msgs[0]["code"] == "shutting_down" and late.close_code == 1001
        results = [await drain(ws) for ws in clients]
        await stopping
        raw = await reader.read()
        writer.close()
        return results, [ws.close_code for ws in clients], raw, time.monotonic() - t0

    results, codes, raw, took = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    for msgs in results:
        assert [m["type"] for m in msgs][-2:] == ["final", "done"] and msgs[-2]["reason"] == "eos"
        assert msgs[-1]["audio_seconds"] == pytest.approx(1.5)
    assert codes == [1001, 1001]
    assert b'"type": "done"' in raw and b'"audio_seconds": 0.5' in raw  # the raw client got its done too
    assert took < 8


def test_sigterm_drains_and_exits_zero(tiny_ckpt, tmp_path):
    """`python -m streamd serve`: READY=1 and WATCHDOG=1 over $NOTIFY_SOCKET, SIGTERM -> finals, done, exit 0."""
    name = f"streamd-test-{os.getpid()}-{time.monotonic_ns()}"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind("\0" + name)
    notify.setblocking(False)
    env = dict(os.environ, NOTIFY_SOCKET="@" + name, WATCHDOG_USEC="200000", OMP_NUM_THREADS="1",
               STREAMD_PORT="0", STREAMD_MODEL=tiny_ckpt, STREAMD_DEVICE="cpu")
    env.pop("WATCHDOG_PID", None)
    x = pcm16(random_audio(1.2, seed=6))

    async def body():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streamd", "serve", "--config", str(ROOT / "configs" / "default.yaml"),
            "--host", "127.0.0.1", cwd=str(ROOT), env=env, stderr=asyncio.subprocess.PIPE)
        port, log = None, []
        try:
            while port is None:
                line = (await proc.stderr.readline()).decode()
                assert line, "server exited early:\n" + "".join(log)
                log.append(line)
                m = re.search(r"listening on ws://127\.0\.0\.1:(\d+)", line)
                port = int(m.group(1)) if m else None
            rest = asyncio.create_task(proc.stderr.read())
            loop = asyncio.get_running_loop()
            got = []
            while not any("READY=1" in g for g in got):
                got.append((await loop.sock_recv(notify, 4096)).decode())
            async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
                await ws.send('{"type": "start"}')
                assert json.loads(await ws.recv())["type"] == "ready"
                for i in range(0, len(x), 3200):
                    await ws.send(x[i:i + 3200])
                while json.loads(await ws.recv())["type"] != "partial":
                    pass
                while not any("WATCHDOG=1" in g for g in got):
                    got.append((await loop.sock_recv(notify, 4096)).decode())
                proc.send_signal(signal.SIGTERM)
                msgs = await drain(ws)
                code = ws.close_code
            rc = await asyncio.wait_for(proc.wait(), 20)
            try:
                while True:
                    got.append(notify.recv(4096).decode())
            except BlockingIOError:
                pass
            return msgs, code, rc, got, (await rest).decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    try:
        msgs, code, rc, got, stderr = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    finally:
        notify.close()
    assert rc == 0, stderr
    assert [m["type"] for m in msgs][-2:] == ["final", "done"] and msgs[-1]["audio_seconds"] == pytest.approx(1.2)
    assert code == 1001
    assert any(g.startswith("READY=1") for g in got) and any("STOPPING=1" in g for g in got)
    assert "WATCHDOG=1" in got


# ----------------------------------------------------------------------------- sd_notify


def test_notifier_datagrams(tmp_path):
    path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(2)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abstract.bind(f"\0streamd-notify-{os.getpid()}")
    abstract.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": path})
        assert n.enabled and n.ready("model loaded")
        assert srv.recv(100) == b"READY=1\nSTATUS=model loaded"
        assert n.stopping() and srv.recv(100) == b"STOPPING=1"
        assert n.watchdog() and srv.recv(100) == b"WATCHDOG=1"
        n.close()
        a = Notifier(f"@streamd-notify-{os.getpid()}")
        assert a.status("hello") and abstract.recv(100) == b"STATUS=hello"

        abstract.setblocking(False)

        def received():
            out = []
            while True:
                try:
                    out.append(abstract.recv(100))
                except BlockingIOError:
                    return out

        async def pings():  # watchdog loop: pings while healthy, none while stalled
            healthy = [True]
            task = asyncio.create_task(a.watchdog_loop(0.02, lambda: healthy[0]))
            await asyncio.sleep(0.1)
            healthy[0] = False
            assert len(received()) >= 2
            await asyncio.sleep(0.05)
            received()
            await asyncio.sleep(0.1)
            task.cancel()
            assert received() == []

        asyncio.run(pings())
        a.close()
        assert not Notifier.from_env({}).enabled and not Notifier(None).ready()
        assert not Notifier(str(tmp_path / "missing.sock")).ready()  # best effort: logged, not raised
    finally:
        srv.close()
        abstract.close()
    assert watchdog_interval({"WATCHDOG_USEC": "3000000"}) == 1.5
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}) is None  # not our pid
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}) == 1.5
    assert watchdog_interval({}) is None and watchdog_interval({"WATCHDOG_USEC": "x"}) is None


# ----------------------------------------------------------------------------- microphone


def gated(blocks, gate: threading.Event, fail_after: int | None = None):
    gate.wait(10)
    for i, b in enumerate(blocks):
        if fail_after is not None and i == fail_after:
            from streamd.capture import MicError

            raise MicError("input device 'fake' stopped delivering audio (device lost or unplugged?)")
        yield b


def test_mic_events_broadcast(tiny_ckpt):
    from streamd.capture import MicCapture, ReplaySource

    rate = 16000
    x = random_audio(2.0, rate=rate, seed=11)
    blocks = [x[i:i + 1600] for i in range(0, x.size, 1600)]
    rec = Recognizer.from_checkpoint(tiny_ckpt, app_config().engine)
    sid = rec.create_stream(sample_rate=rate)
    rec.accept_audio(sid, x)
    rec.finish(sid)
    want = [e.text for e in rec.drain() if isinstance(e, Final)]
    gates, calls = [threading.Event(), threading.Event()], []

    def factory(m):
        i = len(calls)
        calls.append(m)
        src = ReplaySource(gated(blocks if i else blocks[:6], gates[i], fail_after=None if i else 5), rate, speed=0)
        return MicCapture(m.device, m.sample_rate, m.block_seconds, source=src)

    cfg = app_config(mic={"enabled": True, "sample_rate": rate, "retry_seconds": 0.05})

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), mic_factory=factory)
        async with app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as sub:
                await asyncio.sleep(0.05)
                gates[0].set()  # first capture: 5 blocks, then the device is lost
                msgs = []
                while not any(m.get("code") == "mic_error" for m in msgs):
                    msgs.append(json.loads(await sub.recv()))
                while len(calls) < 2:
                    await asyncio.sleep(0.01)
                gates[1].set()  # the retry: a new stream with the whole recording
                dones = sum(m["type"] == "done" for m in msgs)
                while dones < 2:
                    msgs.append(json.loads(await sub.recv()))
                    dones += msgs[-1]["type"] == "done"
            return msgs

    msgs = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    err = [m for m in msgs if m["type"] == "error"]
    assert [e["code"] for e in err] == ["mic_error"] and "device lost" in err[0]["message"]
    assert "partial" in [m["type"] for m in msgs]
    last_done = max(i for i, m in enumerate(msgs) if m["type"] == "done")
    first_done = min(i for i, m in enumerate(msgs) if m["type"] == "done")
    second = [m["text"] for m in msgs[first_done + 1:last_done] if m["type"] == "final"]
    assert second == want  # the retried stream decodes exactly like the engine on the same audio
    assert msgs[last_done]["audio_seconds"] == pytest.approx(2.0)


def test_mic_retries_back_off_and_log_a_repeated_error_once(tiny_ckpt, caplog):
    """No input device: the daemon keeps trying, waiting twice as long each time up to retry_max_seconds,
    and the same error is logged (and sent to subscribers) once, not at every try."""
    from streamd.capture import NO_INPUT_DEVICE, MicError

    calls = []

    def factory(m):
        calls.append(asyncio.get_running_loop().time())
        raise MicError(NO_INPUT_DEVICE)

    cfg = app_config(mic={"enabled": True, "retry_seconds": 0.02, "retry_max_seconds": 0.08})

    async def body():
        app = App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine), mic_factory=factory)
        async with app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as sub:
                while len(calls) < 7:
                    await asyncio.sleep(0.02)
                msgs = []
                try:
                    while True:
                        msgs.append(json.loads(await asyncio.wait_for(sub.recv(), 0.1)))
                except asyncio.TimeoutError:
                    pass
        return msgs

    with caplog.at_level("DEBUG", logger="streamd.server"):
        msgs = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    gaps = np.diff(calls[:7])
    assert all(g >= 0.95 * want for g, want in zip(gaps, [0.02, 0.04, 0.08, 0.08, 0.08, 0.08])), gaps
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "microphone" in r.getMessage()]
    assert len(errors) == 1 and "trying again in 0.02 s" in errors[0].getMessage()
    assert "--wav" not in errors[0].getMessage()  # serve has no --wav: the hint belongs to `streamd mic`
    assert sum(r.levelname == "DEBUG" and "microphone" in r.getMessage() for r in caplog.records) >= 5
    assert [m["code"] for m in msgs if m["type"] == "error"] in ([], ["mic_error"])


def test_events_without_mic(tiny_ckpt):
    async def body():
        cfg = app_config()
        async with App(cfg, recognizer=Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/events") as ws:
                msgs = await drain(ws)
            return msgs, ws.close_code

    msgs, code = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert msgs[0]["code"] == "no_mic" and "--mic" in msgs[0]["message"] and code == 1008


# ----------------------------------------------------------------------------- configuration


def flat_keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "thresholds":
            out |= flat_keys(v, f"{prefix}{k}.")
        else:
            out.add(prefix + k)
    return out


def test_default_yaml_documents_every_option():
    path = ROOT / "configs" / "default.yaml"
    assert load_yaml(path, AppConfig) == AppConfig()  # the shipped file says what the defaults are
    raw = yaml.safe_load(path.read_text())
    assert flat_keys(raw) == flat_keys(to_dict(AppConfig()))  # ... every one of them
    text = path.read_text()
    for key in flat_keys(raw):
        leaf = key.rsplit(".", 1)[-1]
        line = next(i for i, ln in enumerate(text.splitlines()) if re.match(rf"\s*{leaf}:", ln))
        above = text.splitlines()[line - 1].strip()
        assert "#" in text.splitlines()[line] or above.startswith("#"), f"{key} is not commented"


def test_check_config(tmp_path, capsys):
    assert main(["check-config", str(ROOT / "configs" / "default.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "OK"
    cases = {"server:\n  bogus: 1\n": "server.bogus: unknown key",
             "limits:\n  max_streams: 0\n": "limits.max_streams: must be >= 1",
             "server:\n  port: high\n": "server.port: expected an integer",
             "engine:\n  kws:\n    threshold: 2\n": "engine.kws.threshold",
             "tls:\n  cert: /nope/cert.pem\n  key: /nope/key.pem\n": "tls.cert: no such file",
             "auth:\n  token_file: /nope/tokens\n": "auth.token_file: cannot read",
             "auth:\n  tokens: [short]\n": "auth.tokens[0]",
             "engine:\n  model: /nope/model.pt\n": "engine.model: no such file",
             "engine:\n  decoding:\n    lm: /nope/x.lm.pt\n": "engine.decoding.lm: no such file",
             "server: [1, 2\n": "",  # broken YAML
             }
    for text, needle in cases.items():
        f = tmp_path / "bad.yaml"
        f.write_text(text)
        assert main(["check-config", str(f)]) == 2, text
        err = capsys.readouterr().err
        assert needle in err and str(f) in err, (text, err)


def test_resolve_config_precedence(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("server:\n  host: 0.0.0.0\n  port: 9000\nengine:\n  model: from-file.pt\n")
    cfg = resolve_config(str(f), {}, {})
    assert (cfg.server.host, cfg.server.port, cfg.engine.model) == ("0.0.0.0", 9000, "from-file.pt")
    env = {"STREAMD_HOST": "::1", "STREAMD_PORT": "9100", "STREAMD_MODEL": "env.pt", "STREAMD_DEVICE": "cpu"}
    cfg = resolve_config(str(f), {}, env)
    assert (cfg.server.host, cfg.server.port, cfg.engine.model, cfg.engine.device) == ("::1", 9100, "env.pt", "cpu")
    cfg = resolve_config(str(f), {"port": 9200, "model": "flag.pt", "vosk_port": 2700, "mic": True,
                                  "mic_device": "3"}, env)
    assert (cfg.server.port, cfg.engine.model, cfg.server.vosk_port) == (9200, "flag.pt", 2700)
    assert cfg.mic.enabled and cfg.mic.device == 3
    with pytest.raises(ConfigError, match="STREAMD_PORT: expected an integer, got 'http'"):
        resolve_config(None, {}, {"STREAMD_PORT": "http"})
    with pytest.raises(ConfigError, match="--port: port: must be 0..65535"):
        resolve_config(None, {"port": 70000}, {})
    with pytest.raises(ConfigError, match="STREAMD_DEVICE: device: must be auto, cpu"):
        resolve_config(None, {}, {"STREAMD_DEVICE": "tpu"})


def test_serve_without_model_names_the_options(monkeypatch, tmp_path, capsys):
    import streamd.paths

    monkeypatch.setattr(streamd.paths, "default_model_path", lambda: tmp_path / "default.pt")
    monkeypatch.delenv("STREAMD_MODEL", raising=False)
    monkeypatch.delenv("STREAMD_CONFIG", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["serve", "--port", "0"])
    msg = str(e.value.code)
    assert "--model" in msg and "STREAMD_MODEL" in msg and "default.pt" in msg
    with pytest.raises(SystemExit) as e:
        main(["serve", "--port", "0", "--model", str(tmp_path / "missing.pt")])
    assert "missing.pt" in str(e.value.code) and "not found" in str(e.value.code)
    assert main(["serve", "--port", "99999", "--model", str(tmp_path / "x.pt")]) == 2
    assert "--port: port: must be 0..65535" in capsys.readouterr().err
