"""Tests for streamd.train.rooms: RIR loading / simulation / convolution, real-noise bank, channel colouring."""

import json
import math

import numpy as np
import pytest
import soundfile as sf
from scipy import signal as ss

from streamd.train import augment as A
from streamd.train import rooms as R
from helpers import speechlike

SR = 16000

try:
    import pyroomacoustics  # noqa: F401
    HAS_PRA = True
except ImportError:  # pragma: no cover - depends on the environment
    HAS_PRA = False
needs_pra = pytest.mark.skipif(not HAS_PRA, reason="pyroomacoustics is not installed (pip install pyroomacoustics)")




def rms(x):
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)))


# --------------------------------------------------------------------------- apply_rir


def test_unit_impulse_is_identity():
    x = speechlike(np.random.default_rng(0), 1.0)
    assert np.allclose(R.apply_rir(x, np.array([1.0], np.float32)), x, atol=1e-6)
    assert np.allclose(R.apply_rir(x, np.array([0.5, 0.0, 0.0])), x, atol=1e-6)  # scale is normalized away


def test_pure_delay_shifts_or_is_aligned():
    x = speechlike(np.random.default_rng(1), 1.0)
    h = np.zeros(161)
    h[160] = 0.3
    shifted = R.apply_rir(x, h, align=False)
    ref = np.concatenate([np.zeros(160), x[:-160]])
    ref *= rms(x) / rms(ref)
    assert shifted.shape == x.shape and np.allclose(shifted, ref, atol=1e-5)
    assert np.allclose(R.apply_rir(x, h), x, atol=1e-6)  # aligned: the direct path is at sample 0


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_direct_convolution_and_keeps_rms(seed):
    rng = np.random.default_rng(seed)
    x = speechlike(rng, 0.5)
    h = np.zeros(3000)
    h[40] = -0.8                                          # direct path (negative polarity), after 40 samples
    h[2:40] = 0.05 * rng.standard_normal(38)              # below 10 % of the peak: dropped by the alignment
    h[41:] = 0.3 * rng.standard_normal(2959) * np.exp(-np.arange(2959) / 600)
    y = R.apply_rir(x, h)
    k = int(np.argmax(np.abs(h) >= 0.1 * 0.8))
    ref = np.convolve(x.astype(np.float64), h[k:] / 0.8)[: len(x)]  # slow oracle
    ref *= rms(x) / rms(ref)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.allclose(y, ref, atol=1e-5)
    assert abs(rms(y) - rms(x)) < 1e-6
    assert np.array_equal(R.apply_rir(x, R.Rir(h.astype(np.float32), "h")), R.apply_rir(x, h.astype(np.float32)))


def test_apply_rir_edge_cases():
    assert R.apply_rir(np.zeros(0, np.float32), np.array([1.0])).shape == (0,)
    z = np.zeros(100, np.float32)
    assert np.array_equal(R.apply_rir(z, np.array([1.0, 0.5])), z)
    with pytest.raises(ValueError, match="empty or silent"):
        R.apply_rir(np.ones(10, np.float32), np.zeros(5))
    with pytest.raises(ValueError, match="1-D"):
        R.apply_rir(np.ones((2, 10), np.float32), np.array([1.0]))


def test_normalize_rir():
    h = np.concatenate([np.zeros(50), [0.02, 2.0], 0.5 * np.exp(-np.arange(2000) / 100.0)])
    n = R.normalize_rir(h)
    assert n[0] == 1.0 and np.max(np.abs(n)) == 1.0            # aligned on the direct path, peak 1
    assert len(n) < 2001                                         # tail cut at -60 dB remaining energy
    assert len(R.normalize_rir(h, max_seconds=0.01, rate=SR)) == 160
    assert len(R.normalize_rir(h, align=False)) > 50


# --------------------------------------------------------------------------- RIR folders


