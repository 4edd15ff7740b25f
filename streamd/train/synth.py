"""Build a synthetic 16 kHz training corpus: text -> TTS -> augmentation -> WAV + manifest.

Pipeline (``streamd synth``):

1. :func:`plan_corpus` (main process, sequential, so it depends only on the
   seed and the voice list): each utterance is a wake-word positive
   ("hey stream ...", probability ``kws_fraction``), a confusable negative
   (``negatives_fraction``) or a plain in-domain sentence, from one
   :class:`~streamd.train.text.TextGenerator`; an engine is drawn with
   :data:`ENGINE_WEIGHTS` (renormalized over the installed engines), then a
   voice of that engine uniformly (espeak: 30 % a bare accent voice, else any
   accent+variant); TTS speed (0.85-1.2) and pitch (half the time +-2
   semitones) are drawn too.
2. :func:`render` (worker processes): synthesize, then augment with a
   generator seeded by ``(seed, index)``, so the audio of utterance ``i`` does
   not depend on which worker made it or in which order.  About 30 % get a
   WSOLA tempo change and 15 % a speed perturbation; 25 % reverberation
   (RT60 0.2-0.9 s); level set to -35..-15 dBFS RMS; 0.05-0.8 s of leading and
   trailing silence; half get noise at 0-30 dB SNR (white / pink / brown, or
   babble of 3-5 other synthesized sentences), the rest a faint white floor
   (45-70 dB SNR); 15 % pass through a telephone channel and another 15 % through
   a plain 8 kHz round trip (``narrowband``); peaks above 0.99 are
   scaled down.  SNR is relative to the speech power before padding.
3. 16-bit mono WAVs under ``shard-XXXX/`` (``shard_size`` per folder) and one
   ``manifest.jsonl`` line per utterance, in index order: ``audio`` (path
   relative to the manifest), ``text``, ``voice`` (:attr:`Voice.id`),
   ``duration`` (s), ``keyword`` ("hey stream" or null), ``aug`` (what was applied).
4. ``clean.jsonl``: the same lines for the utterances without added noise,
   reverberation, channel colouring or narrow band (about a quarter), for the
   first stage of the training curriculum (configs/train.yaml).

Optional speaker and channel diversity (all off by default, so corpora made
before reproduce exactly), drawn from generators of their own seeded by
``(seed, index)`` (:class:`streamd.train.augment_manifest.AugmentChain`):
``--voice-perturb P`` (WORLD speaker change, right after TTS), ``--real-rir P`` /
``--room-sim P`` (a real or simulated room instead of the synthetic
reverberation), ``--real-noise P`` with ``--noise-manifest M`` (real noise
at 0-30 dB SNR instead of the synthetic noise or floor) and ``--channel P``
(microphone colouring, before the telephone stage).

``--texts FILE`` (with ``--texts-share P``, default 0.5) puts your own domain
sentences in the corpus: that share of the plain sentences is one of the
file's lines, normalized to the model's spoken form (:func:`read_texts`) and
spoken by the same voices, the same augmentation; the wake-word positives and
negatives are unchanged.  This is how the default recipe gives the voices the
prompts of the Asterisk training split (never its held-out ones).

If an engine fails on a text, the utterance is retried with the next voice
drawn from its generator (up to 3 voices); the manifest names the voice used.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from streamd.train import augment as A
from streamd.train.jobs import job_results, report_progress
from streamd.text.normalize import normalize_text
from streamd.train.text import KEYWORD, TextGenerator, spoken_form
from streamd.train.tts import ENGINES, TTSError, Voice, list_voices, synthesize

__all__ = ["ENGINE_WEIGHTS", "UttPlan", "plan_corpus", "choose_text", "read_texts", "render", "synthesize_corpus",
           "benchmark"]

RATE = 16000
ENGINE_WEIGHTS = {"espeak": 0.4, "piper": 0.25, "flite": 0.2, "festival": 0.15}
_BABBLE_ENGINES = ("espeak", "flite")  # fast engines for background talkers
_MAX_VOICE_TRIES = 3
_ESPEAK_PLAIN = 0.3  # share of espeak picks using a bare accent voice (else one of ~100 variants x accents)


@dataclass(frozen=True)
class UttPlan:
    """Everything needed to render one utterance deterministically.

    Attributes:
        index: position in the corpus (also names the file).
        text: normalized transcript.
        spoken: text given to the TTS engine (a.m. spelled for engines, optional comma after the wake phrase).
        keyword: "hey stream" for wake-word positives, else None.
        voice: the planned voice (a fallback may replace it if it fails).
        speed: TTS tempo factor.  pitch: TTS pitch shift in semitones.
        seed: corpus seed (the augmentation generator is seeded with ``(seed, index)``).
    """

    index: int
    text: str
    spoken: str
    keyword: str | None
    voice: Voice
    speed: float
    pitch: float
    seed: int


def _pick_voice(rng: np.random.Generator, by_engine: dict[str, list[Voice]]) -> Voice:
    engines = sorted(by_engine)
    w = np.array([ENGINE_WEIGHTS.get(e, 0.1) for e in engines])
    engine = engines[int(rng.choice(len(engines), p=w / w.sum()))]
    vs = by_engine[engine]
    if engine == "espeak" and rng.random() < _ESPEAK_PLAIN:
        vs = [v for v in vs if "+" not in v.name] or vs
    return vs[int(rng.integers(len(vs)))]


def _group(voices: list[Voice]) -> dict[str, list[Voice]]:
    by_engine: dict[str, list[Voice]] = {}
    for v in voices:
        by_engine.setdefault(v.engine, []).append(v)
    return by_engine


def choose_text(gen: TextGenerator, r: float, kws_fraction: float, negatives_fraction: float
                ) -> tuple[str, str | None]:
    """(text, keyword) of one utterance, by the uniform draw r in [0, 1): a wake-word positive below
    ``kws_fraction``, then a confusable negative (``negatives_fraction``), else a plain sentence."""
    if r < kws_fraction:
        return gen.keyword_sentence(), KEYWORD
    if r < kws_fraction + negatives_fraction:
        return gen.confusable_negative(), None
    return gen.sentence(), None


def plan_corpus(num_utts: int, seed: int, kws_fraction: float, negatives_fraction: float,
                voices: list[Voice], slot_focus: float = 0.0, texts: Sequence[str] = (),
                texts_share: float = 0.0) -> list[UttPlan]:
    """Texts, voices and TTS settings for ``num_utts`` utterances (deterministic given the arguments).

    ``slot_focus``: share of the plain sentences drawn from ``TextGenerator.slot_drill``.
    ``texts`` / ``texts_share``: that share of the plain sentences is instead one of ``texts`` (your
    own domain sentences, already in spoken form: :func:`read_texts`), drawn uniformly by a generator
    of its own, so the other draws, and a corpus made without ``texts``, stay the same."""
    if not 0 <= texts_share <= 1:
        raise ValueError(f"texts_share must be in [0, 1], got {texts_share}")
    if texts_share > 0 and not texts:
        raise ValueError("texts_share > 0 needs a non-empty list of texts")
    if num_utts < 1:
        raise ValueError(f"num_utts must be >= 1, got {num_utts}")
    if not (0 <= kws_fraction <= 1 and 0 <= negatives_fraction <= 1 and kws_fraction + negatives_fraction <= 1):
        raise ValueError("kws_fraction and negatives_fraction must be in [0, 1] with a sum <= 1, got "
                         f"{kws_fraction} and {negatives_fraction}")
    if not voices:
        raise ValueError("no TTS voices available: install espeak-ng, flite, festival or piper-tts "
                         "(see streamd.train.tts)")
    gen = TextGenerator(seed, slot_focus)
    rng = np.random.default_rng([seed, 1 << 30])
    own = np.random.default_rng([seed, 1 << 29])  # draws for ``texts`` only
    by_engine = _group(voices)
    plans = []
    for i in range(num_utts):
        r = rng.random()
        text, keyword = choose_text(gen, r, kws_fraction, negatives_fraction)
        if texts_share > 0 and r >= kws_fraction + negatives_fraction and own.random() < texts_share:
            text = texts[int(own.integers(len(texts)))]
        spoken = spoken_form(text)
        if keyword and spoken != KEYWORD and rng.random() < 0.4:
            spoken = spoken.replace(KEYWORD, KEYWORD + ",", 1)
        voice = _pick_voice(rng, by_engine)
        speed = float(rng.uniform(0.85, 1.2))
        pitch = float(rng.uniform(-2.0, 2.0)) if rng.random() < 0.5 else 0.0
        plans.append(UttPlan(i, text, spoken, keyword, voice, round(speed, 3), round(pitch, 2), seed))
    return plans


def read_texts(path: str | os.PathLike) -> list[str]:
    """Sentences of a text file, one per line, in the model's spoken form (:func:`normalize_text`:
    numbers spelled out, symbols and punctuation as the model writes them); blank lines are skipped.
    ValueError names the line that normalizes to nothing."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            text = normalize_text(line)
            if not text:
                raise ValueError(f"{path}:{n}: no words left after normalization: {line.strip()!r}")
            out.append(text)
    if not out:
        raise ValueError(f"{path}: no sentences")
    return out


