"""streamd.server.admission: admission by capacity and cost, fair scheduling of bursts, per-client quotas and the
backlog bound.

The rules are sans-I/O and tested directly with time as an argument; then each rule once on loopback with the
tiny random model, with a capacity model whose scale is pinned so that no test depends on how fast this machine
is.  The engine runner's side (the fair pick it steps, the backlog bound it enforces) is tested in
test_runner.py, the feature buffer that follows the backlog back down in tests/audio/test_fbank.py."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect

from helpers import random_audio
from tests.server.wire import drain, http_get, make_app, pcm16, run, until
from streamd.config import AppConfig, ConfigError, LimitsConfig, default_beam, from_dict
from streamd.server.admission import (GROWTH_MIN, HELD_WINDOW, LAG_WINDOW, LIGHT_STREAM_COST, MIN_BATCH_UNITS,
                                      NEAR_LIMIT, NEAR_RETRY_AFTER, NEAR_WAITING, REFILL_RETRIES,
                                      REFILL_RETRY_AFTER, RETRY_AFTER, Admission, CapacityModel, Candidate, Refusal, fair_pick, stream_cost)
from streamd.server.protocol import CLOSE_CODES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHUNK = 0.32


def model(fixed=0.01, per_unit=0.002, window=5.0) -> CapacityModel:
    return CapacityModel(CHUNK, fixed, per_unit, window)


def limits(**kw) -> LimitsConfig:
    return LimitsConfig(**kw)


# ============================================================================= cost and capacity model


def test_stream_cost_by_method_and_beam():
    assert stream_cost("greedy") == stream_cost("ctc_greedy") == stream_cost("greedy", 64) == 1.0
    assert stream_cost("modified_beam", 4) == pytest.approx(1.6)
    assert stream_cost("modified_beam", 64) == pytest.approx(10.6)  # the beam-64 adversary: ~10 greedy streams
    assert stream_cost("beam", 4) < stream_cost("beam", 16) < stream_cost("beam", 64)
    assert stream_cost("beam", 64) > 200  # the plain beam search grows with the square of the beam
    assert 1.0 < stream_cost("ctc_prefix_beam", 64) < 2.0
    assert stream_cost("modified_beam", 0) == stream_cost("modified_beam", 1)  # clamped, never below one hypothesis


def test_capacity_model_prediction_budget_and_calibration():
    m = model(fixed=0.01, per_unit=0.002)
    assert m.step_seconds(0, 0.0) == pytest.approx(0.01)
    assert m.step_seconds(100, 0.0) == pytest.approx(0.21)
    assert m.load(100, 0.0) == pytest.approx(0.21 / CHUNK)
    assert m.budget(0.0) == pytest.approx((CHUNK - 0.01) / 0.002)  # what one step may take in a chunk
    assert m.budget(0.0, 0.5) == pytest.approx((0.5 * CHUNK - 0.01) / 0.002)
    assert m.busy(0.0) == 0.0
    # under a burst: steps of a quarter chunk, longer where the fixed time would eat the admitted load
    assert m.step_budget(0.0, 0.8) == pytest.approx(m.budget(0.0, 0.25))
    slow = model(fixed=0.03, per_unit=0.002)
    f = 1.5 * 0.03 / (0.2 * CHUNK + 0.03)
    assert f > 0.25 and slow.step_budget(0.0, 0.8) == pytest.approx(slow.budget(0.0, f))
    assert model(fixed=0.05, per_unit=0.02).step_budget(0.0, 0.8) == MIN_BATCH_UNITS  # batching still pays
    # from two timed steps; a noisy pair (large batch no slower) falls back to 1/16 of the small step per unit
    c = CapacityModel.from_timings(CHUNK, (1.0, 0.012), (16.0, 0.042))
    assert (c.fixed, c.per_unit) == pytest.approx((0.010, 0.002))
    n = CapacityModel.from_timings(CHUNK, (1.0, 0.016), (16.0, 0.010))
    assert n.per_unit == pytest.approx(0.001) and n.fixed == pytest.approx(0.015)
    for bad in ((-1.0, 0.1), (0.1, 0.0), (float("nan"), 0.1)):
        with pytest.raises(ValueError):
            model(*bad)
    with pytest.raises(ValueError):
        CapacityModel(0.0, 0.01, 0.001)


def test_capacity_model_scale_follows_recent_steps_and_busy_fraction():
    m = model(fixed=0.01, per_unit=0.002, window=5.0)
    for i in range(10):  # steps twice as slow as calibrated (another process took a core)
        m.add_step(10.0 + 0.1 * i, 10, 2 * 0.03)
    assert m.scale(11.0) == pytest.approx(2.0)
    assert m.step_seconds(10, 11.0) == pytest.approx(0.06)
    assert m.budget(11.0) == pytest.approx((CHUNK / 2 - 0.01) / 0.002)
    assert m.busy(11.0) == pytest.approx(0.6 / 5.0)
    # outliers do not move the 75th percentile much; a few slow steps among many normal ones
    for i in range(30):
        m.add_step(12.0 + 0.01 * i, 10, 0.03)
    assert m.scale(12.5) == pytest.approx(2.0) or m.scale(12.5) < 2.0
    assert m.scale(17.0) == pytest.approx(1.0)  # the slow ones left the window
    # no step in the window: the last scale stays, nothing is busy
    assert m.scale(100.0) == pytest.approx(1.0) and m.busy(100.0) == 0.0
    m.add_step(100.0, 0, 1.0)  # a step of no cost (nothing decoded) is ignored
    m.add_step(100.0, 5, float("nan"))
    assert m.busy(100.0) == 0.0
    m.add_step(101.0, 10, 2 * 0.01 + 0.02, steps=2)  # a cycle of two steps: the second's fixed time is known
    assert m.scale(101.0) == pytest.approx(1.0)


# ============================================================================= admission


def test_idle_server_takes_one_stream_then_admits_by_predicted_load():
    m = model(fixed=0.01, per_unit=0.01)  # 0.8 x 0.32 s fits (0.256 - 0.01) / 0.01 = 24.6 units
    a = Admission(limits(max_load=0.8), m)
    assert a.reserve(1, 0.0, 500.0, "10.0.0.1") is None  # idle: even a stream far over capacity
    assert a.check(10.0, 1.0).code == "overloaded"
    a.release(1)
    a.release(1)  # idempotent
    for k in range(24):  # one a second (the slow start is tested below)
        assert a.reserve(k, 10.0 + k, 1.0, "10.0.0.1") is None, k
    t = 40.0
    r = a.reserve(99, t, 1.0, "10.0.0.2")
    assert isinstance(r, Refusal) and r.code == "overloaded" and r.retry_after > 0
    assert "limits.max_load" in r.message and "try again" in r.message
    assert r.rule == "load" and r.reason.startswith("at capacity")
    assert r.wire() == {"type": "error", "code": "overloaded", "message": r.message, "retry_after": r.retry_after}
    assert CLOSE_CODES["overloaded"] == CLOSE_CODES["client_limit"] == CLOSE_CODES["backlog_exceeded"] == 1013
    assert a.overloaded(t) is not None  # /readyz 503
    assert a.check(t, 0.5) is None  # a cheaper stream still fits
    a.release(0)
    assert a.overloaded(t) is None and a.reserve(99, t, 1.0, "10.0.0.2") is None
    # cost-weighted: a beam-64 stream needs room for 10.6 units
    a2 = Admission(limits(max_load=0.8), m)
    a2.reserve(0, 0.0, 1.0, "victim")
    assert a2.check(5.0, stream_cost("modified_beam", 64)) is None
    for k in range(1, 3):
        a2.reserve(k, 5.0 * k, stream_cost("modified_beam", 64), "adversary")
    t = 20.0
    assert a2.check(t, stream_cost("modified_beam", 64)).code == "overloaded"
    assert a2.check(t, 1.0) is None
    assert a2.load(t) == pytest.approx(m.load(a2.total_cost(), t))


def test_retry_hint_is_short_when_the_refusal_is_within_the_scale_noise_and_few_wait():
    """Over the limit by less than NEAR_LIMIT with few refusals lately: 1 s (the next seconds' scale decides);
    further over, or while a crowd is being refused: 3 s."""
    m = model(fixed=0.0, per_unit=0.01)  # load = 0.01 x units / 0.32
    a = Admission(limits(max_load=0.8), m)
    for k in range(25):  # 25 units: load 0.78
        assert a.reserve(k, float(k), 1.0, "c") is None
    t = 40.0
    near = a.check(t, 1.0)  # 26 units: load 0.8125, 1.6 % over
    assert near.code == "overloaded" and near.retry_after == NEAR_RETRY_AFTER == 1.0
    assert "try again in 1 s" in near.message
    assert m.load(28.0, t) <= NEAR_LIMIT * 0.8 < m.load(29.0, t)
    assert a.check(t, 3.0).retry_after == NEAR_RETRY_AFTER  # 28 units: 9.4 % over
    far = a.check(t, 4.0)  # 29 units: 13 % over
    assert far.retry_after == RETRY_AFTER == 3.0 and "try again in 3 s" in far.message
    # a crowd: NEAR_WAITING refusals within LAG_WINDOW -> the long hint even when only marginally over
    t = 100.0
    for i in range(NEAR_WAITING):  # fewer than NEAR_WAITING before each of these
        assert a.check(t + 0.01 * i, 1.0).retry_after == NEAR_RETRY_AFTER, i
    assert a.check(t + 0.2, 1.0).retry_after == RETRY_AFTER
    assert a.overloaded(t + 0.3).retry_after == RETRY_AFTER  # /readyz sees the same, and counts no refusal
    assert a.check(t + 0.2 + LAG_WINDOW + 0.1, 1.0).retry_after == NEAR_RETRY_AFTER  # the crowd has gone


def test_slow_start_and_observed_overload():
    m = model(fixed=0.001, per_unit=0.0001)  # the model would take 2500 units
    a = Admission(limits(), m)
    a.reserve(0, 0.0, 1.0, "c")  # idle: taken
    for k in range(1, int(GROWTH_MIN)):
        assert a.reserve(k, 0.5, 1.0, "c") is None
    r = a.check(0.6, 1.0)  # 16 units admitted within a second
    assert r.code == "overloaded" and r.retry_after == 1.0 and "gradually" in r.message
    assert r.rule == "slow_start" and r.reason.startswith("not at capacity")  # the operator's log says so
    assert a.check(1.6, 1.0) is None  # a second later
    # 16 a second, then a quarter of the demand a second ago: 16 -> 32 -> 48 -> 64 -> 80 -> 100
    for t, n in ((2.0, 16), (3.1, 16), (4.2, 16), (5.3, 16), (6.4, 20)):
        base = len(a.streams)
        for k in range(n):
            assert a.reserve(base + k, t, 1.0, "c") is None, (t, k)
        assert a.check(t, 1.0).code == "overloaded"
    assert len(a.streams) == 100
    # the event loop running late (90th percentile over 2 s, at least 5 samples)
    b = Admission(limits(), m)
    b.reserve(1, 0.0, 1.0, "c")
    for i in range(4):
        b.note_loop_lag(0.3, 10.0 + 0.1 * i)
    assert b.check(10.4, 1.0) is None  # too few samples yet
    for i in range(10):
        b.note_loop_lag(0.3, 10.4 + 0.1 * i)
    r = b.check(11.4, 1.0)
    assert r.code == "overloaded" and "event loop" in r.message and "300 ms" in r.message
    assert r.rule == "loop_lag" and "event loop" in r.reason
    assert b.check(13.5, 1.0) is None  # older than the window
    # live streams' partials late: counted only for streams with a known rate of at most 1.2x real time
    c = Admission(limits(), m)
    for k in (1, 2):
        c.reserve(k, 0.0, 1.0, "c")
    for i in range(21):
        c.note_audio(1, 0.5 * i, 0.5 * i)  # real time
        c.note_audio(2, 4.0 * 0.5 * i, 0.5 * i)  # 4x: its queue is its own doing
    for i in range(10):
        c.note_lag(2, 30.0, 10.0)
    assert c.check(10.0, 1.0) is None
    for i in range(10):
        c.note_lag(1, 0.6, 10.0)
    r = c.check(10.0, 1.0)
    assert r.code == "overloaded" and "0.60 s after their audio" in r.message and r.rule == "partial_lag"
    sig = c.signals(10.0)
    assert sig["streams"] == 2 and sig["late"] == pytest.approx(0.6) and sig["loop_lag"] is None
    assert sig["busy"] == 0.0 and sig["load"] == pytest.approx(m.load(5.0, 10.0))  # 1 + 4 (the 4x stream)


def held_at(a: Admission, n: int, now: float, lag: float) -> None:
    """``n`` live streams (forced in: no slow start) sending in real time for 10 s before ``now``, their partials
    ``lag`` seconds after their audio, and the transport's periodic look (``overloaded``)."""
    for k in range(n):
        a.reserve(k, now - 10.0, 1.0, "c", force=True)
        for i in range(21):
            a.note_audio(k, 0.5 * i, now - 10.0 + 0.5 * i)
    for k in range(n):
        a.note_lag(k, lag, now)
    a.overloaded(now)


def test_nine_beam_streams_at_once_on_an_idle_server_meet_the_slow_start():
    """Issue 47: 9 modified_beam streams (2.2 units each) at one instant on an idle, roomy server: 7 get in, the
    last 2 are refused by the slow start (16 units a second), not by capacity, and get in a second later (the
    refusal's retry_after) -- by design: a client that retries as told is served."""
    m = model(fixed=0.01, per_unit=0.001)  # room for ~240 units
    a = Admission(limits(), m)
    cost = stream_cost("modified_beam")
    got = [a.reserve(k, 0.0, cost, f"c{k}") for k in range(9)]
    refused = [r for r in got if r is not None]
    assert len(refused) == 2 and {r.rule for r in refused} == {"slow_start"} and refused[0].retry_after == 1.0
    assert a.load(0.0) < 0.2  # far from capacity
    assert a.reserve(7, 1.0, cost, "c7") is None and a.reserve(8, 1.0, cost, "c8") is None


def test_slow_start_resumes_above_the_level_seen_on_time():
    m = model(fixed=0.001, per_unit=0.0001)  # the model would take 2500 units
    a = Admission(limits(), m)
    held_at(a, 100, 20.0, lag=0.05)  # 100 streams, partials on time
    assert a.held(20.0) == pytest.approx(100.0) and a.signals(20.0)["held"] == pytest.approx(100.0)
    for k in range(100):
        a.release(k)
    a.reserve(1000, 21.0, 1.0, "c")  # idle: taken
    t = 22.5  # the load is gone: its clients come back, half the held level a second
    for k in range(50):
        assert a.reserve(2000 + k, t, 1.0, "c") is None, k
    assert "gradually" in a.check(t, 1.0).message
    for k in range(50, 99):
        assert a.reserve(2000 + k, t + 1.1, 1.0, "c") is None, k
    r = a.check(t + 1.1, 1.0)  # above it: the slow start again (16 a second, a quarter of the demand)
    assert r.code == "overloaded" and "gradually" in r.message
    assert a.check(t + 2.2, 1.0) is None
    # a host that got twice as slow since then: the held level counts half
    m.add_step(30.0, 100.0, 2 * (m.fixed + m.per_unit * 100))
    assert a.held(30.0) == pytest.approx(50.0)
    # ... but steps that run faster now (a few streams, an idle host) never raise it above the demand seen
    m.add_step(36.0, 10.0, 0.5 * (m.fixed + m.per_unit * 10))
    assert m.scale(36.0) == pytest.approx(0.5)
    assert a.held(36.0) == pytest.approx(100.0) == a.held_demand(36.0)
    # forgotten after HELD_WINDOW seconds
    assert a.held(20.0 + HELD_WINDOW + 0.1) == 0.0
    # late partials, or no partials at all, record nothing: the slow start from the first stream
    late, silent = Admission(limits(), model(fixed=0.001, per_unit=0.0001)), Admission(limits(), model())
    held_at(late, 100, 20.0, lag=0.2)  # more than half a chunk
    for k in range(100):
        silent.reserve(k, 10.0, 1.0, "c", force=True)
    silent.overloaded(20.0)
    for b in (late, silent):
        assert b.held(20.0) == 0.0
        for k in range(100):
            b.release(k)
        b.reserve(1000, 21.0, 1.0, "c")
        n = 0
        while b.reserve(2000 + n, 22.5, 1.0, "c") is None:
            n += 1
        assert n == GROWTH_MIN  # 16 units in a second


def test_the_clients_refilling_a_demand_seen_on_time_get_the_short_hint():
    """The last clients of a load's peak coming back while the steps run slower than at the peak: the load rule
    refuses them, but under a demand the live streams were on time at within HELD_WINDOW (as measured then), and
    on time now, with the shortest retry hint for as many clients as fit under it (each back about every
    REFILL_RETRY_AFTER, and up to REFILL_RETRIES times as often: clients randomize hints), however far over;
    the long one to the rest, above that demand, with late partials, or once forgotten."""
    m = model(fixed=0.0, per_unit=0.01)  # load = 0.01 x units / 0.32 x scale
    a = Admission(limits(max_load=0.8), m)
    held_at(a, 25, 20.0, lag=0.05)  # 25 streams on time (load 0.78)
    assert a.held_demand(20.0) == pytest.approx(25.0)
    for k in range(2):
        a.release(k)

    def on_time(t: float, lag: float = 0.05) -> None:
        for k in range(2, 25):
            a.note_audio(k, 10.0 + (t - 20.0), t)
            a.note_lag(k, lag, t)

    on_time(21.0)
    m.add_step(21.0, 23.0, 1.3 * m.per_unit * 23.0)  # the steps 30 % slower: 24 units are far over the limit
    assert m.load(24.0, 21.0) > NEAR_LIMIT * 0.8
    short = int(REFILL_RETRIES * 2 * LAG_WINDOW / REFILL_RETRY_AFTER)  # 2 places: 16 short hints in LAG_WINDOW
    assert short == 16
    hints = [a.reserve(100 + i, 21.0 + 0.01 * i, 1.0, "c").retry_after for i in range(short + 2)]
    assert hints == [REFILL_RETRY_AFTER] * short + [RETRY_AFTER] * 2
    assert REFILL_RETRY_AFTER < NEAR_RETRY_AFTER < RETRY_AFTER
    on_time(23.5)
    assert a.check(23.5, 1.0).retry_after == REFILL_RETRY_AFTER  # those refusals have left the window
    assert a.check(23.5, 3.0).retry_after == RETRY_AFTER  # 26 units: more than was served on time
    on_time(23.6, lag=0.3)  # late partials: the long hint
    assert a.check(23.6, 1.0).retry_after == RETRY_AFTER
    assert a.held_demand(24.0 + HELD_WINDOW) == 0.0  # forgotten
    m.add_step(27.0, 23.0, m.per_unit * 23.0)  # the slow steps have left the scale's window
    assert a.reserve(200, 27.0, 1.0, "c") is None  # the prediction allows it again: admitted as always


def test_demand_counts_streams_that_send_faster_than_real_time():
    m = model(fixed=0.01, per_unit=0.01)  # 24.6 units fit in 80 % of a chunk
    a = Admission(limits(max_load=0.8), m, window=5.0)
    a.reserve(1, 0.0, 1.0, "files")
    a.reserve(2, 0.0, 1.0, "mic")
    assert a.rate(1, 0.0) == 1.0 and a.demand(0.0) == 2.0
    for i in range(21):  # stream 1 sends 4 s of audio per second, stream 2 pauses after 1 s of real time
        a.note_audio(1, 4.0 * 0.5 * i, 0.5 * i)
    a.note_audio(2, 0.5, 0.5)
    a.note_audio(2, 0.5, 1.5)
    assert a.rate(1, 10.0) == pytest.approx(4.0) and a.rate(2, 10.0) == 1.0  # never below real time
    assert a.demand(10.0) == pytest.approx(5.0)
    fast = Admission(limits(max_load=0.8, max_realtime=4.0), m, window=5.0)  # a file at 12x (flow control)
    fast.reserve(1, 0.0, 1.0, "files")
    for i in range(21):
        fast.note_audio(1, 12.0 * 0.5 * i, 0.5 * i)
    assert fast.rate(1, 10.0) == 4.0  # counted at max_realtime: beyond it, it takes what live streams leave
    a.reserve(30, 10.0, 1.0, "burst")
    a.note_audio(30, 30.0, 10.0)
    a.note_audio(30, 31.0, 10.5)
    assert a.rate(30, 10.5) == 1.0  # under a second known: real time assumed
    a.release(30)
    assert a.rate(1, 16.0) == 1.0  # nothing for longer than the window
    for k in range(3, 23):
        a.reserve(k, 10.0, 1.0, "c", force=True)
    assert "limits.max_load" in a.check(10.0, 1.0).message  # 5 + 20 + 1 units: over, though only 23 streams
    a.note_audio(99, 1.0, 10.0)  # not admitted: ignored
    a.release(1)
    assert a.rate(1, 10.0) == 1.0 and a.check(10.0, 1.0) is None


def test_no_capacity_rule_without_a_model_or_with_max_load_zero():
    a = Admission(limits(), None)
    for k in range(1000):
        assert a.reserve(k, 0.0, 10.0, "c") is None
    assert a.load(0.0) is None and a.overloaded(0.0) is None
    m = model(fixed=1.0, per_unit=1.0)
    b = Admission(limits(max_load=0), m)
    b.reserve(1, 0.0, 1.0, "c")
    assert b.check(0.0, 1.0) is None


def test_per_client_and_per_token_quotas_are_cost_weighted():
    a = Admission(limits(max_cost_per_client=4, max_cost_per_token=3))
    assert a.reserve(1, 0.0, 1.6, "10.0.0.1") is None
    assert a.reserve(2, 0.0, 1.6, "10.0.0.1") is None
    r = a.reserve(3, 0.0, 1.0, "10.0.0.1")
    assert r is not None and r.code == "client_limit" and "10.0.0.1" in r.message and "max_cost_per_client" in r.message
    assert r.rule == "client_limit"
    assert a.reserve(3, 0.0, 1.0, "10.0.0.2") is None  # another address
    assert a.reserve(4, 0.0, stream_cost("modified_beam", 64), "10.0.0.3").code == "client_limit"  # alone over it
    assert a.reserve(5, 0.0, 2.0, "10.0.0.4", token="t1") is None
    r = a.reserve(6, 0.0, 2.0, "10.0.0.5", token="t1")
    assert r.code == "client_limit" and "max_cost_per_token" in r.message and "t1" not in r.message
    assert r.rule == "token_limit"
    assert a.reserve(6, 0.0, 2.0, "10.0.0.5", token="t2") is None
    a.release(1)
    assert a.reserve(7, 0.0, 1.0, "10.0.0.1") is None
    # forced (the microphone, a transport without admission): counted, never refused
    assert a.reserve(8, 0.0, 50.0, "local", force=True) is None and a.client_cost("local") == 50.0
    assert a.reserve(8, 0.0, 2.0, "local", force=True) is None and a.client_cost("local") == 2.0  # replaced


def test_light_lane_takes_the_one_cheap_stream_of_a_client_while_it_has_room():
    a = Admission(limits())
    lane: set[int] = set()

    def opened(key, client, cost):
        assert a.reserve(key, 0.0, cost, client, force=True) is None
        if a.light(key, lane, 4.0):
            lane.add(key)
        return key in lane

    # a default modified beam stream is light, a wider one is not
    assert stream_cost("modified_beam", default_beam("modified_beam")) <= LIGHT_STREAM_COST < stream_cost("modified_beam", 9)
    assert opened(1, "10.0.0.1", 1.0)  # a client's only stream, greedy
    assert not opened(2, "10.0.0.1", 1.0)  # its second: the client is heavy now (the first stays)
    assert not opened(3, "10.0.0.2", stream_cost("modified_beam", 64))  # one stream, but a costly one
    assert opened(4, "10.0.0.3", stream_cost("modified_beam", 4))
    assert not opened(5, "10.0.0.4", 1.5)  # light, but 1 + 1.6 + 1.5 units is over the lane's 4
    assert opened(6, "10.0.0.6", 1.3)  # 3.9 units
    assert not opened(7, "10.0.0.5", 0.2)  # the lane is full
    a.release(1)
    lane.discard(1)
    assert opened(7, "10.0.0.5", 1.0)  # room again
    assert not a.light(99, lane, 4.0)  # not admitted: no lane at all


def test_new_config_keys_are_validated():
    d = LimitsConfig()
    assert (d.max_load, d.max_backlog_seconds, d.max_cost_per_client, d.max_cost_per_token, d.light_lane) == \
        (0.7, 60.0, 0, 0, 4.0)
    assert from_dict(AppConfig, {}).engine.num_threads == 1  # the safe default on a busy host
    for data, path in (({"max_load": 1.5}, "limits.max_load"), ({"max_load": -0.1}, "limits.max_load"),
                       ({"max_backlog_seconds": 0.5}, "limits.max_backlog_seconds"),
                       ({"max_backlog_seconds": 20}, "limits.max_backlog_seconds"),  # under the 30 s burst
                       ({"max_cost_per_client": 0.5}, "limits.max_cost_per_client"),
                       ({"max_cost_per_token": -1}, "limits.max_cost_per_token"),
                       ({"light_lane": 0.5}, "limits.light_lane")):
        with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
            from_dict(AppConfig, {"limits": data})
    ok = from_dict(AppConfig, {"limits": {"max_backlog_seconds": 5, "burst_seconds": 5}})
    assert ok.limits.max_backlog_seconds == 5
    assert from_dict(AppConfig, {"limits": {"max_backlog_seconds": 5, "max_realtime": 0}}).limits.max_realtime == 0


# ============================================================================= fair scheduling


def cand(sid, client, cost=1.0, backlog=0.3, seq=None) -> Candidate:
    return Candidate(sid, client, cost, backlog, sid if seq is None else seq)


def test_fair_pick_takes_everything_that_fits():
    ready = [cand(1, "a"), cand(2, "b"), cand(3, "b")]
    assert fair_pick(ready, 3.0, 256) is None
    assert fair_pick([], 0.0, 256) is None
    assert fair_pick(ready, 100.0, 2) is not None  # max_batch binds


def test_fair_pick_protects_a_light_client_from_a_costly_one():
    victim = cand(1, "victim", 1.0, backlog=0.32)
    adversary = [cand(10 + i, "adversary", 10.6, backlog=5.0 + i) for i in range(60)]
    picked = fair_pick([victim] + adversary, 40.0, 256)
    assert picked[0] == 1  # the client with nothing taken goes first, whatever the other's backlog
    assert len(picked) == 4 and set(picked[1:]) == {69, 68, 67}  # 1 + 3 x 10.6 <= 40: oldest backlogs first
    # equal clients share the budget (water-filling by cost)
    ready = [cand(i, "a") for i in range(10)] + [cand(100 + i, "b") for i in range(10)]
    picked = fair_pick(ready, 8.0, 256)
    assert sum(s < 100 for s in picked) == 4 and sum(s >= 100 for s in picked) == 4
    # within a client the oldest backlog first, ties by admission order
    ready = [cand(1, "a", backlog=0.3), cand(2, "a", backlog=2.0), cand(3, "a", backlog=2.0, seq=0)]
    assert fair_pick(ready, 2.0, 256) == [3, 2]
    # at least one stream, even over the budget
    assert fair_pick([cand(1, "a", 1.0), cand(2, "b", 300.0)], 10.0, 256) == [1]
    assert fair_pick([cand(1, "a", 300.0), cand(2, "b", 300.0)], 1.0, 256) == [1]
    # max_batch caps the step
    assert len(fair_pick([cand(i, str(i)) for i in range(10)], 100.0, 3)) == 3
    # streams on time go first, in a step of their own; then the ones behind, by the same rules
    ready = [cand(1, "victim", 1.0, backlog=0.35), cand(2, "adversary", 10.6, backlog=9.0),
             cand(3, "other", 1.0, backlog=0.5), cand(4, "adversary", 10.6, backlog=0.3)]
    assert fair_pick(ready, 100.0, 256, on_time=0.64) == [1, 3, 4]
    assert fair_pick(ready, 100.0, 256, on_time=None) is None
    assert fair_pick([r for r in ready if r.sid == 2], 1.0, 256, on_time=0.64) == [2]
    assert fair_pick([cand(1, "a", backlog=5.0), cand(2, "b", backlog=6.0)], 100.0, 256, on_time=0.64) is None
    # deterministic
    ready = [cand(i, "abc"[i % 3], 1.0 + (i % 4), backlog=(i * 7) % 5) for i in range(30)]
    assert fair_pick(ready, 20.0, 256) == fair_pick(list(reversed(ready)), 20.0, 256)


# ============================================================================= on the wire


class PinnedModel(CapacityModel):
    """A capacity model whose scale does not follow the (machine-dependent) measured steps."""

    def scale(self, now: float) -> float:
        return 1.0

    def busy(self, now: float) -> float:
        return 0.0


async def first_error(url, start=None, **kw):
    async with connect(url, **kw) as ws:
        if start is not None:
            await ws.send(json.dumps(start))
        msgs = await drain(ws)
    return msgs, ws.close_code


async def ready_stream(url):
    """A v1 stream started with the defaults; asserts the server answered ``ready``."""
    ws = await connect(url)
    await ws.send('{"type": "start"}')
    assert json.loads(await ws.recv())["type"] == "ready"
    return ws


def test_overloaded_refusals_readyz_and_recovery_on_the_wire(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            chunk = app.batcher.runner.chunk_seconds
            # two greedy streams fill 70 % of a chunk, a third would be over the 80 %; nothing measured moves it
            app.admission.model = PinnedModel(chunk, 0.0, 0.35 * chunk)
            app.admission._p90 = lambda d, now: None  # nor the measured lags (this machine)
            url = f"ws://127.0.0.1:{app.port}/v1/stream"
            assert (await http_get(app.port, "/readyz"))[0] == 200
            a = await ready_stream(url)
            b = await ready_stream(url)
            status, hdrs, text = await http_get(app.port, "/readyz")
            assert (status, text, hdrs.get("retry-after")) == (503, b"overloaded\n", str(int(RETRY_AFTER)))
            msgs, code = await first_error(url)  # refused at connect, before its start message
            assert code == 1013 and msgs[0]["code"] == "overloaded" and msgs[0]["retry_after"] == RETRY_AFTER
            await b.send('{"type": "eof"}')
            await drain(b)
            await until(lambda: len(app.admission.streams) == 1)
            assert (await http_get(app.port, "/readyz"))[0] == 200  # capacity is back at once
            # cost-weighted: a beam-64 stream does not fit beside the greedy one, and is refused at its start
            msgs, code = await first_error(url, {"type": "start", "method": "modified_beam", "beam": 64})
            assert code == 1013 and [m["code"] for m in msgs] == ["overloaded"] and "cost 10.6" in msgs[0]["message"]
            c = await ready_stream(url)
            for ws in (a, c):
                await ws.send('{"type": "eof"}')
                assert (await drain(ws))[-1]["type"] == "done"
            await until(lambda: not app.admission.streams)
            text = (await http_get(app.port, "/metrics"))[2].decode()
            assert 'streamd_errors_total{code="overloaded"} 2.0' in text and "streamd_load " in text

    run(body())


def test_client_quota_and_backlog_bound_on_the_wire(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt, limits={"max_cost_per_client": 2, "max_realtime": 0, "max_load": 0,
                                               "max_backlog_seconds": 1.0}) as app:
            url = f"ws://127.0.0.1:{app.port}/v1/stream"
            msgs, code = await first_error(url, {"type": "start", "method": "modified_beam", "beam": 8})
            assert code == 1013 and msgs[0]["code"] == "client_limit" and msgs[0]["retry_after"] > 0
            a = await ready_stream(url)
            b = await ready_stream(url)
            msgs, code = await first_error(url)  # a third greedy stream from 127.0.0.1: over its 2 units
            assert (code, msgs[0]["code"]) == (1013, "client_limit")
            await b.send(pcm16(random_audio(3.0, seed=4)))  # 3 s at once: over the 1 s backlog bound
            msgs = await drain(b)
            assert b.close_code == 1013 and msgs[-1]["code"] == "backlog_exceeded", msgs
            await a.send('{"type": "eof"}')
            assert (await drain(a))[-1]["type"] == "done"
            await until(lambda: not app.admission.streams)

    run(body())
