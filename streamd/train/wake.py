"""``streamd wake train "hey jarvis"``: a wake model (:mod:`streamd.model.wake`) trained from the keyword's text.

Data, all made or read here (nothing downloaded), seeded by ``seed``:

1. **Positives**: the keyword spoken by the corpus's TTS voices (:mod:`streamd.train.tts`: espeak-ng, flite,
   festival, piper as installed, drawn with :data:`streamd.train.synth.ENGINE_WEIGHTS`; TTS speed
   0.8-1.25, pitch +-3 semitones), half of them given a new speaker by WORLD resynthesis
   (:mod:`streamd.train.voices`), trimmed, then ``copies`` placements each: 0-1.2 s of lead, a speed
   perturbation (30 %), a room (45 %: a simulated shoebox room when pyroomacoustics is installed, else
   the synthetic reverberation), real background noise from the training split of Speech Commands
   (``_silence_`` clips, 60 %, 0-30 dB SNR) or a faint white floor, a microphone colouring (30 %), an 8 kHz
   round trip or telephone band (20 %), level -40..-12 dBFS.
2. **Negatives**: confusable phrases spoken the same way (each word of the keyword alone, its partial
   phrases, the keyword with a word's first sound changed, the words in reverse order; **sound-alikes**
   (:func:`sound_alikes`): the keyword with a word replaced by dictionary words 1 to ~35 % of phoneme edits
   away, "hey savant" -> "hey levant", "chatterbox" -> "chapter box", from the CMU dictionary that festival
   installs; plain sentences of :class:`streamd.train.text.TextGenerator`; ``wide_negatives`` farther
   sound-alikes (:func:`wide_sound_alikes`: same syllable count, more than ~35 % and up to half of a word's
   phonemes changed, "hey savant" -> "hey vermont"; up to ``rhyme_share`` of them keep the replaced word's
   rhyme, its last vowel and what follows, "hey savant" -> "hey dupont")), the parts of each positive
   placement before the keyword is half said, and all the real speech and noise of the training splits
   (:data:`REAL_SPLITS`, ~4.8 h: never ``mycroft``, never a dev split; a real clip whose transcript holds the
   keyword is left out).  The real files' embeddings are kept on disk (:func:`real_cache_file`).
3. Each file is embedded once (the frozen speech_embedding, as at run time: the file after
   ``PREFIX_SAMPLES`` of silence) and scored in 16-embedding windows (:class:`_Windows` gathers them without
   copies); a positive window is one that ends 0-0.32 s after the keyword ends.
4. The head (:class:`streamd.model.wake.WakeHead`) is trained with weighted binary cross-entropy, AdamW, 8
   epochs, each on every positive and synthetic negative window and a quarter of the real negative windows;
   then **hard-negative mining**: the 3000 training negative windows the first head scores highest are added
   three times and a fresh head of ``members`` nets is trained (each net from its own seed, ``seed``,
   ``seed + 1``, ...).  25 % of the negative files (by hash of the name) and of the positive TTS utterances
   are held out.  Steps 1, 3 and 4 run ``draws`` times, each draw with its own seed (:func:`_draw_seed`): new
   TTS voices, texts and placements (the real negatives are the same files); the head holds the nets of every
   draw and its logit is the mean of theirs (bagging: what a run learns depends on which voices and placements
   its draw holds, and the draws' nets average that out).
5. The threshold is the lowest logit whose detections (the detector's rule: score >= threshold, refractory
   1 s) on the held-out **real** negatives (~1.2 h) stay at or below ``target_fa_per_h``; then the last layer
   of each net is **calibrated** (:func:`_calibrate`): its score is 0.5 at that threshold and 0.95 at the median
   held-out positive, so the file's threshold is 0.5 and scores do not saturate (the order of scores is
   unchanged).  The file records the DET curve (held-out miss rate against false alarms per hour on the
   real negatives, calibrated scores), the data counts and the time taken.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from streamd.model.speech_embedding import load_speech_embedding
from streamd.model.wake import PREFIX_SAMPLES, WINDOW, WakeHead, save_wake_model
from streamd.paths import shared_root

__all__ = ["WakeTrainConfig", "train_wake_model", "confusable_phrases", "sound_alikes", "wide_sound_alikes",
           "read_lexicon",
           "real_negative_files", "real_cache_file"]

RATE = 16000
THRESHOLDS = sorted({round(float(t), 3) for t in np.linspace(0.05, 0.95, 19)}
                    | {round(1 - 10 ** -float(x), 6) for x in np.arange(1.25, 5.01, 0.125)})
"""The DET curve's thresholds (calibrated scores): 0.05..0.95, then 1 - 10^-x up to 0.99999."""
_REAL_CACHE: dict[str, tuple[torch.Tensor, float]] = {}  # _file_key -> (embeddings after the prefix, seconds)
EMB = 1280                   # samples per embedding / score
POS_SPAN_S = 0.32            # positive windows end 0 .. this after the keyword's end
REFRACTORY_S = 1.0


@dataclass(frozen=True)
class WakeTrainConfig:
    """Sizes of one training run (the defaults: 8.3 min wall on the idle 2-core machine, 13-18 min with another
    training beside it)."""

    tts_positives: int = 300        # TTS utterances of the keyword
    copies: int = 8                 # placements (augmentations) of each; copy c is the same whatever ``copies``
    tts_negatives: int = 300        # TTS confusables and sentences
    wide_negatives: int = 150       # TTS farther sound-alikes (wide_sound_alikes), on top of tts_negatives
    rhyme_share: float = 0.5        # of them, at most this share keeping the replaced word's rhyme first
    real_negatives: int = 6000      # real training-split files (speech and noise; all ~5300 of them)
    hidden: int = 32
    epochs: int = 8
    label_smoothing: float = 0.0    # targets 0 -> s/2, 1 -> 1 - s/2
    weight_decay: float = 1e-4
    real_share: float = 0.25        # share of the real negative windows drawn each epoch
    hard_negatives: int = 3000      # a second round with this many top-scoring negatives added (0: one round)
    hard_repeat: int = 3
    members: int = 1                # nets per draw (seeds seed, seed + 1, ...); the head averages every net
    draws: int = 3                  # TTS data drawn this many times (seeds: _draw_seed), members trained on each
    target_fa_per_h: float = 0.5
    cache: bool = True              # keep the real negatives' embeddings on disk (real_cache_file)
    seed: int = 0
    workers: int = 2


