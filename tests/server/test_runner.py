"""streamd.server.runner: the worker-side engine runner alone (no sockets): keys map to engine streams, a failing
command only fails its stream, the backlog bound, the fair pick under a step budget."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from helpers import random_audio
from tests.server.wire import pcm16
from streamd.config import AppConfig, from_dict
from streamd.engine import Recognizer
from streamd.events import Error, Partial
from streamd.server.commands import FeedPcm, OpenStream
from streamd.server.runner import EngineRunner

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


def test_engine_runner_commands_and_isolation(tiny_ckpt):
    """The worker-side runner alone: keys map to engine streams; a failing command only fails its stream."""
    from streamd.server.app import EngineRunner
    from streamd.server.commands import CloseStream, FeedPcm, FinishStream, OpenStream

    rec = Recognizer.from_checkpoint(tiny_ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    runner = EngineRunner(rec, max_steps=2)
    x = pcm16(random_audio(1.0, seed=3))
    real_accept = rec.accept_pcm

    def flaky_accept(sid, data, fmt):
        if len(data) == 1002:
            raise RuntimeError("boom")
        return real_accept(sid, data, fmt)

    rec.accept_pcm = flaky_accept
    res = runner.cycle([OpenStream(7, {"sample_rate": 16000}), OpenStream(8, {"sample_rate": 16000}),
                        OpenStream(9, {"sample_rate": 5}),
                        FeedPcm(7, x, "s16le", ack=True), FeedPcm(8, x[:1002], "s16le", ack=True),
                        FinishStream(7)])
    assert res.opened[:2] == [(7, None), (8, None)] and res.opened[2][0] == 9 and "sample_rate" in res.opened[2][1]
    assert res.acks == {7: 1, 8: 1} and res.audio_seconds == pytest.approx(1.0)
    errs = [(k, e.code) for k, e in res.events if type(e).__name__ == "Error"]
    assert errs == [(8, "internal")] and not rec.has_stream(2)  # key 8's engine stream was closed
    assert len(res.steps) == 2 and res.pending  # max_steps bounds a cycle
    events = list(res.events)
    while res.pending:
        res = runner.cycle([])
        events += res.events
    kinds = [type(e).__name__ for k, e in events if k == 7]
    assert kinds[-2:] == ["Final", "Done"] and rec.num_streams == 0
    assert runner.cycle([FeedPcm(7, x, "s16le"), CloseStream(8)]).events == []  # gone: no-op


@pytest.fixture
def rec(tiny_ckpt):
    return Recognizer.from_checkpoint(tiny_ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)


def test_runner_ends_a_stream_past_the_backlog_bound(rec):
    runner = EngineRunner(rec, max_steps=1, max_backlog=2.0)
    x = pcm16(random_audio(1.5, seed=1))
    res = runner.cycle([OpenStream(1, {}), OpenStream(2, {}), FeedPcm(1, x, "s16le"),
                        FeedPcm(2, x, "s16le"), FeedPcm(1, x, "s16le")])
    errs = [(k, e) for k, e in res.events if isinstance(e, Error)]
    assert [(k, e.code, e.fatal) for k, e in errs] == [(1, "backlog_exceeded", True)]
    assert "limits.max_backlog_seconds" in errs[0][1].message and "3.0 s" in errs[0][1].message
    assert rec.num_streams == 1  # stream 2 (1.5 s behind) goes on; stream 1's audio is freed
    assert [k for k, _ in runner.cycle([FeedPcm(1, x, "s16le")]).events] == [2]  # key 1 gone: no-op


def test_runner_steps_the_fair_pick_under_a_budget(rec):
    runner = EngineRunner(rec, max_steps=1)
    x = pcm16(random_audio(rec.chunk_frames * rec.frame_shift_s * 4, seed=2))  # 3 chunks ready
    cmds = [OpenStream(1, {"method": "greedy"}, client="victim")]
    cmds += [OpenStream(10 + i, {"method": "modified_beam", "beam": 64}, client="adversary") for i in range(4)]
    cmds += [FeedPcm(k, x, "s16le") for k in (1, 10, 11, 12, 13)]
    runner.budget = 1.0 + 10.6 + 1  # the victim and one adversary stream per step
    res = runner.cycle(cmds)
    stepped = {k for k, e in res.events if isinstance(e, Partial)}
    assert stepped == {1, 10} and res.step_costs == [pytest.approx(11.6)] and res.steps[0][0] == 2
    res = runner.cycle([])  # the victim again, and the adversary stream with the oldest backlog
    assert {k for k, e in res.events if isinstance(e, Partial)} == {1, 11}
    runner.budget = None  # no limit: every ready stream in one step
    res = runner.cycle([])
    assert {k for k, e in res.events if isinstance(e, Partial)} == {1, 10, 11, 12, 13}


def test_streams_behind_are_not_starved_by_streams_on_time(rec):
    """Streams on time go first in a step of their own, but the streams behind get the next step (of their own):
    with a live stream ready at every cycle, a stream behind still advances."""
    runner = EngineRunner(rec, max_steps=1)
    chunk = rec.chunk_frames * rec.frame_shift_s
    runner.budget = 100.0
    res = runner.cycle([OpenStream(1, {}, client="live"), OpenStream(2, {}, client="burst"),
                        FeedPcm(2, pcm16(random_audio(8 * chunk, seed=3)), "s16le")])
    stepped = []
    for i in range(6):  # one chunk of live audio per cycle
        res = runner.cycle([FeedPcm(1, pcm16(random_audio(chunk + (0.05 if i == 0 else 0.0), seed=10 + i)), "s16le")])
        stepped.append({k for k, e in res.events if isinstance(e, Partial)})
    # without the rule the live stream took every step ([{1}] * 6) and the stream behind starved; with it the
    # stream behind gets the step after the on-time one, a step of its own, and then both go on
    assert stepped[:2] == [{1}, {2}], stepped
    assert all(2 in s for s in stepped[2:]), stepped


def test_a_stream_behind_by_its_own_choice_is_owed_no_step():
    """A stream whose audio came 1.5x faster than real time or more, over 2 s or more (a file pushed at full
    speed, an adversary) takes what the on-time streams leave, as before the no-starvation rule."""

    class Ready:  # the two calls _pick makes of the recognizer: which streams are ready, and their backlogs
        model_info = {"chunk_seconds": 0.32}
        config = SimpleNamespace(max_batch=256)
        backlogs = {1: 0.32, 2: 3.0}  # stream 1 on time, stream 2 behind

        def ready_streams(self):
            return [1, 2]

        def backlog(self, sid):
            return self.backlogs[sid]

    runner = EngineRunner(Ready())
    runner.budget = 100.0
    now = time.perf_counter()
    runner._fed = {1: (now - 3.0, 3.0), 2: (now - 3.0, 3.5)}  # both near real time: stream 2 is owed
    assert [runner._pick() for _ in range(4)] == [[1], [2], [1], [2]]
    runner._fed[2] = (now - 1.0, 3.5)  # 3.5x, but over 1 s only: not known yet, still owed
    assert not runner._fast(2, time.perf_counter())
    runner._fed[2] = (now - 3.0, 6.0)  # 2x over 3 s: fast, owed nothing
    assert runner._fast(2, time.perf_counter())
    assert [runner._pick() for _ in range(3)] == [[1], [1], [1]]
