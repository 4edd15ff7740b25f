"""Log-mel fbank: slow Kaldi-style oracle, streaming windows, tones, silence, batching."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from streamd.audio.fbank import Fbank, FbankStream, mel_filterbank
from streamd.audio.pcm import AudioError
from streamd.config import FbankConfig

CFG = FbankConfig()
SMALL = FbankConfig(num_mel_bins=23, frame_length_ms=20.0, frame_shift_ms=7.5, preemphasis=0.5,
                    low_freq=100.0, high_freq=6000.0, log_floor=1e-6)


def _mel(f: float) -> float:
    return 1127.0 * math.log(1.0 + f / 700.0)


def oracle_fbank(x: np.ndarray, cfg: FbankConfig) -> np.ndarray:
    """Frame-by-frame, sample-by-sample Kaldi fbank in float64 -> (T, num_mel_bins)."""
    n, shift = cfg.frame_length, cfg.frame_shift
    n_fft = 1
    while n_fft < n:
        n_fft *= 2
    mel_lo, mel_hi = _mel(cfg.low_freq), _mel(cfg.high_freq)
    delta = (mel_hi - mel_lo) / (cfg.num_mel_bins + 1)
    weights = np.zeros((n_fft // 2 + 1, cfg.num_mel_bins))
    for b in range(cfg.num_mel_bins):
        left, center, right = mel_lo + b * delta, mel_lo + (b + 1) * delta, mel_lo + (b + 2) * delta
        for k in range(n_fft // 2):  # Kaldi leaves the Nyquist bin out
            m = _mel(k * cfg.sample_rate / n_fft)
            if left < m < right:
                weights[k, b] = (m - left) / (center - left) if m <= center else (right - m) / (right - center)
    window = [(0.5 - 0.5 * math.cos(2 * math.pi * i / (n - 1))) ** 0.85 for i in range(n)]
    out = []
    for t in range(0 if len(x) < n else 1 + (len(x) - n) // shift):
        frame = [float(v) for v in x[t * shift:t * shift + n]]
        mean = sum(frame) / n
        frame = [v - mean for v in frame]
        for i in range(n - 1, 0, -1):
            frame[i] -= cfg.preemphasis * frame[i - 1]
        frame[0] -= cfg.preemphasis * frame[0]
        frame = [v * w for v, w in zip(frame, window)] + [0.0] * (n_fft - n)
        spec = np.fft.rfft(frame)
        power = spec.real ** 2 + spec.imag ** 2
        out.append(np.log(np.maximum(power @ weights, cfg.log_floor)))
    return np.array(out).reshape(-1, cfg.num_mel_bins)


@pytest.mark.parametrize("cfg", [CFG, SMALL], ids=["default", "small"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_slow_oracle(cfg, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=int(rng.integers(cfg.frame_length, 2500)))
    x[: len(x) // 3] *= 0.01  # a quiet stretch too
    ref = oracle_fbank(x, cfg)
    fb = Fbank(cfg)
    got64 = fb(torch.tensor(x, dtype=torch.float64)[None])[0]
    assert got64.dtype == torch.float64
    np.testing.assert_allclose(got64.numpy(), ref, atol=1e-5, rtol=0)  # float32 filter matrix
    got32 = fb(torch.tensor(x, dtype=torch.float32)[None])[0]
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), ref, atol=2e-3, rtol=0)


def test_mel_filterbank_matches_oracle_construction():
    w, centers = mel_filterbank(40, 512, 16000, 0.0, 8000.0)
    assert w.shape == (257, 40) and centers.shape == (40,)
    assert np.all(w[-1] == 0) and np.all(w >= 0)
    mel_c = [_mel(0) + (b + 1) * (_mel(8000) - _mel(0)) / 41 for b in range(40)]
    np.testing.assert_allclose([_mel(c) for c in centers], mel_c, rtol=1e-12)


@pytest.mark.parametrize("length", [0, 1, 399, 400, 401, 559, 560, 561, 1000])
def test_num_frames_and_shapes(length):
    fb = Fbank(CFG)
    out = fb(torch.zeros(3, length))
    expected = 0 if length < 400 else 1 + (length - 400) // 160
    assert out.shape == (3, expected, 80) and fb.num_frames(length) == expected


def test_silence_is_log_floor():
    for cfg in (CFG, SMALL):
        out = Fbank(cfg)(torch.zeros(2, 3000))
        torch.testing.assert_close(out, torch.full_like(out, math.log(cfg.log_floor)))
    # a constant (DC) signal is silence after DC removal
    out = Fbank(CFG)(torch.full((1, 1000), 0.3))
    assert torch.allclose(out, torch.full_like(out, math.log(CFG.log_floor)), atol=1e-4)


@pytest.mark.parametrize("cfg", [CFG, FbankConfig(num_mel_bins=40, low_freq=0.0, high_freq=8000.0)],
                         ids=["default", "40bins"])
def test_tone_peaks_at_nearest_center(cfg):
    fb = Fbank(cfg)
    centers = fb.mel_centers.numpy().astype(np.float64)
    rng = np.random.default_rng(0)
    # filters narrower than the FFT resolution (below ~250 Hz with 80 bins) cannot resolve a tone
    bins = [b for b in range(1, cfg.num_mel_bins - 1) if centers[b] - centers[b - 1] > 40.0]
    freqs = []
    for b in bins:
        off = rng.uniform(-0.3, 0.3)  # of the distance to the neighbour centre: nearest is unambiguous
        freqs.append(centers[b] + off * (centers[b + 1] - centers[b] if off > 0 else centers[b] - centers[b - 1]))
    t = np.arange(4000) / 16000
    x = torch.tensor(np.stack([0.5 * np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in freqs]),
                     dtype=torch.float32)
    peak = fb(x).mean(dim=1).argmax(dim=-1).numpy()
    nearest = np.abs(centers[None, :] - np.array(freqs)[:, None]).argmin(axis=1)
    np.testing.assert_array_equal(peak, nearest)
    assert len(freqs) > cfg.num_mel_bins // 2


def test_batch_equals_rows():
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.uniform(-1, 1, size=(4, 1234)), dtype=torch.float32)
    fb = Fbank(CFG)
    batched = fb(x)
    for i in range(4):
        torch.testing.assert_close(batched[i], fb(x[i:i + 1])[0], atol=1e-5, rtol=0)


def test_cpu_blocks_equal_one_pass(monkeypatch):
    """More rows than one CPU pass holds: the blocks (a short last one included) give the one-pass result."""
    rng = np.random.default_rng(4)
    x = torch.tensor(rng.uniform(-1, 1, size=(11, 2345)), dtype=torch.float32)
    fb = Fbank(CFG)
    whole = fb(x)
    monkeypatch.setattr(Fbank, "CPU_BLOCK_ROWS", 4)
    torch.testing.assert_close(fb(x), whole, atol=0, rtol=0)


def test_buffers_follow_module_and_are_not_persistent():
    fb = Fbank(CFG)
    assert fb.state_dict() == {}
    assert {name for name, _ in fb.named_buffers()} == {"window", "mel_weights", "mel_centers"}
    assert fb.to(torch.float64).mel_weights.dtype == torch.float64


def test_runs_on_the_input_device():
    fb = Fbank(CFG).to("meta")  # no data, but any tensor created on the wrong device would fail
    out = fb(torch.zeros(2, 1000, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 4, 80)
    assert fb(torch.zeros(2, 10, device="meta")).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    x = torch.tensor(np.random.default_rng(0).uniform(-1, 1, size=(3, 4000)), dtype=torch.float32)
    fb = Fbank(CFG)
    ref = fb(x)
    got = fb.to("cuda")(x.to("cuda"))
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), ref, atol=1e-3, rtol=0)


def test_fbank_input_errors():
    fb = Fbank(CFG)
    with pytest.raises(ValueError, match=r"shape \(B, S\), got shape \(100,\)"):
        fb(torch.zeros(100))
    with pytest.raises(ValueError, match="floating samples .*got dtype torch.int16"):
        fb(torch.zeros(1, 500, dtype=torch.int16))


# ----------------------------------------------------------------------------- FbankStream


def _padded_len(n: int, cfg: FbankConfig) -> int:
    """Oracle: shortest length >= n (and >= frame_length) of the form L + k * shift (0 stays 0)."""
    if n == 0:
        return 0
    length = cfg.frame_length
    while length < n:
        length += cfg.frame_shift
    return length


@pytest.mark.parametrize("cfg", [CFG, SMALL], ids=["default", "small"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_stream_windows_equal_whole_signal(cfg, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=int(rng.integers(0, 5000))).astype(np.float32)
    fb = Fbank(cfg)
    s = FbankStream(cfg)
    feats, i = [], 0

    def take_some(final: bool) -> None:
        ready = s.frames_ready()
        n = ready if final else int(rng.integers(0, ready + 1))
        w = s.take(n)
        assert w.dtype == np.float32
        assert len(w) == (0 if n == 0 else cfg.frame_length + (n - 1) * cfg.frame_shift)
        if n:
            feats.append(fb(torch.from_numpy(w)[None])[0])
            assert feats[-1].shape[0] == n
        assert s.buffered_samples <= cfg.frame_length + cfg.frame_shift + 800 + 1  # consumed samples dropped

    while i < len(x):
        size = int(rng.choice([0, 1, rng.integers(0, 50), rng.integers(0, 800)]))
        piece = x[i:i + size]
        s.accept(piece)
        i += len(piece)
        assert s.accepted == i
        take_some(final=False)
    s.finish()
    take_some(final=True)
    assert s.frames_ready() == 0

    padded = np.concatenate([x, np.zeros(_padded_len(len(x), cfg) - len(x), dtype=np.float32)])
    whole = fb(torch.from_numpy(padded)[None])[0]
    got = torch.cat(feats) if feats else whole[:0]
    assert s.frames_taken == whole.shape[0] == got.shape[0]
    torch.testing.assert_close(got, whole, atol=1e-5, rtol=0)
    if len(x):  # the last accepted sample lies in the last frame
        assert (s.frames_taken - 1) * cfg.frame_shift + cfg.frame_length >= len(x)


@pytest.mark.parametrize("n,frames", [(0, 0), (1, 1), (399, 1), (400, 1), (401, 2), (560, 2), (561, 3)])
def test_finish_padding(n, frames):
    s = FbankStream(CFG)
    s.accept(np.ones(n, dtype=np.float32))
    s.finish()
    s.finish()  # idempotent
    assert s.frames_ready() == frames and s.accepted == n
    w = s.take(frames)
    assert len(w) == _padded_len(n, CFG)
    assert np.all(w[:n] == 1) and np.all(w[n:] == 0)


def test_take_into_writes_the_window_of_take():
    """take_into: up to max_frames of the ready frames into a batch row (zeros after), as take hands them out."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, 5000).astype(np.float32)
    a, b = FbankStream(CFG), FbankStream(CFG)
    a.accept(x), b.accept(x)
    fl, fs = CFG.frame_length, CFG.frame_shift
    for max_frames in (8, 8, 16):  # 29 frames ready: 8, 8, then the 13 left of a 16-frame row
        row = np.full(fl + (max_frames - 1) * fs, 7.0, dtype=np.float32)
        n = a.take_into(max_frames, row)
        want = b.take(min(max_frames, b.frames_ready()))
        assert n == min(max_frames, n + a.frames_ready()) and want.size == fl + (n - 1) * fs
        np.testing.assert_array_equal(row[:want.size], want)
        assert not row[want.size:].any()
    row = np.full(fl, 7.0, dtype=np.float32)
    assert a.take_into(1, row) == 0 and not row.any()  # nothing ready: nothing taken, the row zeroed
    assert a.frames_taken == b.frames_taken == 29