# ---------------------------------------------------------------------- text


_ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "ch", "sh", "j", ""]
_VOWELS = "aeiouy"


def _swap_onset(word: str, onset: str) -> str:
    i = 0
    while i < len(word) and word[i] not in _VOWELS:
        i += 1
    return onset + word[i:] if i < len(word) else word


def confusable_phrases(keyword: str, rng: np.random.Generator, n: int) -> list[str]:
    """``n`` phrases that sound partly like ``keyword`` but are not it: its words alone, its partial
    phrases, the words in reverse order, a word with its first sound changed, a word cut short."""
    words = keyword.split()
    base: list[str] = []
    for i in range(len(words)):
        for j in range(i + 1, len(words) + 1):
            if (i, j) != (0, len(words)):
                base.append(" ".join(words[i:j]))
    if len(words) > 1:
        base.append(" ".join(reversed(words)))
    out = []
    key = keyword.casefold()
    while len(out) < n:
        r = rng.random()
        if base and r < 0.3:
            p = base[int(rng.integers(len(base)))]
        else:
            w = list(words)
            k = int(rng.integers(len(w)))
            if r < 0.8:
                w[k] = _swap_onset(w[k], _ONSETS[int(rng.integers(len(_ONSETS)))])
            elif len(w[k]) > 3:
                w[k] = w[k][: max(2, int(len(w[k]) * rng.uniform(0.4, 0.7)))]
            p = " ".join(w)
        if p.casefold() != key:
            out.append(p)
    return out


LEXICONS = ("/usr/share/festival/dicts/cmu/cmudict-0.4.out",)
"""Pronunciation dictionaries read by :func:`sound_alikes`: festival's CMU dictionary (installed with the
festival voice), else pocketsphinx's (``pocketsphinx/model/en-us/cmudict-en-us.dict``) when importable."""


def _lexicon_path() -> Path | None:
    for p in LEXICONS:
        if Path(p).is_file():
            return Path(p)
    try:
        import importlib.util
        spec = importlib.util.find_spec("pocketsphinx")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        p = Path(spec.origin).parent / "model" / "en-us" / "cmudict-en-us.dict"
        if p.is_file():
            return p
    return None


_SAME = {"ax": "ah", "axr": "er", "ix": "ih"}  # reduced vowels count as their full ones (no near-homophones)


def read_lexicon(path: str | Path) -> dict[str, tuple[str, ...]]:
    """word -> phonemes (lower case, no stress) of a CMU dictionary, festival's Lisp form
    (``("word" nil (((p h) 1) ...))``) or the plain one (``word P H ...``); the first pronunciation of a word."""
    out: dict[str, tuple[str, ...]] = {}
    for line in Path(path).read_text(encoding="latin-1").splitlines():
        if line.startswith("("):
            j = line.find('"', 2)
            word, rest = line[2:j], line[j + 1:]
            k = rest.find("(")
            phones = tuple(p for p in rest[k:].replace("(", " ").replace(")", " ").split() if not p.isdigit())
        else:
            parts = line.split()
            if len(parts) < 2:
                continue
            word, phones = parts[0], tuple("".join(c for c in p if not c.isdigit()).lower() for p in parts[1:])
        if word.isalpha() and word not in out and phones:
            out[word] = tuple(_SAME.get(x, x) for x in phones)
    return out


