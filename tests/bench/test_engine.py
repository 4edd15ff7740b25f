"""The engine benchmark runs end to end and reports every field (no timing assertions)."""

import json

import pytest
from pathlib import Path

from helpers import random_audio, write_wav
from streamd.cli.bench import bench_main as main


def test_bench_engine_json(tiny_ckpt, tmp_path, capsys):
    wavs = [write_wav(tmp_path / f"{i}.wav", random_audio(1.0, seed=i), 16000) for i in range(2)]
    assert main(["engine", "--model", tiny_ckpt, "--streams", "1,3", "--seconds", "1.0", "--json",
                 "--audio", *wavs]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    per_n, summary = rows[:-1], rows[-1]
    assert [r["streams"] for r in per_n] == [1, 3]
    for r in per_n:
        for k in ("streams", "method", "device", "rtf", "p50_ms", "p95_ms", "p99_ms", "realtime", "batched_speedup"):
            assert k in r
        assert r["method"] == "greedy" and r["device"] == "cpu" and r["rtf"] > 0
    assert summary["max_realtime_streams"] in (0, 1, 3)
    assert summary["single_seconds"] == 1.0 and summary["encoder"] == "traced"


def test_bench_engine_eager_encoder(tiny_ckpt, tmp_path, capsys, monkeypatch):
    """--eager-encoder builds every timed Recognizer with engine.trace_encoder false (the side-by-side run)."""
    from streamd import engine

    seen = []
    real = engine.Recognizer.from_checkpoint.__func__

    def spy(cls, path, config=None):
        seen.append(config.trace_encoder)
        return real(cls, path, config)

    monkeypatch.setattr(engine.Recognizer, "from_checkpoint", classmethod(spy))
    wavs = [write_wav(tmp_path / "0.wav", random_audio(1.0), 16000)]
    assert main(["engine", "--model", tiny_ckpt, "--streams", "2", "--seconds", "1.0", "--json", "--audio", *wavs,
                 "--eager-encoder"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["encoder"] == "eager"
    assert seen and not any(seen)


def test_bench_engine_single_seconds(tiny_ckpt, tmp_path, capsys):
    """Shorter clips for the throughput runs are taken; a value out of (0, --seconds] is a clear error."""
    wavs = [write_wav(tmp_path / "0.wav", random_audio(1.0), 16000)]
    args = ["engine", "--model", tiny_ckpt, "--streams", "2", "--seconds", "1.0", "--json", "--audio", *wavs]
    assert main(args + ["--single-seconds", "0.5"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[-1]["single_seconds"] == 0.5 and rows[0]["throughput_single"] > 0
    assert main(args + ["--single-seconds", "2"]) == 2
    assert "--single-seconds must be in (0, --seconds]" in capsys.readouterr().err


def test_bench_default_audio_is_the_shipped_samples_only():
    """Nothing outside the package is read: the dev set beside the checkout (if any) is not the default."""
    from streamd import paths
    from streamd.paths import default_samples

    files = paths.default_bench_audio()
    assert files == sorted(str(p) for p in default_samples().parent.glob("*.wav")) and len(files) == 6
    root = Path(paths.__file__).resolve().parent
    assert all(Path(f).resolve().is_relative_to(root) for f in files)


def test_bench_host_overhead_json(capsys):
    """--host-overhead: one row per method, stream count and partials setting, each with its per-stream-step
    figure and the tiny model's emission rate (it runs the real searches: tokens come out)."""
    assert main(["engine", "--host-overhead", "--streams", "2,3", "--seconds", "0.7", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["method"], r["streams"], r["partials"]) for r in rows] == [
        (m, n, p) for m in ("greedy", "modified_beam") for n in (2, 3) for p in (True, False)]
    for r in rows:
        assert r["us_per_stream_step"] > 0 and r["steps"] >= 1 and r["stream_steps"] >= r["streams"]
        assert r["cpu_us_per_stream_step"] > 0
        assert r["tokens_per_frame"] >= 0
        parts = [r[k] for k in ("front_end_us", "model_us", "search_us", "host_us")]
        assert all(p >= 0 for p in parts) and r["shipped_front_end_us"] > 0
        assert sum(parts) == pytest.approx(r["cpu_us_per_stream_step"], abs=0.01)  # the parts of the whole
    assert any(r["tokens_per_frame"] > 0 for r in rows)


def test_bench_host_overhead_phase_groups():
    """--phases 2: each step takes about half the streams (their chunks fall in two groups), and every stream
    still decodes its audio."""
    from streamd.bench.engine import bench_host_overhead

    whole, = bench_host_overhead([6], ("greedy",), seconds=1.0, partials=(False,))
    rows = bench_host_overhead([6], ("greedy",), seconds=1.0, partials=(False,), phases=2)
    r, = rows
    assert r.phases == 2 and whole.phases == 1
    assert r.stream_steps == whole.stream_steps  # the same chunks decoded
    assert r.steps > whole.steps and r.stream_steps / r.steps < 6
    with pytest.raises(ValueError, match="phases"):
        bench_host_overhead([2], ("greedy",), seconds=0.5, phases=0)


def test_tiny_model_has_the_shipped_interfaces():
    from streamd.bench.engine import tiny_model
    from streamd.model.checkpoint import load_checkpoint
    from streamd.paths import default_model_path

    tiny, shipped = tiny_model(), load_checkpoint(default_model_path())
    assert tiny.tokens.tokens == shipped.tokens.tokens
    ft, fs = tiny.model.cfg.fbank, shipped.model.cfg.fbank  # the same frames from the same samples; fewer bins
    assert (ft.sample_rate, ft.frame_shift) == (fs.sample_rate, fs.frame_shift)
    assert ft.num_mel_bins < fs.num_mel_bins and ft.frame_length < fs.frame_length
    assert tiny.model.cfg.encoder.chunk_size == shipped.model.cfg.encoder.chunk_size
    assert sum(p.numel() for p in tiny.model.parameters()) < sum(p.numel() for p in shipped.model.parameters()) / 100
