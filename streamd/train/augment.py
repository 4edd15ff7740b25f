"""Waveform augmentation for synthetic training data (numpy, offline).

Every function takes and returns a mono ``(N,)`` float32 signal nominally in
[-1, 1] at ``rate`` Hz; randomness only comes from an explicit
``np.random.Generator`` argument, so results are reproducible from a seed.

* :func:`speed_perturb`: resample-based speed change (pitch and tempo change
  together, like Kaldi's 0.9/1.0/1.1 perturbation); length ``~ N / factor``.
* :func:`tempo`: WSOLA time-scale modification (tempo changes, pitch kept):
  Hann windows of 25 ms at 50 % overlap are overlap-added at a fixed synthesis
  hop; each analysis window is taken near ``k * hop * factor``, shifted by up
  to +-10 ms to the offset that best cross-correlates with the natural
  continuation of the previous window, so periodic waveforms stay in phase.
* :func:`pitch_shift`: WSOLA stretch by the pitch ratio, then resampling back
  to the original length.  (Resampling ratios are rounded to 100 Hz steps of
  ``rate * factor``: an exact polyphase table stays small.)
* :func:`gain`, :func:`pad_silence`.
* :func:`colored_noise` (white / pink / brown: power spectrum ``1/f^alpha``
  with ``alpha`` = 0 / 1 / 2), :func:`babble` (sum of other utterances), and
  :func:`add_noise`, which scales noise to an exact SNR in dB (mean power of
  the signal over mean power of the added noise).
* :func:`synthetic_rir` / :func:`reverberate`: exponentially decaying
  Gaussian-noise tail whose energy decays by 60 dB in ``rt60`` seconds, after
  a unit direct path and a short pre-delay; direct-to-reverberant ratio set
  in dB; FFT convolution; output keeps the input length and RMS.
* :func:`telephone`: 300-3400 Hz band-pass, down to 8 kHz, optional G.711
  mu-law 8-bit companding, and back up to ``rate``.

Resampling uses :func:`streamd.audio.resample.resample` (Kaiser windowed sinc).
"""

from __future__ import annotations

import math
import os
import wave
from pathlib import Path

import numpy as np

from streamd.audio.resample import resample
from streamd.options import SAMPLE_RATE_RANGE, sample_rate_ok

__all__ = [
    "NOISE_COLORS",
    "speed_perturb",
    "tempo",
    "pitch_shift",
    "gain",
    "pad_silence",
    "colored_noise",
    "babble",
    "add_noise",
    "snr_db",
    "synthetic_rir",
    "reverberate",
    "telephone",
    "write_wav",
]

NOISE_COLORS = {"white": 0.0, "pink": 1.0, "brown": 2.0}


def _signal(x: np.ndarray, name: str = "x") -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be a 1-D (N,) mono signal, got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{name} must be a float array, got dtype {x.dtype}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite samples")
    return x.astype(np.float32, copy=False)


def _rate(rate: int) -> int:
    if not sample_rate_ok(rate):
        raise ValueError(f"rate must be an integer sample rate in {SAMPLE_RATE_RANGE} Hz, got {rate!r}")
    return int(rate)


def _factor(factor: float, name: str, lo: float = 0.5, hi: float = 2.0) -> float:
    if not isinstance(factor, (int, float, np.floating)) or not lo <= float(factor) <= hi:
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {factor!r}")
    return float(factor)


def speed_perturb(x: np.ndarray, factor: float, rate: int = 16000) -> np.ndarray:
    """Play ``x`` ``factor`` times faster (pitch rises by ``factor`` too).

    Args:
        x: ``(N,)`` float signal at ``rate``.
        factor: 0.5..2.0; the effective ratio is ``rate * factor`` rounded to a multiple of 100 Hz, over ``rate``.

    Returns:
        ``(ceil(N / factor'),)`` float32 at ``rate``.
    """
    x, rate = _signal(x), _rate(rate)
    factor = _factor(factor, "speed factor")
    in_rate = _quantized_rate(rate * factor)
    if in_rate == rate:
        return x.copy()
    return resample(x, in_rate, rate)


