"""``streamd bench server``: the daemon under N live websocket clients (the parser is :mod:`streamd.cli.bench`).

What it measures
----------------
N v1 clients on loopback (or any ``--url``) each stream 16 kHz s16le audio
at real-time pace, like microphones: packet k (100 ms, samples
``[k*P, (k+1)*P)``) is sent at ``t0 + phase + (k + 1) * 0.1 s``, the moment a
live source would have captured its last sample; the phases are random in
[0, 100 ms), as independent clients would be.  Every client asks for
partials, so the server sends one after each decoded chunk.

* **Partial latency.** A partial covers the stream up to its ``end``
  (seconds decoded so far; see docs/protocol.md).  Decoding that chunk needed
  the samples up to ``end + 15 ms`` (the last 25 ms fbank window reaches
  15 ms past its 10 ms shift), so the partial's latency is its arrival time
  minus the wall time at which the packet holding sample
  ``round((end + 0.015) * 16000) - 1`` was sent.  Partials whose chunk needed
  the zero padding after ``eof`` (the last, partly filled chunk) are part of
  finalization and not counted.  Coalesced partials (a slow reader gets the
  newest) do not bias this: each partial is matched by its own ``end``.
* **Finalization latency**: ``eof`` sent -> ``done`` received.
* **Engine step time**: ``GET /metrics`` before and after the run; the
  ``streamd_step_seconds`` histogram's sum / count difference is the mean
  wall time of one batch step during the run (``streamd_batch_size`` gives
  the mean batch).  Partial latency minus step time is what the server adds
  on top of the model: waiting for the next cycle, batching, websocket I/O.
* **Growth**: p95 of the partials that arrived in the first and in the last
  third of the run, and per stream the least-squares slope of latency (ms)
  against arrival time (minutes); ``latency_grows`` when some stream's fitted
  rise over its run exceeds one chunk duration (the server falling a whole
  chunk further behind).  ``--duration-minutes M`` makes every stream M
  minutes long (the audio looped) for soak runs.

Clients start together after every ``ready`` arrived, behind one warm-up
stream (1 s of audio sent at once) that absorbs first-call overheads before
the ``/metrics`` baseline is taken.  ``--model`` runs the daemon in-process
(its own thread and event loop, a free loopback port) so that client timing
never waits on the server's loop; ``--url`` measures a running daemon (whose
``/metrics`` then also counts any other traffic it has).

Output: a short report, or with ``--json`` one object with ``clients``,
``p50_ms``, ``p95_ms``, ``p99_ms``, ``final_p50_ms``, ``final_p95_ms``,
``step_ms``, ``first_third_p95_ms``, ``last_third_p95_ms``,
``max_slope_ms_per_min`` and more (``null`` where nothing was measured).
Exit status 1 when a client failed (its error is listed) or the in-process
daemon did not start (the reason is printed), 2 for usage errors.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from ..config import FbankConfig

__all__ = ["ClientTrace", "ServerBenchResult", "partial_latency", "slope_per_minute", "third_p95s",
           "parse_metrics", "metrics_url", "summarize", "bench_server", "InProcessServer", "AudioLoop", "format_report",
           "ClientPlan", "run_client"]

RATE = 16000
PACKET_S = 0.1
# the fbank frame ending a chunk at t needs audio up to t + (window - hop): 25 - 10 = 15 ms by default
FBANK_LOOKAHEAD_S = (FbankConfig.frame_length_ms - FbankConfig.frame_shift_ms) / 1000
WARMUP_S = 1.0


# --------------------------------------------------------------------------- what one client saw


@dataclass
class ClientTrace:
    """Timeline of one client stream (``time.perf_counter`` seconds).

    ``sent_at[k]``: when packet k (samples ``[k*packet, (k+1)*packet)``) had
    been sent; ``partials``: ``(arrival, end)`` per partial received, ``end``
    in seconds of stream audio; ``eof_at`` / ``done_at``: eof sent, done received.
    """

    index: int
    packet_samples: int
    total_samples: int
    sent_at: list[float] = field(default_factory=list)
    partials: list[tuple[float, float]] = field(default_factory=list)
    finals: list[str] = field(default_factory=list)
    eof_at: float | None = None
    done_at: float | None = None
    chunk_seconds: float | None = None
    error: str | None = None
    error_code: str | None = None  # the server's error code (or "http NNN" for a refused handshake)
    retry_after: float | None = None  # the error's retry hint, if any
    close_code: int | None = None
    done_audio_seconds: float | None = None  # what the server says it decoded (done.audio_seconds)


def partial_latency(end_s: float, arrival: float, sent_at: Sequence[float], packet_samples: int,
                    total_samples: int, rate: int = RATE) -> float | None:
    """Seconds from sending the last sample a partial needed to its arrival.

    ``end_s``: the partial's ``end`` (stream seconds decoded); the chunk's
    last fbank window reaches ``end_s + 15 ms``.  None when that sample is
    past the audio (the chunk was completed by the padding after eof) or was
    never sent.
    """
    need = int(round(end_s * rate)) + int(round(FBANK_LOOKAHEAD_S * rate))  # samples the chunk needed
    if need <= 0 or need > total_samples:
        return None
    k = (need - 1) // packet_samples
    if k >= len(sent_at):
        return None
    return arrival - sent_at[k]


def slope_per_minute(times_s: Sequence[float], values_ms: Sequence[float]) -> float | None:
    """Least-squares slope of ``values_ms`` against ``times_s``, in ms per minute (None: < 3 points or no span)."""
    t = np.asarray(times_s, dtype=np.float64) / 60.0
    y = np.asarray(values_ms, dtype=np.float64)
    if t.size < 3 or np.ptp(t) <= 0:
        return None
    tc = t - t.mean()
    return float((tc * (y - y.mean())).sum() / (tc * tc).sum())


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def third_p95s(times_s: Sequence[float], values_ms: Sequence[float], t_begin: float,
               t_end: float) -> tuple[float | None, float | None]:
    """p95 of the values whose time falls in the first third / the last third of ``[t_begin, t_end]``."""
    t = np.asarray(times_s, dtype=np.float64)
    y = np.asarray(values_ms, dtype=np.float64)
    third = (t_end - t_begin) / 3.0
    first = y[t < t_begin + third]
    last = y[t >= t_end - third]
    return _pct(first, 95), _pct(last, 95)


# --------------------------------------------------------------------------- /metrics


def metrics_url(ws_url: str) -> str:
    """``ws://h:p/v1/stream?x`` -> ``http://h:p/metrics`` (``wss`` -> ``https``)."""
    u = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(u.scheme)
    if scheme is None:
        raise ValueError(f"url must start with ws:// or wss://, got {ws_url!r}")
    return urlunsplit((scheme, u.netloc, "/metrics", "", ""))


