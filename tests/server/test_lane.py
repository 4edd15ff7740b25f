"""streamd.server.lane: the light lane's engine process gives exactly what the same runner gives in this
process, refuses to start with a clear error, and ends with its pipe.  (On the wire, with the daemon's
routing and a lane that dies mid-stream: tests/server/test_app.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import random_audio
from tests.server.wire import pcm16
from streamd.config import EngineConfig, from_dict
from streamd.engine import Recognizer
from streamd.server.commands import CloseStream, FeedPcm, FeedSamples, FinishStream, OpenStream
from streamd.server.lane import LaneProcess
from streamd.server.runner import EngineRunner

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def script():
    """Cycles of commands: two streams, audio in pieces (bytes and samples), a finish, a close."""
    a, b = random_audio(1.6, seed=21), random_audio(1.1, seed=22)
    cycles = [[OpenStream(1, {"method": "greedy"}, "10.0.0.1"),
               OpenStream(2, {"method": "modified_beam", "beam": 3}, "10.0.0.2")]]
    for i in range(0, a.size, 4000):
        cycles.append([FeedPcm(1, pcm16(a[i:i + 4000]), "s16le"), FeedSamples(2, b[i:i + 4000].astype(np.float32))])
    cycles += [[FinishStream(1), CloseStream(2)]] + [[] for _ in range(8)]
    return cycles


def test_the_lane_process_gives_what_the_runner_gives_here(tiny_ckpt):
    cfg = from_dict(EngineConfig, {"device": "cpu"})
    here = EngineRunner(Recognizer.from_checkpoint(tiny_ckpt, cfg), 4, 60.0)
    lane = LaneProcess(tiny_ckpt, cfg, 4, 60.0)
    seen = []
    try:
        assert lane.alive and lane.pid
        for cmds in script():
            want, got = here.cycle(cmds), lane.cycle(cmds)
            assert got.opened == want.opened and got.acks == want.acks and got.pending == want.pending
            assert [(k, e.to_wire()) for k, e in got.events] == [(k, e.to_wire()) for k, e in want.events]
            assert [b for b, _, _ in got.steps] == [b for b, _, _ in want.steps]
            assert got.audio_seconds == pytest.approx(want.audio_seconds)
            seen += [(k, e.to_wire()["type"]) for k, e in got.events]
        assert (1, "final") in seen and (1, "done") in seen and (2, "partial") in seen
    finally:
        lane.close(timeout=60.0)  # a clean exit, however busy the machine
    assert lane._proc.exitcode == 0 and not lane.alive


def test_a_lane_that_cannot_load_says_why(tmp_path):
    with pytest.raises(RuntimeError, match="light lane could not start.*nope.pt"):
        LaneProcess(str(tmp_path / "nope.pt"), EngineConfig(device="cpu"))


def test_the_main_engine_process_calibrates_runs_nicer_and_takes_the_budget(tiny_ckpt):
    """What the daemon's main engine needs of its process (server.engine_process): the runner's model info
    and capacity calibration from the child, the child ``nice`` steps nicer than this process, and the step
    budget set here applied there (budget 1 with two greedy streams ready: one stream per step)."""
    import os

    from streamd.server.admission import CapacityModel

    cfg = from_dict(EngineConfig, {"device": "cpu"})
    here = EngineRunner(Recognizer.from_checkpoint(tiny_ckpt, cfg), 4, 60.0)
    lane = LaneProcess(tiny_ckpt, cfg, 4, 60.0, name="main engine", nice=3, policy="batch")
    try:
        assert lane.model_info == here.model_info
        assert os.getpriority(os.PRIO_PROCESS, lane.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)
        assert lane.policy_error is None and os.sched_getscheduler(lane.pid) == os.SCHED_BATCH
        model = lane.calibrate()
        assert isinstance(model, CapacityModel) and model.chunk_seconds == here.chunk_seconds
        assert model.per_unit > 0 and model.fixed >= 0
        x = random_audio(1.0, seed=23)
        open_two = [OpenStream(1, {"method": "greedy"}, "10.0.0.1"), OpenStream(2, {"method": "greedy"}, "10.0.0.2")]
        feed = [FeedSamples(1, x.astype(np.float32)), FeedSamples(2, x.astype(np.float32))]
        lane.budget = 1.0
        steps = [b for cmds in (open_two, feed, [], []) for b, _, _ in lane.cycle(cmds).steps]
        assert steps and set(steps) == {1}
        lane.budget = None  # no budget: both streams in every step
        steps = [b for cmds in ([FinishStream(1), FinishStream(2)], [], []) for b, _, _ in lane.cycle(cmds).steps]
        assert 2 in steps
    finally:
        lane.close(timeout=60.0)  # a clean exit, however busy the machine
    assert lane._proc.exitcode == 0


@pytest.mark.parametrize("policy", ["normal", "idle"])
def test_a_lane_process_runs_under_its_scheduling_policy(tiny_ckpt, policy):
    """server.engine_policy and engine_nice: every thread of the child (those its imports started first
    included) under the policy and nice value."""
    import os

    lane = LaneProcess(tiny_ckpt, EngineConfig(device="cpu"), name="main engine", nice=2, policy=policy)
    try:
        want = {"normal": os.SCHED_OTHER, "idle": os.SCHED_IDLE}[policy]
        threads = [int(t) for t in os.listdir(f"/proc/{lane.pid}/task")]
        assert lane.policy_error is None
        assert {os.sched_getscheduler(t) for t in threads} == {want}
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads} == {min(19, os.getpriority(os.PRIO_PROCESS, 0) + 2)}
    finally:
        lane.close()


def test_a_policy_that_cannot_be_set_is_reported_and_the_lane_runs_on(tiny_ckpt, monkeypatch):
    """Where the platform lacks a policy or refuses it, :func:`lower_priority` says why and changes nothing; a
    lane process then runs as it is and carries the reason (the daemon logs it as a warning)."""
    import os

    from streamd.server.lane import lower_priority

    assert lower_priority(0, "normal") is None
    monkeypatch.delattr(os, "SCHED_IDLE")
    assert lower_priority(0, "idle") == "this platform has no SCHED_IDLE"
    monkeypatch.undo()

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert lower_priority(0, "batch") == "SCHED_BATCH: [Errno 1] Operation not permitted"
    monkeypatch.undo()
    lane = LaneProcess(tiny_ckpt, EngineConfig(device="cpu"), name="main engine", policy="nosuch")
    try:
        assert lane.alive and lane.policy_error == "this platform has no SCHED_NOSUCH"
        assert os.sched_getscheduler(lane.pid) == os.SCHED_OTHER
    finally:
        lane.close()


def test_a_main_engine_that_cannot_load_says_so(tmp_path):
    from streamd.model.checkpoint import CheckpointError

    with pytest.raises(RuntimeError, match="main engine could not start: CheckpointError: .*nope.pt") as e:
        LaneProcess(str(tmp_path / "nope.pt"), EngineConfig(device="cpu"), name="main engine")
    assert isinstance(e.value.__cause__, CheckpointError)  # the daemon raises the child's own error


PRIORITY_PROBE = """
import json, os, sys, threading
from streamd.server.lane import raise_priority
done = threading.Event()
t = threading.Thread(target=done.wait)
t.start()  # a thread that exists before: on Linux a nice value is per thread
nice, why = raise_priority(None if sys.argv[1] == "none" else int(sys.argv[1]))
tids = [int(x) for x in os.listdir("/proc/self/task")]
print(json.dumps({"nice": nice, "why": why, "threads": sorted({os.getpriority(os.PRIO_PROCESS, x) for x in tids})}))
done.set()
"""


def _probe(want: str, prefix=(), start_nice: int = 0, rlimit_nice: int | None = None) -> dict:
    """:func:`raise_priority` in a process of its own (never this one's priority), started at nice value
    ``start_nice`` whatever this process's own is (``nice -n 10 pytest``); skipped where going below this
    process's value is not allowed (no CAP_SYS_NICE and too low an RLIMIT_NICE)."""
    import json
    import os
    import resource
    import subprocess
    import sys

    own = os.getpriority(os.PRIO_PROCESS, 0)
    if start_nice < own and os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20 - start_nice:
        pytest.skip(f"this process runs at nice {own}; a probe at nice {start_nice} needs CAP_SYS_NICE or "
                    f"RLIMIT_NICE >= {20 - start_nice}")

    def pre():
        if start_nice != own:
            os.setpriority(os.PRIO_PROCESS, 0, start_nice)  # absolute: the behaviour depends on the start value
        if rlimit_nice is not None:
            resource.setrlimit(resource.RLIMIT_NICE, (rlimit_nice, rlimit_nice))

    r = subprocess.run([*prefix, sys.executable, "-c", PRIORITY_PROBE, want], capture_output=True, text=True,
                       preexec_fn=pre, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_daemon_asks_for_its_priority_on_every_thread_only_when_started_at_zero():
    """server.nice (:func:`raise_priority`): every thread of a process started at 0 goes to the value (a
    positive one needs no right); a process started at another value keeps it; None changes nothing."""
    assert _probe("5") == {"nice": 5, "why": None, "threads": [5]}
    assert _probe("-5", start_nice=3) == {"nice": 3, "why": None, "threads": [3]}  # `nice -n 3`, Nice=3: kept
    assert _probe("none") == {"nice": 0, "why": None, "threads": [0]}


def test_a_priority_the_system_refuses_is_reported_and_nothing_changes():
    """Without CAP_SYS_NICE and with RLIMIT_NICE 0 (an ordinary user), -5 is refused: the process stays at 0 and
    says what it would need; with the right (root here, or RLIMIT_NICE >= 25) every thread goes to -5."""
    import os
    import shutil

    prefix = ()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot drop CAP_SYS_NICE")
        prefix = ("setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice")
    got = _probe("-5", prefix, rlimit_nice=0)
    assert got["nice"] == 0 and got["threads"] == [0]
    assert "needs CAP_SYS_NICE or RLIMIT_NICE >= 25" in got["why"]
    if os.geteuid() == 0:
        assert _probe("-5") == {"nice": -5, "why": None, "threads": [-5]}