def tempo(x: np.ndarray, factor: float, rate: int = 16000) -> np.ndarray:
    """WSOLA tempo change: ``factor`` > 1 is faster (shorter), pitch is kept.

    Args:
        x: ``(N,)`` float signal at ``rate``.
        factor: 0.5..2.0.

    Returns:
        ``(round(N / factor),)`` float32.
    """
    x, rate = _signal(x), _rate(rate)
    factor = _factor(factor, "tempo factor")
    n_out = int(round(len(x) / factor))
    if factor == 1.0 or len(x) == 0:
        return x.copy()
    win = 2 * int(0.0125 * rate)           # 25 ms, even
    hop = win // 2                          # synthesis hop (50 % overlap)
    tol = int(0.010 * rate)                 # +-10 ms search
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)).astype(np.float64)  # periodic Hann
    n_frames = n_out // hop + 2
    pad = tol + win
    xp = np.concatenate([np.zeros(pad), x.astype(np.float64), np.zeros(pad + int(n_frames * hop * factor) + win)])
    out = np.zeros(n_frames * hop + win)
    norm = np.zeros_like(out)
    prev = None  # analysis start (in xp) of the previous frame
    for k in range(n_frames):
        nominal = pad + int(round(k * hop * factor))
        if prev is None:
            start = nominal
        else:
            target = xp[prev + hop: prev + hop + win]  # natural continuation of the previous frame
            region = xp[nominal - tol: nominal + tol + win]
            corr = np.correlate(region, target, mode="valid")  # (2 tol + 1,)
            start = nominal - tol + int(np.argmax(corr))
        out[k * hop: k * hop + win] += xp[start: start + win] * window
        norm[k * hop: k * hop + win] += window
        prev = start
    # hop = win / 2 with a periodic Hann sums to 1 except in the first half-window
    y = out / np.maximum(norm, 1e-3)
    return y[:n_out].astype(np.float32)


def pitch_shift(x: np.ndarray, semitones: float, rate: int = 16000) -> np.ndarray:
    """Shift pitch by ``semitones`` (-12..12) keeping the duration.

    Returns:
        ``(N,)`` float32 (length within a few samples of the input, trimmed/padded to N).
    """
    x, rate = _signal(x), _rate(rate)
    if not isinstance(semitones, (int, float, np.floating)) or not -12.0 <= float(semitones) <= 12.0:
        raise ValueError(f"semitones must be a number in [-12, 12], got {semitones!r}")
    if semitones == 0 or len(x) == 0:
        return x.copy()
    in_rate = _quantized_rate(rate * 2.0 ** (float(semitones) / 12.0))
    stretched = tempo(x, rate / in_rate, rate)          # longer by in_rate / rate, same pitch
    y = resample(stretched, in_rate, rate)              # back to N samples, pitch * in_rate / rate
    return _fit(y, len(x))


def _quantized_rate(r: float) -> int:
    """Nearest multiple of 100 Hz: keeps the resampler's polyphase table small (ratio error < 0.4 %)."""
    return int(round(r / 100.0)) * 100


def _fit(y: np.ndarray, n: int) -> np.ndarray:
    return y[:n] if len(y) >= n else np.concatenate([y, np.zeros(n - len(y), dtype=y.dtype)])


def gain(x: np.ndarray, db: float) -> np.ndarray:
    """Scale by ``db`` decibels: ``(N,)`` -> ``(N,)`` float32 (no clipping)."""
    x = _signal(x)
    return (x * np.float32(10.0 ** (float(db) / 20.0))).astype(np.float32)


def pad_silence(x: np.ndarray, lead: float, trail: float, rate: int = 16000) -> np.ndarray:
    """Add ``lead`` / ``trail`` seconds (>= 0) of digital silence around ``x``."""
    x, rate = _signal(x), _rate(rate)
    if lead < 0 or trail < 0:
        raise ValueError(f"silence durations must be >= 0 s, got lead={lead} trail={trail}")
    a, b = int(round(lead * rate)), int(round(trail * rate))
    return np.concatenate([np.zeros(a, np.float32), x, np.zeros(b, np.float32)])