def _babble_noise(n: int, rng: np.random.Generator, by_engine: dict[str, list[Voice]]) -> np.ndarray:
    engines = [e for e in _BABBLE_ENGINES if e in by_engine] or sorted(by_engine)
    gen = TextGenerator(int(rng.integers(2**31)))
    talkers = []
    for _ in range(int(rng.integers(3, 6))):
        vs = by_engine[engines[int(rng.integers(len(engines)))]]
        v = vs[int(rng.integers(len(vs)))]
        talkers.append(synthesize(v, spoken_form(gen.sentence()), RATE, seed=int(rng.integers(2**31))))
    return A.babble(n, talkers, rng, talkers=len(talkers))


def render(plan: UttPlan, voices: list[Voice] | None = None, extras=None) -> tuple[np.ndarray, Voice, dict]:
    """Synthesize and augment one utterance.

    Args:
        plan: from :func:`plan_corpus`.
        voices: candidates for fallbacks and babble (default: :func:`list_voices`).
        extras: an optional :class:`streamd.train.augment_manifest.AugmentChain` (voice, real / simulated
            room, real noise and channel stages; its other probabilities are not used here).

    Returns:
        ``(audio, voice, aug)``: ``(N,)`` float32 at 16 kHz in [-0.99, 0.99], the
        voice actually used, and a dict describing the augmentation.
    """
    voices = list_voices() if voices is None else voices
    by_engine = _group(voices)
    rng = np.random.default_rng([plan.seed, plan.index])
    voice, errors = plan.voice, []
    for _ in range(_MAX_VOICE_TRIES):
        try:
            x = synthesize(voice, plan.spoken, RATE, speed=plan.speed, pitch=plan.pitch,
                           seed=int(rng.integers(2**31)))
            break
        except TTSError as e:
            errors.append(str(e))
            voice = _pick_voice(rng, by_engine)
    else:
        raise TTSError(f"utterance {plan.index} ({plan.text!r}) failed with {_MAX_VOICE_TRIES} voices: "
                       + " | ".join(errors))
    aug: dict = {"tts_speed": plan.speed, "tts_pitch": plan.pitch}
    xr = None
    if extras is not None and extras.active:
        from streamd.train.augment_manifest import stage_rngs

        xr = stage_rngs([plan.seed, plan.index, _EXTRAS_KEY])
        x = extras.apply_voice(x, xr["voice"], aug)
    r = rng.random()
    if r < 0.3:
        aug["tempo"] = round(float(rng.uniform(0.85, 1.15)), 3)
        x = A.tempo(x, aug["tempo"], RATE)
    elif r < 0.45:
        aug["speed"] = float(rng.choice([0.9, 1.1]))
        x = A.speed_perturb(x, aug["speed"], RATE)
    if xr is not None:
        x = extras.apply_room(x, xr["room"], aug)
    if "rir" not in aug and rng.random() < 0.25:
        aug["rt60"] = round(float(rng.uniform(0.2, 0.9)), 3)
        x = A.reverberate(x, aug["rt60"], RATE, rng, drr_db=float(rng.uniform(-2.0, 12.0)))
    level = float(rng.uniform(-35.0, -15.0))
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    x = A.gain(x, level - 20.0 * np.log10(rms))
    speech_power = float(np.mean(np.square(x, dtype=np.float64)))
    x = A.pad_silence(x, float(rng.uniform(0.05, 0.8)), float(rng.uniform(0.05, 0.8)), RATE)
    if xr is not None:
        x = extras.apply_noise(x, xr["noise"], aug, signal_power=speech_power)
    if "snr" in aug:  # real noise (extras) instead of the synthetic noise or floor
        pass
    elif rng.random() < 0.5:
        aug["snr"] = round(float(rng.uniform(0.0, 30.0)), 2)
        kind = str(rng.choice(["white", "pink", "brown", "babble"], p=[0.2, 0.35, 0.2, 0.25]))
        aug["noise"] = kind
        noise = _babble_noise(len(x), rng, by_engine) if kind == "babble" else A.colored_noise(len(x), kind, rng)
        x = A.add_noise(x, noise, aug["snr"], signal_power=speech_power)
    else:
        x = A.add_noise(x, A.colored_noise(len(x), "white", rng), float(rng.uniform(45.0, 70.0)),
                        signal_power=speech_power)
    if xr is not None:
        x = extras.apply_channel(x, xr["channel"], aug)
    r = rng.random()
    if r < 0.15:
        aug["telephone"] = True
        x = A.telephone(x, RATE)
    elif r < 0.3:
        aug["narrowband"] = True
        x = A.telephone(x, RATE, mu_law=False, bandpass=False)
    peak = float(np.max(np.abs(x)))
    if peak > 0.99:
        x = x * np.float32(0.99 / peak)
    return x.astype(np.float32), voice, aug



