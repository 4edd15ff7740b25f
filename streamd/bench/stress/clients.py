"""Client sessions against a daemon under test, driven by the load generator of ``streamd bench server``
(:mod:`streamd.bench.server`): one attempt and what it saw (:class:`Session`), a crowd of them (:class:`Load`),
the victim stream, and their summary (accepted, refused, partial lag percentiles, audio lost)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..server import PACKET_S, RATE, AudioLoop, ClientPlan, ClientTrace, partial_latency, run_client

PKT = int(PACKET_S * RATE)
VICTIM_ADDR, ADVERSARY_ADDR = "127.0.0.2", "127.0.0.3"


@dataclass
class Session:
    """One client stream attempt and what it saw."""

    trace: ClientTrace
    addr: str
    kind: str
    started: float
    ended: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.trace.chunk_seconds is not None

    def lags(self) -> list[float]:
        tr = self.trace
        out = []
        for arrival, end in tr.partials:
            lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
            if lag is not None:
                out.append(lag)
        return out

    def audio_lost(self) -> float | None:
        """Seconds of sent audio the server did not decode (None: not accepted)."""
        if not self.accepted:
            return None
        sent = len(self.trace.sent_at) and min(len(self.trace.sent_at) * PKT, self.trace.total_samples) / RATE
        if self.trace.done_audio_seconds is None:
            return float(sent)
        return max(0.0, sent - self.trace.done_audio_seconds)


class Load:
    """Concurrent client sessions against one daemon, with a live count of accepted streams."""

    def __init__(self, url: str, audio: AudioLoop, seed: int = 0):
        self.url, self.audio = url, audio
        self.rnd = random.Random(seed)
        self.sessions: list[Session] = []
        self.live = 0
        self.peak = 0

    async def stream(self, seconds: float, addr: str = "127.0.0.1", kind: str = "load", method: str | None = None,
                     beam: int | None = None, speed: float = 1.0) -> Session:
        plan = ClientPlan(self.url, int(round(seconds * RATE)), method, beam, local_addr=addr, speed=speed,
                          timeout=30.0)
        tr = ClientTrace(len(self.sessions), PKT, plan.total_samples)
        s = Session(tr, addr, kind, time.monotonic())
        self.sessions.append(s)
        loop = asyncio.get_running_loop()
        ready, go = asyncio.Event(), loop.create_future()

        async def release() -> None:
            await ready.wait()
            if tr.error is None and not go.done():
                self.live += 1
                self.peak = max(self.peak, self.live)
                go.set_result(time.perf_counter())

        rel = loop.create_task(release())
        try:
            await run_client(plan, self.audio, tr, self.rnd.randrange(self.audio.pcm.size), self.rnd.uniform(0, PACKET_S),
                          ready, go)
        finally:
            rel.cancel()
            if go.done():
                self.live -= 1
            s.ended = time.monotonic()
        return s

    async def persistent(self, seconds: float, until: float, ramp: float = 2.0, **kw: Any) -> None:
        """Try (after a random delay in ``ramp``) until accepted once or ``until`` (monotonic); refused: wait the
        server's ``retry_after`` (x 0.5-1.5) and try again."""
        await asyncio.sleep(self.rnd.uniform(0, ramp))
        while time.monotonic() < until:
            s = await self.stream(seconds, **kw)
            if s.accepted:
                return
            wait = (s.trace.retry_after or 5.0) * self.rnd.uniform(0.5, 1.5)
            await asyncio.sleep(min(wait, max(0.0, until - time.monotonic())))


def session_partials(s: Session) -> list[tuple[float, float]]:
    """(arrival, lag) of each partial of a session that has a lag (perf_counter seconds)."""
    tr = s.trace
    out = []
    for arrival, end in tr.partials:
        lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
        if lag is not None:
            out.append((arrival, lag))
    return out


def victim_split(partials: list[tuple[float, float]], t_from: float, t_to: float = math.inf
                 ) -> tuple[list[float], list[float]]:
    """The victim's partial lags before ``t_from`` and between ``t_from`` and ``t_to`` (perf_counter)."""
    before = [lag for arrival, lag in partials if arrival < t_from]
    during = [lag for arrival, lag in partials if t_from <= arrival <= t_to]
    return before, during


def victim_report(s: Session) -> dict:
    """The victim's session: its partials as (arrival, lag), how it ended, the audio it lost."""
    r = summarize_sessions([s])
    return {"partials": session_partials(s), "accepted_ended": r["accepted_ended"], "audio_lost_s": r["audio_lost_s"]}


async def victim_main(url: str, seconds: float, audio: AudioLoop) -> None:
    """``--victim URL``: one greedy stream from ``VICTIM_ADDR``; prints :func:`victim_report` (JSON)."""
    load = Load(url, audio, seed=7)
    print(json.dumps(victim_report(await load.stream(seconds, addr=VICTIM_ADDR, kind="victim"))))


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 1)


def summarize_sessions(sessions: list[Session]) -> dict:
    acc = [s for s in sessions if s.accepted]
    refused = [s for s in sessions if not s.accepted]
    lags = [lag for s in acc for lag in s.lags()]
    lost = [x if x > 0.011 else 0.0 for x in (s.audio_lost() or 0.0 for s in acc)]  # done rounds to 0.01 s
    ended = {}
    for s in acc:
        key = s.trace.error_code or ("done" if s.trace.done_at else "no done")
        ended[key] = ended.get(key, 0) + 1
    codes: dict[str, int] = {}
    bad_refusals = []
    for s in refused:
        tr = s.trace
        key = f"{tr.error_code}/{tr.close_code}"
        codes[key] = codes.get(key, 0) + 1
        if tr.close_code != 1013 or not tr.error_code or not (tr.error or "").split(": ", 1)[-1]:
            bad_refusals.append(f"{tr.error_code} {tr.close_code}: {tr.error}")
    return {"attempts": len(sessions), "accepted": len(acc), "refused": len(refused), "refusal_codes": codes,
            "refusals_not_1013_with_reason": len(bad_refusals), "bad_refusal_examples": bad_refusals[:5],
            "partials": len(lags), "p50_ms": ms(pct(lags, 50)), "p95_ms": ms(pct(lags, 95)),
            "p99_ms": ms(pct(lags, 99)), "max_ms": ms(max(lags) if lags else None),
            "accepted_ended": ended, "audio_lost_s": round(sum(lost), 3),
            "streams_losing_audio": sum(x > 0.011 for x in lost)}
