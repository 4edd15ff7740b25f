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
   phrases, the keyword with a word's first sound changed, the words in reverse order, plain sentences of
   :class:`streamd.train.text.TextGenerator`), the parts of each positive placement before the keyword is
   half said, and real speech and noise from training splits only (``speech_commands/train``,
   ``speechocean762/train``, ``librispeech_unlabeled/librispeech_train-clean-100``; never ``mycroft``,
   never a dev split; a real clip whose transcript holds the keyword is left out).
3. Each file is scored as at run time (:meth:`streamd.model.wake.WakeScorer.offline_scores`'s windows):
   the frozen speech_embedding once per file, then every 16-embedding window; a positive window is one
   that ends 0-0.32 s after the keyword ends.
4. The head (:class:`streamd.model.wake.WakeHead`) is trained with weighted binary cross-entropy, Adam, a few
   epochs; 25 % of the negative files (by hash of the name) and of the positive TTS utterances are held out.
5. The threshold is the lowest of :data:`THRESHOLDS` whose detections (the detector's rule: score >=
   threshold, refractory 1 s) on the held-out **real** negatives stay at or below ``target_fa_per_h`` (a
   rate per hour of natural audio; the held-out confusable phrases, dense by design, are reported beside
   it); the file records it with the DET curve (held-out miss rate against false alarms per hour on the
   real negatives), the data counts and the time taken.  The embeddings of the real files are computed
   once per process: training several keywords in one command shares them.
"""

from __future__ import annotations

import hashlib
import json
import math
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

__all__ = ["WakeTrainConfig", "train_wake_model", "confusable_phrases", "real_negative_files"]

RATE = 16000
THRESHOLDS = sorted({round(float(t), 3) for t in np.linspace(0.05, 0.95, 19)}
                    | {round(1 - 10 ** -float(x), 6) for x in np.arange(1.25, 5.01, 0.125)})
"""The sweep of the threshold choice: 0.05..0.95, then 1 - 10^-x up to 0.99999 (trained heads saturate)."""
_REAL_CACHE: dict[str, tuple[torch.Tensor, float]] = {}  # real file -> (embeddings after the prefix, seconds)
EMB = 1280                   # samples per embedding / score
POS_SPAN_S = 0.32            # positive windows end 0 .. this after the keyword's end
REFRACTORY_S = 1.0


@dataclass(frozen=True)
class WakeTrainConfig:
    """Sizes of one training run (the defaults finish in about 10 min on 2 busy cores)."""

    tts_positives: int = 300        # TTS utterances of the keyword
    copies: int = 5                 # placements (augmentations) of each
    tts_negatives: int = 300        # TTS confusables and sentences
    real_negatives: int = 1800      # real training-split files (speech and noise)
    hidden: int = 32
    epochs: int = 12
    target_fa_per_h: float = 0.5
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


def real_negative_files(keyword: str, root: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """Real training-split audio for negatives: {"speech": [(path, name)], "noise": [...]}.  Only
    ``speech_commands/train``, ``speechocean762/train`` and ``librispeech_unlabeled``'s train-clean-100;
    never mycroft, never a dev split; lines whose transcript holds the keyword are left out."""
    root = Path(root) if root is not None else shared_root() / "real"
    key = f" {' '.join(keyword.casefold().split())} "
    out: dict[str, list[tuple[str, str]]] = {"speech": [], "noise": []}
    for sub, prefix in (("speech_commands/train", ""), ("speechocean762/train", ""),
                        ("librispeech_unlabeled", "librispeech_train-clean-100/")):
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


def _windows(emb, audio: list[np.ndarray]) -> list[torch.Tensor]:
    """Per file, the (T, 16, 96) windows scored at run time (the file after PREFIX_SAMPLES of silence)."""
    out = []
    for x in audio:
        t = torch.from_numpy(np.concatenate([np.zeros(PREFIX_SAMPLES, np.float32), x]))[None]
        e = emb(t)[0]
        out.append(e.unfold(0, WINDOW, 1).transpose(1, 2).contiguous() if e.shape[0] >= WINDOW
                   else torch.zeros(0, WINDOW, 96))
    return out


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
    rng = np.random.default_rng([cfg.seed, 0x57414B45])
    torch.manual_seed(cfg.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pos_tts, neg_tts = _synthesize(kw, cfg, rng, voices)
        t_tts = time.monotonic() - t_start
        real, emb, noise, rirs = _read_real(kw, cfg, log)
        data = _embed(cfg, emb, pos_tts, neg_tts, real, noise, rirs)
        X_pos = torch.cat(data.pos_win)
        X_neg = torch.cat(data.neg_win)
        head = WakeHead(cfg.hidden)
        _fit(head, X_pos, X_neg, cfg, log)
        head.eval()
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
            "data": {"tts_positives": data.n_pos_ok, "copies": cfg.copies,
                     "tts_negatives": sum(x is not None for x in neg_tts),
                     "real_negative_files": len(real), "train_negative_hours": round(data.train_neg_secs / 3600, 3),
                     "train_windows": {"positive": int(X_pos.shape[0]), "negative": int(X_neg.shape[0])},
                     "sources": ["tts: " + ", ".join(sorted({v.engine for v in voices})),
                                 "real/speech_commands/train", "real/speechocean762/train",
                                 "real/librispeech_unlabeled/librispeech_train-clean-100"],
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


def _synthesize(kw: str, cfg: WakeTrainConfig, rng: np.random.Generator, voices: list
                ) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
    """Step 1, TTS: the keyword's positives and the confusable and plain negatives, spoken (None: a failed
    synthesis)."""
    from streamd.train.text import TextGenerator

    gen = TextGenerator(cfg.seed)
    neg_texts = confusable_phrases(kw, rng, int(cfg.tts_negatives * 0.7))
    neg_texts += [gen.sentence() for _ in range(cfg.tts_negatives - len(neg_texts))]
    pos_texts = [kw if rng.random() < 0.6 else kw.replace(" ", ", ", 1) + ("!" if rng.random() < 0.3 else "")
                 for _ in range(cfg.tts_positives)]
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
    todo = [(p, n) for p, n in real if n not in _REAL_CACHE]
    bar = _Bar("read real audio", len(todo) + len(noise_files) - len(noise_files) // 2)
    emb = load_speech_embedding()
    for path, name in todo:  # embeddings of real files are kept for the next keyword of this process
        x = load_audio_at(path, RATE)
        t = torch.from_numpy(np.concatenate([np.zeros(PREFIX_SAMPLES, np.float32), x]))[None]
        with torch.no_grad():
            _REAL_CACHE[name] = (emb(t)[0], len(x) / RATE)
        bar.update()

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


@dataclass
class _Embedded:
    """Step 3's windows (each (N, WINDOW, 96)): for training (positive, negative) and held out (positive with
    their labels, real negatives, confusable TTS negatives), with the seconds of audio behind them."""

    pos_win: list = field(default_factory=list)
    neg_win: list = field(default_factory=list)
    pos_held: list = field(default_factory=list)  # (windows, positive labels)
    held_neg: list = field(default_factory=list)
    held_tts: list = field(default_factory=list)
    held_secs: float = 0.0
    held_tts_secs: float = 0.0
    train_neg_secs: float = 0.0
    n_pos_ok: int = 0


def _embed(cfg: WakeTrainConfig, emb: Any, pos_tts: list, neg_tts: list, real: list, noise: Any, rirs: list
           ) -> _Embedded:
    """Step 3, placements and windows: each positive placed ``copies`` times, each negative once, every file
    scored into windows; split into training and held-out data by name."""
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
            w = _windows(emb, [y])[0]
            p, n = _labels(w.shape[0], s, e)
            if held:
                d.pos_held.append((w, p))
            else:
                d.pos_win.append(w[torch.from_numpy(p)])
                d.neg_win.append(w[torch.from_numpy(n)])
            bar.update()
    neg_items = [("tts", f"neg-{i}", x) for i, x in enumerate(neg_tts) if x is not None]
    bar = _Bar("embed negatives", len(neg_items))
    for kind, name, x in neg_items:
        g = np.random.default_rng([cfg.seed, int(name[4:]), 0x4E4547])
        x, _, _ = _place(x, g, noise, rirs, lead_max=0.8, trail=0.4)
        w = _windows(emb, [x])[0]
        if _held_out(name):
            d.held_tts.append(w)
            d.held_tts_secs += len(x) / RATE
        else:
            d.neg_win.append(w)
            d.train_neg_secs += len(x) / RATE
        bar.update()
    for _, name in real:
        e, secs = _REAL_CACHE[name]
        w = e.unfold(0, WINDOW, 1).transpose(1, 2) if e.shape[0] >= WINDOW else torch.zeros(0, WINDOW, 96)
        if _held_out(name):
            d.held_neg.append(w)
            d.held_secs += secs
        else:
            d.neg_win.append(w)
            d.train_neg_secs += secs
    return d


def _threshold(head: WakeHead, d: _Embedded, cfg: WakeTrainConfig) -> tuple[float, list, np.ndarray, list, list, float]:
    """Step 5, the threshold on the held-out data: (threshold, DET curve, the held-out positives' top scores,
    the DET point at the threshold on real and on confusable TTS negatives, the top real negative score)."""
    with torch.no_grad():
        neg_scores = [torch.sigmoid(head(w)).numpy() if len(w) else np.zeros(0) for w in d.held_neg]
        tts_scores = [torch.sigmoid(head(w)).numpy() if len(w) else np.zeros(0) for w in d.held_tts]
        pos_max = np.array([float(torch.sigmoid(head(w[torch.from_numpy(p)])).max())
                            if p.any() else 0.0 for w, p in d.pos_held])
    hours = d.held_secs / 3600
    det = det_curve(pos_max, neg_scores, hours, THRESHOLDS)
    ok = [x for x in det if x[2] <= cfg.target_fa_per_h]
    thr = ok[0][0] if ok else THRESHOLDS[-1]
    top = max((float(s.max()) for s in neg_scores if len(s)), default=0.0)
    at = det_curve(pos_max, neg_scores, hours, [thr])[0]
    tts_at = det_curve(pos_max, tts_scores, d.held_tts_secs / 3600, [thr])[0]
    return thr, det, pos_max, at, tts_at, top


def _imap(fn, jobs, workers: int, voices):
    if workers <= 1:
        _init_tts(voices)
        for j in jobs:
            yield fn(j)
        return
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(workers, initializer=_init_tts, initargs=(voices,)) as pool:
        yield from pool.imap(fn, jobs, chunksize=4)


def _fit(head: WakeHead, X_pos: torch.Tensor, X_neg: torch.Tensor, cfg: WakeTrainConfig, log) -> None:
    """Weighted BCE (positives and negatives weigh the same in total), Adam, ``cfg.epochs`` epochs."""
    X = torch.cat([X_pos, X_neg])
    y = torch.cat([torch.ones(len(X_pos)), torch.zeros(len(X_neg))])
    w = torch.where(y > 0, 0.5 * len(X) / max(1, len(X_pos)), 0.5 * len(X) / max(1, len(X_neg)))
    opt = torch.optim.Adam(head.parameters(), lr=1e-3, weight_decay=1e-4)
    g = torch.Generator().manual_seed(cfg.seed)
    bs = 256
    steps = cfg.epochs * math.ceil(len(X) / bs)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps)
    bar = _Bar("train head", cfg.epochs)
    head.train()
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(X), generator=g)
        tot = 0.0
        for i in range(0, len(X), bs):
            idx = perm[i:i + bs]
            xb = X[idx]
            xb = xb + 0.05 * torch.randn(xb.shape, generator=g) * xb.std()
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(head(xb), y[idx], reduction="none")
                    * w[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(idx)
        bar.update()
    log(f"head: {len(X_pos)} positive and {len(X_neg)} negative windows, last epoch loss {tot / len(X):.4f}")