def _edit(a: Sequence[str], b: Sequence[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _pronounce(word: str, lexicon: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """A word's phonemes, or those of the two dictionary words it is made of ("chatterbox" = chatter + box)."""
    if word in lexicon:
        return lexicon[word]
    for k in range(len(word) - 2, 2, -1):
        if word[:k] in lexicon and word[k:] in lexicon:
            return lexicon[word[:k]] + lexicon[word[k:]]
    return None


def _contains(q: Sequence[str], p: Sequence[str]) -> bool:
    return any(tuple(q[i:i + len(p)]) == tuple(p) for i in range(len(q) - len(p) + 1))


def _by_length(lexicon: dict[str, tuple[str, ...]]) -> dict[int, list[tuple[str, tuple[str, ...]]]]:
    """The lexicon's (word, phonemes) grouped by phoneme count (the sound-alike searches look near a length)."""
    by_len: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    for w, p in lexicon.items():
        by_len.setdefault(len(p), []).append((w, p))
    return by_len


def sound_alikes(keyword: str, lexicon: dict[str, tuple[str, ...]], rng: np.random.Generator, n: int) -> list[str]:
    """Up to ``n`` phrases that sound like ``keyword`` but are not it ("hey savant" -> "hey levant",
    "chatterbox" -> "chapter box"): the keyword with one word replaced by a dictionary word (or two) whose
    phonemes are 1 to ~35 % edits away from it; never a homophone (0 edits).  Nearest first, ties shuffled."""
    words = keyword.split()
    by_len = _by_length(lexicon)
    scored: list[tuple[float, str]] = []
    for i, w in enumerate(words):
        p = _pronounce(w, lexicon)
        if not p:
            continue
        budget = _near_budget(len(p))
        subs: list[tuple[float, str]] = []
        for L in range(len(p) - budget, len(p) + budget + 1):
            for v, q in by_len.get(L, ()):
                d = _edit(p, q)
                if 1 <= d <= budget and v != w and not _contains(q, p):
                    subs.append((d / len(p), v))
        for k in range(2, len(p) - 1):  # two words for one: each half within 1 edit
            left = [(v, _edit(p[:k], q)) for L in (k - 1, k, k + 1) for v, q in by_len.get(L, ())]
            right = [(v, _edit(p[k:], q)) for L in (len(p) - k - 1, len(p) - k, len(p) - k + 1)
                     for v, q in by_len.get(L, ())]
            left = [(v, d) for v, d in left if d <= 1 and len(v) > 1]
            right = [(v, d) for v, d in right if d <= 1 and len(v) > 1]
            for lv, dl in left[:40]:
                for rv, dr in right[:40]:
                    if 1 <= dl + dr <= budget:
                        subs.append(((dl + dr) / len(p) + 0.01, f"{lv} {rv}"))
        for d, v in subs:
            scored.append((d, " ".join(words[:i] + [v] + words[i + 1:])))
    key = keyword.casefold()
    jitter = rng.random(len(scored))
    seen: set[str] = set()
    out = []
    for (d, ph), _ in sorted(zip(scored, jitter), key=lambda t: (t[0][0], t[1])):
        if ph.casefold() != key and ph not in seen:
            seen.add(ph)
            out.append(ph)
        if len(out) >= n:
            break
    return out


_VOWEL_PHONES = frozenset("aa ae ah ao aw ay eh er ey ih iy ow oy uh uw".split())


def _syllables(phones: Sequence[str]) -> int:
    return sum(p in _VOWEL_PHONES for p in phones)


NEAR_SHARE = 0.35   # sound_alikes: at most this share of a word's phonemes edited (rounded, >= 1)
WIDE_SHARE = 0.5    # wide_sound_alikes: beyond that, up to this share (rounded down, >= one more edit)
WIDE_MIN_PHONES = 4  # wide_sound_alikes replaces words of at least this many phonemes ("savant", not "hey")


def _near_budget(n: int) -> int:
    return max(1, round(NEAR_SHARE * n))


def _rhyme(phones: Sequence[str]) -> tuple[str, ...]:
    """A word's rhyme: its last vowel and the phonemes after it ("savant" -> ``ah n t``; () without a vowel)."""
    last = [i for i, p in enumerate(phones) if p in _VOWEL_PHONES]
    return tuple(phones[last[-1]:]) if last else ()


def wide_sound_alikes(keyword: str, lexicon: dict[str, tuple[str, ...]], rng: np.random.Generator, n: int,
                      rhyme_share: float = 0.0) -> list[str]:
    """Up to ``n`` farther sound-alikes than :func:`sound_alikes` ("hey savant" -> "hey vermont"): the keyword
    with one word replaced by a dictionary word (or two) of the same number of syllables whose phonemes are more
    than the near budget (~35 %) and at most half of them (at least one edit more than the near budget) away;
    only words of at least :data:`WIDE_MIN_PHONES` phonemes are replaced; never a word that holds the keyword's
    word.  Drawn at random (``rng``), not nearest first, so that the farther shapes are spread over the whole
    band; the same rule for every keyword.  ``rhyme_share``: up to that share of the ``n`` are drawn first from
    the candidates that keep the replaced word's rhyme (:func:`_rhyme`: "hey savant" -> "hey dupont"): they
    differ from the keyword only before its last vowel, the part a detector that listens to the word's end
    misses."""
    if not 0.0 <= rhyme_share <= 1.0:
        raise ValueError(f"rhyme_share must be within [0, 1], got {rhyme_share}")
    words = keyword.split()
    by_len = _by_length(lexicon)
    cands: dict[str, bool] = {}  # phrase -> keeps the rhyme
    for i, w in enumerate(words):
        p = _pronounce(w, lexicon)
        if not p or len(p) < WIDE_MIN_PHONES:
            continue
        lo = _near_budget(len(p))
        hi = max(lo + 1, int(WIDE_SHARE * len(p)))
        syl = _syllables(p)
        subs: list[tuple[str, tuple[str, ...]]] = []
        for L in range(len(p) - hi, len(p) + hi + 1):
            for v, q in by_len.get(L, ()):
                if _syllables(q) == syl and v != w and lo < _edit(p, q) <= hi and not _contains(q, p):
                    subs.append((v, q))
        for k in range(2, len(p) - 1):  # two words for one: each half within 2 edits
            halves = []
            for part in (p[:k], p[k:]):
                c = [(v, q) for L in range(len(part) - 2, len(part) + 3) for v, q in by_len.get(L, ())
                     if len(v) > 1 and _edit(part, q) <= 2]
                halves.append([c[j] for j in rng.permutation(len(c))[:40]])
            for lv, lq in halves[0]:
                for rv, rq in halves[1]:
                    q = lq + rq
                    if _syllables(q) == syl and lo < _edit(p, q) <= hi:
                        subs.append((f"{lv} {rv}", q))
        rh = _rhyme(p)
        for v, q in subs:
            phrase = " ".join(words[:i] + [v] + words[i + 1:])
            cands[phrase] = cands.get(phrase, False) or _rhyme(q) == rh
    key = keyword.casefold()
    order = sorted(c for c in cands if c.casefold() != key)
    order = [order[j] for j in rng.permutation(len(order))]
    first = [c for c in order if cands[c]][: int(rhyme_share * n)]
    taken = set(first)
    return (first + [c for c in order if c not in taken])[:n]


# ---------------------------------------------------------------------- audio


def _trim(x: np.ndarray, db: float = 35.0) -> np.ndarray:
    """Cut leading / trailing frames more than ``db`` below the loudest 10 ms frame."""
    f = 160
    n = len(x) // f
    if n < 3:
        return x
    e = 10 * np.log10(np.mean(np.square(x[: n * f].reshape(n, f), dtype=np.float64), axis=1) + 1e-12)
    on = np.nonzero(e > e.max() - db)[0]
    return x[max(0, on[0] * f - 320): min(len(x), (on[-1] + 1) * f + 320)]


def _tts_job(args: tuple) -> np.ndarray | None:
    """One TTS utterance, optionally with a WORLD speaker change, trimmed (None when every voice failed)."""
    from streamd.train.synth import _group, _pick_voice
    from streamd.train.tts import TTSError, synthesize
    text, seed, index, world = args
    rng = np.random.default_rng([seed, index, 0x77])
    by_engine = _group(_VOICES)
    for _ in range(3):
        v = _pick_voice(rng, by_engine)
        try:
            x = synthesize(v, text, RATE, speed=float(rng.uniform(0.8, 1.25)),
                           pitch=float(rng.uniform(-3, 3)) if rng.random() < 0.6 else 0.0,
                           seed=int(rng.integers(2**31)))
            break
        except TTSError:
            continue
    else:
        return None
    if world and rng.random() < 0.5 and len(x) > 0.2 * RATE:
        from streamd.train.voices import sample_voice_params, world_perturb
        try:
            x = world_perturb(x, RATE, rng, sample_voice_params(rng))
        except Exception:  # noqa: BLE001 - WORLD fails on rare degenerate inputs: keep the plain voice
            pass
    return _trim(np.asarray(x, dtype=np.float32))


_VOICES: list = []


def _init_tts(voices: list) -> None:
    global _VOICES
    _VOICES = voices


def _place(x: np.ndarray, rng: np.random.Generator, noise, rirs: list, lead_max: float = 1.2,
           trail: float = 0.6) -> tuple[np.ndarray, int, int]:
    """One augmented placement of the trimmed utterance ``x``: (audio, keyword start, keyword end) in samples."""
    from streamd.train import augment as A
    from streamd.train import rooms as R
    if rng.random() < 0.3:
        x = A.speed_perturb(x, float(rng.uniform(0.88, 1.12)), RATE)
    n0 = len(x)
    if rng.random() < 0.45:
        if rirs:
            x = R.apply_rir(x, rirs[int(rng.integers(len(rirs)))])[: n0 + int(0.3 * RATE)]
        else:
            x = A.reverberate(x, float(rng.uniform(0.2, 0.9)), RATE, rng, drr_db=float(rng.uniform(-2, 12)))
    rms = float(np.sqrt(np.mean(np.square(x[:n0], dtype=np.float64)))) + 1e-9
    x = x * np.float32(10 ** (float(rng.uniform(-40, -12)) / 20) / rms)
    power = float(np.mean(np.square(x[:n0], dtype=np.float64)))
    lead = int(rng.uniform(0.0, lead_max) * RATE)
    y = np.zeros(lead + max(len(x), n0 + int(trail * RATE)), np.float32)
    y[lead:lead + len(x)] = x
    if noise is not None and rng.random() < 0.6:
        y = A.add_noise(y, noise.sample(len(y), rng), float(rng.uniform(0, 30)), signal_power=power)
    else:
        y = A.add_noise(y, A.colored_noise(len(y), "white", rng), float(rng.uniform(40, 70)), signal_power=power)
    if rng.random() < 0.3:
        y = R.random_channel(y, RATE, rng)
    r = rng.random()
    if r < 0.1:
        y = A.telephone(y, RATE)
    elif r < 0.2:
        y = A.telephone(y, RATE, mu_law=False, bandpass=False)
    peak = float(np.max(np.abs(y))) + 1e-9
    if peak > 0.99:
        y = y * np.float32(0.99 / peak)
    return y.astype(np.float32), lead, lead + n0


REAL_SPLITS = (("speech_commands/train", ""), ("speechocean762/train", ""), ("speechocean762/unlabeled", ""),
               ("librispeech_unlabeled", "librispeech_train-clean-100/"))
"""The real audio that may be a negative: (folder under ``../shared/real``, prefix of its manifest's paths).
Training splits only: never ``mycroft``, never a dev split (about 4.8 h in all)."""


def real_negative_files(keyword: str, root: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """Real training-split audio for negatives: {"speech": [(path, name)], "noise": [...]} from
    :data:`REAL_SPLITS`; lines whose transcript holds the keyword are left out."""
    root = Path(root) if root is not None else shared_root() / "real"
    key = f" {' '.join(keyword.casefold().split())} "
    out: dict[str, list[tuple[str, str]]] = {"speech": [], "noise": []}
    for sub, prefix in REAL_SPLITS:
        man = root / sub / "manifest.jsonl"
        if not man.is_file():
            continue
        for line in man.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            o = json.loads(line)
            if not o["audio"].startswith(prefix):
                continue
            if key in f" {' '.join(str(o.get('text') or '').casefold().split())} ":
                continue
            kind = "noise" if o.get("noise") else "speech"
            out[kind].append((str(man.parent / o["audio"]), f"{sub}/{o['audio']}"))
    return out


def real_cache_file() -> Path:
    """The on-disk cache of the real negatives' embeddings (float16; keyed by file path, size and time):
    ``$XDG_CACHE_HOME/streamd/wake_real_<sha256 of the embedding weights, 12 hex>.pt`` (default ``~/.cache``)."""
    from streamd.model.speech_embedding import default_embedding_path
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sha = hashlib.sha256(default_embedding_path().read_bytes()).hexdigest()[:12]
    return Path(base) / "streamd" / f"wake_real_{sha}.pt"


def _file_key(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _held_out(name: str, share: float = 0.25) -> bool:
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) / 2**32 < share


# ---------------------------------------------------------------------- progress


class _Bar:
    """A one-line progress bar on stderr (``\\r`` updates on a terminal, a line every 10 % otherwise)."""

    def __init__(self, what: str, total: int, out=sys.stderr) -> None:
        self.what, self.total, self.k, self.out, self.t0 = what, max(1, total), 0, out, time.monotonic()
        self.tty = hasattr(out, "isatty") and out.isatty()
        self._last = -1

    def update(self, n: int = 1) -> None:
        self.k += n
        frac = min(1.0, self.k / self.total)
        step = int(frac * 10)
        if not self.tty and step == self._last and self.k < self.total:
            return
        self._last = step
        bar = "#" * int(frac * 30)
        el = time.monotonic() - self.t0
        line = f"{self.what:<22} [{bar:<30}] {self.k}/{self.total} {el:5.0f} s"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=self.out, flush=True)
        if self.tty and self.k >= self.total:
            print(file=self.out, flush=True)


# ---------------------------------------------------------------------- windows


def _labels(n: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """For a placement with the keyword at samples [start, end): (positive mask, negative mask) of its n
    scores; score k ends at (k + 1) * 1280."""
    ends = (np.arange(n) + 1) * EMB
    pos = (ends >= end) & (ends <= end + POS_SPAN_S * RATE)
    neg = ends <= start + (end - start) // 2
    return pos, neg


def _detections(scores: np.ndarray, thr: float) -> int:
    """Detections in one file's score sequence by the runtime rule (>= thr, refractory 1 s)."""
    ref = int(round(REFRACTORY_S * RATE / EMB))
    n, last = 0, -10**9
    for k in np.nonzero(scores >= thr)[0]:
        if k - last >= ref:
            n, last = n + 1, k
    return n


def det_curve(pos_max: np.ndarray, neg_scores: list[np.ndarray], neg_hours: float,
              thresholds: Sequence[float]) -> list[list[float]]:
    """[[threshold, miss rate, false alarms per hour], ...] (positives: detected when their max score >=
    threshold; negatives: detections by the runtime rule)."""
    out = []
    for t in thresholds:
        miss = float(np.mean(pos_max < t)) if len(pos_max) else float("nan")
        fa = sum(_detections(s, t) for s in neg_scores) / max(neg_hours, 1e-9)
        out.append([round(float(t), 4), round(miss, 4), round(fa, 3)])
    return out


# ---------------------------------------------------------------------- main entry


def train_wake_model(keyword: str, out: str | Path | None = None, cfg: WakeTrainConfig = WakeTrainConfig(),
                     log: Callable[[str], None] | None = None) -> Path:
    """Train a wake model for ``keyword`` from its text; write it to ``out`` (default ``<keyword>.wake.pt``)
    and return the path.  The steps are the module's: :func:`_synthesize`, :func:`_read_real`,
    :func:`_embed`, :func:`_fit`, :func:`_threshold`."""
    from streamd.train.tts import list_voices

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    kw = " ".join(keyword.casefold().split())
    if not kw or not all(c.isalpha() or c in " '-" for c in kw):
        raise ValueError(f"keyword must be words of letters, got {keyword!r}")
    out = Path(out) if out is not None else Path(kw.replace(" ", "_") + ".wake.pt")
    t_start = time.monotonic()
    voices = list_voices()
    if not voices:
        raise RuntimeError("no TTS voices: install espeak-ng, flite, festival or piper-tts (see streamd.train.tts)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        real = emb = noise = rirs = None
        heads, data, t_tts, n_neg_tts = [], _Embedded(), 0.0, 0
        for k in range(cfg.draws):
            dc = dataclasses.replace(cfg, seed=_draw_seed(cfg.seed, k))
            if cfg.draws > 1:
                log(f"draw {k + 1} of {cfg.draws} (seed {dc.seed})")
            torch.manual_seed(dc.seed)
            t0 = time.monotonic()
            pos_tts, neg_tts = _synthesize(kw, dc, np.random.default_rng([dc.seed, 0x57414B45]), voices)
            t_tts += time.monotonic() - t0
            n_neg_tts += sum(x is not None for x in neg_tts)
            # the real negatives, rooms and noise, the same for every draw, read after the first draw's TTS:
            # reading them draws from torch's generator, which the nets' initialization then follows
            if real is None:
                real, emb, noise, rirs = _read_real(kw, cfg, log)
            d = _embed(dc, emb, pos_tts, neg_tts, real, noise, rirs)
            head = WakeHead(cfg.hidden)
            _fit(head, d.train, dc, log)
            if cfg.hard_negatives or cfg.members > 1:
                head = _fit_members(head, d.train, dc, log)
            heads.append(head)
            data.merge(d)  # its held-out data; the training windows are dropped with d
        head = WakeHead.average(heads).eval() if len(heads) > 1 else heads[0]
        thr, det, pos_max, at, tts_at, top = _threshold(head, data, cfg)
        hours = data.held_secs / 3600
        elapsed = time.monotonic() - t_start
        info = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "embedding": "google speech_embedding (streamd/assets/speech_embedding.pt)",
            "target_fa_per_h": cfg.target_fa_per_h,
            "held_out": {"positives": int(len(pos_max)), "negative_files": len(data.held_neg),
                         "negative_hours": round(hours, 3), "miss_at_threshold": at[1], "fa_per_h_at_threshold": at[2],
                         "top_negative_score": round(top, 6),
                         "confusable_tts": {"files": len(data.held_tts), "hours": round(data.held_tts_secs / 3600, 3),
                                            "fa_per_h_at_threshold": tts_at[2]}},
            "data": {"tts_positives": data.n_pos_ok, "copies": cfg.copies, "draws": cfg.draws,
                     "tts_negatives": n_neg_tts,
                     "real_negative_files": len(real),
                     "train_negative_hours": round((data.train_tts_secs + data.train_real_secs) / 3600, 3),
                     "train_windows": {"positive": data.train_windows[0], "negative": data.train_windows[1]},
                     "sources": ["tts: " + ", ".join(sorted({v.engine for v in voices}))]
                     + [f"real/{sub}/{prefix}".rstrip("/") for sub, prefix in REAL_SPLITS],
                     "voices": len(voices), "rooms": "pyroomacoustics" if rirs else "synthetic"},
            "config": cfg.__dict__,
            "det": det,
            "trained_s": round(elapsed, 1), "tts_s": round(t_tts, 1),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        save_wake_model(out, kw, float(thr), head, info)
        log(f"{kw!r}: threshold {thr:.3f}; held out: miss {at[1] * 100:.1f} % of {len(pos_max)} positives, "
            f"{at[2]:.2f} FA/h on {hours:.2f} h; {elapsed:.0f} s -> {out}")
        return out
    finally:
        torch.set_num_threads(threads)


def _draw_seed(seed: int, k: int) -> int:
    """The seed of draw ``k`` of a run seeded ``seed`` (draw 0 uses ``seed`` itself: ``draws=1`` is one plain run)."""
    return seed + 7919 * k


def _texts(kw: str, cfg: WakeTrainConfig, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """What step 1 speaks: (positive texts, negative texts): the confusables, near sound-alikes and sentences
    (``cfg.tts_negatives``), then ``cfg.wide_negatives`` farther sound-alikes (:func:`wide_sound_alikes`)."""
    from streamd.train.text import TextGenerator

    gen = TextGenerator(cfg.seed)
    lex_path = _lexicon_path()
    lex = read_lexicon(lex_path) if lex_path else {}
    alike = sound_alikes(kw, lex, rng, int(cfg.tts_negatives * 0.35)) if lex else []
    neg_texts = confusable_phrases(kw, rng, int(cfg.tts_negatives * 0.7) - len(alike)) + alike
    neg_texts += [gen.sentence() for _ in range(cfg.tts_negatives - len(neg_texts))]
    pos_texts = [kw if rng.random() < 0.6 else kw.replace(" ", ", ", 1) + ("!" if rng.random() < 0.3 else "")
                 for _ in range(cfg.tts_positives)]
    if lex and cfg.wide_negatives:
        neg_texts += wide_sound_alikes(kw, lex, rng, cfg.wide_negatives, cfg.rhyme_share)
    return pos_texts, neg_texts


def _synthesize(kw: str, cfg: WakeTrainConfig, rng: np.random.Generator, voices: list
                ) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
    """Step 1, TTS: the keyword's positives and the confusable and plain negatives (:func:`_texts`), spoken
    (None: a failed synthesis)."""
    pos_texts, neg_texts = _texts(kw, cfg, rng)
    jobs = [(t, cfg.seed, i, True) for i, t in enumerate(pos_texts)]
    jobs += [(t, cfg.seed, 100000 + i, True) for i, t in enumerate(neg_texts)]
    bar = _Bar("synthesize (TTS)", len(jobs))
    tts = []
    for x in _imap(_tts_job, jobs, cfg.workers, voices):
        tts.append(x)
        bar.update()
    return tts[:len(pos_texts)], tts[len(pos_texts):]


def _read_real(kw: str, cfg: WakeTrainConfig, log: Callable[[str], None]) -> tuple[list, Any, Any, list]:
    """Step 2, real negatives and noise: the real files used as negatives ((path, name); their embeddings in
    ``_REAL_CACHE``), the speech embedding, the background noise bank (or None) and the simulated rooms."""
    from streamd.audio.resample import load_audio_at
    from streamd.train import rooms as R

    files = real_negative_files(kw)
    noise_files = files["noise"]
    speech = files["speech"]
    pick = np.random.default_rng([cfg.seed, 0x5245414C]).permutation(len(speech))
    pick = pick[: max(0, cfg.real_negatives - len(noise_files) // 2)]
    real = [speech[i] for i in sorted(pick)] + noise_files[: len(noise_files) // 2]
    disk_path = real_cache_file() if cfg.cache else None
    disk: dict = {}
    if disk_path is not None and disk_path.is_file():
        try:
            disk = torch.load(disk_path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - a broken cache is rebuilt
            log(f"ignoring the unreadable embedding cache {disk_path} ({e.__class__.__name__})")
    todo = [p for p, _ in real if _file_key(p) not in _REAL_CACHE]
    bar = _Bar("read real audio", len(todo) + len(noise_files) - len(noise_files) // 2)
    emb = load_speech_embedding()
    new = 0
    for path in todo:  # embeddings of real files are kept for the next keyword (and on disk for the next run)
        key = _file_key(path)
        if key not in disk:
            x = load_audio_at(path, RATE)
            disk[key] = (_sequence(emb, x).half(), len(x) / RATE)
            new += 1
        _REAL_CACHE[key] = (disk[key][0].float(), float(disk[key][1]))
        bar.update()
    if disk_path is not None and new:
        disk_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = disk_path.with_name(f".{disk_path.name}.{os.getpid()}.tmp")
        torch.save(disk, tmp)
        os.replace(tmp, disk_path)

    bg_files = noise_files[len(noise_files) // 2:]
    noise = None
    if bg_files:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            man = Path(tmp) / "noise.jsonl"
            man.write_text("".join(json.dumps({"audio": p}) + "\n" for p, _ in bg_files), encoding="utf-8")
            noise = R.NoiseBank(man, RATE)
        bar.update(len(bg_files))
    rirs: list = []
    try:
        rirs = R.simulate_rirs(24, RATE, np.random.default_rng([cfg.seed, 0x524F]), rt60=(0.2, 0.9))
    except ImportError:
        log("pyroomacoustics not installed: synthetic reverberation instead of simulated rooms")
    return real, emb, noise, rirs


class _Windows:
    """Training windows without copies: embedding sequences laid end to end (``rows`` (R, 96)); a window is the
    16 rows from a start index.  ``pos`` / ``neg``: start indices (long) of the positive and negative windows;
    ``real``: (len(neg),) bool, the negatives from real files (a share of them is drawn each epoch)."""

    def __init__(self) -> None:
        self._rows: list[torch.Tensor] = []
        self._pos: list[torch.Tensor] = []
        self._neg: list[torch.Tensor] = []
        self._real: list[torch.Tensor] = []
        self._n = 0

    def add(self, seq: torch.Tensor, pos: np.ndarray | None = None, neg: np.ndarray | None = None,
            real: bool = False) -> None:
        """seq (T + 15, 96); pos / neg: (T,) masks of its windows (neg None: every window a negative)."""
        starts = torch.arange(max(0, seq.shape[0] - WINDOW + 1)) + self._n
        if pos is not None:
            self._pos.append(starts[torch.from_numpy(pos)])
        self._neg.append(starts if neg is None else starts[torch.from_numpy(neg)])
        self._real.append(torch.full((len(self._neg[-1]),), real))
        self._rows.append(seq.float())
        self._n += seq.shape[0]

    def finish(self) -> "_Windows":
        cat = lambda xs, dt: torch.cat(xs) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        self.rows = torch.cat(self._rows) if self._rows else torch.zeros(0, 96)
        self.pos, self.neg = cat(self._pos, torch.long), cat(self._neg, torch.long)
        self.real = cat(self._real, torch.bool)
        self._rows = self._pos = self._neg = self._real = []
        return self

    def gather(self, starts: torch.Tensor) -> torch.Tensor:
        """starts (N,) -> windows (N, 16, 96)."""
        return self.rows[starts[:, None] + torch.arange(WINDOW)]


@dataclass
class _Embedded:
    """Step 3's data: the training windows and, held out, the positive placements (embedding sequences with
    their positive-window masks), the real negatives and the confusable TTS negatives (sequences), with the
    seconds of audio behind them."""

    train: _Windows = field(default_factory=_Windows)
    pos_held: list = field(default_factory=list)  # (sequence, positive mask)
    held_neg: list = field(default_factory=list)
    held_tts: list = field(default_factory=list)
    held_secs: float = 0.0
    held_tts_secs: float = 0.0
    train_tts_secs: float = 0.0   # training negatives: TTS seconds (every draw's) and real seconds (once)
    train_real_secs: float = 0.0
    n_pos_ok: int = 0
    train_windows: tuple[int, int] = (0, 0)  # (positive, negative) training windows of every merged draw

    def merge(self, d: "_Embedded") -> None:
        """Add another draw's held-out data and counts; the real negatives are the same files in every draw, so
        they are taken as they are, not added; the draw's training windows are only counted."""
        self.pos_held += d.pos_held
        self.held_tts += d.held_tts
        self.held_tts_secs += d.held_tts_secs
        self.held_neg, self.held_secs, self.train_real_secs = d.held_neg, d.held_secs, d.train_real_secs
        self.train_tts_secs += d.train_tts_secs
        self.n_pos_ok += d.n_pos_ok
        self.train_windows = (self.train_windows[0] + len(d.train.pos), self.train_windows[1] + len(d.train.neg))


def _sequence(emb, x: np.ndarray) -> torch.Tensor:
    """The embeddings (T + 15, 96) of a file after PREFIX_SAMPLES of silence (window k = rows k .. k + 15)."""
    t = torch.from_numpy(np.concatenate([np.zeros(PREFIX_SAMPLES, np.float32), x]))[None]
    with torch.no_grad():
        return emb(t)[0]


def _embed(cfg: WakeTrainConfig, emb: Any, pos_tts: list, neg_tts: list, real: list, noise: Any, rirs: list
           ) -> _Embedded:
    """Step 3, placements and embeddings: each positive placed ``copies`` times, each negative once, every
    file embedded; split into training and held-out data by name."""
    d = _Embedded()
    d.n_pos_ok = sum(x is not None for x in pos_tts)
    bar = _Bar("embed positives", d.n_pos_ok * cfg.copies)
    for i, x in enumerate(pos_tts):
        if x is None:
            continue
        held = _held_out(f"pos-{i}")
        for c in range(cfg.copies):
            g = np.random.default_rng([cfg.seed, i, c, 0x504F53])
            y, s, e = _place(x, g, noise, rirs)
            seq = _sequence(emb, y)
            p, n = _labels(max(0, seq.shape[0] - WINDOW + 1), s, e)
            if held:
                d.pos_held.append((seq, p))
            else:
                d.train.add(seq, p, n)
            bar.update()
    neg_items = [(f"neg-{i}", x) for i, x in enumerate(neg_tts) if x is not None]
    bar = _Bar("embed negatives", len(neg_items))
    for name, x in neg_items:
        g = np.random.default_rng([cfg.seed, int(name[4:]), 0x4E4547])
        x, _, _ = _place(x, g, noise, rirs, lead_max=0.8, trail=0.4)
        seq = _sequence(emb, x)
        if _held_out(name):
            d.held_tts.append(seq)
            d.held_tts_secs += len(x) / RATE
        else:
            d.train.add(seq)
            d.train_tts_secs += len(x) / RATE
        bar.update()
    for path, name in real:
        seq, secs = _REAL_CACHE[_file_key(path)]
        if _held_out(name):
            d.held_neg.append(seq)
            d.held_secs += secs
        else:
            d.train.add(seq, real=True)
            d.train_real_secs += secs
    d.train.finish()
    return d


@torch.no_grad()
def _logits(head: WakeHead, seq: torch.Tensor) -> np.ndarray:
    """The head's logits (T,) of every window of one embedding sequence (T + 15, 96)."""
    seq = seq.float()
    if seq.shape[0] < WINDOW:
        return np.zeros(0, np.float32)
    return head(seq.unfold(0, WINDOW, 1).transpose(1, 2)).numpy()


def _threshold_logit(neg: list[np.ndarray], hours: float, target_fa_per_h: float) -> float:
    """The lowest logit threshold whose detections (the runtime rule) on the negatives' logit tracks stay at or
    below ``target_fa_per_h`` x ``hours`` (candidates: the negatives' own scores, highest first)."""
    allowed = math.floor(target_fa_per_h * hours + 1e-9)
    flat = np.concatenate([t for t in neg if len(t)] or [np.zeros(1, np.float32)])
    cands = np.unique(flat)[::-1][: 50 * (allowed + 1) + 200]
    thr = float(cands[0]) + 1e-3
    for t in cands:
        if sum(_detections(s, float(t)) for s in neg) > allowed:
            break
        thr = float(t)
    return thr


CAL_POSITIVE_LOGIT = 3.0
"""Calibration: after training, the head's last layer is scaled and shifted so that its score is 0.5 at the
chosen threshold and sigmoid(3.0) = 0.95 at the median held-out positive (scores no longer saturate at 0.999x;
the order of scores, hence every miss / false-alarm trade-off, is unchanged)."""


def _calibrate(head: WakeHead, thr_logit: float, pos_logit_median: float) -> None:
    """Fold ``a * (logit - thr_logit)`` into the head's last layer (a > 0: the median positive lands at
    :data:`CAL_POSITIVE_LOGIT`; a = 1 when the median positive is not above the threshold)."""
    gap = pos_logit_median - thr_logit
    a = CAL_POSITIVE_LOGIT / gap if gap > 1e-3 else 1.0
    with torch.no_grad():  # the logit is the mean of the nets' logits: each net's last layer takes the same fold
        for net in head.nets:
            net[-1].weight.mul_(a)
            net[-1].bias.sub_(thr_logit).mul_(a)


def _threshold(head: WakeHead, d: _Embedded, cfg: WakeTrainConfig) -> tuple[float, list, np.ndarray, list, list, float]:
    """Step 5, the threshold on the held-out data, then the calibration (:func:`_calibrate`; the threshold is
    then 0.5): (threshold, DET curve, the held-out positives' top scores, the DET point at the threshold on real
    and on confusable TTS negatives, the top real negative score), all after calibration."""
    hours = d.held_secs / 3600
    pos = np.array([float(_logits(head, s)[p].max()) if p.any() else -1e9 for s, p in d.pos_held])
    thr = _threshold_logit([_logits(head, s) for s in d.held_neg], hours, cfg.target_fa_per_h)
    _calibrate(head, thr, float(np.median(pos)) if len(pos) else thr)
    sig = lambda z: 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))  # noqa: E731
    neg_scores = [sig(_logits(head, s)) for s in d.held_neg]
    tts_scores = [sig(_logits(head, s)) for s in d.held_tts]
    pos_max = np.array([float(sig(_logits(head, s)[p]).max()) if p.any() else 0.0 for s, p in d.pos_held])
    det = det_curve(pos_max, neg_scores, hours, THRESHOLDS)
    top = max((float(s.max()) for s in neg_scores if len(s)), default=0.0)
    at = det_curve(pos_max, neg_scores, hours, [0.5])[0]
    tts_at = det_curve(pos_max, tts_scores, d.held_tts_secs / 3600, [0.5])[0]
    return 0.5, det, pos_max, at, tts_at, top


def _imap(fn, jobs, workers: int, voices):
    if workers <= 1:
        _init_tts(voices)
        for j in jobs:
            yield fn(j)
        return
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(workers, initializer=_init_tts, initargs=(voices,)) as pool:
        yield from pool.imap(fn, jobs, chunksize=4)


def _fit(head: WakeHead, w: _Windows, cfg: WakeTrainConfig, log, hard: torch.Tensor | None = None,
         seed: int | None = None) -> None:
    """Weighted binary cross-entropy (positives and negatives weigh the same in total), AdamW with weight decay,
    one cycle of ``cfg.epochs`` epochs; labels smoothed by ``cfg.label_smoothing``; each epoch sees every
    positive and synthetic negative window and a ``cfg.real_share`` draw of the real negative windows (2.4 h of
    real audio is ~100 k overlapping windows); ``hard``: negative window starts added ``cfg.hard_repeat`` times
    (the hard negatives of a first round); ``seed``: of the window draws and the noise (default ``cfg.seed``)."""
    g = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
    neg = w.neg if hard is None else torch.cat([w.neg, hard.repeat(cfg.hard_repeat)])
    real = w.real if hard is None else torch.cat([w.real, torch.zeros(len(hard) * cfg.hard_repeat, dtype=torch.bool)])
    n_real = int(real.sum())
    per_epoch = len(w.pos) + len(neg) - n_real + int(round(cfg.real_share * n_real))
    bs = 256
    steps = cfg.epochs * (math.ceil(per_epoch / bs) + 1)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    bar = _Bar("train head" if hard is None else "train head (hard)", cfg.epochs)
    head.train()
    tot = 0.0
    for _ in range(cfg.epochs):
        keep = ~real | (torch.rand(len(neg), generator=g) < cfg.real_share)
        starts = torch.cat([w.pos, neg[keep]])
        y = torch.cat([torch.ones(len(w.pos)), torch.zeros(int(keep.sum()))])
        wt = torch.where(y > 0, 0.5 * len(y) / max(1, len(w.pos)), 0.5 * len(y) / max(1, int(keep.sum())))
        target = y * (1 - cfg.label_smoothing) + 0.5 * cfg.label_smoothing
        perm = torch.randperm(len(y), generator=g)
        tot = 0.0
        for i in range(0, len(y), bs):
            idx = perm[i:i + bs]
            xb = w.gather(starts[idx])
            xb = xb + 0.05 * torch.randn(xb.shape, generator=g) * xb.std()
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(head(xb), target[idx], reduction="none")
                    * wt[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched.last_epoch + 1 < steps:
                sched.step()
            tot += float(loss.detach()) * len(idx)
        tot /= max(1, len(y))
        bar.update()
    head.eval()
    log(f"head: {len(w.pos)} positive and {len(neg)} negative windows ({n_real} real, {cfg.real_share:g} of them "
        f"per epoch), last epoch loss {tot:.4f}")


def _fit_members(first: WakeHead, w: _Windows, cfg: WakeTrainConfig, log) -> WakeHead:
    """The second round: the hard negatives of ``first`` (when ``cfg.hard_negatives``), then ``cfg.members``
    fresh nets trained on the same windows from seeds ``cfg.seed``, ``cfg.seed + 1``, ...; their mean logit is
    the head's (:meth:`WakeHead.average`)."""
    hard = _hard_negatives(first, w, cfg.hard_negatives) if cfg.hard_negatives else None
    heads = []
    for k in range(cfg.members):
        torch.manual_seed(cfg.seed + k)
        heads.append(WakeHead(cfg.hidden))
        _fit(heads[-1], w, cfg, log, hard, seed=cfg.seed + k)
    return WakeHead.average(heads).eval() if len(heads) > 1 else heads[0]


@torch.no_grad()
def _hard_negatives(head: WakeHead, w: _Windows, k: int) -> torch.Tensor:
    """The starts of the ``k`` training negative windows the head scores highest."""
    sc = torch.cat([head(w.gather(w.neg[i:i + 4096])) for i in range(0, len(w.neg), 4096)])
    return w.neg[sc.topk(min(k, len(sc))).indices]
