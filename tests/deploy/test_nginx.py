"""The nginx recipe (deploy/nginx/streamd.conf, docs/deploy.md) in front of two real daemons.

Debian's nginx runs as the current user, not daemonized, with its configuration, logs and
temporary files in a tmp dir and free loopback ports; the site file is the shipped one with the
test's ports put in.  Two ``streamd serve`` processes (a tiny model) sit behind it.

1. 16 streams through nginx spread over both daemons (least_conn).  SIGTERM to one while every
   stream is mid-audio (the rest of the audio waits until that daemon's log says it is draining, so
   a signal handled late on a loaded machine changes nothing): each of its streams still gets the
   finals of all the audio it received (what the engine decodes from that prefix) and ``done``, then
   close 1001; the other daemon's
   streams finish whole.  Streams started right after the SIGTERM are all served by the other
   daemon (one that reaches the draining daemon is refused with ``shutting_down`` after the
   handshake, which nginx cannot see; the client library retries it, and once the daemon has
   exited nginx skips it; one that the other daemon's admission control refuses with ``overloaded`` on a
   loaded machine is retried too, and is counted as a connection but never as a stream).
2. The clean rolling restart of the recipe: the restarted daemon answers ``/readyz`` 200; nginx
   reloaded with the other daemon marked ``down`` sends every new stream to the restarted one (never a
   connection to the other; a stream retried after an ``overloaded`` refusal on a loaded machine is retried
   there too), while the streams already on the ``down`` one finish whole through the reload.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

from helpers import random_audio
from streamd import events as E
from streamd.client import RETRY_CODES, Client, PcmSource

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "deploy" / "nginx" / "streamd.conf"
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
TIMEOUT = 120

pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx; "
                                                      ".ci/run installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    """Poll ``cond`` until true; a bound on a wait, not an assertion on time."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Daemon:
    """``streamd serve`` on a given loopback port (a subprocess; its log is kept)."""

    def __init__(self, ckpt: str, port: int, config: Path):
        self.port, self.log = port, []
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMD_")}
        env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamd", "serve", "--config", str(config), "--model", ckpt, "--host",
             "127.0.0.1", "--port", str(port), "--device", "cpu"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if "ready:" in line:
                self.ready.set()
        self.ready.set()

    def wait_ready(self) -> "Daemon":
        if not self.ready.wait(TIMEOUT) or self.proc.poll() is not None:
            raise RuntimeError("streamd serve did not start:\n" + "\n".join(self.log[-30:]))
        return self

    def _metrics(self) -> tuple[float, dict[str, float]]:
        """One ``/metrics`` reading: v1 connections accepted, and ``streamd_errors_total`` by code (refusals
        before ``ready`` are counted there too)."""
        _, text = http_get(self.port, "/metrics")
        m = re.search(r'^streamd_connections_total\{route="v1"\} (\S+)$', text, re.M)
        errors = {c: float(v) for c, v in re.findall(r'^streamd_errors_total\{code="([^"]+)"\} (\S+)$', text, re.M)}
        return (float(m.group(1)) if m else 0.0), errors

    def v1_connections(self) -> float:
        return self._metrics()[0]

    @staticmethod
    def _refused(errors: dict[str, float]) -> float:
        """Of ``errors``, the streams refused with a try-again code (close 1013 or 1001)."""
        return sum(v for c, v in errors.items() if c in RETRY_CODES)

    def refusals(self) -> float:
        return self._refused(self._metrics()[1])

    def v1_accepted(self) -> tuple[float, dict[str, float]]:
        """v1 connections that became streams (those refused with a try-again code taken out), and the errors,
        from one reading.

        A daemon under load may refuse a new stream with ``overloaded`` or ``too_many_streams`` (close 1013,
        admission control); the client retries it, so that connection is counted but never served.
        """
        connections, errors = self._metrics()
        return connections - self._refused(errors), errors

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def site_conf(listen: int, backends: list[int], down: tuple[int, ...] = ()) -> str:
    """The shipped site file with the test's listen port and backends (the shipped server lines' settings)."""
    text = SITE.read_text()
    lines = re.findall(r"^( *)server 127\.0\.0\.1:\d+( [^;]*);$", text, re.M)
    assert lines, f"{SITE}: no 'server 127.0.0.1:PORT ...;' lines in the upstream"
    indent, params = lines[0]
    ours = "\n".join(f"{indent}server 127.0.0.1:{p}{' down' if p in down else params};" for p in backends)
    text = re.sub(r"^ *server 127\.0\.0\.1:\d+ [^;]*;\n", "", text, flags=re.M)
    text = re.sub(r"^( *least_conn;\n)", lambda m: m.group(1) + ours + "\n", text, count=1, flags=re.M)
    text, n = re.subn(r"^( *)listen 8080;$", rf"\g<1>listen 127.0.0.1:{listen};", text, flags=re.M)
    assert n == 1, f"{SITE}: no 'listen 8080;' line"
    return text


