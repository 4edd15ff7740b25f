"""The daemon's sections (``streamd serve``): server, limits, auth, TLS, the ``mic`` app, and ``AppConfig``
holding them with the engine's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..options import SAMPLE_RATE_RANGE, sample_rate_ok
from .checks import _check, _one_of, _positive
from .decoding import EngineConfig


# CPU scheduling policies of the main engine's process (server.engine_policy; Linux SCHED_OTHER, SCHED_BATCH,
# SCHED_IDLE: streamd.server.lane.lower_priority)
ENGINE_POLICIES = ("normal", "batch", "idle")
EVENT_LOOPS = ("asyncio", "uvloop")  # server.event_loop
MAX_FRONT_PROCESSES = 256  # server.front_processes: processes carrying the connections, at most



@dataclass(frozen=True)
class ServerConfig:
    """Listeners and lifecycle of ``streamd serve`` (see docs/protocol.md).

    ``port`` 0 picks a free port (tests).  ``vosk_port`` None disables the
    second, Vosk-only listener; ``wyoming_port`` None disables the Wyoming
    (Home Assistant) TCP listener.  ``web_root`` "" serves the page shipped in
    the package (``streamd/server/web``) at ``GET /``.  ``ping_interval`` / ``ping_timeout``
    0 disable websocket keepalive.  ``warmup_seconds``: audio decoded once
    with every search method before ``ready`` (0 = none).  ``allowed_hosts``:
    the ``Host`` names (any port) the server answers to, ``*`` = any; empty =
    ``localhost``, ``127.0.0.1``, ``[::1]`` and ``host``, plus any IP address
    when ``host`` is not a loopback address (other names get HTTP 403: DNS
    rebinding).  ``show_model_paths``: ``ready.model.path`` and
    ``model.lm.path`` carry the server's absolute paths instead of file names.
    ``engine_process``: the main engine runs in a child process of its own
    (:mod:`streamd.server.lane`) when the daemon loads a checkpoint, so that
    the event loop does not share the interpreter lock with the decoding
    (false: a worker thread of the daemon's process); ``engine_nice``: that
    process's nice increment (0..19), so that on a busy CPU client I/O and the
    light lane come first (docs/benchmarks.md "Overload").  ``engine_policy``:
    that process's Linux CPU scheduling policy (:data:`ENGINE_POLICIES`):
    ``normal`` (SCHED_OTHER, the default) and ``batch`` (SCHED_BATCH) take
    the fair share of ``engine_nice``; ``idle`` (SCHED_IDLE) decodes only on
    CPU time no other process wants (``engine_nice`` then has no effect): for
    a desktop where the recognizer must never slow anything else down, at the
    price of capacity whenever anything else runs (measured under overload:
    docs/benchmarks.md "Settings and the measurements behind them").  Where a policy is not
    available, the process keeps its own and the daemon logs a warning.
    ``nice``: the nice value (-20..19) ``streamd serve`` asks for at start when
    it was started at 0 (one started otherwise, by ``nice -n`` or a unit's
    ``Nice=``, keeps that), as audio servers ask for theirs, so that on a shared
    host client I/O and the light lane come before ordinary processes; below 0
    it needs ``CAP_SYS_NICE`` or ``RLIMIT_NICE``, and where the system refuses
    the daemon logs why and runs on at its own; null: never changed
    (:func:`streamd.server.lane.raise_priority`, docs/benchmarks.md "Overload").
    ``front_processes``: processes that carry the websocket connections (v1, Vosk, events, the HTTP routes),
    all feeding the daemon's one engine (:mod:`streamd.server.front`); 1 (the default): the connections
    live in the daemon's own process.  More spread the connections' CPU over more cores (docs/benchmarks.md
    "Connections").
    ``event_loop``: the event loop of the daemon's processes (and its front processes): ``asyncio`` (the
    standard library's) or ``uvloop`` (libuv's, the pip package ``uvloop``, in the ``server`` extra on Linux
    and macOS; measured against asyncio in docs/benchmarks.md "Connections": no clear gain in the connections
    scenario yet, hence not the default).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    vosk_port: int | None = None
    wyoming_port: int | None = None
    vosk_sample_rate: int = 8000
    web_root: str = ""
    grace_seconds: float = 10.0
    max_steps_per_cycle: int = 4
    warmup_seconds: float = 1.0
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    close_timeout: float = 5.0
    log_level: str = "info"
    allowed_hosts: tuple[str, ...] = ()
    show_model_paths: bool = False
    engine_process: bool = True
    engine_nice: int = 10
    engine_policy: str = "normal"
    nice: int | None = -5
    front_processes: int = 1
    event_loop: str = "asyncio"

    def __post_init__(self) -> None:
        _check(isinstance(self.host, str) and self.host != "", "host", f"must be a host name or address, got {self.host!r}")
        _check(0 <= self.port <= 65535, "port", f"must be 0..65535, got {self.port}")
        _check(self.vosk_port is None or 0 <= self.vosk_port <= 65535, "vosk_port",
               f"must be 0..65535 or null, got {self.vosk_port}")
        _check(self.wyoming_port is None or 0 <= self.wyoming_port <= 65535, "wyoming_port",
               f"must be 0..65535 or null, got {self.wyoming_port}")
        _check(sample_rate_ok(self.vosk_sample_rate), "vosk_sample_rate",
               f"must be {SAMPLE_RATE_RANGE}, got {self.vosk_sample_rate}")
        _positive(self.grace_seconds, "grace_seconds", strict=False)
        _check(self.max_steps_per_cycle >= 1, "max_steps_per_cycle", f"must be >= 1, got {self.max_steps_per_cycle}")
        _check(0 <= self.warmup_seconds <= 30, "warmup_seconds", f"must be 0..30, got {self.warmup_seconds}")
        _positive(self.ping_interval, "ping_interval", strict=False)
        _positive(self.ping_timeout, "ping_timeout", strict=False)
        _positive(self.close_timeout, "close_timeout")
        _one_of(self.log_level, ("debug", "info", "warning", "error"), "log_level")
        from ..wire import host_name  # the one Host syntax (stdlib only)

        for i, h in enumerate(self.allowed_hosts):
            try:
                ok = h == "*" or (h == h.strip() and bool(host_name(h)))
            except (ValueError, TypeError):
                ok = False
            _check(ok, f"allowed_hosts[{i}]", f"must be a host name, an IP address ([::1] for IPv6) or *, "
                                              f"without scheme or port, got {h!r}")
        _check(isinstance(self.show_model_paths, bool), "show_model_paths",
               f"must be true or false, got {self.show_model_paths!r}")
        _check(isinstance(self.engine_process, bool), "engine_process",
               f"must be true or false, got {self.engine_process!r}")
        _check(isinstance(self.engine_nice, int) and not isinstance(self.engine_nice, bool)
               and 0 <= self.engine_nice <= 19, "engine_nice", f"must be an integer 0..19, got {self.engine_nice!r}")
        _one_of(self.engine_policy, ENGINE_POLICIES, "engine_policy")
        _check(isinstance(self.front_processes, int) and not isinstance(self.front_processes, bool)
               and 1 <= self.front_processes <= MAX_FRONT_PROCESSES, "front_processes",
               f"must be an integer 1..{MAX_FRONT_PROCESSES}, got {self.front_processes!r}")
        _one_of(self.event_loop, EVENT_LOOPS, "event_loop")
        _check(self.nice is None or (isinstance(self.nice, int) and not isinstance(self.nice, bool)
                                     and -20 <= self.nice <= 19), "nice",
               f"must be an integer -20..19 or null, got {self.nice!r}")


