"""The protocol sessions' states as data (streamd.server.states): each table lists every state, the sessions
move only along it, and an illegal transition raises a clear error.  The wire behaviour the transitions
drive is tested in test_protocol.py, test_vosk.py and test_wyoming.py."""

from __future__ import annotations

import pytest

from streamd.config import LimitsConfig
from streamd.events import Done, Error, Final, Partial, WakeWord
from streamd.server.protocol import V1_TRANSITIONS, Close, Finish, Open, V1Session, V1State
from streamd.server.states import IllegalTransition, SessionState, Transitions
from streamd.server.vosk import VOSK_TRANSITIONS, VoskSession, VoskState

MODEL_INFO = {"name": "tiny", "methods": ["greedy", "modified_beam"], "chunk_seconds": 0.32}

try:
    from streamd.server.wyoming import WYOMING_TRANSITIONS, WyomingSession, WyomingState
except ImportError:  # the wyoming package is not installed
    WYOMING_TRANSITIONS = WyomingSession = WyomingState = None

TABLES = [pytest.param(V1_TRANSITIONS, id="v1"), pytest.param(VOSK_TRANSITIONS, id="vosk"),
          pytest.param(WYOMING_TRANSITIONS, id="wyoming",
                       marks=pytest.mark.skipif(WYOMING_TRANSITIONS is None, reason="needs the wyoming package"))]


def edges(table: Transitions) -> set[tuple[str, str]]:
    return {(a.value, b.value) for a, nxt in table.table.items() for b in nxt}


# =========================================================================== the tables themselves


def test_v1_table():
    assert [s.value for s in V1State] == ["await_start", "streaming", "ending", "closed"]
    assert V1Session.state is V1_TRANSITIONS and V1_TRANSITIONS.initial is V1State.AWAIT_START
    assert edges(V1_TRANSITIONS) == {("await_start", "streaming"), ("await_start", "closed"),
                                     ("streaming", "ending"), ("streaming", "closed"), ("ending", "closed")}


def test_vosk_table():
    assert [s.value for s in VoskState] == ["config", "streaming", "ending", "closed"]
    assert VoskSession.state is VOSK_TRANSITIONS and VOSK_TRANSITIONS.initial is VoskState.CONFIG
    assert edges(VOSK_TRANSITIONS) == {("config", "streaming"), ("config", "closed"), ("streaming", "ending"),
                                       ("streaming", "closed"), ("ending", "closed")}


@pytest.mark.skipif(WYOMING_TRANSITIONS is None, reason="needs the wyoming package")
def test_wyoming_table():
    assert [s.value for s in WyomingState] == ["idle", "armed", "streaming", "ending", "failed", "closed"]
    assert WyomingSession.state is WYOMING_TRANSITIONS and WYOMING_TRANSITIONS.initial is WyomingState.IDLE
    closing = {(s, "closed") for s in ("idle", "armed", "streaming", "ending", "failed")}
    assert edges(WYOMING_TRANSITIONS) == closing | {
        ("idle", "armed"), ("armed", "armed"), ("failed", "armed"),  # transcribe / detect
        ("idle", "streaming"), ("armed", "streaming"), ("failed", "streaming"),  # audio-start / first chunk
        ("idle", "failed"), ("armed", "failed"), ("failed", "failed"),  # that audio's format refused
        ("streaming", "armed"),  # audio-start again during a wake stream
        ("streaming", "ending"),  # audio-stop, drain
        ("streaming", "failed"),  # bad audio, rate limit, refused, a fatal engine error
        ("streaming", "idle"), ("ending", "idle"),  # done: the result sent
        ("failed", "idle"),  # audio-stop after a failure
    }


@pytest.mark.parametrize("table", TABLES)
def test_every_table_is_complete_and_ends_in_closed(table):
    states = list(table.states)
    assert set(table.table) == set(states)  # every state has a row
    assert table.final() == {table.states("closed")}  # closed is the only final state, and it is final
    for s in states:  # closed is reachable from every state, directly (a failure, an abort, the grace period)
        assert s.value == "closed" or table.states("closed") in table.allowed(s), s
    reach, todo = {table.initial}, [table.initial]  # every state is reachable from the initial one
    while todo:
        for t in table.allowed(todo.pop()):
            if t not in reach:
                reach.add(t)
                todo.append(t)
    assert reach == set(states)