class Nginx:
    """Debian's nginx as the current user, in the foreground, everything under ``root``."""

    def __init__(self, root: Path, port: int, site: str):
        self.root, self.port = root, port
        (root / "tmp").mkdir(parents=True)
        self.site = root / "streamd.conf"
        self.site.write_text(site)
        self.error_log = root / "error.log"
        user = (f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
                if os.geteuid() == 0 else "")  # as root, workers would switch to nobody
        tmp = root / "tmp"
        self.conf = root / "nginx.conf"
        self.conf.write_text(f"""
{user}
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {self.error_log} notice;
events {{ worker_connections 512; }}
http {{
    log_format lb '$remote_addr:$remote_port $status upstream=$upstream_addr ($upstream_status) $request_time s';
    access_log {root}/access.log lb;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {self.site};
}}
""")
        self.proc = subprocess.Popen([NGINX, *self._args()], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited {self.proc.returncode}:\n{self.errors()}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, "nginx to listen")

    def _args(self) -> list[str]:
        return ["-p", str(self.root), "-c", str(self.conf), "-e", str(self.error_log)]

    def errors(self) -> str:
        return self.error_log.read_text() if self.error_log.exists() else ""

    def reload(self, site: str) -> None:
        """New site file, ``nginx -s reload``; returns once the old worker stopped taking connections."""
        before = self.errors().count("gracefully shutting down")
        self.site.write_text(site)
        r = subprocess.run([NGINX, *self._args(), "-t", "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        subprocess.run([NGINX, *self._args(), "-s", "reload"], check=True, capture_output=True)
        wait_for(lambda: self.errors().count("gracefully shutting down") > before, "the nginx reload")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_wav(path: Path, pcm: bytes, rate: int) -> str:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return str(path)


class Gated:
    """A stream's audio: the first half at once, the rest when ``gate`` opens (so that it is mid-audio)."""

    def __init__(self, pcm: bytes, rate: int, gate: asyncio.Event):
        self.pcm, self.rate, self.gate = pcm, rate, gate

    def source(self) -> PcmSource:
        async def chunks():
            step = self.rate // 10 * 2  # 0.1 s frames: the audio a server received is whole frames
            half = len(self.pcm) // 2 // step * step
            for i in range(0, half, step):
                yield self.pcm[i:i + step]
            await self.gate.wait()
            for i in range(half, len(self.pcm), step):
                yield self.pcm[i:i + step]

        return PcmSource(chunks(), self.rate)


class Run:
    """One stream through nginx: its events, the stream object, and when it has decoded something."""

    def __init__(self, client: Client, audio: Gated, name: str):
        self.name, self.audio = name, audio
        self.stream = client.stream(audio.source())
        self.events: list = []
        self.live = asyncio.Event()  # a partial came: the server is decoding it
        self.task = asyncio.ensure_future(self._go())

    async def _go(self):
        async for ev in self.stream:
            self.events.append(ev)
            if isinstance(ev, E.Partial):
                self.live.set()
        self.live.set()


def finals(events) -> list[dict]:
    return [e.to_wire() for e in events if isinstance(e, (E.Final, E.WakeWord))]


CLIENT_RETRIES = dict(retries=40, retry_delay=0.1, retry_max_delay=0.5)
"""On a loaded machine a daemon's admission control may refuse a stream with ``overloaded``: the clients retry."""


async def _drain_phase(url: str, files: dict, rates: tuple, a: "Daemon", b: "Daemon"):
    """Phase 1: 16 streams over both daemons; SIGTERM to a mid-stream; 4 new streams (they go to b)."""
    gate = asyncio.Event()
    async with Client(url, **CLIENT_RETRIES) as c, Client(url, **CLIENT_RETRIES) as again:
        runs = [Run(c, Gated(files[rates[i % 4]], rates[i % 4], gate), f"s{i}") for i in range(16)]
        for r in runs:
            await asyncio.wait_for(r.live.wait(), TIMEOUT)
        spread = (a.v1_accepted()[0], b.v1_accepted()[0], a.refusals() + b.refusals())
        b_before = b.v1_accepted()[0]
        a.proc.send_signal(signal.SIGTERM)
        # the rest of the audio only once a has begun its drain: on a loaded machine the signal may be
        # handled late, and streams that had sent all their audio by then would simply end whole
        await asyncio.to_thread(wait_for, lambda: any("draining" in line for line in a.log),
                                "daemon a to begin its drain", TIMEOUT)
        late = [Run(again, Gated(files[rates[i % 4]], rates[i % 4], gate), f"n{i}") for i in range(4)]
        gate.set()
        await asyncio.wait_for(asyncio.gather(*(r.task for r in runs + late)), TIMEOUT)
        return runs, late, spread, b_before


def _references(ckpt: str, tmp_path, files: dict, runs: list) -> tuple[dict, dict, dict]:
    """The offline finals of every file and of the prefix each drained stream got decoded: (paths by rate,
    prefix paths by stream name, finals by path)."""
    from streamd.config import AppConfig, from_dict
    from streamd.engine import Recognizer
    from streamd.feed import transcribe_files

    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    paths = {rate: write_wav(tmp_path / f"{rate}.wav", pcm, rate) for rate, pcm in files.items()}
    prefixes = {}
    for r in runs:
        if r.stream.close_code == 1001:  # drained on a: the audio it received is a prefix in whole frames
            n = round(r.events[-1].audio_seconds * r.audio.rate) * 2
            prefixes[r.name] = write_wav(tmp_path / f"{r.name}.wav", r.audio.pcm[:n], r.audio.rate)
    return paths, prefixes, transcribe_files(rec, list(paths.values()) + list(prefixes.values()))


async def _rolling_phase(url: str, files: dict, a: "Daemon", b: "Daemon", nginx: "Nginx", ports: dict):
    """Phase 2: 4 streams over both, then b taken out with ``down`` + reload, then 4 more (they go to a)."""
    gate = asyncio.Event()
    async with Client(url, **CLIENT_RETRIES) as c:
        before = [Run(c, Gated(files[16000], 16000, gate), f"p{i}") for i in range(4)]
        for r in before:
            await asyncio.wait_for(r.live.wait(), TIMEOUT)
        counts = (a.v1_accepted()[0], b.v1_accepted()[0], b.v1_connections())
        await asyncio.to_thread(nginx.reload, site_conf(ports["lb"], [ports["a"], ports["b"]],
                                                        down=(ports["b"],)))
        after = [Run(c, Gated(files[8000], 8000, gate), f"q{i}") for i in range(4)]
        for r in after:
            await asyncio.wait_for(r.live.wait(), TIMEOUT)
        gate.set()
        await asyncio.wait_for(asyncio.gather(*(r.task for r in before + after)), TIMEOUT)
        return before, after, counts, (a.v1_accepted()[0], b.v1_accepted()[0], b.v1_connections())


def _show_logs(daemons: dict, nginx: "Nginx | None") -> None:
    for name, d in daemons.items():  # shown by pytest when the test fails
        print(f"---- daemon {name}'s log (last 60 lines)\n" + "\n".join(d.log[-60:]))
    if nginx is not None:
        print("---- nginx's error log\n" + nginx.errors()[-4000:])


def test_two_daemons_behind_nginx_drain_and_rolling_restart(ckpt, tmp_path):
    config = tmp_path / "streamd.yaml"
    # The recipe is tested here, not the daemon's priorities, timers or admission, which a loaded machine brings
    # into play: engine_nice 0 (the engines at the test's own nice value: under `nice -n 10 pytest` beside busy
    # processes, 10 more steps would starve them); no idle_timeout / min_audio_rate (the streams wait at their
    # gates as long as a loaded machine takes to set up the rest: 30 s would end them); no capacity rule
    # (max_load 0: a starved daemon measures room for no stream and would refuse most of the 16)
    config.write_text("server:\n  grace_seconds: 10\n  warmup_seconds: 0\n  engine_nice: 0\n"
                      "limits:\n  idle_timeout: 0\n  min_audio_rate: 0\n  max_load: 0\n")
    rates = (16000, 8000, 22050, 44100)
    files = {}
    for i, rate in enumerate(rates):
        pcm = (np.clip(random_audio(3.0, rate, seed=40 + i), -1, 1) * 32767).astype("<i2").tobytes()
        files[rate] = pcm
    ports = {"a": free_port(), "b": free_port(), "lb": free_port()}
    daemons = {k: Daemon(ckpt, ports[k], config) for k in ("a", "b")}
    nginx = None
    try:
        for d in daemons.values():
            d.wait_ready()
        nginx = Nginx(tmp_path / "nginx", ports["lb"], site_conf(ports["lb"], [ports["a"], ports["b"]]))
        url = f"ws://127.0.0.1:{ports['lb']}/v1/stream"
        a, b = daemons["a"], daemons["b"]

        # ---- 1: 16 streams over both; SIGTERM to a mid-stream; new streams go to b
        runs, late, spread, b_before = asyncio.run(_drain_phase(url, files, rates, a, b))
        assert a.proc.wait(30) == 0, "\n".join(a.log[-20:])
        b_after = b.v1_connections()
        b_accepted, b_errors = b.v1_accepted()
        paths, prefixes, ref = _references(ckpt, tmp_path, files, runs)

        # least_conn with every stream still open: each new one went to the daemon with fewer, so 8 and 8 (a
        # stream refused by admission control on a loaded machine closes and is retried: then at most 9 and 7)
        assert spread[0] + spread[1] == 16 and abs(spread[0] - spread[1]) <= (2 if spread[2] else 0), spread
        drained = [r for r in runs if r.stream.close_code == 1001]
        assert len(drained) == spread[0]  # every stream of a was ended by its drain, none of b's
        for r in runs + late:
            done = r.events[-1]
            assert isinstance(done, E.Done), (r.name, r.events[-1:])
            if r.name in prefixes:
                assert 0 < done.audio_seconds < len(r.audio.pcm) / 2 / r.audio.rate
                assert finals(r.events) == finals(ref[prefixes[r.name]]), r.name
            else:
                assert r.stream.close_code == 1000 and done.audio_seconds == pytest.approx(3.0)
                assert finals(r.events) == finals(ref[paths[r.audio.rate]]), r.name
        assert any(finals(r.events) for r in drained)
        # every new stream was served by b, each once (a refusal by b's admission control, retried, is no stream)
        assert b_accepted - b_before == len(late), (b_after, spread, b_errors)
        assert all(r.stream.ready is not None for r in late)
        assert set(b_errors) <= RETRY_CODES - {"shutting_down"}, b_errors  # b was never draining in phase 1

        # ---- 2: rolling restart: a back on its port, /readyz 200, then b taken out with `down` + reload
        a = daemons["a"] = Daemon(ckpt, ports["a"], config).wait_ready()
        assert http_get(ports["a"], "/readyz") == (200, "ready\n")
        nginx.reload(site_conf(ports["lb"], [ports["a"], ports["b"]]))
        b_refused = b.refusals()
        before, after, counts, counts2 = asyncio.run(_rolling_phase(url, files, a, b, nginx, ports))
        assert counts[0] >= 1 and counts[1] - b_accepted >= 1, counts  # both took streams before the reload
        # `down`: every new stream went to a, and nginx never opened another connection to b
        assert counts2 == (counts[0] + 4, counts[1], counts[2]), (counts, counts2)
        # every retry was an admission refusal (none a failed route): the streams' extra attempts, counted
        assert sum(r.stream.attempts - 1 for r in before + after) == a.refusals() + b.refusals() - b_refused
        for r in before + after:
            assert r.stream.close_code == 1000, r.name
            assert finals(r.events) == finals(ref[paths[r.audio.rate]]), r.name
        assert b.stop() == 0  # no stream left on b: it exits at once
    finally:
        _show_logs(daemons, nginx)
        if nginx is not None:
            nginx.stop()
        for d in daemons.values():
            d.stop()
