"""streamd.second_pass.worker: the worker thread (bounded queue, rounds of several segments, overload falls back
to the first pass, never loses a final) and the gate that keeps each stream's events in order."""

from __future__ import annotations

import threading
import time

import numpy as np

from fakes import FakeRecognizer
from streamd.events import Done, Final, Partial
from streamd.second_pass.rescore import SecondPass
from streamd.second_pass.worker import OVERLOAD, FinalGate, SecondPassWorker


def pending(stream=1, segment=0):
    return Final(stream, segment, "first", (), 0.0, 1.0, first_pass_text="first", second_pass="pending",
                 audio=np.zeros(16000, np.int16))


def collect():
    got, cond = [], threading.Condition()

    def done(key, final, seconds):
        with cond:
            got.append((key, final, seconds))
            cond.notify_all()

    def wait(n):
        with cond:
            assert cond.wait_for(lambda: len(got) >= n, timeout=20)
        return got
    return done, wait


def test_the_worker_decodes_in_rounds_and_reports_each_final():
    model = FakeRecognizer("second")
    w = SecondPassWorker(SecondPass(model), max_queue=8, max_batch=3, max_wait_s=60)
    done, wait = collect()
    model.gate = threading.Event()
    for i in range(5):
        assert w.submit(i, pending(segment=i), done)
    model.gate.set()
    got = wait(5)
    assert sorted(k for k, _, _ in got) == [0, 1, 2, 3, 4]
    assert all(f.text == "second" and f.pass_no == 2 and s >= 0 for _, f, s in got)
    w.close()


class _Turns(FakeRecognizer):
    """Each call waits for the next of ``turns`` (an Event per call) before it answers."""

    def __init__(self, turns):
        super().__init__("second")
        self.turns = list(turns)

    def recognize(self, audio, hotwords=()):
        if self.turns:
            assert self.turns.pop(0).wait(10)
        return super().recognize(audio, hotwords)


def test_each_final_of_a_round_is_delivered_when_it_is_decoded():
    turns = [threading.Event() for _ in range(3)]
    w = SecondPassWorker(SecondPass(_Turns(turns)), max_queue=8, max_batch=4, max_wait_s=60)
    done, wait = collect()
    assert w.submit("a", pending(), done)  # taken alone; the worker waits in its decode
    time.sleep(0.2)
    assert w.submit("b", pending(), done) and w.submit("c", pending(), done)  # the next round: b and c
    turns[0].set()
    turns[1].set()
    got = wait(2)  # b comes back while c is still being decoded
    assert [k for k, _, _ in got] == ["a", "b"] and all(f.pass_no == 2 for _, f, _ in got)
    turns[2].set()
    assert [k for k, _, _ in wait(3)] == ["a", "b", "c"]
    w.close()


def test_a_full_queue_refuses_and_late_segments_keep_the_first_pass():
    model = FakeRecognizer("second")
    model.gate = threading.Event()
    clock = [0.0]
    w = SecondPassWorker(SecondPass(model), max_queue=2, max_batch=1, max_wait_s=1.0, clock=lambda: clock[0])
    done, wait = collect()
    assert w.submit("a", pending(), done)  # taken by the thread, which waits in the model
    time.sleep(0.2)
    assert w.submit("b", pending(), done) and w.submit("c", pending(), done)
    assert not w.submit("d", pending(), done)  # queue full: the caller keeps the first pass
    clock[0] = 5.0  # b and c have now waited past max_wait_s
    model.gate.set()
    got = {k: f for k, f, _ in wait(3)}
    assert got["a"].pass_no == 2
    assert [(got[k].pass_no, got[k].second_pass, got[k].text) for k in "bc"] == [(1, OVERLOAD, "first")] * 2
    w.close()


def test_the_gate_holds_a_streams_events_behind_its_pending_final():
    submitted = []
    accept = [True]
    skipped = []
    gate = FinalGate(lambda k, f: accept[0] and not submitted.append((k, f)),
                     on_skip=lambda k, f: skipped.append(f.second_pass))
    p = Partial(1, 1, "next")
    assert gate.route(1, Partial(1, 0, "a")) == [(1, Partial(1, 0, "a"))]
    assert gate.route(1, pending(segment=0)) == [] and gate.waiting(1)
    assert gate.route(1, p) == [] and gate.route(1, pending(segment=1)) == [] and gate.route(1, Done(1)) == []
    assert gate.route(2, Partial(2, 0, "other")) == [(2, Partial(2, 0, "other"))]  # other streams pass
    second0 = Final(1, 0, "two", pass_no=2, second_pass="done")
    out = gate.resolved(1, second0)
    assert out == [(1, second0), (1, p)] and gate.waiting(1)  # up to the next pending final, submitted
    assert [f.segment for _, f in submitted] == [0, 1]
    second1 = Final(1, 1, "three", pass_no=2, second_pass="done")
    assert gate.resolved(1, second1) == [(1, second1), (1, Done(1))] and not gate.waiting(1)
    accept[0] = False  # overload: the first pass at once, said so
    (key, f), = gate.route(3, pending(stream=3))
    assert key == 3 and f.pass_no == 1 and f.second_pass == OVERLOAD and f.text == "first" and skipped == [OVERLOAD]
