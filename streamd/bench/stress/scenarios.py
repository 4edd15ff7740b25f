"""The load scenarios: baseline, capacity, default, overload, adversary, soak, rss (the faults and the fuzz
are in :mod:`.faults` and :mod:`.fuzz`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..server import AudioLoop, partial_latency
from .clients import ADVERSARY_ADDR, Load, Session, ms, pct, summarize_sessions, victim_split
from .context import Ctx, cfg, hist_quantile, refusal_reason
from .daemon import ALLOCATOR_ENV, Daemon, Sampler


async def scenario_baseline(ctx: Ctx) -> dict:
    with ctx.daemon("baseline", cfg()) as d:
        load = Load(d.url, ctx.audio, seed=1)
        lags = [lag for _, lag in (await ctx.victim(load, d.url, 20.0))["partials"]]
        ctx.done_with(d)
    r = {"partials": len(lags), "p50_ms": ms(pct(lags, 50)), "p95_ms": ms(pct(lags, 95)),
         "max_ms": ms(max(lags) if lags else None)}
    ctx.victim_p95_ms = r["p95_ms"]
    return r


async def run_n(url: str, audio: AudioLoop, n: int, seconds: float, seed: int = 0, **kw: Any) -> list[Session]:
    load = Load(url, audio, seed)
    await asyncio.gather(*(load.stream(seconds, **kw) for _ in range(n)))
    return load.sessions


def realtime(r: dict, chunk_ms: float = 320.0) -> bool:
    return r["accepted"] == r["attempts"] and r["p95_ms"] is not None and r["p95_ms"] <= chunk_ms \
        and r["streams_losing_audio"] == 0


async def scenario_capacity(ctx: Ctx) -> dict:
    """Largest N of real-time greedy streams with admission off (p95 <= one chunk)."""
    runs = {}
    with ctx.daemon("capacity", cfg(max_load=0, max_streams=4000)) as d:
        async def trial(n: int) -> bool:
            sessions = await run_n(d.url, ctx.audio, n, ctx.seconds, seed=n)
            r = summarize_sessions(sessions)
            runs[n] = {k: r[k] for k in ("accepted", "p50_ms", "p95_ms", "streams_losing_audio")}
            print(f"  capacity trial {n}: p95 {r['p95_ms']} ms, accepted {r['accepted']}/{n}", flush=True)
            await asyncio.sleep(2.0)
            return realtime(r)

        good, bad, n = 0, None, 32
        while bad is None and n <= 1024:
            if await trial(n):
                good, n = n, 2 * n
            else:
                bad = n
        while bad is not None and bad - good > max(8, good // 8):
            mid = (good + bad) // 2
            if await trial(mid):
                good = mid
            else:
                bad = mid
        ctx.done_with(d)
    ctx.capacity = good
    return {"capacity_streams": good, "first_failing": bad, "trials": runs}


async def scenario_default(ctx: Ctx) -> dict:
    """Out of the box: no config file; 32 greedy real-time streams."""
    with ctx.daemon("default", None) as d:
        out = {}
        for n in (32, 48):  # all at once; a refused client retries as told (the slow start takes 16 a second)
            load = Load(d.url, ctx.audio, seed=n)
            until = time.monotonic() + 15.0
            await asyncio.gather(*(load.persistent(ctx.seconds, until, ramp=0.0) for _ in range(n)))
            r = summarize_sessions([s for s in load.sessions if s.accepted])
            r["refused"] = sum(not s.accepted for s in load.sessions)
            r["refusal_codes"] = summarize_sessions(load.sessions)["refusal_codes"]
            r["peak_concurrent"] = load.peak
            out[n] = {k: r[k] for k in ("accepted", "peak_concurrent", "refused", "refusal_codes", "p50_ms",
                                        "p95_ms", "p99_ms", "streams_losing_audio")}
            out[n]["real_time"] = r["p95_ms"] is not None and r["p95_ms"] <= 320.0
            print(f"  default config, {n} streams: {out[n]}", flush=True)
            await asyncio.sleep(3.0)
        ctx.done_with(d)
    return out


async def overload_round(ctx: Ctx, d: Daemon, k: float, sampler: Sampler, load_window: float = 20.0,
                         seed: int = 0) -> dict:
    """k x capacity clients offered at once (plus the victim); then recovery to full capacity."""
    cap = ctx.capacity or 64
    n = int(round(k * cap))
    load = Load(d.url, ctx.audio, seed)
    alone = 8.0  # the victim alone first: its unloaded lag in the same daemon, minutes apart from nothing
    lags_a = d.lag_buckets("light")
    victim = asyncio.create_task(ctx.victim(load, d.url, alone + load_window + ctx.seconds + 4))
    await asyncio.sleep(alone)
    t_load = time.perf_counter()
    until = time.monotonic() + load_window
    rss_before = d.rss_mb()
    lags0 = d.lag_buckets("light")  # the victim is the light lane's only stream (the load's client has many)
    alone_in_daemon = hist_quantile(lags_a, lags0, 0.95)
    await asyncio.gather(*(load.persistent(ctx.seconds, until, kind="load") for _ in range(n)))
    t_end = time.monotonic()
    in_daemon = hist_quantile(lags0, d.lag_buckets("light"), 0.95)
    # recovery: /readyz back to 200, then as many streams as were admitted at the peak
    ready_after = None
    while time.monotonic() - t_end < 30:
        if d.readyz()[0] == 200:
            ready_after = time.monotonic() - t_end
            break
        await asyncio.sleep(0.1)
    peak = load.peak
    again = Load(d.url, ctx.audio, seed + 1)  # as many clients as were streaming at the peak, retrying as told
    n_rec = max(1, peak - 1)
    await asyncio.gather(*(again.persistent(3.0, t_end + 20.0, ramp=0.0, kind="recovery") for _ in range(n_rec)))
    got = sorted(s.started for s in again.sessions if s.accepted)
    full_after = got[-1] - t_end if len(got) == n_rec else None
    v = await victim
    rec = [s for s in again.sessions if s.accepted]
    await asyncio.sleep(3.0)
    sessions = [s for s in load.sessions if s.kind == "load"]
    r = summarize_sessions(sessions)
    before, during = victim_split(v["partials"], t_load, t_end - time.monotonic() + time.perf_counter())
    r.update(offered=n, k=k, peak_concurrent=peak, victim_p95_ms=ms(pct(during, 95)),
             victim_alone_p95_ms=ms(pct(before, 95)), victim_in_daemon_p95_ms=ms(in_daemon),
             victim_alone_in_daemon_p95_ms=ms(alone_in_daemon),
             victim_ended=v["accepted_ended"],
             victim_audio_lost_s=v["audio_lost_s"],
             readyz_200_after_s=None if ready_after is None else round(ready_after, 2),
             recovery_accepted=len(rec), recovery_offered=n_rec,
             full_capacity_within_s=None if full_after is None else round(full_after, 2),
             # each recovery attempt: seconds after the load, admitted, the refusal's hint and its rule
             recovery_attempts=[[round(s.started - t_end, 2), s.accepted, s.trace.retry_after,
                                 None if s.accepted else refusal_reason(s.trace.error)] for s in again.sessions],
             rss_before_mb=rss_before, rss_peak_mb=sampler.peak_rss(), rss_idle_after_mb=d.rss_mb(),
             children_rss_idle_after_mb=d.children_rss_mb(),
             fds_idle_after=d.fds())
    print(f"  overload {k}x ({n} clients): accepted {r['accepted']} (peak {peak}), refused {r['refused']}, "
          f"p95 {r['p95_ms']} ms, victim p95 {r['victim_p95_ms']} ms (alone {r['victim_alone_p95_ms']} ms, "
          f"in the daemon {r['victim_in_daemon_p95_ms']} / {r['victim_alone_in_daemon_p95_ms']} ms), "
          f"lost {r['audio_lost_s']} s, "
          f"refusal codes {r['refusal_codes']}, ready after {r['readyz_200_after_s']} s, "
          f"recovery {r['recovery_accepted']}/{r['recovery_offered']}, RSS {r['rss_idle_after_mb']} MiB", flush=True)
    return r


async def scenario_overload(ctx: Ctx) -> dict:
    out = {}
    with ctx.daemon("overload", cfg(max_streams=4000)) as d, Sampler(d) as sampler:
        await asyncio.sleep(1.0)
        out["idle_rss_mb"] = d.rss_mb()
        out["idle_children_rss_mb"] = d.children_rss_mb()
        for name, k in ctx.rounds:
            out[name] = await overload_round(ctx, d, k, sampler, seed=hash(name) % 1000)
        ctx.done_with(d)
    if all(f"5x_{i}" in out for i in (1, 2, 3)):
        rss = [out[f"5x_{i}"]["rss_idle_after_mb"] for i in (1, 2, 3)]
        out["rss_rounds_mb"] = rss
        out["children_rss_rounds_mb"] = [out[f"5x_{i}"]["children_rss_idle_after_mb"] for i in (1, 2, 3)]
        out["rss_third_vs_first"] = round(rss[2] / rss[0], 3) if all(rss) else None
    return out


async def scenario_adversary(ctx: Ctx) -> dict:
    with ctx.daemon("adversary", cfg()) as d:
        load = Load(d.url, ctx.audio, seed=5)
        alone, total = 15.0, 50.0  # the victim alone first (its unloaded lag, same daemon and hour), then not
        victim = asyncio.create_task(ctx.victim(load, d.url, total))
        await asyncio.sleep(alone)
        t_adv = time.perf_counter()
        until = time.monotonic() + 25.0
        await asyncio.gather(*(load.persistent(60.0, until, ramp=0.5, addr=ADVERSARY_ADDR, kind="adversary",
                                               method="modified_beam", beam=64, speed=3.9) for _ in range(60)))
        v = await victim
        errors = d.errors()
        ctx.done_with(d)
    a = summarize_sessions([s for s in load.sessions if s.kind == "adversary"])
    before, during = victim_split(v["partials"], t_adv)
    lags = before + during
    r = {"victim": {"partials": len(lags), "p95_ms": ms(pct(lags, 95)), "accepted_ended": v["accepted_ended"],
                    "audio_lost_s": v["audio_lost_s"]}, "adversary": {k: a[k] for k in ("attempts", "accepted", "refused", "refusal_codes",
                                                       "accepted_ended", "refusals_not_1013_with_reason",
                                                       "bad_refusal_examples")},
         "victim_alone_p95_ms": ms(pct(before, 95)), "victim_with_adversary_p95_ms": ms(pct(during, 95)),
         "victim_with_adversary_p50_ms": ms(pct(during, 50)),
         "victim_p95_ms": ms(pct(lags, 95)), "unloaded_victim_p95_ms": ctx.victim_p95_ms, "server_errors": errors}
    print(f"  adversary: victim p95 alone {r['victim_alone_p95_ms']} ms, with the adversary "
          f"{r['victim_with_adversary_p95_ms']} ms (baseline run {ctx.victim_p95_ms}), adversary {r['adversary']}",
          flush=True)
    return r


async def scenario_soak(ctx: Ctx, minutes: float = 3.0) -> dict:
    cap = ctx.capacity or 64
    n = max(1, cap // 2)
    with ctx.daemon("soak", cfg(max_streams=4000)) as d, Sampler(d, every=10.0) as sampler:
        load = Load(d.url, ctx.audio, seed=13)
        until = time.monotonic() + 60 * minutes

        async def worker() -> None:
            await asyncio.sleep(load.rnd.uniform(0, 5))
            while time.monotonic() < until - 20:
                s = await load.stream(min(60.0, until - time.monotonic()))
                if not s.accepted:  # refused: wait as told
                    await asyncio.sleep((s.trace.retry_after or 1.0) * load.rnd.uniform(0.5, 1.5))
        await asyncio.gather(*(worker() for _ in range(n)))
        ctx.done_with(d)
    by_window: dict[int, list[float]] = {}
    t_first = min((s.trace.sent_at[0] for s in load.sessions if s.trace.sent_at), default=0.0)
    for s in load.sessions:
        tr = s.trace
        for arrival, end in tr.partials:
            lag = partial_latency(end, arrival, tr.sent_at, tr.packet_samples, tr.total_samples)
            if lag is not None:
                by_window.setdefault(int((arrival - t_first) // 30), []).append(lag)
    p95_by_30s = [ms(pct(by_window[w], 95)) for w in sorted(by_window)]
    r = summarize_sessions(load.sessions)
    rss = [(round(t), x) for t, x, _ in sampler.samples]
    fds = [(round(t), x) for t, _, x in sampler.samples]
    return {"streams": n, "minutes": minutes, "summary": {k: r[k] for k in ("attempts", "accepted", "p50_ms", "p95_ms",
                                                                            "p99_ms", "audio_lost_s")},
            "p95_ms_by_30s": p95_by_30s, "rss_mb": rss, "fds": fds}


async def scenario_rss(ctx: Ctx) -> dict:
    out = {}
    for name, env in (("glibc_defaults", {}), ("unit_allocator", ALLOCATOR_ENV)):
        with ctx.daemon(f"rss_{name}", cfg(max_streams=4000), env=env) as d, Sampler(d) as sampler:
            await asyncio.sleep(1.0)
            idle, idle_children = d.rss_mb(), d.children_rss_mb()
            rounds, children = [], []  # the daemon's process; its children (the engine processes)
            for i in range(3):
                r = await overload_round(ctx, d, 5, sampler, load_window=12.0, seed=100 + i)
                rounds.append(r["rss_idle_after_mb"])
                children.append(r["children_rss_idle_after_mb"])
            ctx.done_with(d)
        out[name] = {"env": env, "idle_mb": idle, "after_rounds_mb": rounds, "peak_mb": sampler.peak_rss(),
                     "third_vs_first": round(rounds[2] / rounds[0], 3) if all(rounds) else None,
                     "children_idle_mb": idle_children, "children_after_rounds_mb": children,
                     "children_third_vs_first": round(children[2] / children[0], 3) if all(children) else None}
        print(f"  rss {name}: {out[name]}", flush=True)
    return out
