"""Speaker perturbation by WORLD analysis-resynthesis (numpy in/out, offline).

A TTS corpus has a few dozen voices; real users have other vocal tracts and
other intonation.  :func:`world_perturb` makes a new "speaker" from an
utterance with the WORLD vocoder (``pip install pyworld``):

1. analysis: F0 by DIO (or Harvest) refined by StoneMask, spectral envelope
   by CheapTrick, band aperiodicity by D4C (5 ms frames);
2. vocal-tract length: the spectral envelope is warped along frequency,
   ``S'(f) = S(f / alpha)`` (interpolated in the log domain), so every
   formant moves from ``F`` to ``alpha * F`` (alpha > 1: shorter tract, e.g.
   a female or child voice from a male one).  The aperiodicity is warped by
   the same map so noise bands stay with the formants they belong to;
3. pitch contour, on voiced frames, in the log domain around the utterance's
   mean log-F0 ``m``: ``log f0' = m + log(f0_factor) + excursion * (log f0 - m)
   + drift(t)``: a global factor, a scale of the intonation excursions
   (< 1 flatter, > 1 livelier) and a slow random drift (a sum of three
   sinusoids at 0.15-1 Hz with random phases, peak ``drift_cents`` cents);
4. synthesis, trimmed / zero-padded to the input length and scaled to the
   input RMS (the level is kept).

Silent input (RMS < 1e-6) and input shorter than :data:`MIN_SAMPLES` are
returned unchanged (a copy); input without voiced frames (noise) gets the
envelope warp only.  Randomness comes only from the ``np.random.Generator``
argument.  Cost: about 0.1 s of CPU per second of 16 kHz audio with DIO
(Harvest: about 0.3 s).
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import asdict, dataclass

import numpy as np

from streamd.train.augment import _rate, _signal

__all__ = ["VoiceParams", "sample_voice_params", "world_perturb", "warp_envelope", "MIN_SAMPLES", "ALPHA_RANGE"]

FRAME_MS = 5.0
MIN_SAMPLES = 1024                # shorter input is returned unchanged (too few frames for the analysis)
ALPHA_RANGE = (0.8, 1.25)         # accepted warp factors (sample_voice_params draws 0.85..1.2)
F0_FACTOR_RANGE = (0.5, 2.0)
EXCURSION_RANGE = (0.0, 2.5)
_F0_FLOOR, _F0_CEIL = 60.0, 600.0  # DIO search range (Hz); CheapTrick uses the same floor
_F0_OUT = (40.0, 1000.0)           # the modified contour is clipped to this


@dataclass(frozen=True)
class VoiceParams:
    """One speaker perturbation.

    Attributes:
        alpha: formant (frequency-axis) warp factor, 0.8..1.25 (VTL ratio source / target).
        f0_factor: global F0 factor, 0.5..2.0.
        excursion: scale of log-F0 excursions around the utterance mean, 0..2.5 (1 = unchanged).
        drift_cents: peak of the slow random F0 drift in cents, 0..300.
    """

    alpha: float
    f0_factor: float
    excursion: float
    drift_cents: float

    def __post_init__(self) -> None:
        for name, (lo, hi) in (("alpha", ALPHA_RANGE), ("f0_factor", F0_FACTOR_RANGE),
                               ("excursion", EXCURSION_RANGE), ("drift_cents", (0.0, 300.0))):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not lo <= float(v) <= hi:
                raise ValueError(f"VoiceParams.{name} must be a number in [{lo}, {hi}], got {v!r}")

    def to_dict(self) -> dict:
        """Rounded values for a manifest's ``aug`` field."""
        return {k: round(float(v), 3) for k, v in asdict(self).items()}

    @property
    def identity(self) -> bool:
        return self.alpha == 1.0 and self.f0_factor == 1.0 and self.excursion == 1.0 and self.drift_cents == 0.0


def sample_voice_params(rng: np.random.Generator) -> VoiceParams:
    """Draw a speaker: alpha log-uniform in 0.85..1.2; F0 factor ``alpha^1.5`` times a log-normal
    spread (sigma 0.12), clipped to 0.65..1.6 (shorter tracts tend to go with higher voices);
    excursion uniform 0.6..1.5; drift uniform 0..80 cents."""
    alpha = math.exp(rng.uniform(math.log(0.85), math.log(1.2)))
    f0 = float(np.clip(alpha ** 1.5 * math.exp(rng.normal(0.0, 0.12)), 0.65, 1.6))
    return VoiceParams(alpha=round(alpha, 4), f0_factor=round(f0, 4),
                       excursion=round(float(rng.uniform(0.6, 1.5)), 4),
                       drift_cents=round(float(rng.uniform(0.0, 80.0)), 2))


def _pyworld():
    """Import pyworld.  pyworld 0.3.x reads its version with ``pkg_resources`` (gone from recent
    setuptools); when that import is missing a stub serves the import and is removed again."""
    try:
        import pyworld
        return pyworld
    except ModuleNotFoundError as e:
        if e.name == "pyworld":
            raise ImportError("speaker perturbation needs the WORLD vocoder: pip install pyworld") from None
        if e.name != "pkg_resources":
            raise
    import importlib.metadata as md

    stub = types.ModuleType("pkg_resources")
    stub.get_distribution = lambda name: types.SimpleNamespace(version=md.version(name))  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = stub
    try:
        import pyworld
    finally:
        if sys.modules.get("pkg_resources") is stub:
            del sys.modules["pkg_resources"]
    return pyworld