@dataclass(frozen=True)
class LimitsConfig:
    """Per-server and per-connection limits (0 disables a timeout or the rate limit).

    ``max_realtime``: a stream may send audio at most this many times faster
    than real time on average, with a burst of ``burst_seconds`` of audio
    (token bucket).  ``max_message_bytes`` bounds one binary frame,
    ``max_text_bytes`` one text frame.  ``outbox_messages`` bounds the
    messages queued for one client (partials coalesce; a client that lets
    more pile up is disconnected).  ``min_audio_rate``: a stream must deliver
    at least this many seconds of audio per second of wall time, measured over
    consecutive windows of ``min_audio_window`` seconds from the connection
    on, until it sends eof (0 = no minimum); slower: ``audio_too_slow``.

    Admission by capacity (:mod:`streamd.server.admission`): ``max_load`` is the share of a chunk's
    duration that one batch step over every live stream may take, predicted from the measured step times
    and each stream's cost (a greedy stream is 1 unit, a beam search more); a stream that would push the
    load above it is refused with ``overloaded`` (close 1013, ``retry_after``) and ``/readyz`` answers 503
    meanwhile (0 = no capacity rule, ``max_streams`` only).  The default, 0.7, keeps the streams the
    host's other work per stream (event loop, clients on the same cores) still carries once the encoder
    runs as a traced graph (0.8 then let accepted streams' p95 lag pass 1 s in 2 of 15 overload rounds;
    docs/benchmarks.md "Overload").  ``max_backlog_seconds``: received audio a
    stream may have waiting to be decoded; beyond it the stream ends with ``backlog_exceeded`` (bounds
    memory; at least ``burst_seconds``).  ``max_cost_per_client`` / ``max_cost_per_token``: cost units one
    client address / one bearer token may hold at once (0 = no limit); beyond: ``client_limit``.
    ``light_lane``: cost units of streams a second engine lane serves (:mod:`streamd.server.lane`: a child
    process with the same checkpoint and engine config): the stream of a client that holds no other one and
    costs at most
    :data:`~streamd.server.admission.LIGHT_STREAM_COST` goes there while the lane has room, so that a light
    client's partials do not wait behind the batch steps of a heavy one (0 = one lane for every stream).
    """

    max_streams: int = 64
    max_message_bytes: int = 1048576
    max_text_bytes: int = 65536
    max_realtime: float = 4.0
    burst_seconds: float = 30.0
    idle_timeout: float = 30.0
    open_timeout: float = 10.0
    outbox_messages: int = 256
    min_audio_rate: float = 0.1
    min_audio_window: float = 30.0
    max_load: float = 0.7
    max_backlog_seconds: float = 60.0
    max_cost_per_client: float = 0.0
    max_cost_per_token: float = 0.0
    light_lane: float = 4.0

    def __post_init__(self) -> None:
        _check(self.max_streams >= 1, "max_streams", f"must be >= 1, got {self.max_streams}")
        _check(self.max_message_bytes >= 1024, "max_message_bytes", f"must be >= 1024, got {self.max_message_bytes}")
        _check(self.max_text_bytes >= 256, "max_text_bytes", f"must be >= 256, got {self.max_text_bytes}")
        _positive(self.max_realtime, "max_realtime", strict=False)
        _positive(self.burst_seconds, "burst_seconds")
        _positive(self.idle_timeout, "idle_timeout", strict=False)
        _positive(self.open_timeout, "open_timeout", strict=False)
        _check(self.outbox_messages >= 4, "outbox_messages", f"must be >= 4, got {self.outbox_messages}")
        _check(math.isfinite(self.min_audio_rate) and 0 <= self.min_audio_rate <= 1, "min_audio_rate",
               f"must be 0..1 (seconds of audio per second; 0 = off), got {self.min_audio_rate!r}")
        _check(not self.max_realtime or self.min_audio_rate <= self.max_realtime, "min_audio_rate",
               f"must be <= max_realtime ({self.max_realtime:g}), got {self.min_audio_rate:g}")
        _check(math.isfinite(self.min_audio_window) and self.min_audio_window >= 1, "min_audio_window",
               f"must be >= 1 second, got {self.min_audio_window!r}")
        _check(math.isfinite(self.max_load) and 0 <= self.max_load <= 1, "max_load",
               f"must be 0..1 (share of a chunk's duration; 0 = no capacity admission), got {self.max_load!r}")
        _check(math.isfinite(self.max_backlog_seconds) and self.max_backlog_seconds >= 1, "max_backlog_seconds",
               f"must be >= 1 second, got {self.max_backlog_seconds!r}")
        _check(not self.max_realtime or self.max_backlog_seconds >= self.burst_seconds, "max_backlog_seconds",
               f"must be >= burst_seconds ({self.burst_seconds:g}: a full burst is a legitimate backlog), "
               f"got {self.max_backlog_seconds:g}")
        for name in ("max_cost_per_client", "max_cost_per_token", "light_lane"):
            v = getattr(self, name)
            _check(math.isfinite(v) and (v == 0 or v >= 1), name,
                   f"must be 0 (no limit) or >= 1 cost unit (one greedy stream), got {v!r}")


