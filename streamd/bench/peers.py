"""``streamd bench peers``: the same evaluation files through pocketsphinx, streamd and real-speech teacher
models (the parser is :mod:`streamd.cli.bench.peers`).

    streamd bench peers [--set ../shared/eval/dev/asr.jsonl] [--limit N] [--model PATH] [--json]
                        [--systems pocketsphinx,streamd,whisper-base,whisper-tiny.en,moonshine-base]

The real sets measured so far (docs/benchmarks.md, "Real speech: streamd beside the teacher models"):
``../shared/real/speech_commands/dev/manifest.jsonl`` (command words) and
``../shared/real/speechocean762/dev/manifest.jsonl`` (read sentences, non-native speakers, 16 kHz Ogg Opus,
which soundfile reads).

Every file of the set (``streamd eval``'s JSON-lines format, read with
:func:`streamd.evaluation.sets.read_eval_set`) is loaded once, resampled to
16 kHz, and decoded file by file by each system, in one run on this machine:

* **pocketsphinx** (pip package ``pocketsphinx`` 5.1.1, its bundled US English
  acoustic model, language model and dictionary): one ``Decoder`` built once;
  per file ``start_utt()``, ``process_raw(s16le bytes, full_utt=True)``,
  ``end_utt()``, ``hyp().hypstr`` (filler tokens such as ``<sil>`` /
  ``[NOISE]`` and alternate-pronunciation marks ``word(2)`` removed).
* **streamd**: one :class:`~streamd.engine.Recognizer` built once; per file
  one stream fed 0.1 s pieces with a batch step after each (as the daemon
  does), then ``finish()`` and ``drain()`` (:func:`streamd.feed.feed_streams`,
  the loop of ``streamd eval``); the hypothesis is every non-empty ``Final``
  joined, as in ``streamd eval``.
* **teachers** (``whisper-base``, ``whisper-tiny.en``, ``moonshine-base``:
  :data:`streamd.second_pass.models.TEACHERS`, the models ``streamd label``
  uses; pip extra ``teacher``): one model built once, ``transcribe(x)`` per
  file; their written-form output ("Set a timer for 5 minutes.") is turned
  into the references' spoken form with
  :func:`streamd.text.normalize.normalize_text` before scoring.

``--systems`` picks the systems and their order (default
``pocketsphinx,streamd``).  A system whose package is not installed is
skipped with the reason printed (and listed under ``skipped`` in
``--json``); with no system left the script exits 2.

Each system decodes one second of silence first (first-call overheads are
not decoding time).  Scores use ``streamd eval``'s conventions
(:func:`~streamd.scoring.metrics.normalize_words`,
:func:`~streamd.scoring.metrics.align_words`): WER = (sub + del + ins) / reference
words over the whole set.  ``rtf`` = decode wall time / audio seconds and
``cpu_rtf`` = process CPU time (all threads) / audio seconds, timing only the
decode calls (file loading excluded).  pocketsphinx is single-threaded, so
torch runs with ``--threads 1`` by default for a like-for-like CPU budget;
the teachers get the same ``--threads`` (CTranslate2 / ONNX Runtime intra-op
threads).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..paths import shared_root

RATE = 16000
DecodeFn = Callable[[np.ndarray], str]  # (N,) float32 samples in [-1, 1] at 16 kHz -> hypothesis text
DEFAULT_SET = shared_root() / "eval" / "dev" / "asr.jsonl"
PIP_HINT = 'pip install pocketsphinx (the project\'s extra: pip install -e ".[bench]")'


@dataclass(frozen=True)
class Utterance:
    """One file of the set: its name (as in the set), reference text, 16 kHz samples ``(N,)`` float32."""

    name: str
    ref: str
    audio: np.ndarray

    @property
    def seconds(self) -> float:
        return self.audio.size / RATE


@dataclass
class SystemScore:
    """One system's figures over the set (``wer`` None when the references hold no words)."""

    name: str
    files: int
    audio_seconds: float
    ref_words: int
    sub: int
    dels: int
    ins: int
    wer: float | None
    rtf: float
    cpu_rtf: float
    hyps: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}
        d.pop("hyps")
        return d


