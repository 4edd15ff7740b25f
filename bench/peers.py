#!/usr/bin/env python3
"""Peer comparison: the same evaluation files through pocketsphinx, streamd and real-speech teacher models.

    python bench/peers.py [--set ../shared/eval/dev/asr.jsonl] [--limit N] [--model PATH] [--json]
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

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

RATE = 16000
DecodeFn = Callable[[np.ndarray], str]  # (N,) float32 samples in [-1, 1] at 16 kHz -> hypothesis text
DEFAULT_SET = Path(__file__).resolve().parents[2] / "shared" / "eval" / "dev" / "asr.jsonl"
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
    from streamd.scoring.metrics import word_errors

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
    from streamd.events import Error, Final
    from streamd.feed import feed_streams

    def decode(x: np.ndarray) -> str:
        _, (events,) = feed_streams(rec, [(x, RATE)], piece_seconds, **stream_options)
        errs = [e for e in events if isinstance(e, Error)]
        if errs:
            raise RuntimeError(f"{errs[0].code}: {errs[0].message}")
        return " ".join(e.text for e in events if isinstance(e, Final) and e.text)

    return decode


def teacher_decoder(name: str, threads: int = 1) -> DecodeFn:
    """A ``streamd label`` teacher, its text normalized to spoken form; ImportError when its package is missing."""
    from streamd.text.normalize import normalize_text
    from streamd.second_pass.models import load_teacher

    teacher = load_teacher(name, cpu_threads=threads)

    def decode(x: np.ndarray) -> str:
        return normalize_text(teacher.transcribe(x))

    return decode


def system_names() -> list[str]:
    """Every system ``--systems`` accepts: pocketsphinx, streamd, then the teachers (strongest first)."""
    from streamd.second_pass.models import teacher_names

    return ["pocketsphinx", "streamd"] + teacher_names()


def load_set(path: str | Path, limit: int | None = None) -> list[Utterance]:
    """The set's files at 16 kHz (ValueError naming the file and line for a malformed set)."""
    from streamd.audio.pcm import load_audio
    from streamd.audio.resample import resample
    from streamd.evaluation.sets import read_eval_set

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


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/peers.py", description="WER and CPU real-time factor of pocketsphinx, "
                                                                    "streamd and teacher models on the same files")
    ap.add_argument("--set", help=f"evaluation set, JSON lines (default {DEFAULT_SET} beside the checkout, "
                                  "else the package's sample recordings)")
    ap.add_argument("--limit", type=int, help="only the first N files")
    ap.add_argument("--model", help="streamd checkpoint (default: the shipped model)")
    ap.add_argument("--method", help="streamd search method (default: the engine's)")
    ap.add_argument("--device", default="cpu", help="streamd device (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch / teacher threads (default %(default)s, as "
                                                           "pocketsphinx)")
    ap.add_argument("--systems", default="pocketsphinx,streamd",
                    help="comma-separated systems, in table order (default %(default)s; also whisper-base, "
                         "whisper-tiny.en, moonshine-base)")
    ap.add_argument("--json", action="store_true", help="one JSON object: per-system figures and per-file texts")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        print(f"peers: --limit must be >= 1, got {args.limit}", file=sys.stderr)
        return 2
    if args.threads < 1:
        print(f"peers: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    known = system_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names or len(set(names)) != len(names):
        what = f"unknown system(s) {', '.join(unknown)}" if unknown else f"--systems {args.systems!r} is empty or " \
                                                                       "lists a system twice"
        print(f"peers: {what}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    try:
        if not args.set:
            from streamd.paths import default_samples

            args.set = str(DEFAULT_SET if DEFAULT_SET.is_file() else default_samples())
            if not DEFAULT_SET.is_file():
                print(f"peers: no dev set at {DEFAULT_SET}: using the sample recordings {args.set}", file=sys.stderr)
        utts = load_set(args.set, args.limit)
    except Exception as e:  # noqa: BLE001 - ValueError / AudioError: say which file
        print(f"peers: {e}", file=sys.stderr)
        return 2

    systems: dict[str, DecodeFn] = {}
    skipped: dict[str, str] = {}
    model = device = None
    for name in names:
        if name == "pocketsphinx":
            try:
                systems[name] = sphinx_decoder()
            except ImportError as e:
                skipped[name] = f"pocketsphinx is not installed ({e}); install it with: {PIP_HINT}"
        elif name == "streamd":
            import dataclasses

            import torch

            from streamd.paths import model_arg
            from streamd.config import EngineConfig
            from streamd.engine import Recognizer

            torch.set_num_threads(args.threads)
            cfg = EngineConfig(device=args.device, num_threads=args.threads)
            if args.method:
                cfg = dataclasses.replace(cfg, decoding=dataclasses.replace(cfg.decoding, method=args.method))
            model = model_arg(args.model)
            try:
                rec = Recognizer.from_checkpoint(model, cfg)
            except (ValueError, OSError) as e:
                print(f"peers: cannot load {model}: {e}", file=sys.stderr)
                return 2
            device = str(rec.device)
            systems[name] = streamd_decoder(rec)
        else:
            try:
                systems[name] = teacher_decoder(name, args.threads)
            except ImportError as e:
                skipped[name] = str(e)
    for name, why in skipped.items():
        print(f"peers: skipping {name}: {why}", file=sys.stderr)
    if not systems:
        print("peers: no system left to run", file=sys.stderr)
        return 2
    scores = compare(utts, systems)
    if args.json:
        print(json.dumps({"set": args.set, "files": len(utts), "audio_seconds": round(sum(u.seconds for u in utts), 3),
                          "threads": args.threads, "model": model, "device": device,
                          "systems": [s.to_json() for s in scores], "skipped": skipped,
                          "utterances": [dict({"audio": u.name, "ref": u.ref}, **{s.name: s.hyps[i] for s in scores})
                                         for i, u in enumerate(utts)]}))
    else:
        where = f"; streamd {model} on {device}" if model else ""
        print(f"{args.set}: {len(utts)} files, {sum(u.seconds for u in utts):.1f} s of audio{where}, "
              f"threads {args.threads}")
        print(format_table(scores))
    errors = [f"{s.name}: {e}" for s in scores for e in s.errors]
    for e in errors:
        print(f"peers: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