def colored_noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise with power spectrum ``~ 1/f^alpha`` (white 0, pink 1, brown 2).

    Returns:
        ``(n,)`` float32 with unit RMS (zero mean).
    """
    if color not in NOISE_COLORS:
        raise ValueError(f"noise color must be one of {sorted(NOISE_COLORS)}, got {color!r}")
    if n < 2:
        raise ValueError(f"noise length must be >= 2 samples, got {n}")
    alpha = NOISE_COLORS[color]
    white = rng.standard_normal(n)
    if alpha:
        spec = np.fft.rfft(white)
        f = np.fft.rfftfreq(n)
        f[0] = f[1]
        spec *= f ** (-alpha / 2.0)
        spec[0] = 0.0
        white = np.fft.irfft(spec, n)
    white -= white.mean()
    return (white / np.sqrt(np.mean(white ** 2))).astype(np.float32)


def babble(n: int, utterances: list[np.ndarray], rng: np.random.Generator, talkers: int = 4) -> np.ndarray:
    """Babble noise: ``talkers`` randomly chosen, randomly offset, looped utterances summed.

    Args:
        n: output length in samples.
        utterances: list of ``(M_i,)`` float signals at the target rate (not silent).
        talkers: number of overlapping voices (>= 1).

    Returns:
        ``(n,)`` float32 with unit RMS.
    """
    if not utterances:
        raise ValueError("babble needs at least one utterance, got an empty list")
    if talkers < 1:
        raise ValueError(f"talkers must be >= 1, got {talkers}")
    out = np.zeros(n, dtype=np.float64)
    for _ in range(talkers):
        u = _signal(utterances[int(rng.integers(len(utterances)))], "babble utterance").astype(np.float64)
        rms = np.sqrt(np.mean(u ** 2)) if len(u) else 0.0
        if rms == 0.0:
            raise ValueError("babble utterances must not be silent or empty")
        reps = -(-(n + len(u)) // len(u))
        looped = np.tile(u, reps)
        off = int(rng.integers(len(u)))
        out += looped[off: off + n] / rms
    rms = np.sqrt(np.mean(out ** 2))
    return (out / rms if rms > 0 else out).astype(np.float32)


def snr_db(signal: np.ndarray, noise: np.ndarray) -> float:
    """``10 log10(mean(signal^2) / mean(noise^2))`` (same-length ``(N,)`` arrays)."""
    return float(10.0 * np.log10(np.mean(np.square(signal, dtype=np.float64)) /
                                 np.mean(np.square(noise, dtype=np.float64))))


def add_noise(x: np.ndarray, noise: np.ndarray, snr: float, *, signal_power: float | None = None) -> np.ndarray:
    """Add ``noise`` scaled so that the signal-to-noise ratio is ``snr`` dB.

    Args:
        x: ``(N,)`` float signal.
        noise: ``(M,)`` float noise, ``M >= N`` (the first N samples are used).
        snr: target SNR in dB.
        signal_power: mean power to use for the signal instead of ``mean(x^2)``
            (e.g. the power of the speech before silence padding).

    Returns:
        ``(N,)`` float32 ``x + g * noise[:N]`` (no clipping).
    """
    x, noise = _signal(x), _signal(noise, "noise")
    if len(noise) < len(x):
        raise ValueError(f"noise is shorter than the signal: {len(noise)} < {len(x)} samples")
    noise = noise[: len(x)].astype(np.float64)
    ps = float(np.mean(np.square(x, dtype=np.float64))) if signal_power is None else float(signal_power)
    pn = float(np.mean(noise ** 2))
    if ps <= 0:
        raise ValueError("cannot set an SNR for a silent signal (signal power is 0)")
    if pn <= 0:
        raise ValueError("noise is silent (power 0)")
    g = math.sqrt(ps / (pn * 10.0 ** (snr / 10.0)))
    return (x + g * noise).astype(np.float32)


def synthetic_rir(rt60: float, rate: int, rng: np.random.Generator, *, drr_db: float = 5.0,
                  predelay: float = 0.004) -> np.ndarray:
    """Synthetic room impulse response.

    ``h[0] = 1`` (direct path); from ``predelay`` seconds on, Gaussian noise
    times ``exp(-6.908 t / rt60)`` (amplitude -60 dB at ``t = rt60``), scaled
    so that direct energy / tail energy is ``drr_db``.

    Returns:
        ``(round(rt60 * rate) + 1,)`` float32.
    """
    rate = _rate(rate)
    if not 0.05 <= rt60 <= 3.0:
        raise ValueError(f"rt60 must be in [0.05, 3.0] s, got {rt60}")
    n = int(round(rt60 * rate)) + 1
    t = np.arange(n) / rate
    tail = rng.standard_normal(n) * np.exp(-6.908 * t / rt60)
    tail[: max(1, int(round(predelay * rate)))] = 0.0
    tail *= math.sqrt(10.0 ** (-drr_db / 10.0) / np.sum(tail ** 2))
    tail[0] = 1.0
    return tail.astype(np.float32)


def reverberate(x: np.ndarray, rt60: float, rate: int, rng: np.random.Generator, *,
                drr_db: float = 5.0) -> np.ndarray:
    """Convolve with :func:`synthetic_rir`; output ``(N,)`` float32 with the input's RMS."""
    x, rate = _signal(x), _rate(rate)
    h = synthetic_rir(rt60, rate, rng, drr_db=drr_db).astype(np.float64)
    if len(x) == 0:
        return x.copy()
    m = len(x) + len(h) - 1
    nfft = 1 << (m - 1).bit_length()
    y = np.fft.irfft(np.fft.rfft(x.astype(np.float64), nfft) * np.fft.rfft(h, nfft), nfft)[: len(x)]
    rx, ry = np.sqrt(np.mean(x.astype(np.float64) ** 2)), np.sqrt(np.mean(y ** 2))
    return (y * (rx / ry) if ry > 0 else y).astype(np.float32)


