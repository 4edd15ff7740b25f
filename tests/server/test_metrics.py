"""streamd.server.metrics: one registry per server (several in one process never share series), every name
``streamd_``-prefixed, batch steps recorded as histograms and the real-time factor."""

from __future__ import annotations

import pytest

from streamd.server.metrics import CONTENT_TYPE, Metrics


def values(m: Metrics) -> dict[str, float]:
    """The exposition's samples: series (name and labels) -> value."""
    out = {}
    for line in m.render().decode().splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def test_every_series_is_streamd_prefixed_and_documented():
    text = Metrics().render().decode()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names >= {"streamd_active_streams", "streamd_connections_total", "streamd_audio_seconds_total",
                     "streamd_real_time_factor", "streamd_batch_size", "streamd_step_seconds",
                     "streamd_wake_events_total", "streamd_errors_total", "streamd_backlog_seconds", "streamd_load",
                     "streamd_dropped_partials_total", "streamd_flow_held_seconds_total"}
    assert all(n.startswith("streamd_") for n in names)
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")}
    assert names <= helps
    assert CONTENT_TYPE.startswith("text/plain")


def test_servers_in_one_process_do_not_share_series():
    a, b = Metrics(), Metrics()
    a.connections.labels(route="v1").inc()
    a.errors.labels(code="bad_json").inc(2)
    a.audio_seconds.inc(1.5)
    a.active_streams.set(3)
    va, vb = values(a), values(b)
    assert va['streamd_connections_total{route="v1"}'] == 1.0 and va['streamd_errors_total{code="bad_json"}'] == 2.0
    assert va["streamd_audio_seconds_total"] == 1.5 and va["streamd_active_streams"] == 3.0
    assert 'streamd_connections_total{route="v1"}' not in vb and vb["streamd_audio_seconds_total"] == 0.0
    assert vb["streamd_active_streams"] == 0.0


def test_record_step():
    m = Metrics()
    m.record_step(3, 0.02, 0.64)
    m.record_step(1, 0.004, 0.0)  # no audio decoded: the real-time factor keeps the last value
    v = values(m)
    assert v["streamd_batch_size_count"] == 2 and v["streamd_batch_size_sum"] == 4
    assert v['streamd_batch_size_bucket{le="1.0"}'] == 1 and v['streamd_batch_size_bucket{le="4.0"}'] == 2
    assert v["streamd_step_seconds_count"] == 2 and v["streamd_step_seconds_sum"] == pytest.approx(0.024)
    assert v['streamd_step_seconds_bucket{le="0.005"}'] == 1
    assert v["streamd_real_time_factor"] == pytest.approx(0.02 / 0.64)
