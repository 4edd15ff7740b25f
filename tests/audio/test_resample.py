"""Streaming resampler: slow oracle, chunking invariance, lengths, tones, aliasing."""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import numpy as np
import pytest

from streamd.audio.pcm import AudioError
from streamd.audio.resample import StreamingResampler, resample

rs = importlib.import_module("streamd.audio.resample")  # the package attribute is the function

PAIRS = [(8000, 16000), (11025, 16000), (22050, 16000), (44100, 16000), (48000, 16000), (16000, 8000)]


def _i0(x: float) -> float:
    """Modified Bessel function I0 by its power series sum_k ((x/2)^k / k!)^2."""
    term, total, k = 1.0, 1.0, 0
    while term > 1e-17 * total:
        k += 1
        term *= (x / (2 * k)) ** 2
        total += term
    return total


def _kernel(tau: float, nu: float, half_width: float) -> float:
    """Kaiser-windowed sinc low-pass, evaluated at one point (in input samples)."""
    if abs(tau) > half_width:
        return 0.0
    window = _i0(rs._BETA * math.sqrt(max(0.0, 1.0 - (tau / half_width) ** 2))) / _i0(rs._BETA)
    arg = 2 * nu * tau
    sinc = 1.0 if arg == 0 else math.sin(math.pi * arg) / (math.pi * arg)
    return 2 * nu * sinc * window


def oracle_resample(x: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """y[n] = sum_k x[k] h(t_n - k) / sum_{k in Z} h(t_n - k), t_n = n in_rate / out_rate (exact)."""
    nu = rs._ROLLOFF * min(in_rate, out_rate) / 2 / in_rate
    half_width = rs._ZEROS / (2 * nu)
    n_out = math.ceil(Fraction(len(x) * out_rate, in_rate))
    y = np.zeros(n_out)
    for n in range(n_out):
        t = Fraction(n * in_rate, out_rate)
        ks = range(math.floor(t - half_width) - 1, math.ceil(t + half_width) + 2)
        w = {k: _kernel(float(t - k), nu, half_width) for k in ks}
        y[n] = sum(x[k] * wk for k, wk in w.items() if 0 <= k < len(x)) / sum(w.values())
    return y


def _pieces(rng: np.random.Generator, x: np.ndarray) -> list[np.ndarray]:
    out, i = [], 0
    while i < len(x):
        size = int(rng.choice([0, 1, 2, rng.integers(0, 40), rng.integers(0, 700)]))
        out.append(x[i:i + size])
        i += size
    return out


@pytest.mark.parametrize("in_rate,out_rate", PAIRS + [(44101, 16000)])
def test_matches_slow_oracle(in_rate, out_rate):
    rng = np.random.default_rng(in_rate)
    x = rng.uniform(-1, 1, size=120)
    y = resample(x, in_rate, out_rate)
    ref = oracle_resample(x, in_rate, out_rate)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, atol=1e-6, rtol=0)


def test_large_table_pair_computes_rows_on_the_fly():
    r = StreamingResampler(44101, 16000)
    assert r._table is None and r.up == 16000  # exercised against the oracle above
    assert StreamingResampler(44100, 16000)._table is not None


@pytest.mark.parametrize("in_rate,out_rate", PAIRS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_piece_equivalence(in_rate, out_rate, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=int(rng.integers(1, 3000))).astype(np.float32)
    whole = resample(x, in_rate, out_rate)
    r = StreamingResampler(in_rate, out_rate)
    parts = [r.process(p) for p in _pieces(rng, x)]
    parts.append(r.flush())
    assert all(p.dtype == np.float32 and p.ndim == 1 for p in parts)
    streamed = np.concatenate(parts)
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=1e-6, rtol=0)
    assert r.samples_in == len(x) and r.samples_out == len(whole)


