"""``streamd data``: import real corpora into training manifests, and manifest statistics.

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
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

from ..train import corpora

__all__ = ["main", "KINDS"]

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


def build_parser() -> argparse.ArgumentParser:
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "import":
            _import(args)
            return 0
        return _stats(args)
    except (ValueError, OSError) as e:
        print(f"streamd data: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