def test_frames_ready_before_finish():
    s = FbankStream(CFG)
    s.accept(np.zeros(399, dtype=np.float32))
    assert s.frames_ready() == 0
    s.accept(np.zeros(1, dtype=np.float64))
    assert s.frames_ready() == 1
    s.accept(np.zeros(320, dtype=np.float32))
    assert s.frames_ready() == 3
    s.take(2)
    assert s.frames_ready() == 1 and s.frames_taken == 2
    assert s.buffered_samples == 720 - 320


def test_stream_errors():
    s = FbankStream(CFG)
    s.accept(np.zeros(500, dtype=np.float32))
    with pytest.raises(ValueError, match=r"n must be in 0\.\.1 \(frames ready\), got 2"):
        s.take(2)
    with pytest.raises(ValueError, match="got -1"):
        s.take(-1)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        s.take(1.0)
    with pytest.raises(AudioError, match=r"1-D samples, got shape \(2, 2\)"):
        s.accept(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(AudioError, match="float samples .*got dtype int16"):
        s.accept(np.zeros(3, dtype=np.int16))
    s.finish()
    with pytest.raises(RuntimeError, match="accept called after finish"):
        s.accept(np.zeros(3, dtype=np.float32))


def test_fbank_stream_buffer_grows_amortized_and_shrinks_after_the_backlog():
    cfg = FbankConfig()
    s = FbankStream(cfg)
    piece = np.zeros(1600, np.float32)  # 100 ms packets
    for _ in range(600):  # a 60 s backlog arrives
        s.accept(piece)
    assert s.buffered_samples == 960_000 and s.capacity < 2 * 960_000 + FbankStream.MIN_CAPACITY
    while s.frames_ready() >= 32:  # decoded chunk by chunk
        s.take(32)
    assert s.buffered_samples < 32 * 160 + 400 and s.capacity <= 4 * FbankStream.MIN_CAPACITY  # memory given back