def test_the_states_read_as_their_names():
    s = V1Session("x", LimitsConfig(), MODEL_INFO)
    assert s.state is V1State.AWAIT_START and s.state == "await_start" and str(s.state) == "await_start"
    assert isinstance(s.state, SessionState) and f"{s.state}" == "await_start"


# =========================================================================== illegal transitions


def test_illegal_transitions_raise_a_clear_error():
    s = V1Session("x", LimitsConfig(), MODEL_INFO)
    with pytest.raises(IllegalTransition, match=r"V1Session: illegal state transition 'await_start' -> 'ending' "
                                                r"\(allowed from 'await_start': closed, streaming\)") as e:
        s.state = V1State.ENDING
    assert (e.value.old, e.value.new) == (V1State.AWAIT_START, V1State.ENDING)
    assert s.state is V1State.AWAIT_START  # unchanged
    with pytest.raises(IllegalTransition, match="'await_start' -> 'bogus'"):
        s.state = "bogus"
    s.state = "streaming"  # a state's name is accepted too, and checked the same way
    assert s.state is V1State.STREAMING
    s.state = V1State.CLOSED
    with pytest.raises(IllegalTransition, match=r"allowed from 'closed': none: it is final"):
        s.state = V1State.STREAMING


def test_vosk_illegal_transition():
    s = VoskSession(LimitsConfig())
    with pytest.raises(IllegalTransition, match="VoskSession: illegal state transition 'config' -> 'ending'"):
        s.state = VoskState.ENDING


@pytest.mark.skipif(WYOMING_TRANSITIONS is None, reason="needs the wyoming package")
def test_wyoming_illegal_transition_and_connection_lost():
    s = WyomingSession(LimitsConfig(), {"name": "tiny"}, "1")
    with pytest.raises(IllegalTransition, match="WyomingSession: illegal state transition 'idle' -> 'ending'"):
        s.state = WyomingState.ENDING
    s.connection_lost()
    assert s.closed and s.state is WyomingState.CLOSED
    s.connection_lost()  # idempotent: the transport may report it twice
    assert s.client_eof() == [] and s.fail("internal", "x") == [] and s.shutdown() == []  # nothing after closed


def test_a_bad_table_is_refused():
    class S(SessionState):
        A = "a"
        CLOSED = "closed"

    with pytest.raises(ValueError, match="must list every state"):
        Transitions("S", S.A, {S.A: {S.CLOSED}})  # no row for closed
    with pytest.raises(ValueError, match="stray"):
        Transitions("S", S.A, {S.A: {"closed"}, S.CLOSED: set()})  # not a member
    t = Transitions("S", S.A, {S.A: {S.CLOSED}, S.CLOSED: ()})
    assert t.check(S.A, "closed") is S.CLOSED and t.final() == {S.CLOSED}


# =========================================================================== the sessions follow their tables


def test_v1_session_walks_its_table():
    s = V1Session("x", LimitsConfig(), MODEL_INFO)
    assert isinstance(s.receive('{"type": "start"}', 0.0)[-1], Open) and s.state is V1State.STREAMING
    assert s.receive('{"type": "eof"}', 0.1) == [Finish()] and s.state is V1State.ENDING
    out = s.event(Final(1, 0, "hi")) + s.event(Done(1))
    assert out[-1] == Close(1000, "done") and s.state is V1State.CLOSED
    assert s.event(Done(1)) == [] and s.fail("internal", "x") == []  # closed stays closed, quietly


def test_vosk_session_walks_its_table():
    s = VoskSession(LimitsConfig())
    assert s.receive('{"config": {"sample_rate": 16000}}', 0.0) == [] and s.state is VoskState.CONFIG
    assert isinstance(s.receive(b"\0\0" * 160, 0.0)[0], Open) and s.state is VoskState.STREAMING
    assert s.receive('{"eof" : 1}', 0.1) == [Finish()] and s.state is VoskState.ENDING
    assert s.applied(1)[0].message == {"partial": ""}
    out = s.event(Error(1, "internal", "boom", fatal=True))
    assert out[-1].code == 1011 and s.state is VoskState.CLOSED


