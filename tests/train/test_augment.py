"""Tests for streamd.train.augment (numpy augmentation), with simple oracles."""

import numpy as np
import pytest

from streamd.train import augment as A
from helpers import speechlike

SR = 16000


def sine(freq, seconds=1.0, amp=0.5, rate=SR):
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_freq(y, rate=SR):
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    return np.argmax(spec) * rate / len(y)


def band_db(y, lo, hi, rate=SR):
    """Energy in [lo, hi) Hz relative to total energy, in dB."""
    p = np.abs(np.fft.rfft(y.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(len(y), 1 / rate)
    return 10 * np.log10(p[(f >= lo) & (f < hi)].sum() / p.sum())




@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("color", ["white", "pink", "brown", "babble"])
@pytest.mark.parametrize("snr", [0.0, 7.5, 30.0])
def test_add_noise_hits_snr(seed, color, snr):
    rng = np.random.default_rng(seed)
    x = speechlike(rng, 1.5)
    if color == "babble":
        noise = A.babble(len(x), [speechlike(rng, 0.7), speechlike(rng, 1.1)], rng, talkers=3)
    else:
        noise = A.colored_noise(len(x) + 100, color, rng)
    y = A.add_noise(x, noise, snr)
    assert y.shape == x.shape and y.dtype == np.float32
    assert abs(A.snr_db(x, y - x) - snr) < 0.5


def test_add_noise_signal_power_override():
    rng = np.random.default_rng(3)
    speech = speechlike(rng, 1.5)
    padded = A.pad_silence(speech, 0.5, 0.7, SR)
    noise = A.colored_noise(len(padded), "pink", rng)
    p = float(np.mean(speech.astype(np.float64) ** 2))
    y = A.add_noise(padded, noise, 10.0, signal_power=p)
    n = (y - padded).astype(np.float64)
    assert abs(10 * np.log10(p / np.mean(n ** 2)) - 10.0) < 0.5


@pytest.mark.parametrize("color,slope", [("white", 0.0), ("pink", -3.0), ("brown", -6.0)])
def test_colored_noise_spectrum_and_determinism(color, slope):
    a = A.colored_noise(4 * SR, color, np.random.default_rng(5))
    b = A.colored_noise(4 * SR, color, np.random.default_rng(5))
    c = A.colored_noise(4 * SR, color, np.random.default_rng(6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert abs(np.sqrt(np.mean(a.astype(np.float64) ** 2)) - 1) < 1e-3
    # mean power per octave band, 250-500 Hz vs 2000-4000 Hz (3 octaves apart)
    p = np.abs(np.fft.rfft(a.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(len(a), 1 / SR)
    per_oct = 10 * np.log10(p[(f >= 2000) & (f < 4000)].mean() / p[(f >= 250) & (f < 500)].mean()) / 3
    assert abs(per_oct - slope) < 0.7


def test_babble_properties():
    rng = np.random.default_rng(0)
    utts = [speechlike(rng, 0.5), speechlike(rng, 0.8)]
    a = A.babble(3 * SR, utts, np.random.default_rng(1))
    b = A.babble(3 * SR, utts, np.random.default_rng(1))
    assert a.shape == (3 * SR,) and np.array_equal(a, b)
    assert abs(np.sqrt(np.mean(a.astype(np.float64) ** 2)) - 1) < 1e-3
    with pytest.raises(ValueError, match="at least one utterance"):
        A.babble(100, [], rng)
    with pytest.raises(ValueError, match="silent"):
        A.babble(100, [np.zeros(50, np.float32)], rng)


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.1, 1.3])
def test_speed_perturb_length_and_pitch(factor):
    x = sine(300.0, 2.0)
    y = A.speed_perturb(x, factor, SR)
    eff = round(SR * factor / 100) * 100 / SR
    assert len(y) == int(np.ceil(len(x) / eff))
    assert abs(peak_freq(y) - 300.0 * eff) < 2.0


@pytest.mark.parametrize("factor", [0.8, 0.9, 1.1, 1.25])
@pytest.mark.parametrize("freq", [150.0, 440.0])
def test_tempo_keeps_pitch_and_level(factor, freq):
    x = sine(freq, 2.0)
    y = A.tempo(x, factor, SR)
    assert len(y) == round(len(x) / factor)
    assert abs(peak_freq(y) - freq) < 2.0
    mid = y[SR // 10: -SR // 10].astype(np.float64)
    assert abs(np.sqrt(np.mean(mid ** 2)) - 0.5 / np.sqrt(2)) < 0.02  # no phase-cancellation dips
    # WSOLA keeps waveform continuity: a clean sine stays almost clean
    assert band_db(y, freq * 1.5, SR / 2) < -25


def test_tempo_identity_and_speech_length():
    rng = np.random.default_rng(0)
    x = speechlike(rng, 1.5)
    assert np.array_equal(A.tempo(x, 1.0, SR), x)
    y = A.tempo(x, 1.15, SR)
    assert len(y) == round(len(x) / 1.15) and np.all(np.isfinite(y))


@pytest.mark.parametrize("semitones", [-3.0, 2.0, 5.0])
def test_pitch_shift(semitones):
    x = sine(220.0, 2.0)
    y = A.pitch_shift(x, semitones, SR)
    assert len(y) == len(x)
    eff = round(SR * 2 ** (semitones / 12) / 100) * 100 / SR
    assert abs(peak_freq(y[SR // 10: -SR // 10]) - 220.0 * eff) < 2.0


def test_gain_and_padding():
    x = sine(500.0, 0.5)
    assert np.allclose(A.gain(x, 20 * np.log10(2)), 2 * x, atol=1e-6)
    y = A.pad_silence(x, 0.25, 0.5, SR)
    assert len(y) == len(x) + 4000 + 8000
    assert not y[:4000].any() and not y[-8000:].any() and np.array_equal(y[4000:-8000], x)
    with pytest.raises(ValueError, match=">= 0 s"):
        A.pad_silence(x, -0.1, 0.0, SR)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("rt60", [0.2, 0.6])
def test_reverberate_matches_direct_convolution(seed, rt60):
    x = speechlike(np.random.default_rng(10 + seed), 0.6)
    y = A.reverberate(x, rt60, SR, np.random.default_rng(seed), drr_db=3.0)
    h = A.synthetic_rir(rt60, SR, np.random.default_rng(seed), drr_db=3.0).astype(np.float64)
    ref = np.convolve(x.astype(np.float64), h)[: len(x)]  # slow oracle
    ref *= np.sqrt(np.mean(x.astype(np.float64) ** 2) / np.mean(ref ** 2))
    assert y.shape == x.shape
    assert np.allclose(y, ref, atol=1e-5)
    assert np.array_equal(y, A.reverberate(x, rt60, SR, np.random.default_rng(seed), drr_db=3.0))


def test_rir_decay_and_drr():
    rt60 = 0.5
    h = A.synthetic_rir(rt60, SR, np.random.default_rng(0), drr_db=6.0).astype(np.float64)
    assert len(h) == round(rt60 * SR) + 1 and h[0] == 1.0
    assert abs(10 * np.log10(1.0 / np.sum(h[1:] ** 2)) - 6.0) < 1e-6
    w = int(0.05 * SR)
    early = np.mean(h[100:100 + w] ** 2)
    half = np.mean(h[int(rt60 / 2 * SR): int(rt60 / 2 * SR) + w] ** 2)
    # energy falls 60 dB per rt60 -> 30 dB at rt60 / 2 (window offset ~0.6 ms)
    assert abs(10 * np.log10(early / half) - 30.0) < 4.0


def test_telephone_band_limits():
    rng = np.random.default_rng(0)
    x = (0.3 * rng.standard_normal(2 * SR)).astype(np.float32)  # full-band
    y = A.telephone(x, SR)
    assert y.shape == x.shape and y.dtype == np.float32
    assert band_db(y, 4000, SR / 2) < -40          # nothing above the 8 kHz Nyquist
    assert band_db(x, 4000, SR / 2) > -4           # (the input had half its energy there)
    assert band_db(y, 0, 200) < -20                # low cut
    tone = sine(1000.0, 1.0, 0.3)
    out = A.telephone(tone, SR)[SR // 10: -SR // 10].astype(np.float64)
    assert abs(10 * np.log10(np.mean(out ** 2) / np.mean(tone.astype(np.float64) ** 2))) < 1.0  # passband
    low = A.telephone(sine(100.0, 1.0, 0.3), SR, mu_law=False)[SR // 10: -SR // 10]
    assert 10 * np.log10(np.mean(low.astype(np.float64) ** 2) / 0.045) < -20
    # plain 8 kHz round trip: no low cut, nothing above 4 kHz, lossless below
    nb = A.telephone(x, SR, mu_law=False, bandpass=False)
    assert band_db(nb, 4000, SR / 2) < -40
    keep = A.telephone(sine(100.0, 1.0, 0.3), SR, mu_law=False, bandpass=False)[SR // 10: -SR // 10]
    assert abs(10 * np.log10(np.mean(keep.astype(np.float64) ** 2) / 0.045)) < 1.0


@pytest.mark.parametrize("call,msg", [
    (lambda: A.tempo(np.zeros((2, 10), np.float32), 1.1), "1-D"),
    (lambda: A.tempo(np.zeros(10, np.int16), 1.1), "float array"),
    (lambda: A.tempo(np.zeros(10, np.float32), 3.0), "tempo factor must be a number in [0.5, 2.0]"),
    (lambda: A.speed_perturb(np.zeros(10, np.float32), 0.1), "speed factor"),
    (lambda: A.pitch_shift(np.zeros(10, np.float32), 20.0), "semitones"),
    (lambda: A.speed_perturb(np.zeros(10, np.float32), 1.1, rate=1000), "rate must be an integer"),
    (lambda: A.colored_noise(100, "blue", np.random.default_rng(0)), "noise color must be one of"),
    (lambda: A.add_noise(np.ones(10, np.float32), np.ones(5, np.float32), 10.0), "noise is shorter"),
    (lambda: A.add_noise(np.zeros(10, np.float32), np.ones(10, np.float32), 10.0), "silent signal"),
    (lambda: A.add_noise(np.array([np.nan], np.float32), np.ones(1, np.float32), 10.0), "NaN"),
    (lambda: A.synthetic_rir(5.0, SR, np.random.default_rng(0)), "rt60 must be in"),
])
def test_invalid_inputs(call, msg):
    with pytest.raises(ValueError) as e:
        call()
    assert msg in str(e.value)
