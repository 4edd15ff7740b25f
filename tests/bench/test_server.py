"""``streamd bench server``: latency bookkeeping against slow references, and one real run on loopback."""

from __future__ import annotations

import json
import random
import socket

import numpy as np
import pytest

from helpers import random_audio
from streamd.cli.bench import bench_main as main
from streamd.bench.server import (FBANK_LOOKAHEAD_S, ClientTrace, metrics_url, parse_metrics, partial_latency,
                                  slope_per_minute, summarize, third_p95s)
from helpers import write_wav


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------- pure bookkeeping


def slow_partial_latency(end_s, arrival, sent_at, pkt, total, rate=16000):
    """Walk the packets until the samples sent cover the chunk's last fbank window."""
    need = round(end_s * rate) + round(FBANK_LOOKAHEAD_S * rate)
    if need > total:
        return None
    sent = 0
    for t in sent_at:
        sent = min(total, sent + pkt)
        if sent >= need:
            return arrival - t
    return None


@pytest.mark.parametrize("seed", range(5))
def test_partial_latency_matches_packet_walk(seed):
    rnd = random.Random(seed)
    pkt = rnd.choice([1600, 800, 1234])
    total = rnd.randint(5 * pkt, 40 * pkt)
    n_sent = rnd.randint(1, -(-total // pkt))
    sent_at = sorted(rnd.uniform(0, 10) for _ in range(n_sent))
    for _ in range(50):
        end = round(rnd.randint(1, total // 640 + 2) * 0.04, 2)  # 40 ms frames, wire rounding
        arrival = rnd.uniform(10, 20)
        assert partial_latency(end, arrival, sent_at, pkt, total) == slow_partial_latency(end, arrival, sent_at,
                                                                                            pkt, total)


def test_partial_latency_example():
    # chunk ends at 0.32 s -> needs 0.335 s = 5360 samples -> packet 3 (samples 4800..6400)
    assert partial_latency(0.32, 1.0, [0.1, 0.2, 0.3, 0.4, 0.5], 1600, 8000) == pytest.approx(0.6)
    assert partial_latency(0.5, 1.0, [0.1, 0.2, 0.3, 0.4, 0.5], 1600, 8000) is None  # needs eof padding


@pytest.mark.parametrize("seed", range(4))
def test_slope_matches_polyfit(seed):
    g = np.random.default_rng(seed)
    t = np.sort(g.uniform(0, 300, g.integers(3, 50)))
    y = 40 + 2.5 * t / 60 + g.normal(0, 3, t.size)
    assert slope_per_minute(t, y) == pytest.approx(np.polyfit(t / 60, y, 1)[0], rel=1e-9, abs=1e-9)
    assert slope_per_minute(t[:2], y[:2]) is None
    assert slope_per_minute([5, 5, 5], [1, 2, 3]) is None


@pytest.mark.parametrize("seed", range(4))
def test_third_p95s_match_loops(seed):
    g = np.random.default_rng(seed)
    t = g.uniform(0, 9, 200)
    y = g.uniform(0, 100, 200)
    first, last = third_p95s(t, y, 0.0, 9.0)
    assert first == pytest.approx(np.percentile([v for s, v in zip(t, y) if s < 3.0], 95))
    assert last == pytest.approx(np.percentile([v for s, v in zip(t, y) if s >= 6.0], 95))


def test_parse_metrics_and_url():
    text = ("# HELP streamd_step_seconds Wall time\n# TYPE streamd_step_seconds histogram\n"
            'streamd_step_seconds_bucket{le="0.001"} 0.0\nstreamd_step_seconds_sum 1.25\n'
            "streamd_step_seconds_count 50.0\nstreamd_active_streams 2.0\n")
    m = parse_metrics(text)
    assert m == {"streamd_step_seconds_sum": 1.25, "streamd_step_seconds_count": 50.0, "streamd_active_streams": 2.0}
    assert metrics_url("ws://127.0.0.1:8765/v1/stream?token=x") == "http://127.0.0.1:8765/metrics"
    assert metrics_url("wss://h:1/v1/stream") == "https://h:1/metrics"
    with pytest.raises(ValueError, match="url must start with ws:// or wss://, got 'http://x'"):
        metrics_url("http://x")


def synthetic_trace(index, grow_ms_per_s, base_ms=50.0, seconds=60.0, pkt=1600):
    """A stream whose packets go out on time and whose partials (every 0.32 s) arrive base + grow * t later."""
    total = int(seconds * 16000)
    tr = ClientTrace(index, pkt, total, chunk_seconds=0.32)
    tr.sent_at = [(k + 1) * 0.1 for k in range(total // pkt)]
    for c in range(1, int(seconds / 0.32)):
        end = round(c * 0.32, 2)
        k = (round(end * 16000) + 240 - 1) // pkt
        t_sent = tr.sent_at[k]
        tr.partials.append((t_sent + (base_ms + grow_ms_per_s * t_sent) / 1000, end))
    tr.eof_at, tr.done_at = seconds, seconds + 0.2
    return tr


def test_summarize_flags_growth_and_reads_metrics():
    steady = summarize([synthetic_trace(0, 0.0), synthetic_trace(1, 0.0)], 0.0, 60.0, None, "ws://x",
                       step=(2.0, 100.0), batch=(150.0, 100.0))
    assert steady.p50_ms == pytest.approx(50.0) and steady.p99_ms == pytest.approx(50.0)
    assert steady.final_p50_ms == pytest.approx(200.0) and steady.finals_done == 2
    assert steady.step_ms == pytest.approx(20.0) and steady.steps == 100 and steady.mean_batch == pytest.approx(1.5)
    assert steady.max_slope_ms_per_min == pytest.approx(0.0, abs=1e-6) and steady.latency_grows is False
    assert steady.first_third_p95_ms == pytest.approx(50.0) and steady.last_third_p95_ms == pytest.approx(50.0)
    # one stream falls behind by 10 ms per second sent: 600 ms/min of send time; the slope is against arrival
    # time (arrival = 1.01 x sent + 0.05 s), so 600 / 1.01 ms/min: ~590 ms over the run, more than a 320 ms chunk
    grows = summarize([synthetic_trace(0, 0.0), synthetic_trace(1, 10.0)], 0.0, 60.0, None, "ws://x")
    assert grows.max_slope_ms_per_min == pytest.approx(600.0 / 1.01, rel=1e-6) and grows.latency_grows is True
    # 4 ms per second: ~240 ms over the minute, less than a chunk: not flagged
    slow = summarize([synthetic_trace(0, 4.0)], 0.0, 60.0, None, "ws://x")
    assert slow.max_slope_ms_per_min == pytest.approx(240.0 / 1.004, rel=1e-6) and slow.latency_grows is False
    assert grows.last_third_p95_ms > grows.first_third_p95_ms + 150
    assert grows.step_ms is None and grows.steps == 0


# ----------------------------------------------------------------------------- CLI


@pytest.fixture()
def wavs(tmp_path):
    return [write_wav(tmp_path / f"{i}.wav", random_audio(2.0, seed=i), 16000) for i in range(2)]


def test_bench_server_in_process_json(tiny_ckpt, wavs, capsys):
    assert main(["server", "--model", tiny_ckpt, "--clients", "2", "--seconds", "2", "--threads", "1", "--json",
                 "--audio", *wavs]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    r = json.loads(out[0])
    for k in ("clients", "p50_ms", "p95_ms", "p99_ms", "final_p50_ms", "final_p95_ms", "step_ms",
              "first_third_p95_ms", "last_third_p95_ms", "max_slope_ms_per_min"):
        assert k in r, k
    assert r["clients"] == 2 and r["errors"] == [] and r["finals_done"] == 2
    # the tiny model's chunk is 160 ms: 2 s of audio gives 12 partials per stream covering sent audio
    assert r["chunk_ms"] == pytest.approx(160.0) and r["partials_measured"] == 24
    assert 0 <= r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
    assert 0 <= r["final_p50_ms"] <= r["final_p95_ms"]
    # each stream's 12 chunks need a step each; steps that batch both streams count once
    assert r["step_ms"] > 0 and r["steps"] >= 12
    assert r["first_third_p95_ms"] >= 0 and r["last_third_p95_ms"] >= 0
    assert isinstance(r["max_slope_ms_per_min"], float) and isinstance(r["latency_grows"], bool)


def test_bench_server_text_report(tiny_ckpt, wavs, capsys):
    assert main(["server", "--model", tiny_ckpt, "--clients", "1", "--seconds", "1", "--threads", "1",
                 "--audio", wavs[0]]) == 0
    out = capsys.readouterr().out
    assert "partial latency: p50" in out and "finalization (eof -> done)" in out
    assert "engine step (/metrics):" in out and "above the step time" in out and "p95 first third" in out


def test_bench_server_unreachable_url_fails_clearly(wavs, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["server", "--url", f"ws://127.0.0.1:{port}/v1/stream", "--clients", "2", "--seconds", "1",
                 "--json", "--audio", wavs[0]]) == 1
    r = json.loads(capsys.readouterr().out)
    assert len(r["errors"]) == 2 and "cannot talk to ws://127.0.0.1" in r["errors"][0]
    assert r["p50_ms"] is None


@pytest.mark.parametrize("flags, message", [
    (["--clients", "0"], "--clients must be >= 1, got 0"),
    (["--seconds", "0"], "--seconds must be > 0, got 0.0"),
    (["--duration-minutes", "-1"], "--duration-minutes must be > 0, got -1.0"),
    (["--url", "http://h/v1/stream"], "--url must start with ws:// or wss://, got 'http://h/v1/stream'"),
    (["--audio", "/nonexistent.wav"], "/nonexistent.wav: no such file"),
])
def test_bench_server_usage_errors(flags, message, capsys):
    assert main(["server", *flags]) == 2
    assert message in capsys.readouterr().err


def test_bench_server_bad_model_says_why(wavs, capsys):
    assert main(["server", "--model", "/nonexistent.pt", "--clients", "1", "--seconds", "1", "--audio", wavs[0]]) == 1
    assert "the in-process server failed to start: CheckpointError: /nonexistent.pt: no such checkpoint file" \
        in capsys.readouterr().err