def score_system(name: str, decode: DecodeFn, utts: Sequence[Utterance],
                 wall_clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> SystemScore:
    """Decode every utterance with ``decode``, timing only the calls; WER against the references.

    A call that raises is recorded in ``errors`` and scored as an empty hypothesis.
    """
    from ..scoring.metrics import word_errors

    wall = cpu = 0.0
    hyps: list[str] = []
    errors: list[str] = []
    for u in utts:
        w0, c0 = wall_clock(), cpu_clock()
        try:
            hyp = decode(u.audio)
        except Exception as e:  # noqa: BLE001 - one bad file must not hide the others' figures
            hyp = ""
            errors.append(f"{u.name}: {type(e).__name__}: {e}")
        wall += wall_clock() - w0
        cpu += cpu_clock() - c0
        if not isinstance(hyp, str):
            raise TypeError(f"{name}: the decoder returned {type(hyp).__name__} for {u.name}, expected str")
        hyps.append(hyp)
    c = word_errors([u.ref for u in utts], hyps)
    seconds = sum(u.seconds for u in utts)
    return SystemScore(name, len(utts), seconds, c.words, c.subs, c.dels, c.ins, c.wer,
                       wall / seconds if seconds > 0 else float("nan"), cpu / seconds if seconds > 0 else float("nan"),
                       hyps, errors)


def format_table(scores: Sequence[SystemScore]) -> str:
    """A fixed-width table: one row per system."""
    head = f"{'system':<16} {'files':>5} {'audio s':>8} {'words':>6} {'WER':>7} {'sub':>5} {'del':>5} {'ins':>5} " \
           f"{'RTF':>7} {'CPU RTF':>8}"
    rows = [head]
    for s in scores:
        wer = "n/a" if s.wer is None else f"{100 * s.wer:.1f}%"
        rows.append(f"{s.name:<16} {s.files:>5} {s.audio_seconds:>8.1f} {s.ref_words:>6} {wer:>7} {s.sub:>5} "
                    f"{s.dels:>5} {s.ins:>5} {s.rtf:>7.4f} {s.cpu_rtf:>8.4f}")
    return "\n".join(rows)


# --------------------------------------------------------------------------- the systems


_SPHINX_NOISE = re.compile(r"^(<.*>|\[.*\]|\+\+.*\+\+)$")
_SPHINX_ALT = re.compile(r"\(\d+\)$")


def clean_sphinx_text(text: str) -> str:
    """Drop filler tokens (``<sil>``, ``[NOISE]``, ``++UH++``) and pronunciation marks (``read(2)`` -> ``read``)."""
    return " ".join(_SPHINX_ALT.sub("", w) for w in text.split() if not _SPHINX_NOISE.match(w))


def sphinx_decoder() -> DecodeFn:
    """pocketsphinx with its bundled default English models; raises ImportError when it is not installed."""
    from pocketsphinx import Decoder

    dec = Decoder(samprate=RATE, loglevel="FATAL")

    def decode(x: np.ndarray) -> str:
        pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2").tobytes()
        dec.start_utt()
        dec.process_raw(pcm, full_utt=True)
        dec.end_utt()
        hyp = dec.hyp()
        return clean_sphinx_text(hyp.hypstr) if hyp is not None else ""

    return decode


def streamd_decoder(rec, piece_seconds: float = 0.1, **stream_options) -> DecodeFn:
    """One stream of ``rec`` (a Recognizer) per call, fed like ``streamd eval`` feeds it
    (:func:`streamd.feed.feed_streams`: pieces with a step after each, finish, drain); Finals joined."""
    from ..events import Error, Final
    from ..feed import feed_streams

    def decode(x: np.ndarray) -> str:
        _, (events,) = feed_streams(rec, [(x, RATE)], piece_seconds, **stream_options)
        errs = [e for e in events if isinstance(e, Error)]
        if errs:
            raise RuntimeError(f"{errs[0].code}: {errs[0].message}")
        return " ".join(e.text for e in events if isinstance(e, Final) and e.text)

    return decode


def teacher_decoder(name: str, threads: int = 1) -> DecodeFn:
    """A ``streamd label`` teacher, its text normalized to spoken form; ImportError when its package is missing."""
    from ..text.normalize import normalize_text
    from ..second_pass.models import load_teacher

    teacher = load_teacher(name, cpu_threads=threads)

    def decode(x: np.ndarray) -> str:
        return normalize_text(teacher.transcribe(x))

    return decode


def system_names() -> list[str]:
    """Every system ``--systems`` accepts: pocketsphinx, streamd, then the teachers (strongest first)."""
    from ..second_pass.models import teacher_names

    return ["pocketsphinx", "streamd"] + teacher_names()


def load_set(path: str | Path, limit: int | None = None) -> list[Utterance]:
    """The set's files at 16 kHz (ValueError naming the file and line for a malformed set)."""
    from ..audio.pcm import load_audio
    from ..audio.resample import resample
    from ..evaluation.sets import read_eval_set

    entries, _ = read_eval_set(path, limit)
    out = []
    for e in entries:
        x, rate = load_audio(e.audio)
        out.append(Utterance(e.rel_audio, e.text, resample(x, rate, RATE) if rate != RATE else x))
    return out


def compare(utts: Sequence[Utterance], systems: dict[str, DecodeFn], warmup: bool = True) -> list[SystemScore]:
    """Score every system on the same utterances, one after the other (each warmed up on 1 s of silence)."""
    out = []
    for name, fn in systems.items():
        if warmup:
            fn(np.zeros(RATE, dtype=np.float32))
        out.append(score_system(name, fn, utts))
    return out


def build_systems(names: Sequence[str], model: str | None = None, method: str | None = None, device: str = "cpu",
                  threads: int = 1) -> tuple[dict[str, DecodeFn], dict[str, str], str | None, str | None]:
    """The decoders of ``names`` in order: (systems, skipped {name: why its package is missing}, the streamd
    checkpoint, its device). ValueError when the streamd checkpoint cannot be loaded."""
    systems: dict[str, DecodeFn] = {}
    skipped: dict[str, str] = {}
    path = dev = None
    for name in names:
        if name == "pocketsphinx":
            try:
                systems[name] = sphinx_decoder()
            except ImportError as e:
                skipped[name] = f"pocketsphinx is not installed ({e}); install it with: {PIP_HINT}"
        elif name == "streamd":
            import torch

            from ..config import EngineConfig
            from ..engine import Recognizer
            from ..paths import model_arg

            torch.set_num_threads(threads)
            cfg = EngineConfig(device=device, num_threads=threads)
            if method:
                cfg = dataclasses.replace(cfg, decoding=dataclasses.replace(cfg.decoding, method=method))
            path = model_arg(model)
            try:
                rec = Recognizer.from_checkpoint(path, cfg)
            except (ValueError, OSError) as e:
                raise ValueError(f"cannot load {path}: {e}") from e
            dev = str(rec.device)
            systems[name] = streamd_decoder(rec)
        else:
            try:
                systems[name] = teacher_decoder(name, threads)
            except ImportError as e:
                skipped[name] = str(e)
    return systems, skipped, path, dev


def peers_json(set_path: str, utts: Sequence[Utterance], scores: Sequence[SystemScore], threads: int,
               model: str | None, device: str | None, skipped: dict[str, str]) -> dict:
    """The ``--json`` object: per-system figures and per-file texts."""
    return {"set": set_path, "files": len(utts), "audio_seconds": round(sum(u.seconds for u in utts), 3),
            "threads": threads, "model": model, "device": device,
            "systems": [s.to_json() for s in scores], "skipped": skipped,
            "utterances": [dict({"audio": u.name, "ref": u.ref}, **{s.name: s.hyps[i] for s in scores})
                           for i, u in enumerate(utts)]}