def test_load_rir_folder(tmp_path):
    r44 = 44100
    stereo = np.zeros((4410, 2), np.float32)
    stereo[441, 0] = 0.9                                           # 10 ms pre-delay
    stereo[441 + 100:, 0] = 0.1 * np.exp(-np.arange(4410 - 541) / 500.0)
    stereo[0, 1] = -0.5
    sf.write(tmp_path / "b_room.wav", stereo, r44, subtype="PCM_24")
    (tmp_path / "sub").mkdir()
    mono = np.zeros(1600, np.float32)
    mono[10] = 1.0
    sf.write(tmp_path / "sub" / "a.flac", mono, SR)
    sf.write(tmp_path / "silent.wav", np.zeros(100, np.float32), SR)
    (tmp_path / "notes.txt").write_text("not audio")
    rirs = R.load_rir_folder(tmp_path, SR)
    assert [r.name for r in rirs] == ["b_room.wav#0", "b_room.wav#1", "sub/a.flac"]
    for r in rirs:
        assert r.h.dtype == np.float32 and np.max(np.abs(r.h)) == pytest.approx(1.0)
        assert abs(r.h[0]) >= 0.1 or abs(r.h[:3]).max() >= 0.1  # direct path at the start
    assert len(rirs[0].h) <= 4410 * SR // r44 + 1                 # resampled to 16 kHz
    assert np.array_equal(rirs[2].h, [1.0])
    with pytest.raises(FileNotFoundError, match="no such folder"):
        R.load_rir_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .wav or .flac"):
        R.load_rir_folder(tmp_path / "empty")


def test_default_rir_folder(monkeypatch):
    d = R.default_rir_folder()
    if d is not None:
        assert d.name == "impulses" and any(p.suffix == ".wav" for p in d.iterdir())
        rirs = R.load_rir_folder(d, SR)
        assert len(rirs) >= 1 and all(np.max(np.abs(r.h)) == pytest.approx(1.0) for r in rirs)
    monkeypatch.setattr(R.importlib.util, "find_spec", lambda name: None)
    assert R.default_rir_folder() is None


@needs_pra
def test_simulate_rirs():
    a = R.simulate_rirs(3, SR, np.random.default_rng(7), rt60=(0.2, 0.35))
    b = R.simulate_rirs(3, SR, np.random.default_rng(7), rt60=(0.2, 0.35))
    c = R.simulate_rirs(3, SR, np.random.default_rng(8), rt60=(0.2, 0.35))
    assert [r.name for r in a] == [r.name for r in b] and all(np.array_equal(p.h, q.h) for p, q in zip(a, b))
    assert [r.name for r in a] != [r.name for r in c]
    for r in a:
        assert r.name.startswith("sim:rt")
        rt = float(r.name.split(":")[1][2:])
        assert 0.2 <= rt <= 0.35
        h = r.h.astype(np.float64)
        assert np.max(np.abs(h)) == pytest.approx(1.0) and np.argmax(np.abs(h)) < 10
        e = np.cumsum(h[::-1] ** 2)[::-1]                    # Schroeder backward integral
        edc = 10 * np.log10(e / e[0])
        t20 = np.argmax(edc < -25) - np.argmax(edc < -5)     # 20 dB of decay ~ RT60 / 3
        assert 0.1 * rt < 3 * t20 / SR < 4 * rt
    with pytest.raises(ValueError, match="rt60 must be a range"):
        R.simulate_rirs(1, SR, np.random.default_rng(0), rt60=(0.5, 0.2))
    with pytest.raises(ValueError, match="n must be an integer"):
        R.simulate_rirs(0, SR, np.random.default_rng(0))


# --------------------------------------------------------------------------- noise bank


def _noise_manifest(tmp_path, clips):
    lines = []
    for i, c in enumerate(clips):
        name = f"n{i}.wav"
        sf.write(tmp_path / name, c, SR if i % 2 == 0 else 8000)
        lines.append(json.dumps({"audio": name, "text": "", "noise": True}))
    m = tmp_path / "noise.jsonl"
    m.write_text("\n".join(lines) + "\n")
    return m


def test_noise_bank_sample_and_snr(tmp_path):
    rng = np.random.default_rng(0)
    clips = [0.01 * rng.standard_normal(SR).astype(np.float32), 0.3 * rng.standard_normal(4000).astype(np.float32),
             np.zeros(SR, np.float32), 0.1 * rng.standard_normal(100).astype(np.float32)]
    bank = R.NoiseBank(_noise_manifest(tmp_path, clips), SR)
    assert len(bank) == 2                                      # silent and too-short clips skipped
    a, names = bank.sample(5 * SR, np.random.default_rng(1), return_names=True)
    b = bank.sample(5 * SR, np.random.default_rng(1))
    assert a.shape == (5 * SR,) and a.dtype == np.float32 and np.array_equal(a, b)
    assert abs(rms(a) - 1.0) < 1e-5 and len(names) >= 5      # looped / concatenated to the length
    assert not np.array_equal(a, bank.sample(5 * SR, np.random.default_rng(2)))
    # level is stationary across clip boundaries (each clip unit RMS, equal-power crossfades)
    seg = [rms(a[i: i + 1600]) for i in range(0, len(a), 1600)]
    assert max(seg) / min(seg) < 2.0
    x = speechlike(rng, 1.0)
    for snr in (0.0, 12.5, 30.0):
        y = A.add_noise(x, bank.sample(len(x), rng), snr)
        assert abs(A.snr_db(x, y - x) - snr) < 1e-4        # exact
    assert bank.sample(10, rng).shape == (10,)