@dataclass(frozen=True)
class AuthConfig:
    """Optional bearer-token auth and the browser Origin allow-list.

    ``tokens`` (and the lines of ``token_file``) are accepted bearer tokens;
    none at all means no auth.  ``allowed_origins``: exact origins such as
    ``https://app.example``, ``self`` (the Origin's host equals the request's
    Host header) or ``*`` (any).  Requests without an Origin header
    (non-browser clients) are always allowed.
    """

    tokens: tuple[str, ...] = ()
    token_file: str = ""
    allowed_origins: tuple[str, ...] = ("self",)

    def __post_init__(self) -> None:
        for i, t in enumerate(self.tokens):
            _check(isinstance(t, str) and len(t) >= 8 and t.strip() == t, f"tokens[{i}]",
                   "must be a string of at least 8 characters without surrounding spaces")
        for i, o in enumerate(self.allowed_origins):
            _check(isinstance(o, str) and o != "" and o == o.strip(), f"allowed_origins[{i}]", f"bad origin {o!r}")


@dataclass(frozen=True)
class TlsConfig:
    """TLS for both listeners: PEM certificate chain and private key ("" = plain ws://)."""

    cert: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        _check(bool(self.cert) == bool(self.key), "cert" if not self.cert else "key",
               "cert and key must be given together")

    @property
    def enabled(self) -> bool:
        return bool(self.cert)


