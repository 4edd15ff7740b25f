"""Tests for streamd.train.voices (WORLD speaker perturbation), against synthetic vowels of known F0 / formants."""

import numpy as np
import pytest
from scipy import signal as ss

from streamd.train import voices as V

try:
    PW = V._pyworld()
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"pyworld is not installed ({e}); pip install pyworld", allow_module_level=True)

SR = 16000


def vowel(f0=110.0, formants=(500.0, 1500.0, 2500.0), bws=(80.0, 100.0, 120.0), seconds=1.0, vibrato=0.0,
          rate=SR):
    """Glottal pulse train at ``f0`` (times ``1 + vibrato sin(2 pi 3 t)``) through 2-pole formant resonators,
    high-passed at 60 Hz (no DC, like recorded speech)."""
    n = int(seconds * rate)
    t = np.arange(n) / rate
    phase = np.cumsum(f0 * (1 + vibrato * np.sin(2 * np.pi * 3 * t))) / rate
    src = np.zeros(n)
    src[np.nonzero(np.diff(np.floor(phase)) > 0)[0]] = 1.0
    y = src
    for f, b in zip(formants, bws):
        r, th = np.exp(-np.pi * b / rate), 2 * np.pi * f / rate
        y = ss.lfilter([1 - r], [1, -2 * r * np.cos(th), r * r], y)
    y = ss.sosfilt(ss.butter(2, 60.0, "highpass", fs=rate, output="sos"), y)
    return (0.3 * y / np.max(np.abs(y))).astype(np.float32)


def psd(y):
    f, p = ss.welch(y.astype(np.float64), SR, nperseg=1024)
    return f, p


def smooth_db(p, k=9):
    """PSD smoothed over k bins (~140 Hz, more than a harmonic spacing), in dB: an envelope."""
    return 10 * np.log10(np.convolve(p, np.ones(k) / k, mode="same") + 1e-20)


def envelope_db(y):
    """Mean CheapTrick envelope (dB) over the voiced middle frames: ``(513,)`` bins of 15.6 Hz."""
    y = y.astype(np.float64)
    f0, t = PW.dio(y, SR, frame_period=5.0)
    f0 = PW.stonemask(y, f0, t, SR)
    sp = PW.cheaptrick(y, f0, t, SR)
    return 10 * np.log10(sp[20:-20].mean(axis=0))


def centroid(y, hi=8000.0):
    f, p = psd(y)
    m = f < hi
    return float((f[m] * p[m]).sum() / p[m].sum())


def f0_of(y):
    y = y.astype(np.float64)
    f0, t = PW.dio(y, SR, frame_period=5.0)
    f0 = PW.stonemask(y, f0, t, SR)
    return f0[f0 > 0]


def P(alpha=1.0, f0=1.0, exc=1.0, drift=0.0):
    return V.VoiceParams(alpha, f0, exc, drift)


def test_identity_reconstructs_and_keeps_level():
    x = vowel()
    y = V.world_perturb(x, SR, np.random.default_rng(0), P())
    assert y.shape == x.shape and y.dtype == np.float32
    assert abs(np.sqrt(np.mean(y.astype(np.float64) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)) - 1) < 1e-4
    f, px = psd(x)
    _, py = psd(y)
    band = (f > 100) & (f < 5000)
    lsd = np.sqrt(np.mean((smooth_db(px) - smooth_db(py))[band] ** 2))
    assert lsd < 1.5  # dB, smoothed log-spectral distance (measured 0.6)
    assert abs(np.median(f0_of(y)) - 110.0) < 2.0


@pytest.mark.parametrize("alpha", [0.85, 1.15, 1.2])
def test_alpha_scales_formants_and_centroid(alpha):
    x = vowel(f0=100.0)
    y = V.world_perturb(x, SR, np.random.default_rng(0), P(alpha=alpha))
    assert abs(centroid(y) / centroid(x) - alpha) < 0.04 * alpha
    f = np.arange(513) * SR / 1024
    ex, ey = envelope_db(x), envelope_db(y)
    for formant in (1500.0, 2500.0):
        lo, hi = formant * 0.8, formant * 1.25
        mx = (f >= lo) & (f < hi)
        my = (f >= lo * alpha) & (f < hi * alpha)
        fx = f[mx][np.argmax(ex[mx])]
        fy = f[my][np.argmax(ey[my])]
        assert abs(fx - formant) < 40
        assert abs(fy / fx - alpha) < 0.04 * alpha, (formant, fx, fy)
    assert abs(np.median(f0_of(y)) - 100.0) < 2.0  # the pitch is not touched


@pytest.mark.parametrize("factor", [0.75, 1.3, 1.6])
def test_f0_factor_measured_by_dio(factor):
    x = vowel(f0=140.0)
    y = V.world_perturb(x, SR, np.random.default_rng(0), P(f0=factor))
    f0 = f0_of(y)
    assert len(f0) > 150
    assert abs(np.median(f0) / 140.0 - factor) < 0.02 * factor


def test_excursion_scales_intonation():
    x = vowel(f0=150.0, vibrato=0.1, seconds=1.5)
    sd_in = np.std(np.log(f0_of(x)))
    flat = np.std(np.log(f0_of(V.world_perturb(x, SR, np.random.default_rng(0), P(exc=0.0)))))
    wide = np.std(np.log(f0_of(V.world_perturb(x, SR, np.random.default_rng(0), P(exc=2.0)))))
    assert flat < 0.25 * sd_in
    assert abs(wide / sd_in - 2.0) < 0.3


