"""streamd.server.drain: the sans-I/O drain decisions under load (which streams the grace period can finish),
and the throughput window they are based on.  The drain on the wire: tests/server/test_app.py."""

import pytest

from streamd.server.drain import ThroughputWindow, cannot_finish_message, drain_plan, grace_over_message


def test_drain_plan_and_throughput():
    w = ThroughputWindow(10.0)
    assert w.rate(0.0) is None
    w.add(0.0, 0.5, 2.0)
    w.add(5.0, 0.5, 6.0)
    assert w.rate(5.0) == pytest.approx(8.0)
    w.add(20.0, 1.0, 1.0)  # the old steps leave the window
    assert w.rate(20.0) == pytest.approx(1.0) and w.rate(40.0) is None
    assert drain_plan({1: 50.0, 2: 1.0}, None, 10.0) == set()  # idle engine: no measure, nobody ended
    assert drain_plan({1: 3.0, 2: 4.0}, 1.0, 10.0) == set()  # 7 s fit into 0.8 * 10 s
    # 8 s of budget: the shortest backlogs first (ties: the older key), the rest ended now
    assert drain_plan({1: 5.0, 2: 2.0, 3: 2.0, 4: 4.0, 5: 0.0}, 1.0, 10.0) == {1}
    assert drain_plan({1: 5.0, 2: 3.0, 3: 3.0, 4: 4.0}, 1.0, 10.0) == {1, 4}
    assert drain_plan({3: 3.0, 2: 3.0}, 1.0, 6.0) == {3}  # 4.8 s: one of two equal backlogs, the older
    assert drain_plan({7: 9.0}, 1.0, 10.0) == {7} and drain_plan({}, 1.0, 10.0) == set()


def test_both_drain_errors_give_the_same_reason():
    """Whichever ends a stream (the plan at once, or the end of the grace), the client reads the same reason."""
    early, late, wyoming = cannot_finish_message(12.34), grace_over_message(0.8), grace_over_message()
    for m in (early, late, wyoming):
        assert m.startswith("the server is shutting down and ")
    assert "12.3 s of audio" in early and "(0.8 s)" in late and "(" not in wyoming