def warp_envelope(env: np.ndarray, alpha: float, log: bool = True) -> np.ndarray:
    """Warp ``(T, K)`` per-frame spectra along frequency: ``out[:, k] = env[:, k / alpha]``.

    Linear interpolation between bins (of ``log(env)`` when ``log``); past the last bin the
    last value is held.  A peak at bin ``k`` moves to ``alpha * k``."""
    env = np.asarray(env, dtype=np.float64)
    if env.ndim != 2:
        raise ValueError(f"env must be a (T, K) array of spectra, got shape {env.shape}")
    if alpha == 1.0:
        return env.copy()
    k = env.shape[1]
    src = np.arange(k) / float(alpha)
    lo = np.minimum(np.floor(src).astype(np.int64), k - 1)
    hi = np.minimum(lo + 1, k - 1)
    w = np.clip(src - lo, 0.0, 1.0)[None, :]
    w[:, src >= k - 1] = 0.0
    v = np.log(np.maximum(env, 1e-300)) if log else env
    out = v[:, lo] * (1.0 - w) + v[:, hi] * w
    return np.exp(out) if log else out


def _drift(n_frames: int, cents: float, rng: np.random.Generator) -> np.ndarray:
    """``(n_frames,)`` natural-log F0 offsets: three sinusoids (0.15-1 Hz), peak ``cents``."""
    if cents <= 0 or n_frames == 0:
        return np.zeros(n_frames)
    t = np.arange(n_frames) * FRAME_MS / 1000.0
    freqs, phases, amps = rng.uniform(0.15, 1.0, 3), rng.uniform(0, 2 * np.pi, 3), rng.uniform(0.3, 1.0, 3)
    d = (amps[:, None] * np.sin(2 * np.pi * freqs[:, None] * t[None, :] + phases[:, None])).sum(axis=0)
    peak = float(np.max(np.abs(d)))
    return d / peak * (cents / 1200.0 * math.log(2.0)) if peak > 0 else d


def world_perturb(x: np.ndarray, rate: int, rng: np.random.Generator, params: VoiceParams | None = None, *,
                  f0_method: str = "dio") -> np.ndarray:
    """New speaker from ``x`` by WORLD analysis, envelope warp, F0 contour change and resynthesis.

    Args:
        x: ``(N,)`` float signal at ``rate`` (mono, finite).
        rate: 8000..48000 Hz.
        rng: source of the F0 drift (and of ``params`` when None).
        params: the perturbation; None draws :func:`sample_voice_params` from ``rng``.
        f0_method: "dio" (fast, default) or "harvest" (more robust on noisy audio, ~3x slower).

    Returns:
        ``(N,)`` float32 with the RMS of ``x``.  Silent or short (< ``MIN_SAMPLES``) input is
        returned unchanged.
    """
    x, rate = _signal(x), _rate(rate)
    if f0_method not in ("dio", "harvest"):
        raise ValueError(f"f0_method must be 'dio' or 'harvest', got {f0_method!r}")
    if params is None:
        params = sample_voice_params(rng)
    elif not isinstance(params, VoiceParams):
        raise ValueError(f"params must be a VoiceParams or None, got {type(params).__name__}")
    n = len(x)
    xd = x.astype(np.float64)
    rms = float(np.sqrt(np.mean(xd ** 2))) if n else 0.0
    if n < MIN_SAMPLES or rms < 1e-6:
        return x.copy()
    pw = _pyworld()
    xd = np.ascontiguousarray(xd)
    if f0_method == "dio":
        f0, t = pw.dio(xd, rate, f0_floor=_F0_FLOOR, f0_ceil=_F0_CEIL, frame_period=FRAME_MS)
    else:
        f0, t = pw.harvest(xd, rate, f0_floor=_F0_FLOOR, f0_ceil=_F0_CEIL, frame_period=FRAME_MS)
    f0 = pw.stonemask(xd, f0, t, rate)
    sp = pw.cheaptrick(xd, f0, t, rate, f0_floor=_F0_FLOOR)
    ap = pw.d4c(xd, f0, t, rate)
    drift = _drift(len(f0), float(params.drift_cents), rng)
    if params.identity:
        f0_new = f0
    else:
        sp = warp_envelope(sp, float(params.alpha), log=True)
        ap = np.clip(warp_envelope(ap, float(params.alpha), log=False), 0.0, 1.0)
        voiced = f0 > 0
        f0_new = np.zeros_like(f0)
        if voiced.any():
            lf = np.log(f0[voiced])
            m = float(lf.mean())
            lf_new = m + math.log(params.f0_factor) + params.excursion * (lf - m) + drift[voiced]
            f0_new[voiced] = np.clip(np.exp(lf_new), *_F0_OUT)
    y = pw.synthesize(np.ascontiguousarray(f0_new), np.ascontiguousarray(sp), np.ascontiguousarray(ap),
                      rate, FRAME_MS)
    y = y[:n] if len(y) >= n else np.concatenate([y, np.zeros(n - len(y))])
    if not np.all(np.isfinite(y)):  # pragma: no cover - defensive: WORLD should not produce NaN
        return x.copy()
    ry = float(np.sqrt(np.mean(y ** 2)))
    return (y * (rms / ry) if ry > 0 else y).astype(np.float32)