@pytest.mark.parametrize("in_rate,out_rate", PAIRS + [(16000, 16000), (44101, 16000), (8000, 48000)])
def test_output_length(in_rate, out_rate):
    for n in (0, 1, 2, 3, 7, 100, 441, 1000):
        r = StreamingResampler(in_rate, out_rate)
        got = len(r.process(np.zeros(n))) + len(r.flush())
        assert got == -(-n * out_rate // in_rate), (n, got)


def test_process_never_overshoots_and_memory_is_bounded():
    rng = np.random.default_rng(5)
    r = StreamingResampler(44100, 16000)
    for _ in range(200):
        r.process(rng.uniform(-1, 1, size=int(rng.integers(0, 500))))
        assert r.samples_out <= -(-r.samples_in * 16000 // 44100)
        assert len(r._buf) <= 2 * r.lookahead + 500 + 3


@pytest.mark.parametrize("in_rate", [8000, 11025, 22050, 44100, 48000])
@pytest.mark.parametrize("freq", [440.0, 1000.0, 3000.0])
def test_sine_keeps_frequency_amplitude_and_alignment(in_rate, freq):
    x = 0.8 * np.sin(2 * np.pi * freq * np.arange(in_rate // 4) / in_rate)
    y = resample(x, in_rate, 16000)
    n = np.arange(len(y))
    inner = slice(400, len(y) - 400)  # away from the zero-padded edges
    expected = 0.8 * np.sin(2 * np.pi * freq * n / 16000)  # output n is at time n / 16000: no delay
    np.testing.assert_allclose(y[inner], expected[inner], atol=2e-4, rtol=0)


def test_sine_high_in_passband():
    x = 0.5 * np.sin(2 * np.pi * 6500 * np.arange(12000) / 48000)
    y = resample(x, 48000, 16000)
    expected = 0.5 * np.sin(2 * np.pi * 6500 * np.arange(len(y)) / 16000)
    np.testing.assert_allclose(y[300:-300], expected[300:-300], atol=5e-3, rtol=0)


@pytest.mark.parametrize("in_rate,out_rate,freq", [(48000, 16000, 10000.0), (44100, 16000, 9000.0),
                                                    (22050, 16000, 8600.0), (16000, 8000, 5000.0)])
def test_anti_aliasing(in_rate, out_rate, freq):
    x = np.sin(2 * np.pi * freq * np.arange(in_rate // 2) / in_rate)
    y = resample(x, in_rate, out_rate)
    inner = y[len(y) // 4:-len(y) // 4]
    assert np.sqrt(np.mean(inner ** 2)) * np.sqrt(2) < 1e-3  # below -60 dB


def test_passthrough_equal_rates():
    x = np.random.default_rng(0).uniform(-1, 1, 999).astype(np.float32)
    r = StreamingResampler(16000, 16000)
    assert r.lookahead == 0
    np.testing.assert_array_equal(np.concatenate([r.process(x[:10]), r.process(x[10:]), r.flush()]), x)


def test_errors():
    with pytest.raises(AudioError, match=r"sample_rate must be 8000\.\.48000, got 5") as e:
        StreamingResampler(5, 16000)
    assert e.value.code == "bad_sample_rate"
    with pytest.raises(AudioError, match="got 96000"):
        StreamingResampler(16000, 96000)
    r = StreamingResampler(8000)
    with pytest.raises(AudioError, match=r"must be 1-D .*got shape \(2, 3\)"):
        r.process(np.zeros((2, 3)))
    with pytest.raises(AudioError, match="must be a float array .*got dtype int16"):
        r.process(np.zeros(4, dtype=np.int16))
    r.flush()
    with pytest.raises(RuntimeError, match="after flush"):
        r.process(np.zeros(3))
    with pytest.raises(RuntimeError, match="flush called twice"):
        r.flush()


def test_one_shot_resampling_takes_any_rate():
    """``resample`` (files, not live streams) takes rates outside 8..48 kHz: a 96 kHz tone comes out at 16 kHz
    with its frequency and level, the length ceil(N * out / in); the streaming class keeps to the live rates."""
    t = np.arange(96000) / 96000
    y = resample(np.sin(2 * np.pi * 440 * t).astype(np.float32), 96000, 16000)
    assert y.shape == (16000,)
    ref = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    np.testing.assert_allclose(y[1000:-1000], ref[1000:-1000], atol=1e-3)
    assert resample(np.zeros(10, np.float32), 4000, 16000).shape == (40,)
    with pytest.raises(AudioError, match="positive integer"):
        resample(np.zeros(10, np.float32), 0, 16000)


def test_load_audio_at_resamples_a_file_once_and_keeps_its_own_rate(tmp_path):
    from helpers import random_audio, write_wav
    from streamd.audio.pcm import load_audio
    from streamd.audio.resample import load_audio_at

    path = write_wav(tmp_path / "a.wav", random_audio(0.5, 8000, seed=3), 8000)
    x, rate = load_audio(path)
    y = load_audio_at(path, 16000)
    assert y.dtype == np.float32 and np.array_equal(y, resample(x, rate, 16000).astype(np.float32))
    assert np.array_equal(load_audio_at(path, 8000), x)