_WORKER_VOICES: list[Voice] | None = None
_WORKER_OUT: Path | None = None
_WORKER_EXTRAS = None
_EXTRAS_KEY = 0x5845  # third seed word of the extra-stage generators


def _init_worker(voices: list[Voice], out_dir: str, extras=None) -> None:
    global _WORKER_VOICES, _WORKER_OUT, _WORKER_EXTRAS
    _WORKER_VOICES, _WORKER_OUT, _WORKER_EXTRAS = voices, Path(out_dir), extras


def _job(args: tuple[UttPlan, str]) -> dict:
    plan, rel = args
    x, voice, aug = render(plan, _WORKER_VOICES, _WORKER_EXTRAS)
    path = _WORKER_OUT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    A.write_wav(path, x, RATE)
    return {"audio": rel, "text": plan.text, "voice": voice.id, "duration": round(len(x) / RATE, 3),
            "keyword": plan.keyword, "aug": aug}


def synthesize_corpus(out_dir: str | os.PathLike, num_utts: int, seed: int = 0, kws_fraction: float = 0.25,
                      negatives_fraction: float = 0.15, workers: int = 1, *,
                      engines: tuple[str, ...] | list[str] | None = None, shard_size: int = 1000,
                      progress: bool = False, slot_focus: float = 0.0, extras=None,
                      texts: Sequence[str] = (), texts_share: float = 0.0) -> Path:
    """Generate ``num_utts`` utterances under ``out_dir``; returns the path of ``manifest.jsonl``.

    Same seed and same installed voices give the same texts and the same audio,
    whatever ``workers`` is.  ``engines`` restricts the TTS engines used.
    ``extras``: optional :class:`streamd.train.augment_manifest.AugmentChain` (see :func:`render`).
    ``texts`` / ``texts_share``: domain sentences (see :func:`plan_corpus`).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    voices = list_voices(engines)
    plans = plan_corpus(num_utts, seed, kws_fraction, negatives_fraction, voices, slot_focus, texts, texts_share)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(p, f"shard-{p.index // shard_size:04d}/utt-{p.index:08d}.wav") for p in plans]
    manifest, tmp = out / "manifest.jsonl", out / "manifest.jsonl.tmp"
    clean, clean_tmp = out / "clean.jsonl", out / "clean.jsonl.tmp"
    t0 = time.monotonic()
    with open(tmp, "w", encoding="utf-8") as f, open(clean_tmp, "w", encoding="utf-8") as fc, \
            job_results(_job, jobs, workers, _init_worker, (voices, str(out), extras), 4) as results:
        for k, row in enumerate(results, 1):
            f.write(json.dumps(row) + "\n")
            if is_clean(row["aug"]):
                fc.write(json.dumps(row) + "\n")
            if progress:
                report_progress("synth", k, num_utts, "utterances", 100, t0)
    os.replace(clean_tmp, clean)
    os.replace(tmp, manifest)
    return manifest


def is_clean(aug: dict) -> bool:
    """True for an utterance (its manifest ``aug``) with no noise, reverberation, channel colouring,
    telephone or 8 kHz round trip."""
    return (aug.get("snr") is None and aug.get("rt60") is None and not aug.get("telephone")
            and not aug.get("narrowband") and aug.get("rir") is None and not aug.get("channel"))


def benchmark(engines: tuple[str, ...] = ENGINES, n: int = 10, seed: int = 0) -> dict[str, float]:
    """Utterances per CPU-second (TTS + augmentation, this process and its children) per installed engine."""
    out = {}
    for e in engines:
        voices = list_voices([e])
        if not voices:
            continue
        plans = plan_corpus(n, seed, 0.25, 0.15, voices)
        render(plans[0], voices)  # warm-up (model loading)
        c0 = _cpu_seconds()
        for p in plans:
            render(p, voices)
        out[e] = n / (_cpu_seconds() - c0)
    return out


def _cpu_seconds() -> float:
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