def test_drift_is_slow_bounded_and_seeded():
    x = vowel(f0=150.0, seconds=2.0)
    a = V.world_perturb(x, SR, np.random.default_rng(5), P(drift=60.0))
    b = V.world_perturb(x, SR, np.random.default_rng(5), P(drift=60.0))
    c = V.world_perturb(x, SR, np.random.default_rng(6), P(drift=60.0))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    cents = 1200 * np.log2(f0_of(a)[5:-5] / 150.0)              # (DIO's edge frames are unreliable)
    assert np.percentile(np.abs(cents - np.median(cents)), 98) < 130  # peak 60 cents around the mean
    assert np.std(cents) > 10                                           # it does move
    flat = 1200 * np.log2(f0_of(V.world_perturb(x, SR, np.random.default_rng(5), P()))[5:-5] / 150.0)
    assert np.std(flat) < 5


def test_sample_voice_params_ranges_and_determinism():
    ps = [V.sample_voice_params(np.random.default_rng(i)) for i in range(300)]
    assert V.sample_voice_params(np.random.default_rng(3)) == ps[3]
    a = np.array([p.alpha for p in ps])
    f = np.array([p.f0_factor for p in ps])
    assert a.min() >= 0.85 and a.max() <= 1.2 and a.min() < 0.87 and a.max() > 1.18
    assert f.min() >= 0.65 and f.max() <= 1.6
    assert np.corrcoef(np.log(a), np.log(f))[0, 1] > 0.5     # shorter tracts go with higher voices
    assert all(0.6 <= p.excursion <= 1.5 and 0 <= p.drift_cents <= 80 for p in ps)
    assert set(ps[0].to_dict()) == {"alpha", "f0_factor", "excursion", "drift_cents"}


def test_random_params_when_none():
    x = vowel()
    y1 = V.world_perturb(x, SR, np.random.default_rng(1))
    y2 = V.world_perturb(x, SR, np.random.default_rng(1))
    assert np.array_equal(y1, y2) and y1.shape == x.shape and np.all(np.isfinite(y1))


def test_silence_short_and_unvoiced_input():
    rng = np.random.default_rng(0)
    z = np.zeros(8000, np.float32)
    assert np.array_equal(V.world_perturb(z, SR, rng, P(alpha=1.2)), z)
    short = vowel(seconds=0.05)
    assert np.array_equal(V.world_perturb(short, SR, rng, P(alpha=1.2)), short)
    assert V.world_perturb(np.zeros(0, np.float32), SR, rng).shape == (0,)
    noise = (0.1 * rng.standard_normal(SR)).astype(np.float32)
    y = V.world_perturb(noise, SR, rng, P(alpha=1.1, f0=1.3))
    assert y.shape == noise.shape and np.all(np.isfinite(y))
    assert abs(np.std(y) / np.std(noise) - 1) < 0.01


def test_other_rates_and_harvest():
    x8 = vowel(f0=120.0, rate=8000)
    y8 = V.world_perturb(x8, 8000, np.random.default_rng(0), P(f0=1.25))
    assert y8.shape == x8.shape
    x = vowel(f0=120.0, seconds=0.5)
    y = V.world_perturb(x, SR, np.random.default_rng(0), P(f0=1.25), f0_method="harvest")
    assert abs(np.median(f0_of(y)) / 120.0 - 1.25) < 0.03


def test_warp_envelope_moves_a_peak():
    env = np.full((2, 513), 1e-3)
    env[:, 100] = 1.0
    w = V.warp_envelope(env, 1.2)
    assert np.argmax(w[0]) == 120 and w.shape == env.shape
    assert np.array_equal(V.warp_envelope(env, 1.0), env)
    with pytest.raises(ValueError, match=r"\(T, K\)"):
        V.warp_envelope(np.ones(5), 1.1)


@pytest.mark.parametrize("call,msg", [
    (lambda: V.world_perturb(np.zeros((2, 4000), np.float32), SR, np.random.default_rng(0)), "1-D"),
    (lambda: V.world_perturb(np.zeros(4000, np.int16), SR, np.random.default_rng(0)), "float array"),
    (lambda: V.world_perturb(np.zeros(4000, np.float32), 4000, np.random.default_rng(0)), "rate must be"),
    (lambda: V.world_perturb(np.zeros(4000, np.float32), SR, np.random.default_rng(0), f0_method="yin"),
     "f0_method"),
    (lambda: V.world_perturb(np.zeros(4000, np.float32), SR, np.random.default_rng(0), params={"alpha": 1}),
     "VoiceParams"),
    (lambda: V.VoiceParams(1.5, 1.0, 1.0, 0.0), "alpha must be a number in [0.8, 1.25]"),
    (lambda: V.VoiceParams(1.0, 3.0, 1.0, 0.0), "f0_factor"),
    (lambda: V.VoiceParams(1.0, 1.0, -1.0, 0.0), "excursion"),
    (lambda: V.VoiceParams(1.0, 1.0, 1.0, 1000.0), "drift_cents"),
])
def test_invalid_inputs(call, msg):
    with pytest.raises(ValueError) as e:
        call()
    assert msg in str(e.value)
