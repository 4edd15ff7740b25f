"""streamd.server.serve: ``streamd serve`` (SIGTERM drains and exits 0 with sd_notify; no model names the
options) and ``streamd check-config``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time

import pytest
from websockets.asyncio.client import connect

from helpers import ROOT, random_audio
from tests.server.wire import TIMEOUT, drain, pcm16
from streamd.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


@pytest.mark.parametrize("fronts,event_loop", [(1, "asyncio"), (2, "asyncio"), (1, "uvloop"), (2, "uvloop")])
def test_sigterm_drains_and_exits_zero(tiny_ckpt, tmp_path, fronts, event_loop):
    """`python -m streamd serve`: READY=1 and WATCHDOG=1 over $NOTIFY_SOCKET, SIGTERM -> finals, done, exit 0;
    the same with the connections in two front processes (``--front-processes 2``), and on uvloop's event
    loop (``server.event_loop: uvloop``)."""
    config = ROOT / "configs" / "default.yaml"
    if event_loop == "uvloop":
        pytest.importorskip("uvloop")
        text = config.read_text()
        assert "  event_loop: asyncio\n" in text
        config = tmp_path / "uvloop.yaml"
        config.write_text(text.replace("  event_loop: asyncio\n", "  event_loop: uvloop\n"))
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
            sys.executable, "-m", "streamd", "serve", "--config", str(config),
            "--host", "127.0.0.1", "--front-processes", str(fronts), cwd=str(ROOT), env=env,
            stderr=asyncio.subprocess.PIPE)
        port, log = None, []
        try:
            while port is None:
                line = (await proc.stderr.readline()).decode()
                assert line, "server exited early:\n" + "".join(log)
                log.append(line)
                m = re.search(r"listening on ws://127\.0\.0\.1:(\d+)", line)
                port = int(m.group(1)) if m else None
            assert any("running at nice" in line for line in log), log  # server.nice, before any engine
            rest = asyncio.create_task(proc.stderr.read())
            loop = asyncio.get_running_loop()
            got = []
            while not any("READY=1" in g for g in got):
                got.append((await loop.sock_recv(notify, 4096)).decode())
            async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
                await ws.send('{"type": "start"}')
                first = json.loads(await ws.recv())
                assert first["type"] == "ready", first
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
             # what serve would refuse only once it loads: checked against the model's header, the machine
             "engine:\n  kws:\n    wake_words: ['hey 7']\n": "engine.kws.wake_words[0] 'hey 7': characters not in",
             "engine:\n  kws:\n    wake_words: ['Hey Stream']\n": "engine.kws.wake_words[0] 'Hey Stream': the model's own",
             "engine:\n  decoding:\n    method: modified_beam\n    hotwords: [anna, 'r2d2']\n":
                 "engine.decoding.hotwords[1] 'r2d2': characters not in",
             "server:\n  event_loop: trio\n": "server.event_loop: must be one of",
             "server:\n  port: 2700\n  vosk_port: 2700\n": "server.vosk_port: 2700 is server.port too",
             "server:\n  vosk_port: 2700\n  wyoming_port: 2700\n": "server.wyoming_port: 2700 is server.vosk_port too",
             "server:\n  port: 8765\n  wyoming_port: 8765\n": "server.wyoming_port: 8765 is server.port too",
             }
    import torch

    if not torch.cuda.is_available():
        cases["engine:\n  device: cuda\n"] = "engine.device: 'cuda' but CUDA is not available"
    for text, needle in cases.items():
        f = tmp_path / "bad.yaml"
        f.write_text(text)
        assert main(["check-config", str(f)]) == 2, text
        err = capsys.readouterr().err
        assert needle in err and str(f) in err, (text, err)


def test_serve_without_model_names_the_options(monkeypatch, tmp_path, capsys):
    import streamd.paths

    monkeypatch.setattr(streamd.paths, "default_model_path", lambda: tmp_path / "default.pt")
    monkeypatch.delenv("STREAMD_MODEL", raising=False)
    monkeypatch.delenv("STREAMD_CONFIG", raising=False)
    assert main(["serve", "--port", "0"]) == 2  # as every config error
    msg = capsys.readouterr().err
    assert "--model" in msg and "STREAMD_MODEL" in msg and "default.pt" in msg
    assert main(["serve", "--port", "0", "--model", str(tmp_path / "missing.pt")]) == 2
    msg = capsys.readouterr().err
    assert "missing.pt" in msg and "not found" in msg
    assert main(["serve", "--port", "99999", "--model", str(tmp_path / "x.pt")]) == 2
    assert "--port: port: must be 0..65535" in capsys.readouterr().err


@pytest.mark.parametrize("flags, needle", [
    (["--wake-words", "hey 7"], "engine.kws.wake_words[0] 'hey 7': characters not in the token table"),
    (["--port", "2700", "--vosk-port", "2700"], "server.vosk_port: 2700 is server.port too"),
    (["--vosk-port", "2701", "--wyoming-port", "2701"], "server.wyoming_port: 2701 is server.vosk_port too"),
])
def test_serve_refuses_what_check_config_refuses_before_loading(flags, needle, capsys, monkeypatch):
    """serve runs check-config's checks before any engine starts: exit 2, the key named, no engine's error."""
    import streamd.server.serve as serve

    monkeypatch.delenv("STREAMD_CONFIG", raising=False)
    monkeypatch.setattr(serve, "App", None)  # nothing may start
    assert main(["serve", *flags]) == 2
    err = capsys.readouterr().err
    assert needle in err and "light lane" not in err and "could not start" not in err, err


def test_serve_names_the_key_of_a_port_another_process_holds(capsys, monkeypatch):
    """A port already listened on is refused before the model loads, by key (not [Errno 98] once bound)."""
    import streamd.server.serve as serve

    monkeypatch.delenv("STREAMD_CONFIG", raising=False)
    monkeypatch.setattr(serve, "App", None)  # nothing may start
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["serve", "--host", "127.0.0.1", "--port", "0", "--wyoming-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"server.wyoming_port: cannot listen on 127.0.0.1:{port}" in err, err


def test_check_config_refuses_uvloop_when_it_is_not_installed(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it fails as when it is absent
    cfg = tmp_path / "c.yaml"
    cfg.write_text("server:\n  event_loop: uvloop\n")
    assert main(["check-config", str(cfg)]) == 2
    assert "server.event_loop: uvloop is not installed" in capsys.readouterr().err