# =========================================================================== random inputs: the table is exact


def _drive(kind: str, rng, limits: LimitsConfig) -> None:
    """One session of ``kind`` fed a random sequence of client messages, engine events and transport calls."""
    import json

    import numpy as np

    def pcm(n: int, channels: int = 1) -> bytes:
        return np.full(n * channels, 1000, "<i2").tobytes()

    engine = [Partial(1, 0, "a b"), Final(1, 0, "a b"), WakeWord(1, "hey stream", 0.9, 0.1, 0.2),
              Error(1, "internal", "x", fatal=True), Error(1, "warning", "x"), Done(1)]
    now = 0.0
    if kind == "v1":
        s = V1Session("x", limits, MODEL_INFO)
        calls = [lambda: s.receive(json.dumps({"type": "start", **({"sample_rate": 5} if rng.random() < .2 else {})}),
                                   now),
                 lambda: s.receive('{"type": "eof"}', now), lambda: s.receive('{"type": "reset"}', now),
                 lambda: s.receive(pcm(rng.randrange(0, 40000)), now)]
    elif kind == "vosk":
        s = VoskSession(limits, 8000)
        calls = [lambda: s.receive('{"config": {"sample_rate": 16000}}', now), lambda: s.receive('{"eof" : 1}', now),
                 lambda: s.receive("garbage", now), lambda: s.receive(pcm(rng.randrange(0, 20000)), now),
                 lambda: s.applied(rng.randrange(0, 3))]
    else:
        from wyoming.asr import Transcribe
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.event import Event as WyEvent
        from wyoming.info import Describe
        from wyoming.wake import Detect

        s = WyomingSession(limits, {**MODEL_INFO, "keywords": ["hey stream"]}, "1", rng.choice(["greedy", "beam"]))

        def chunk():
            ch = rng.choice([1, 1, 2])
            return AudioChunk(rate=rng.choice([16000, 16000, 8000]), width=2, channels=ch,
                              audio=pcm(rng.randrange(0, 20000), ch)).event()

        calls = [lambda: s.receive(Describe().event(), now), lambda: s.receive(Transcribe().event(), now),
                 lambda: s.receive(Detect(names=rng.choice([None, ["hey stream"], ["nope"]])).event(), now),
                 lambda: s.receive(AudioStart(rate=rng.choice([16000, 5]), width=rng.choice([2, 2, 4]),
                                              channels=rng.choice([1, 2, 3])).event(), now),
                 lambda: s.receive(chunk(), now), lambda: s.receive(AudioStop().event(), now),
                 lambda: s.receive(WyEvent(type="bogus", data={}), now),
                 lambda: s.receive(AudioChunk(rate=16000, width=2, channels=1, audio=b"\0").event(), now),
                 lambda: s.frame_error("bad_event", "x"), lambda: s.open_refused("too_many_streams", "x"),
                 lambda: s.client_eof(), lambda: s.connection_lost()]
    calls += [lambda: s.opened(None if rng.random() < .7 else "bad"), lambda: s.event(rng.choice(engine)),
              lambda: s.fail("internal", "x"), lambda: s.timeout(), lambda: s.tick(now + 5 * rng.random()),
              lambda: s.shutdown()]
    for _ in range(rng.randrange(1, 16)):
        now += rng.random()
        rng.choice(calls)()


@pytest.mark.parametrize("table", TABLES)
def test_random_inputs_use_every_transition_and_no_other(table, monkeypatch):
    """Sessions fed random inputs never leave their table (IllegalTransition would fail the test), and
    between them they take every transition it lists: no edge is dead."""
    import random

    taken = set()
    check = Transitions.check

    def recording(self, old, new):
        target = check(self, old, new)
        if self is table:
            taken.add((str(old), str(target)))
        return target

    monkeypatch.setattr(Transitions, "check", recording)
    kind = {"V1Session": "v1", "VoskSession": "vosk", "WyomingSession": "wyoming"}[table.machine]
    rng = random.Random(0)
    limits = LimitsConfig(min_audio_rate=0.5, min_audio_window=2.0, max_realtime=2.0, burst_seconds=1.0)
    for _ in range(3000):
        _drive(kind, rng, limits)
    assert taken == edges(table)