def test_noise_bank_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        R.NoiseBank(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"audio": "x.wav"}\n')
    with pytest.raises(FileNotFoundError, match="line 1: audio file"):
        R.NoiseBank(bad)
    bad.write_text("{oops\n")
    with pytest.raises(ValueError, match="line 1: invalid JSON"):
        R.NoiseBank(bad)
    silent = _noise_manifest(tmp_path, [np.zeros(SR, np.float32)])
    with pytest.raises(ValueError, match="no usable clip"):
        R.NoiseBank(silent)


# --------------------------------------------------------------------------- channel


def test_biquads_match_their_definitions():
    for kind, f0, g in (("peak", 1000.0, 6.0), ("peak", 3000.0, -8.0), ("low", 200.0, 5.0), ("high", 4000.0, -6.0)):
        sos = R._biquad(kind, f0, g, 1.0, SR)[None]
        w, h = ss.sosfreqz(sos, worN=[f0, 20.0, 7900.0], fs=SR)
        db = 20 * np.log10(np.abs(h))
        if kind == "peak":
            assert abs(db[0] - g) < 1e-6 and abs(db[1]) < 0.1 and abs(db[2]) < 0.3
        elif kind == "low":
            assert abs(db[0] - g / 2) < 1e-6 and abs(db[1] - g) < 0.2 and abs(db[2]) < 0.1  # half gain at f0
        else:
            assert abs(db[0] - g / 2) < 1e-6 and abs(db[2] - g) < 0.5 and abs(db[1]) < 0.1


def test_channel_identity_band_limits_and_clipping():
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(2 * SR)).astype(np.float32)
    assert np.array_equal(R.apply_channel(x, SR, R.ChannelParams()), x)
    y = R.apply_channel(x, SR, R.ChannelParams(highpass=300.0, lowpass=3400.0))
    assert y.shape == x.shape and abs(rms(y) - rms(x)) < 1e-6      # RMS restored

    def band(z, lo, hi):
        p = np.abs(np.fft.rfft(z.astype(np.float64))) ** 2
        f = np.fft.rfftfreq(len(z), 1 / SR)
        return p[(f >= lo) & (f < hi)].mean()

    assert 10 * np.log10(band(y, 6000, 8000) / band(y, 1000, 2000)) < -20
    assert 10 * np.log10(band(y, 20, 80) / band(y, 1000, 2000)) < -20
    g = R.apply_channel(x, SR, R.ChannelParams(gain_db=6.0))
    assert np.allclose(g, x * 10 ** (6 / 20), atol=1e-6)
    c = R.apply_channel(np.sin(2 * np.pi * 200 * np.arange(SR) / SR).astype(np.float32), SR,
                        R.ChannelParams(clip_drive=3.0))
    assert np.max(np.abs(c)) / rms(c) < math.sqrt(2) * 0.95        # flattened peaks (crest factor down)


def test_random_channel_deterministic_and_varied():
    x = speechlike(np.random.default_rng(3), 1.0)
    a = R.random_channel(x, SR, np.random.default_rng(4))
    b = R.random_channel(x, SR, np.random.default_rng(4))
    c = R.random_channel(x, SR, np.random.default_rng(5))
    assert a.shape == x.shape and a.dtype == np.float32 and np.array_equal(a, b) and not np.array_equal(a, c)
    ps = [R.sample_channel_params(np.random.default_rng(i)) for i in range(200)]
    assert 0.4 < np.mean([p.highpass is not None for p in ps]) < 0.8
    assert all(p.lowpass is None or 3400 <= p.lowpass <= 7500 for p in ps)
    assert all(1 <= len(p.peaks) <= 3 and abs(p.gain_db) <= 6 for p in ps)
    d = ps[0].to_dict()
    assert "gain_db" in d and json.loads(json.dumps(d)) == d
    for i in range(20):                                            # stable and finite on every draw
        y = R.random_channel(x, 8000, np.random.default_rng(i))
        assert np.all(np.isfinite(y))