def parse_metrics(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition: name -> value (comments and labelled series skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "{" in line:
            continue
        parts = line.split()
        if len(parts) >= 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                continue
    return out


async def _scrape(url: str, timeout: float = 5.0) -> tuple[dict[str, float] | None, str | None]:
    def get() -> str:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - a URL the user gave
            return r.read().decode("utf-8", "replace")

    try:
        return parse_metrics(await asyncio.to_thread(get)), None
    except (OSError, ValueError) as e:
        return None, f"cannot read {url}: {type(e).__name__}: {e}"


def _delta(before: dict[str, float] | None, after: dict[str, float] | None, name: str) -> tuple[float, float] | None:
    """(sum, count) increase of histogram ``name`` between two scrapes."""
    if before is None or after is None:
        return None
    keys = (f"{name}_sum", f"{name}_count")
    if not all(k in before and k in after for k in keys):
        return None
    return after[keys[0]] - before[keys[0]], after[keys[1]] - before[keys[1]]


# --------------------------------------------------------------------------- summary


@dataclass
class ServerBenchResult:
    """The figures of one run (milliseconds; None where nothing was measured)."""

    clients: int
    seconds: float
    method: str | None
    url: str
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    partials_measured: int
    final_p50_ms: float | None
    final_p95_ms: float | None
    finals_done: int
    step_ms: float | None
    steps: int
    mean_batch: float | None
    first_third_p95_ms: float | None
    last_third_p95_ms: float | None
    max_slope_ms_per_min: float | None
    latency_grows: bool | None
    chunk_ms: float | None
    run_seconds: float
    errors: list[str]
    notes: list[str]

    def to_json(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def summarize(traces: Sequence[ClientTrace], run_start: float, seconds: float, method: str | None, url: str,
              step: tuple[float, float] | None = None, batch: tuple[float, float] | None = None,
              notes: Sequence[str] = ()) -> ServerBenchResult:
    """Turn client traces (and /metrics deltas ``(sum, count)``) into the report figures."""
    times: list[float] = []
    lats: list[float] = []
    slopes: list[float] = []
    growth: list[float] = []
    finals: list[float] = []
    t_last = run_start
    for tr in traces:
        ts, ys = [], []
        for arrival, end in tr.partials:
            lat = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
            if lat is not None:
                ts.append(arrival - run_start)
                ys.append(lat * 1000.0)
            t_last = max(t_last, arrival)
        times += ts
        lats += ys
        s = slope_per_minute(ts, ys)
        if s is not None:
            slopes.append(s)
            growth.append(s * (max(ts) - min(ts)) / 60.0)
        if tr.eof_at is not None and tr.done_at is not None:
            finals.append((tr.done_at - tr.eof_at) * 1000.0)
    chunk_s = next((tr.chunk_seconds for tr in traces if tr.chunk_seconds), None)
    chunk_ms = chunk_s * 1000.0 if chunk_s else None
    first, last = third_p95s(times, lats, 0.0, t_last - run_start) if lats else (None, None)
    step_ms = steps = None
    if step is not None and step[1] > 0:
        step_ms, steps = step[0] / step[1] * 1000.0, int(step[1])
    mean_batch = batch[0] / batch[1] if batch is not None and batch[1] > 0 else None
    grows = None if not growth or chunk_ms is None else bool(max(growth) > chunk_ms)
    return ServerBenchResult(
        clients=len(traces), seconds=seconds, method=method, url=url,
        p50_ms=_pct(lats, 50), p95_ms=_pct(lats, 95), p99_ms=_pct(lats, 99), partials_measured=len(lats),
        final_p50_ms=_pct(finals, 50), final_p95_ms=_pct(finals, 95), finals_done=len(finals),
        step_ms=step_ms, steps=steps or 0, mean_batch=mean_batch, first_third_p95_ms=first, last_third_p95_ms=last,
        max_slope_ms_per_min=max(slopes) if slopes else None, latency_grows=grows, chunk_ms=chunk_ms,
        run_seconds=t_last - run_start, errors=[f"client {tr.index}: {tr.error}" for tr in traces if tr.error],
        notes=list(notes))


# --------------------------------------------------------------------------- clients


class AudioLoop:
    """All audio files joined (16 kHz int16); a client reads it from its own offset, wrapping around."""

    def __init__(self, pcm: np.ndarray):
        if pcm.size == 0:
            raise ValueError("the audio files hold no samples")
        self.pcm = pcm

    @classmethod
    def from_files(cls, paths: Sequence[str]) -> "AudioLoop":
        from ..audio.pcm import load_audio
        from ..audio.resample import resample

        parts = []
        for p in paths:
            x, rate = load_audio(p)
            parts.append(resample(x, rate, RATE) if rate != RATE else x)
        x = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return cls(np.clip(np.round(x * 32767), -32768, 32767).astype("<i2"))

    def read(self, offset: int, n: int) -> bytes:
        idx = (offset + np.arange(n)) % self.pcm.size
        return self.pcm[idx].tobytes()


@dataclass(frozen=True)
class ClientPlan:
    """What every client does: the URL, stream options, and how much audio."""

    url: str
    total_samples: int
    method: str | None = None
    beam: int | None = None
    token: str | None = None
    timeout: float = 30.0
    local_addr: str | None = None  # source address (e.g. 127.0.0.2: another client on loopback)
    speed: float = 1.0  # pacing: this many times real time


def _start_message(plan: ClientPlan) -> str:
    start: dict[str, Any] = {"type": "start", "sample_rate": RATE, "format": "s16le", "partials": True}
    if plan.method:
        start["method"] = plan.method
    if plan.beam:
        start["beam"] = plan.beam
    return json.dumps(start)


async def _send_audio(ws: Any, plan: ClientPlan, audio: AudioLoop, tr: ClientTrace, offset: int, phase: float,
                      t0: float, paced: bool) -> None:
    """The stream's audio in packets (paced from ``t0 + phase`` at ``plan.speed`` x real time), then eof."""
    pkt = tr.packet_samples
    for k in range(-(-tr.total_samples // pkt)):
        n = min(pkt, tr.total_samples - k * pkt)
        if paced:
            due = t0 + phase + (k + 1) * PACKET_S / plan.speed
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await ws.send(audio.read(offset + k * pkt, n))
        tr.sent_at.append(time.perf_counter())
    await ws.send('{"type": "eof"}')
    tr.eof_at = time.perf_counter()


def _record(tr: ClientTrace, raw: str | bytes, now: float) -> None:
    """One server message into the trace: partial (arrival, end), final, done, error."""
    if isinstance(raw, bytes):
        return
    m = json.loads(raw)
    kind = m.get("type")
    if kind == "partial" and isinstance(m.get("end"), (int, float)):
        tr.partials.append((now, float(m["end"])))
    elif kind == "final":
        tr.finals.append(m.get("text", ""))
    elif kind == "done":
        tr.done_at = now
        tr.done_audio_seconds = m.get("audio_seconds")
    elif kind == "error":
        tr.error = f"{m.get('code')}: {m.get('message')}"
        tr.error_code = m.get("code")


async def _stream(ws: Any, plan: ClientPlan, audio: AudioLoop, tr: ClientTrace, offset: int, phase: float,
                  ready: asyncio.Event, go: asyncio.Future, paced: bool) -> None:
    """An open connection: start, ready (or the refusal), the barrier, audio and replies, how it closed."""
    from websockets.exceptions import ConnectionClosed

    try:
        await ws.send(_start_message(plan))
    except ConnectionClosed:
        pass  # refused at once (error, then close): the error is still to be read
    try:
        msg = json.loads(await asyncio.wait_for(ws.recv(), plan.timeout))
    except ConnectionClosed:
        tr.close_code = ws.close_code
        raise
    if msg.get("type") != "ready":
        tr.error = f"{msg.get('code', msg.get('type'))}: {msg.get('message', msg)}"
        tr.error_code, tr.retry_after = msg.get("code"), msg.get("retry_after")
        try:
            await asyncio.wait_for(ws.wait_closed(), plan.timeout)
        finally:
            tr.close_code = ws.close_code
        return
    tr.chunk_seconds = (msg.get("model") or {}).get("chunk_seconds")
    ready.set()
    t0 = await go
    sender = asyncio.create_task(_send_audio(ws, plan, audio, tr, offset, phase, t0, paced))
    try:
        async for raw in ws:
            _record(tr, raw, time.perf_counter())
    finally:
        if not sender.done():
            sender.cancel()
        try:
            await sender
        except (asyncio.CancelledError, ConnectionClosed):
            pass
    tr.close_code = ws.close_code
    if tr.error is None and ws.close_code != 1000:
        tr.error = f"connection closed with code {ws.close_code} {ws.close_reason or ''}".strip()
    if tr.error is None and tr.done_at is None:
        tr.error = "the connection closed without a done message"


async def run_client(plan: ClientPlan, audio: AudioLoop, tr: ClientTrace, offset: int, phase: float,
                     ready: asyncio.Event, go: asyncio.Future, paced: bool = True) -> None:
    """One stream: start, wait for ready, (barrier), paced audio packets, eof; record partials and done in
    ``tr`` (a refusal, a failed connection: its error)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    headers = {"Authorization": f"Bearer {plan.token}"} if plan.token else None
    try:
        extra = {"local_addr": (plan.local_addr, 0)} if plan.local_addr else {}
        async with connect(plan.url, additional_headers=headers, max_size=None, open_timeout=plan.timeout,
                           close_timeout=5, compression=None, **extra) as ws:
            await _stream(ws, plan, audio, tr, offset, phase, ready, go, paced)
    except InvalidStatus as e:
        tr.error = f"server refused the connection: HTTP {e.response.status_code}"
        tr.error_code = f"http {e.response.status_code}"
    except (OSError, asyncio.TimeoutError, ConnectionClosed) as e:
        if tr.error is None:
            tr.error = f"cannot talk to {plan.url}: {type(e).__name__}: {e}"
    finally:
        ready.set()  # a failed client must not hold the barrier


async def _run_clients(plan: ClientPlan, audio: AudioLoop, n: int, seed: int) -> tuple[list[ClientTrace], float]:
    """Connect n clients, start them together (random phases), wait until all are done; returns (traces, t0)."""
    rnd = random.Random(seed)
    pkt = int(PACKET_S * RATE)
    traces = [ClientTrace(i, pkt, plan.total_samples) for i in range(n)]
    readies = [asyncio.Event() for _ in range(n)]
    go: asyncio.Future = asyncio.get_running_loop().create_future()
    tasks = [asyncio.create_task(run_client(plan, audio, tr, rnd.randrange(audio.pcm.size), rnd.uniform(0, PACKET_S),
                                         ev, go)) for tr, ev in zip(traces, readies)]
    await asyncio.gather(*(ev.wait() for ev in readies))
    t0 = time.perf_counter()
    go.set_result(t0)
    await asyncio.gather(*tasks)
    return traces, t0


async def _warmup(plan: ClientPlan, audio: AudioLoop) -> str | None:
    """One short stream sent at once (first-call overheads); returns an error or None."""
    tr = ClientTrace(-1, int(PACKET_S * RATE), int(WARMUP_S * RATE))
    go: asyncio.Future = asyncio.get_running_loop().create_future()
    go.set_result(time.perf_counter())
    await run_client(plan, audio, tr, 0, 0.0, asyncio.Event(), go, paced=False)
    return tr.error


async def bench_server(url: str, clients: int, seconds: float, audio: AudioLoop, method: str | None = None,
                       beam: int | None = None, token: str | None = None, seed: int = 0,
                       warmup: bool = True) -> ServerBenchResult:
    """Run the benchmark against a daemon at ``url`` (a v1 websocket URL)."""
    plan = ClientPlan(url, int(round(seconds * RATE)), method, beam, token)
    notes: list[str] = []
    if warmup:
        err = await _warmup(plan, audio)
        if err is not None:
            traces = [ClientTrace(i, int(PACKET_S * RATE), plan.total_samples, error=f"warm-up: {err}")
                      for i in range(clients)]
            return summarize(traces, time.perf_counter(), seconds, method, url, notes=notes)
    murl = metrics_url(url)
    before, note = await _scrape(murl)
    traces, t0 = await _run_clients(plan, audio, clients, seed)
    after, note2 = await _scrape(murl)
    notes += [n for n in (note or note2,) if n]
    step = _delta(before, after, "streamd_step_seconds")
    if step is None and not notes:
        notes.append(f"{murl} has no streamd_step_seconds histogram")
    return summarize(traces, t0, seconds, method, url, step, _delta(before, after, "streamd_batch_size"), notes)


# --------------------------------------------------------------------------- in-process daemon


class InProcessServer:
    """``streamd serve`` in this process: its own thread and event loop, a free loopback port.

    ``with InProcessServer(model, ...) as url:`` yields the v1 URL; leaving
    drains the server (streams finish, then it stops).
    """

    def __init__(self, model: str, device: str = "cpu", max_streams: int = 64, threads: int | None = None,
                 timeout: float = 120.0, limits: dict | None = None):
        self.model, self.device, self.max_streams, self.threads = model, device, max_streams, threads
        self.timeout = timeout
        self.limits = dict(limits or {})  # more limits.* keys (e.g. max_load: 0 for a capacity search)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.port: int | None = None

    async def _main(self) -> None:
        from ..config import AppConfig, from_dict
        from ..server.app import App

        try:
            engine: dict[str, Any] = {"device": self.device}
            if self.threads is not None:  # None: the config's default (engine.num_threads)
                engine["num_threads"] = self.threads
            cfg = from_dict(AppConfig, {"server": {"host": "127.0.0.1", "port": 0}, "engine": engine,
                                        "limits": {"max_streams": self.max_streams, **self.limits}})
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            async with App(cfg, model_path=self.model) as app:
                self.port = app.port
                self._started.set()
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to the caller's thread
            self._error = e
        finally:
            self._started.set()

    def __enter__(self) -> str:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="bench-server", daemon=True)
        self._thread.start()
        if not self._started.wait(self.timeout):
            raise RuntimeError(f"the in-process server did not start within {self.timeout:.0f} s")
        if self._error is not None or self.port is None:
            raise RuntimeError(f"the in-process server failed to start: {type(self._error).__name__}: {self._error}")
        return f"ws://127.0.0.1:{self.port}/v1/stream"

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(self.timeout)


# --------------------------------------------------------------------------- report


def _fmt(x: float | None, unit: str = " ms") -> str:
    return "n/a" if x is None else f"{x:.1f}{unit}"


def format_report(r: ServerBenchResult) -> str:
    """The text report of one run."""
    lines = [f"streamd bench server: {r.clients} clients x {r.seconds:g} s audio, 100 ms packets at real time "
             f"({r.method or 'server default'} search), {r.url}",
             f"partial latency: p50 {_fmt(r.p50_ms)}, p95 {_fmt(r.p95_ms)}, p99 {_fmt(r.p99_ms)} "
             f"({r.partials_measured} partials; chunk {_fmt(r.chunk_ms)})",
             f"finalization (eof -> done): p50 {_fmt(r.final_p50_ms)}, p95 {_fmt(r.final_p95_ms)} "
             f"({r.finals_done} of {r.clients} streams done)"]
    if r.step_ms is not None:
        line = f"engine step (/metrics): {r.step_ms:.1f} ms mean over {r.steps} steps"
        if r.mean_batch is not None:
            line += f", {r.mean_batch:.1f} streams per step"
        if r.p50_ms is not None:
            line += f"; partial latency p50 is {r.p50_ms - r.step_ms:.1f} ms above the step time"
        lines.append(line)
    else:
        lines.append("engine step (/metrics): not measured")
    verdict = {None: "too few partials to judge", True: "LATENCY GROWS (a stream's fitted rise exceeds one chunk)",
               False: "no stream's latency grows"}[r.latency_grows]
    lines.append(f"over the run ({r.run_seconds:.1f} s): p95 first third {_fmt(r.first_third_p95_ms)}, last third "
                 f"{_fmt(r.last_third_p95_ms)}; max per-stream slope {_fmt(r.max_slope_ms_per_min, ' ms/min')}: "
                 f"{verdict}")
    lines += [f"note: {n}" for n in r.notes]
    lines += [f"ERROR {e}" for e in r.errors]
    return "\n".join(lines)