def _bandpass(lo: float, hi: float, rate: int, taps: int = 255) -> np.ndarray:
    """Linear-phase windowed-sinc (Blackman) band-pass FIR, ``(taps,)``."""
    n = np.arange(taps) - (taps - 1) / 2
    w = np.blackman(taps)

    def lowpass(fc: float) -> np.ndarray:
        h = 2 * fc / rate * np.sinc(2 * fc / rate * n) * w
        return h / h.sum()

    return lowpass(hi) - lowpass(lo)


def _mu_law(x: np.ndarray, mu: float = 255.0) -> np.ndarray:
    """G.711-style mu-law encode to 8 bits and decode back."""
    x = np.clip(x, -1.0, 1.0)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu)
    q = np.round((y + 1.0) / 2.0 * 255.0) / 255.0 * 2.0 - 1.0
    return np.sign(q) * ((1.0 + mu) ** np.abs(q) - 1.0) / mu


def telephone(x: np.ndarray, rate: int = 16000, *, mu_law: bool = True, bandpass: bool = True) -> np.ndarray:
    """Narrow-band telephone channel: 300-3400 Hz, 8 kHz sampling, optional mu-law.

    With ``bandpass=False`` and ``mu_law=False`` this is a plain 8 kHz round
    trip (what a client that sends 8 kHz audio gives the recognizer).

    Returns:
        ``(N,)`` float32 at ``rate`` (no energy above 4 kHz).
    """
    x, rate = _signal(x), _rate(rate)
    if len(x) == 0:
        return x.copy()
    y = np.convolve(x.astype(np.float64), _bandpass(300.0, 3400.0, rate), mode="same") if bandpass else x
    y8 = resample(y.astype(np.float32), rate, 8000)
    if mu_law:
        y8 = _mu_law(y8.astype(np.float64)).astype(np.float32)
    return _fit(resample(y8, 8000, rate), len(x)).astype(np.float32)


def write_wav(path: str | os.PathLike, x: np.ndarray, rate: int = 16000) -> None:
    """Write ``(N,)`` float samples in [-1, 1] as a 16-bit mono WAV, atomically (a ``.tmp`` file renamed)."""
    path = Path(path)
    pcm = np.clip(np.round(np.asarray(x, dtype=np.float64) * 32767.0), -32768, 32767).astype("<i2")
    tmp = path.with_suffix(".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(_rate(rate))
        w.writeframes(pcm.tobytes())
    os.replace(tmp, path)
