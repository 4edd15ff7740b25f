"""streamd.server.settings: configuration resolution (file < environment < flags) and the TLS context (a
self-signed certificate served on loopback)."""

from __future__ import annotations

import json
import shutil
import ssl

import pytest
from websockets.asyncio.client import connect

from tests.server.wire import app_config, make_app, run, self_signed_cert
from streamd.config import ConfigError
from streamd.server.app import resolve_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls(tiny_ckpt, tmp_path):
    cert, key = self_signed_cert(tmp_path)

    async def body():
        async with make_app(tiny_ckpt, tls={"cert": str(cert), "key": str(key)}) as app:
            ctx = ssl.create_default_context(cafile=str(cert))
            async with connect(f"wss://127.0.0.1:{app.port}/v1/stream", ssl=ctx) as ws:
                await ws.send('{"type": "start"}')
                assert json.loads(await ws.recv())["type"] == "ready"
            with pytest.raises(Exception):  # plain ws:// to a TLS port fails
                await connect(f"ws://127.0.0.1:{app.port}/v1/stream", open_timeout=2)

    run(body())
    from streamd.config import ConfigError
    from streamd.server.app import make_ssl_context

    with pytest.raises(ConfigError, match="tls.cert: no such file"):
        make_ssl_context(app_config(tls={"cert": str(tmp_path / "nope.pem"), "key": str(key)}).tls)
    with pytest.raises(ConfigError, match="cannot load certificate"):
        make_ssl_context(app_config(tls={"cert": str(key), "key": str(key)}).tls)


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
    cfg = resolve_config(None, {"second_pass": "moonshine-base-so762", "wake_models": ["a.wake.pt"],
                                "verify_wake": True}, {})
    assert cfg.engine.kws.verify and cfg.engine.kws.wake_models == ("a.wake.pt",)
    with pytest.raises(ConfigError, match="--verify-wake: kws.verify: needs a second pass"):
        resolve_config(None, {"verify_wake": True}, {})