@dataclass(frozen=True)
class MicConfig:
    """The daemon's own microphone stream (``serve --mic``), broadcast on ``/v1/events``.

    ``device``: None = the system default input, an integer index or a name.
    ``retry_seconds``: after a capture error (no device, device lost) wait
    this long and open the device again as a new stream (0 = give up); the
    wait doubles after each try that got no audio, up to ``retry_max_seconds``.
    """

    enabled: bool = False
    device: int | str | None = None
    sample_rate: int = 16000
    block_seconds: float = 0.1
    partials: bool = True
    keywords: bool = True
    retry_seconds: float = 2.0
    retry_max_seconds: float = 60.0

    def __post_init__(self) -> None:
        _check(sample_rate_ok(self.sample_rate), "sample_rate", f"must be {SAMPLE_RATE_RANGE}, got {self.sample_rate}")
        _check(0.01 <= self.block_seconds <= 1.0, "block_seconds", f"must be 0.01..1.0, got {self.block_seconds}")
        _positive(self.retry_seconds, "retry_seconds", strict=False)
        _check(self.retry_max_seconds >= self.retry_seconds, "retry_max_seconds",
               f"must be >= retry_seconds ({self.retry_seconds}), got {self.retry_max_seconds}")


@dataclass(frozen=True)
class AppConfig:
    """Everything ``streamd serve`` reads from its YAML file (configs/default.yaml)."""

    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    mic: MicConfig = field(default_factory=MicConfig)

    def __post_init__(self) -> None:
        # every listener binds server.host: two on one port would fail at start ([Errno 98]) after the model loads
        s = self.server
        seen = {"server.port": s.port}
        for key, port in (("server.vosk_port", s.vosk_port), ("server.wyoming_port", s.wyoming_port)):
            if port:  # None: off; 0: any free port
                other = next((k for k, p in seen.items() if p == port), None)
                _check(other is None, key, f"{port} is {other} too; each listener needs a port of its own")
                seen[key] = port
