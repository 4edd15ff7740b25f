"""The daemon's settings: the configuration as ``streamd serve`` resolves it, its TLS context, and the
checks of ``streamd check-config`` that need the file system.

* :func:`resolve_config`: YAML file (or defaults) < environment (``STREAMD_*``) < command-line flags;
* :func:`make_ssl_context`: ``tls.cert`` / ``tls.key`` -> the server's TLS context;
* :func:`check_app_config`: model and LM files, token file, TLS files, the Wyoming port's auth rule, the
  compute device, wake words and hotwords against the model's tokens (what serve would refuse once loaded);
* :func:`mic_factory`: the microphone capture ``--mic`` asks for (ConfigError without the ``mic`` extra).

Errors are :class:`~streamd.config.ConfigError` naming the key path, variable or flag.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from pathlib import Path
from typing import Any, Callable, Mapping

from ..config import AppConfig, ConfigError, TlsConfig, load_yaml
from .auth import check_wyoming_auth, load_tokens
from .eventloop import check_event_loop
from .wsconn import DirectConnection

__all__ = ["resolve_config", "make_ssl_context", "websocket_options", "check_app_config", "check_device_available",
           "check_phrases", "check_ports_free", "mic_factory"]


def resolve_config(path: str | None, flags: Mapping[str, Any] | None = None,
                   env: Mapping[str, str] | None = None) -> AppConfig:
    """YAML file (or defaults), then environment (STREAMD_HOST/PORT/MODEL/DEVICE), then flags.

    ``flags`` keys: host, port, model, device, vosk_port, wyoming_port, wake_words, hotwords, second_pass, wake_models,
    verify_wake, mic, mic_device, front_processes
    (None = not given).
    Errors are ConfigError naming the key path, variable or flag.
    """
    env = os.environ if env is None else env
    flags = dict(flags or {})
    cfg = load_yaml(path, AppConfig) if path else AppConfig()
    server, engine, mic = cfg.server, cfg.engine, cfg.mic

    def put(obj, name, value, source):
        try:
            return dataclasses.replace(obj, **{name: value})
        except (ConfigError, TypeError) as e:
            raise ConfigError(f"{source}: {e}") from None

    def env_int(name):
        v = env.get(name)
        if not v:
            return None
        try:
            return int(v)
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {v!r}") from None

    for var, section, name, conv in (("STREAMD_HOST", "server", "host", str), ("STREAMD_PORT", "server", "port", None),
                                     ("STREAMD_MODEL", "engine", "model", str),
                                     ("STREAMD_DEVICE", "engine", "device", str)):
        value = env_int(var) if conv is None else env.get(var) or None
        if value is None:
            continue
        if section == "server":
            server = put(server, name, value, var)
        else:
            engine = put(engine, name, value, var)
    for flag, name in (("host", "host"), ("port", "port"), ("vosk_port", "vosk_port"),
                       ("wyoming_port", "wyoming_port"), ("front_processes", "front_processes")):
        if flags.get(flag) is not None:
            server = put(server, name, flags[flag], "--" + flag.replace("_", "-"))
    for flag in ("model", "device"):
        if flags.get(flag) is not None:
            engine = put(engine, flag, flags[flag], f"--{flag}")
    if flags.get("wake_words") is not None:
        engine = dataclasses.replace(engine, kws=put(engine.kws, "wake_words", flags["wake_words"], "--wake-words"))
    if flags.get("wake_models"):
        engine = dataclasses.replace(engine, kws=put(engine.kws, "wake_models", tuple(flags["wake_models"]),
                                                     "--wake-model"))
    if flags.get("hotwords") is not None:
        engine = dataclasses.replace(engine, decoding=put(engine.decoding, "hotwords", flags["hotwords"], "--hotwords"))
    if flags.get("second_pass") is not None:
        engine = dataclasses.replace(engine, second_pass=put(engine.second_pass, "model", flags["second_pass"],
                                                             "--second-pass"))
    if flags.get("verify_wake"):  # after the second pass: it needs one
        engine = put(engine, "kws", dataclasses.replace(engine.kws, verify=True), "--verify-wake")
    if flags.get("mic"):
        mic = put(mic, "enabled", True, "--mic")
    if flags.get("mic_device") is not None:
        d = flags["mic_device"]
        mic = put(mic, "device", int(d) if str(d).isdigit() else d, "--mic-device")
    return dataclasses.replace(cfg, server=server, engine=engine, mic=mic)


def websocket_options(cfg: AppConfig, ssl_ctx: ssl.SSLContext | None) -> dict[str, Any]:
    """The keyword arguments of ``websockets.asyncio.server.serve`` for the daemon's websocket ports (its own
    process or a front process): message size, open and ping timeouts, close timeout, TLS, and the connection
    class (:class:`~.wsconn.DirectConnection`: messages handed to the session without a task per message)."""
    s, lim = cfg.server, cfg.limits
    return dict(max_size=max(2 * lim.max_message_bytes, 2 * lim.max_text_bytes),
                open_timeout=lim.open_timeout or None, ping_interval=s.ping_interval or None,
                ping_timeout=s.ping_timeout or None, close_timeout=s.close_timeout, compression=None, ssl=ssl_ctx,
                create_connection=DirectConnection)


def make_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Server TLS context from ``tls.cert`` / ``tls.key`` (None when TLS is off)."""
    if not tls.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for name, p in (("cert", tls.cert), ("key", tls.key)):
        if not Path(p).is_file():
            raise ConfigError(f"tls.{name}: no such file {p!r}")
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"tls.cert: cannot load certificate {tls.cert!r} / key {tls.key!r}: {e}") from None
    return ctx


