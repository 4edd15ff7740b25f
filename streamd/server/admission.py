"""Sans-I/O admission by capacity and cost, fair scheduling of bursts, and per-client quotas.

No sockets, no asyncio, no clock: the I/O layer (:mod:`streamd.server.app`)
feeds measurements (each batch step's cost and wall time, with ``now`` from
its monotonic clock) and asks for decisions.

* **Cost.** A stream's cost is its share of a batch step in *units* of one
  greedy stream (:func:`stream_cost`, by search method and beam: the search
  methods' table, :data:`streamd.options.METHODS`), plus
  :data:`SECOND_PASS_COST` when its finals get a second pass
  (:attr:`streamd.options.StreamOptions.cost`; docs/benchmarks.md, "Cost of a
  stream by search").
* **Capacity.** :class:`CapacityModel`: one step's wall time is
  ``scale x (fixed + per_unit x cost)``.  ``fixed`` and ``per_unit`` come
  from a calibration at start (greedy steps of 1 and 16 throwaway streams);
  ``scale`` follows the recent engine cycles, each timed from its start to
  the end of routing its results on the event loop (the 75th percentile of
  measured / calibrated time over a sliding window), so the transport's own
  work per stream and a host that gets busier (another process on the
  cores) lower the capacity within seconds.  Every live stream
  needs one chunk decoded per chunk duration, and a step serves every ready
  stream at once, so the streams stay real time while one step over all of
  them fits in a chunk: the *load* is ``step_seconds(total demand) / chunk``,
  where a stream's demand is its cost times the rate its audio arrives at
  (:meth:`Admission.note_audio`; 1 until a second of it is known, never below
  1: a paused microphone keeps its place).
* **Measured lag.** The model predicts; the transport also reports what
  happens: how late its event loop wakes (:meth:`Admission.note_loop_lag`)
  and each live stream's partial lag, from the arrival of the audio that
  completed a chunk to its partial (:meth:`Admission.note_lag`).  (The share
  of time the engine is busy is no measure of saturation: below it the
  engine runs many small steps back to back, each paying the fixed cost,
  and merges them into larger batches as the load grows.)
* **Admission** (:class:`Admission`): a new stream is refused with
  ``overloaded`` (close 1013, ``retry_after`` seconds)

  - when the model's load with it would exceed ``limits.max_load``;
  - while the event loop runs :data:`LOOP_LAG_LIMIT` late or live streams'
    partials come :data:`LATE_CHUNKS` chunk late (90th percentiles over
    :data:`LAG_WINDOW`);
  - beyond ``max(16, 0.25 x demand)`` cost units admitted a second (the slow
    start, :data:`GROWTH`: the measurements catch up before the next
    streams), above the *held* level only: the largest demand (of streams
    admitted before the lag window) at which the live streams' partials came
    within :data:`HELD_CHUNKS` of a chunk over the last :data:`HELD_WINDOW`
    seconds, rescaled down by how much slower the host runs now (never up),
    is admitted again at up to :data:`HELD_RATE` of it a second (not all at
    one instant, whose streams would step in phase).

  ``retry_after`` is :data:`RETRY_AFTER`, except for a load-rule refusal
  within :data:`NEAR_LIMIT` of the limit while fewer than
  :data:`NEAR_WAITING` such refusals came in the last :data:`LAG_WINDOW`
  (:data:`NEAR_RETRY_AFTER`), and for one below :meth:`Admission.held_demand`
  while the live streams are on time, for up to :data:`REFILL_RETRIES` times
  the refusals that as many clients as would fit under it make waiting the
  hint (:data:`REFILL_RETRY_AFTER`): the last clients of a load's peak get
  in as soon as the first of its streams end, the crowd of an overload keeps
  the long hint.  An idle server always takes one stream.  The figures behind
  each constant: docs/benchmarks.md, "Settings and the measurements behind
  them".  Per-client quotas
  (``limits.max_cost_per_client`` by client address,
  ``limits.max_cost_per_token`` by bearer token, in cost units) give
  ``client_limit`` (1013).  ``/readyz`` answers 503 ``overloaded`` while a
  greedy stream would be refused.
* **Fair share** (:func:`fair_pick`): streams on time (a live stream whose
  chunk just completed) go before streams behind (a burst the admission did
  not foresee, audio sent faster than real time), in steps of their own
  (the engine runner gives the step after such a step to the streams
  behind, unless they send faster than real time by choice, so they are
  never starved); and
  when the ready streams cost more than one step may take
  (:meth:`CapacityModel.step_budget`: a quarter of a chunk's duration), the
  step takes them by per-client water-filling (the client that would have
  taken the least cost in this step goes next) and, within a client, the
  oldest backlog first; the others wait for the next step.  A client that
  opened many costly streams then falls behind alone, and its streams end at
  ``limits.max_backlog_seconds`` (``backlog_exceeded``) rather than holding
  unbounded audio.
* **Light lane** (:meth:`Admission.light`): a step cannot be interrupted, so
  under load a light client's partial waits for the batch step in progress
  (of a heavy client's streams) and then for its own.  The stream of a client that holds no other
  one and costs at most :data:`LIGHT_STREAM_COST` goes to a second engine
  lane (``limits.light_lane`` cost units of them; the daemon runs it in a
  process of its own, :mod:`.lane`) while the lane has room; every stream
  still counts in the one capacity model above.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..config import LimitsConfig
from ..options import SECOND_PASS_COST, stream_cost

__all__ = ["stream_cost", "SECOND_PASS_COST", "CapacityModel", "Refusal", "RULES", "StreamLoad", "Admission", "Candidate", "fair_pick",
           "BURST_STEP", "MIN_BATCH_UNITS", "RETRY_AFTER", "NEAR_LIMIT", "NEAR_WAITING", "NEAR_RETRY_AFTER",
           "REFILL_RETRY_AFTER", "REFILL_RETRIES", "WINDOW",
           "LAG_WINDOW", "LOOP_LAG_LIMIT", "LATE_CHUNKS",
           "GROWTH", "GROWTH_MIN", "HELD_WINDOW", "HELD_RATE", "HELD_CHUNKS", "LIGHT_STREAM_COST"]

WINDOW = 5.0  # seconds of recent cycles behind the scale, and of audio arrivals behind a stream's rate
RETRY_AFTER = 3.0  # seconds a refused client is told to wait when the live streams fill the model (some must end)
NEAR_LIMIT = 1.1  # ... but when the load with it would be at most this x max_load (within the scale's own noise)
NEAR_WAITING = 16  # ... and fewer than this many came in the last LAG_WINDOW (a few clients wait, not a crowd)
NEAR_RETRY_AFTER = 1.0  # ... it is told 1 s (the scale's window moves on; after a load the last of its peak get in)
REFILL_RETRY_AFTER = 0.5  # the hint under a demand held on time lately (Admission.held_demand), on time now ...
REFILL_RETRIES = 2.0  # ... for up to this many times the refusals its clients make when each waits the hint
BURST_STEP = 0.25  # share of a chunk's duration one step may take when more streams are ready (fair_pick)
MIN_BATCH_UNITS = 16.0  # ... but never fewer cost units than this (a batch of 16 greedy streams)
MIN_SCALE, MAX_SCALE = 0.1, 50.0
# observed overload (what the step-time model cannot see: the event loop's own work, other processes)
LAG_WINDOW = 2.0  # seconds of loop-lag and stream-lateness samples
LOOP_LAG_LIMIT = 0.1  # the event loop waking this late (90th percentile): no new streams
LATE_CHUNKS = 1.0  # live streams' (at most 1.2x real time) partials this many chunks late (90th pct.): none
MIN_SAMPLES = 5  # observations needed before an observed signal counts
GROWTH, GROWTH_MIN = 0.25, 16.0  # at most max(16, 0.25 x demand a second ago) cost units admitted per second
HELD_WINDOW = 60.0  # seconds a demand seen on time is remembered: admitted again without the slow start, ...
HELD_RATE = 0.5  # ... at most half of it a second (streams admitted at one instant step in phase: a burst)
HELD_CHUNKS = 0.5  # on time: live streams' partials at most this many chunks late (90th pct.)


# the most a light client's one stream costs: greedy, or modified beam at its default beam (8: 2.2 units)
LIGHT_STREAM_COST = stream_cost("modified_beam")


def _percentile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        raise ValueError("no values")
    pos = (len(s) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class CapacityModel:
    """Wall time of a batch step as a function of its cost: ``scale x (fixed + per_unit x cost)`` seconds.

    ``chunk_seconds``: the audio one step decodes per stream; ``fixed`` / ``per_unit``: the calibration
    (seconds per step, seconds per cost unit).  :meth:`add_step` feeds measured steps; ``scale`` is the
    75th percentile (median under 8 steps) of measured / calibrated time over the last ``window`` seconds,
    and keeps its last value while no step comes."""

    def __init__(self, chunk_seconds: float, fixed: float, per_unit: float, window: float = WINDOW):
        if not chunk_seconds > 0:
            raise ValueError(f"chunk_seconds must be > 0, got {chunk_seconds!r}")
        self.chunk_seconds = float(chunk_seconds)
        self.window = float(window)
        self.fixed = self.per_unit = 0.0
        self.calibrate(fixed, per_unit)
        self._steps: deque[tuple[float, float, float]] = deque()  # (now, cost, seconds)
        self._scale = 1.0

    def calibrate(self, fixed: float, per_unit: float) -> None:
        """Set the calibrated shape (ValueError unless both are finite and ``per_unit`` > 0)."""
        if not (math.isfinite(fixed) and math.isfinite(per_unit) and fixed >= 0 and per_unit > 0):
            raise ValueError(f"need fixed >= 0 and per_unit > 0 seconds, got {fixed!r}, {per_unit!r}")
        self.fixed, self.per_unit = float(fixed), float(per_unit)

    @classmethod
    def from_timings(cls, chunk_seconds: float, small: tuple[float, float], large: tuple[float, float],
                     window: float = WINDOW) -> "CapacityModel":
        """From two measured steps ``(cost, seconds)`` of a small and a large batch; a noisy pair (the large
        batch not slower) falls back to a per-unit time of 1/16 of the small step."""
        (c1, t1), (c2, t2) = small, large
        per_unit = (t2 - t1) / (c2 - c1) if c2 > c1 else 0.0
        per_unit = max(per_unit, t1 / 16, 1e-6)
        fixed = max(0.0, t1 - per_unit * c1)
        return cls(chunk_seconds, fixed, per_unit, window)

    def add_step(self, now: float, cost: float, seconds: float, steps: int = 1) -> None:
        """``steps`` batch steps of ``cost`` units in all (with their overhead: a cycle) took ``seconds`` of
        wall time, ending at ``now``."""
        if cost > 0 and steps >= 1 and seconds >= 0 and math.isfinite(seconds):
            self._steps.append((now, float(cost), float(seconds) - (steps - 1) * self.fixed * self._scale))
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._steps and self._steps[0][0] < now - self.window:
            self._steps.popleft()

    def scale(self, now: float) -> float:
        """How much slower than calibrated the recent steps ran (1: as calibrated)."""
        self._expire(now)
        if self._steps:
            ratios = [s / (self.fixed + self.per_unit * c) for _, c, s in self._steps]
            q = 0.75 if len(ratios) >= 8 else 0.5
            self._scale = min(MAX_SCALE, max(MIN_SCALE, _percentile(ratios, q)))
        return self._scale

    def step_seconds(self, cost: float, now: float) -> float:
        """Predicted wall time of one step over streams costing ``cost`` units."""
        return self.scale(now) * (self.fixed + self.per_unit * max(0.0, cost))

    def load(self, cost: float, now: float) -> float:
        """Predicted step time over ``cost`` units as a fraction of the chunk duration (> 1: behind real time)."""
        return self.step_seconds(cost, now) / self.chunk_seconds

    def budget(self, now: float, load: float = 1.0) -> float:
        """The cost units one step may take and still last at most ``load`` x the chunk duration (>= 0)."""
        return max(0.0, (load * self.chunk_seconds / self.scale(now) - self.fixed) / self.per_unit)

    def step_budget(self, now: float, max_load: float) -> float:
        """Cost units one step may take when more is ready (:func:`fair_pick`): a step of at most
        :data:`BURST_STEP` of a chunk (so a real-time stream's chunk waits about two short steps, not two
        chunk-long ones), or longer where steps that short could not serve ``max_load`` (each step pays the
        fixed time ``a``: steps of a share ``f`` of a chunk ``P`` serve ``(P - a / f) / per_unit`` units per
        chunk, which must exceed the ``(max_load P - a) / per_unit`` admitted; with a 1.5 margin), and at least
        :data:`MIN_BATCH_UNITS` (on a host too slow for short steps, batching still pays)."""
        a = self.scale(now) * self.fixed
        p = self.chunk_seconds
        f = max(BURST_STEP, min(1.0, 1.5 * a / ((1.0 - min(max_load, 0.99)) * p + a)))
        return max(MIN_BATCH_UNITS, self.budget(now, f))

    def busy(self, now: float) -> float:
        """Share of the last ``window`` seconds spent in the measured steps (for logs: not a saturation measure)."""
        self._expire(now)
        return min(1.0, sum(s for _, _, s in self._steps) / self.window)


# the rule behind a refusal (Refusal.rule) -> what it means, for the operator's log
RULES = {
    "load": "at capacity: with one more stream the live streams' predicted decoding time would exceed limits.max_load",
    "loop_lag": f"at capacity: the event loop wakes up over {1000 * LOOP_LAG_LIMIT:.0f} ms late (90th percentile), "
                f"it cannot serve more clients",
    "partial_lag": f"at capacity: the live streams' partials come over {LATE_CHUNKS:g} chunk after their audio "
                   f"(90th percentile)",
    "slow_start": f"not at capacity, taking on streams gradually (slow start: at most max({GROWTH_MIN:g}, "
                  f"{GROWTH:g} x the demand) cost units a second above the load held lately); clients retry in 1 s",
    "client_limit": "a client address holds its limits.max_cost_per_client",
    "token_limit": "a bearer token holds its limits.max_cost_per_token",
}


@dataclass(frozen=True)
class Refusal:
    """Why a stream is not admitted: ``code`` (``overloaded`` or ``client_limit``, close 1013), a message
    saying what to do, ``retry_after`` seconds, and the ``rule`` that refused it (a key of :data:`RULES`)."""

    code: str
    message: str
    retry_after: float = RETRY_AFTER
    rule: str = "load"

    @property
    def reason(self) -> str:
        """The rule in words (for the operator's log)."""
        return RULES.get(self.rule, self.rule)

    def wire(self) -> dict:
        """The v1 ``error`` message."""
        return {"type": "error", "code": self.code, "message": self.message, "retry_after": self.retry_after}


@dataclass(frozen=True)
class StreamLoad:
    """An admitted stream: who opened it, what it costs, and its admission order."""

    client: str
    token: str | None
    cost: float
    seq: int


class Admission:
    """The admitted streams and the rules for one more (:meth:`check`, :meth:`reserve`, :meth:`release`).

    ``model`` None (or ``limits.max_load`` 0): no capacity rule, only the quotas."""

    def __init__(self, limits: LimitsConfig, model: CapacityModel | None = None, window: float = WINDOW):
        self.limits = limits
        self.model = model
        self.window = window
        self.streams: dict[int, StreamLoad] = {}
        self._audio: dict[int, deque[tuple[float, float]]] = {}  # key -> (now, audio seconds so far)
        self._late: deque[tuple[float, float]] = deque()  # (now, seconds) partial lags of live streams
        self._loop_lag: deque[tuple[float, float]] = deque()  # (now, seconds late)
        self._admitted: deque[tuple[float, float, int]] = deque()  # (now, cost, key) of the last window's admissions
        self._held: deque[tuple[float, float]] = deque()  # (now, demand x scale) seen on time; units decreasing
        self._held_demand: deque[tuple[float, float]] = deque()  # (now, demand) seen on time; decreasing
        self._refused: deque[tuple[float, float]] = deque()  # (now, load with the stream) of the load rule's refusals
        self._seq = 0

    # ----------------------------------------------------------------- demand

    def note_audio(self, key: int, total_seconds: float, now: float) -> None:
        """Stream ``key`` has received ``total_seconds`` of audio by ``now`` (the transport calls this as audio
        arrives; the rate over the last window scales the stream's demand)."""
        if key not in self.streams:
            return
        h = self._audio.setdefault(key, deque())
        h.append((now, total_seconds))
        while len(h) > 2 and h[1][0] <= now - self.window:
            h.popleft()

    def _measured_rate(self, key: int, now: float) -> float | None:
        """Audio seconds per second over about the last window (None: under a second of history, or a pause
        longer than the window)."""
        h = self._audio.get(key)
        if not h:
            return None
        t_end, a_end = h[-1]
        if now - t_end > self.window:
            return None
        t0, a0 = h[0]
        if t_end - t0 < 1.0:
            return None
        return (a_end - a0) / max(t_end - t0, now - t0)

    def rate(self, key: int, now: float) -> float:
        """Seconds of audio per second of wall time stream ``key`` sent over about the last window, at least 1
        (1 until a second of its history is known, and after a pause longer than the window) and at most
        ``limits.max_realtime`` (when set): a stream sent faster than that is paced by flow control
        (:mod:`.flow`) and decoded with what the live streams leave (:func:`fair_pick`), so it does not hold
        more of the capacity than a stream at that rate."""
        r = self._measured_rate(key, now)
        r = 1.0 if r is None else max(1.0, r)
        cap = self.limits.max_realtime
        return min(r, max(1.0, cap)) if cap > 0 else r

    # ----------------------------------------------------------------- observed overload

    def note_lag(self, key: int, lag: float, now: float) -> None:
        """A partial of stream ``key`` went out ``lag`` seconds after the audio that completed its chunk
        arrived.  Counted for live streams only (a known rate of at most 1.2x real time: audio sent faster
        queues by the client's choice)."""
        r = self._measured_rate(key, now)
        if key in self.streams and r is not None and r <= 1.2:
            self._late.append((now, lag))
        self._trim(self._late, now)


    def note_loop_lag(self, lag: float, now: float) -> None:
        """The transport's event loop woke ``lag`` seconds after it was due (its own saturation)."""
        self._loop_lag.append((now, lag))
        self._trim(self._loop_lag, now)

    @staticmethod
    def _trim(d: deque, now: float) -> None:
        while d and d[0][0] < now - LAG_WINDOW:
            d.popleft()

    def _p90(self, d: deque, now: float) -> float | None:
        self._trim(d, now)
        if len(d) < MIN_SAMPLES:
            return None
        return _percentile([v for _, v in d], 0.9)

    # ----------------------------------------------------------------- sums

    def total_cost(self) -> float:
        return sum(s.cost for s in self.streams.values())

    def demand(self, now: float) -> float:
        """Cost units per chunk duration the admitted streams ask of the engine: cost x arrival rate."""
        return sum(s.cost * self.rate(k, now) for k, s in self.streams.items())

    def client_cost(self, client: str) -> float:
        return sum(s.cost for s in self.streams.values() if s.client == client)

    def token_cost(self, token: str) -> float:
        return sum(s.cost for s in self.streams.values() if s.token == token)

    def load(self, now: float) -> float | None:
        """Predicted load of the admitted streams (None without a capacity model)."""
        if self.model is None:
            return None
        return self.model.load(self.demand(now), now)

    # ----------------------------------------------------------------- decisions

    def check(self, now: float, cost: float, client: str | None = None, token: str | None = None) -> Refusal | None:
        """Would a stream costing ``cost`` units, opened by ``client`` (address) with ``token``, be admitted?"""
        lim = self.limits
        if client is not None and lim.max_cost_per_client:
            used = self.client_cost(client)
            if used + cost > lim.max_cost_per_client + 1e-9:
                return Refusal("client_limit", f"client {client} already uses {used:g} of its "
                                               f"{lim.max_cost_per_client:g} stream units (limits.max_cost_per_client; "
                                               f"this stream costs {cost:g}: "
                                               f"a greedy stream is 1); close a stream or try again later",
                               rule="client_limit")
        if token is not None and lim.max_cost_per_token:
            used = self.token_cost(token)
            if used + cost > lim.max_cost_per_token + 1e-9:
                return Refusal("client_limit", f"this token already uses {used:g} of its {lim.max_cost_per_token:g} "
                                               f"stream units (limits.max_cost_per_token; this stream costs {cost:g}: "
                                               f"a greedy stream is 1); close a stream or try again later",
                               rule="token_limit")
        return self._capacity(now, cost, count=True)

    def _capacity(self, now: float, cost: float, count: bool = False) -> Refusal | None:
        """The capacity rules for a stream of ``cost`` units; ``count``: a refusal by the load rule is given to a
        client (counted for :data:`NEAR_WAITING`; /readyz asks without counting)."""
        model, max_load = self.model, self.limits.max_load
        if model is None or not max_load or not self.streams:
            return None  # no rule, or an idle server: one stream is always taken
        demand = self.demand(now)
        self._trim_admitted(now)
        recent = sum(c for t, c, k in self._admitted if t > now - 1.0 and k in self.streams)
        lag = self._p90(self._loop_lag, now)
        late = self._p90(self._late, now)
        lag_bad = lag is not None and lag > LOOP_LAG_LIMIT
        late_bad = late is not None and late > LATE_CHUNKS * model.chunk_seconds
        on_time = late is not None and late <= HELD_CHUNKS * model.chunk_seconds and not lag_bad
        if on_time:
            settled = sum(c for t, c, k in self._admitted if t > now - LAG_WINDOW - 1.0 and k in self.streams)
            self._note_held(now, demand - settled, model.scale(now))  # what the lags measured

        load = model.load(demand + cost, now)
        if load > max_load:
            self._trim(self._refused, now)
            near = load <= NEAR_LIMIT * max_load and len(self._refused) < NEAR_WAITING
            # refilling: under a demand served on time lately and on time now, the shortest hint to as many
            # clients as would fit it, each coming back every REFILL_RETRY_AFTER and, as clients randomize a
            # hint (commonly from half of it), up to REFILL_RETRIES times as often (the last clients of a load's
            # peak: their own return makes the steps slower for a few seconds, and room frees as the first
            # of them end; a crowd beyond them waits longer)
            gap = self.held_demand(now) - demand
            refills = REFILL_RETRIES * gap * LAG_WINDOW / REFILL_RETRY_AFTER  # refusals in LAG_WINDOW
            refill = on_time and cost <= gap and len(self._refused) < refills
            wait = REFILL_RETRY_AFTER if refill else NEAR_RETRY_AFTER if near else RETRY_AFTER
            if count:
                self._refused.append((now, load))
            return Refusal("overloaded", f"server is at capacity: with this stream (cost {cost:g}; a greedy stream "
                                         f"is 1) the {len(self.streams)} live streams would need {100 * load:.0f} % "
                                         f"of real time to decode (limit {100 * max_load:.0f} %, limits.max_load); "
                                         f"try again in {wait:g} s or use another server", retry_after=wait,
                           rule="load")
        if lag_bad:
            return Refusal("overloaded", f"server is at capacity: its event loop runs {1000 * lag:.0f} ms late; "
                                         f"try again in {LAG_WINDOW:g} s or use another server", retry_after=LAG_WINDOW,
                           rule="loop_lag")
        if late_bad:
            return Refusal("overloaded", f"server is at capacity: live streams' partials come {late:.2f} s after "
                                         f"their audio; try again in {LAG_WINDOW:g} s or use another server",
                           retry_after=LAG_WINDOW, rule="partial_lag")
        base = demand - recent  # what was there a second ago
        held = self.held(now)
        if recent + cost > max(GROWTH_MIN, GROWTH * base, min(held - base, HELD_RATE * held)):
            return Refusal("overloaded", f"server is taking on streams gradually ({recent:g} cost units in the last "
                                         f"second; a greedy stream is 1): try again in 1 s", retry_after=1.0,
                           rule="slow_start")
        return None

    def _note_held(self, now: float, demand: float, scale: float) -> None:
        """The live streams were on time at ``demand`` cost units, with the model's ``scale`` then."""
        for d, value in ((self._held, demand * scale), (self._held_demand, demand)):
            while d and d[-1][1] <= value:  # a sliding window's maximum: newer and at least as large wins
                d.pop()
            d.append((now, value))

    @staticmethod
    def _held_max(d: deque, now: float) -> float:
        """The largest value of a held record (a sliding window's maximum) in the last :data:`HELD_WINDOW`."""
        while d and d[0][0] < now - HELD_WINDOW:
            d.popleft()
        return d[0][1] if d else 0.0

    def held_demand(self, now: float) -> float:
        """The largest demand (cost units) the live streams were on time at in the last :data:`HELD_WINDOW`
        seconds, as it was (not rescaled; 0: none known)."""
        return self._held_max(self._held_demand, now)

    def held(self, now: float) -> float:
        """The largest demand (cost units, at today's scale) seen on time in the last :data:`HELD_WINDOW`
        seconds: admitted again without the slow start (0: none known).  Rescaled down when the host runs
        slower now, never above :meth:`held_demand` (the steps of a lightly loaded host run faster per stream
        than at that demand, so a scale measured on a few streams would overstate it)."""
        units = self._held_max(self._held, now)
        if not units or self.model is None:
            return 0.0
        return min(units / self.model.scale(now), self.held_demand(now))

    def _trim_admitted(self, now: float) -> None:
        while self._admitted and self._admitted[0][0] <= now - self.window:
            self._admitted.popleft()

    def signals(self, now: float) -> dict:
        """What the capacity rule sees now (for logs and metrics)."""
        out = {"streams": len(self.streams), "demand": self.demand(now)}
        if self.model is not None:
            out.update(load=self.model.load(out["demand"], now), scale=self.model.scale(now),
                       busy=self.model.busy(now))
        out.update(loop_lag=self._p90(self._loop_lag, now), late=self._p90(self._late, now), held=self.held(now))
        return out

    def overloaded(self, now: float) -> Refusal | None:
        """The capacity rule for one more greedy stream (``/readyz``: 503 while not None)."""
        return self._capacity(now, 1.0)

    def reserve(self, key: int, now: float, cost: float, client: str = "", token: str | None = None,
                force: bool = False) -> Refusal | None:
        """Admit stream ``key`` (or say why not); ``force``: count it without a check (the microphone, a
        transport without admission).  Reserving a key again replaces its entry."""
        if not force:
            refusal = self.check(now, cost, client, token)
            if refusal is not None:
                return refusal
        self.streams.pop(key, None)
        self._seq += 1
        self.streams[key] = StreamLoad(client, token, float(cost), self._seq)
        if not force:
            self._admitted.append((now, float(cost), key))
        return None

    def release(self, key: int) -> None:
        """Stream ``key`` ended (idempotent)."""
        self.streams.pop(key, None)
        self._audio.pop(key, None)

    def light(self, key: int, lane: Iterable[int], lane_cost: float) -> bool:
        """Admitted stream ``key`` belongs in the light lane (``limits.light_lane``): its client holds no
        other stream, it costs at most :data:`LIGHT_STREAM_COST` units, and with the lane's streams ``lane``
        (keys) it costs at most ``lane_cost`` units."""
        load = self.streams.get(key)
        if load is None or load.cost > LIGHT_STREAM_COST:
            return False
        if any(k != key and s.client == load.client for k, s in self.streams.items()):
            return False
        held = sum(self.streams[k].cost for k in lane if k in self.streams and k != key)
        return held + load.cost <= lane_cost


# --------------------------------------------------------------------------- fair scheduling


@dataclass(frozen=True)
class Candidate:
    """A stream with a chunk ready: engine id, client, cost units, undecoded seconds, admission order."""

    sid: int
    client: str
    cost: float
    backlog: float
    seq: int


def fair_pick(ready: Iterable[Candidate], budget: float, max_batch: int, on_time: float | None = None
              ) -> list[int] | None:
    """The streams of the next step, or None for all of them (their cost fits ``budget`` and ``max_batch``).

    ``on_time``: a stream whose backlog is at most this many seconds is on time (a live stream's chunk just
    completed); while one is ready, the streams behind it (catching up after a burst, or sent faster than
    real time) wait for a step of their own, so that an on-time stream never waits for their work more
    than the one step already running.

    Over the budget: per-client water-filling (fair queueing by cost): the client that would have taken the
    least cost in this step with its next stream goes next (ties: the older backlog, then the older stream,
    then the client name); a client's next stream is its oldest backlog (ties: admitted first); a client
    whose next stream does not fit the budget left is done for this step.  At least one stream is always
    taken."""
    cands = list(ready)
    if not cands:
        return None
    subset = False
    if on_time is not None:
        timely = [c for c in cands if c.backlog <= on_time]
        if timely and len(timely) < len(cands):
            cands, subset = timely, True
    if len(cands) <= max_batch and sum(c.cost for c in cands) <= budget:
        return [c.sid for c in cands] if subset else None
    queues: dict[str, deque[Candidate]] = {}
    for c in sorted(cands, key=lambda c: (-c.backlog, c.seq, c.sid)):
        queues.setdefault(c.client, deque()).append(c)
    taken: dict[str, float] = {k: 0.0 for k in queues}
    left = budget
    out: list[int] = []
    while queues and len(out) < max_batch:
        client = min(queues, key=lambda k: (taken[k] + queues[k][0].cost, -queues[k][0].backlog, queues[k][0].seq, k))
        head = queues[client][0]
        if out and head.cost > left:
            del queues[client]
            continue
        queues[client].popleft()
        if not queues[client]:
            del queues[client]
        out.append(head.sid)
        taken[client] += head.cost
        left -= head.cost
    return out