def check_app_config(cfg: AppConfig) -> None:
    """What ``streamd serve`` would refuse once it loads, checked before anything loads (``check-config``
    and ``serve`` both call it): model and LM files, token file, TLS files, the Wyoming port's auth rule
    (:func:`.auth.check_wyoming_auth`), the compute device (:func:`check_device_available`), the event loop's
    package (:func:`.eventloop.check_event_loop`) and the wake words
    and hotwords against the model's token table (:func:`check_phrases`)."""
    if cfg.engine.model and not Path(cfg.engine.model).is_file():
        raise ConfigError(f"engine.model: no such file {cfg.engine.model!r}")
    lm = cfg.engine.decoding.lm
    if lm not in ("auto", "none") and not Path(lm).is_file():
        raise ConfigError(f"engine.decoding.lm: no such file {lm!r}")
    tokens = load_tokens(cfg.auth)
    make_ssl_context(cfg.tls)
    if cfg.server.wyoming_port is not None:
        check_wyoming_auth(cfg.server, tokens)
    check_device_available(cfg.engine.device, "engine.device")
    check_event_loop(cfg.server.event_loop)
    check_phrases(cfg)


def check_ports_free(server: Any) -> None:
    """ConfigError naming the key (``server.port``, ``vosk_port``, ``wyoming_port``) whose port another process
    already listens on at ``server.host``: ``serve`` checks before its model loads rather than failing with
    ``[Errno 98]`` once it binds (the Wyoming port only after loading).  A test bind with ``SO_REUSEADDR``, as
    the listeners use, closed at once; 0 (any free port) and None (off) are skipped."""
    import socket

    for key, port in (("server.port", server.port), ("server.vosk_port", server.vosk_port),
                      ("server.wyoming_port", server.wyoming_port)):
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(server.host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as e:
            raise ConfigError(f"server.host: cannot resolve {server.host!r}: {e}") from None
        for family, kind, proto, _, addr in infos:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(addr)
                except OSError as e:
                    raise ConfigError(f"{key}: cannot listen on {server.host}:{port}: {e.strerror or e} (another "
                                      "process listens there?)") from None


def check_device_available(device: str, key: str) -> None:
    """ConfigError naming ``key`` when ``device`` (cuda, cuda:N) names a GPU this machine does not have."""
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"{key}: {device!r} but CUDA is not available on this machine (use auto or cpu)")
    index = device.partition(":")[2]
    if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
        raise ConfigError(f"{key}: {device!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")


def check_phrases(cfg: AppConfig) -> None:
    """The configured wake words (``engine.kws.wake_words``) and hotwords (``engine.decoding.hotwords``) are
    spelled by the model's token table, and no wake word repeats the model's own: ConfigError naming the entry.
    Reads the checkpoint's header only (:func:`streamd.model.checkpoint.read_header`), not the model."""
    wake, hot = cfg.engine.kws.wake_words, cfg.engine.decoding.hotwords
    if not wake and not hot:
        return
    from ..decode.context_graph import phrase_graph
    from ..decode.keyword_search import check_runtime_wake_words, keyword_set
    from ..model.checkpoint import CheckpointError, read_header
    from ..paths import default_model_path

    model = cfg.engine.model or str(default_model_path())
    try:
        mcfg, table = read_header(model)
    except CheckpointError as e:
        raise ConfigError(f"engine.model: {e}") from None
    try:
        check_runtime_wake_words(mcfg.keywords, wake, "engine.kws.wake_words")
        keyword_set(table, wake, cfg.engine.kws.wake_threshold, "engine.kws.wake_words")  # as the engine builds them
        phrase_graph(table, hot, 0.0, "engine.decoding.hotwords", whole_words=True)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def mic_factory() -> Callable[[Any], Any]:
    """``config.mic`` -> a started-on-demand :class:`streamd.capture.MicCapture` (ConfigError when the ``mic``
    extra is not installed)."""
    try:
        from ..capture import MicCapture
    except ImportError as e:
        raise ConfigError(f"--mic: microphone capture is unavailable ({e}); install the 'mic' extra") from None
    return lambda m: MicCapture(m.device, m.sample_rate, m.block_seconds)
