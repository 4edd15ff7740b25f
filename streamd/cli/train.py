"""``streamd train``, ``streamd pretrain``, ``streamd average``, ``streamd lm``, ``streamd adapt``: the training
commands' parsers.

The work is in the library: :func:`streamd.train.trainer.train`, :func:`streamd.train.pretrain.pretrain`,
:func:`streamd.train.average.write_averaged_checkpoint`, :func:`streamd.train.lm.train_lm`,
:func:`streamd.train.adapt.adapt`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["train_main", "pretrain_main", "average_main", "lm_main", "adapt_main", "run_config_command"]


def run_config_command(argv: Sequence[str] | None, prog: str, description: str, config_help: str, example: str,
                       load: Callable[..., Any], run: Callable[..., Any], errors: tuple[type[BaseException], ...],
                       logger: logging.Logger) -> int:
    """The ``--config FILE [--resume] [--set KEY=VALUE ...]`` command line of a run: ``load(path, overrides,
    resume=)`` the config, ``run(cfg, stop=)`` it; the first Ctrl-C stops after the current step with a
    checkpoint (exit 130), ``errors`` and config errors exit 2."""
    from ..config import ConfigError

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--config", required=True, help=config_help)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in exp_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example} (repeatable; YAML values)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load(args.config, args.set, resume=True if args.resume else None)
    except (ConfigError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2

    interrupted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(signum, frame):  # first Ctrl-C: finish the step, save, exit; second: abort
            interrupted.set()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            logger.warning("interrupt: saving a checkpoint after the current step (Ctrl-C again to abort)")
        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        res = run(cfg, stop=lambda _step: interrupted.is_set())
    except errors as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    logger.info("stopped at step %d; last checkpoint %s", res.step, res.checkpoint)
    return 130 if interrupted.is_set() else 0


def train_main(argv: Sequence[str] | None = None) -> int:
    """``streamd train --config configs/train.yaml [--resume] [--set KEY=VALUE ...]``."""
    from ..config import ConfigError
    from ..train.trainer import load_train_config, log, train

    return run_config_command(argv, "streamd train", "Train a streaming transducer.",
                              "training YAML (see configs/train.yaml)", "optim.lr=0.001", load_train_config, train,
                              (ConfigError,), log)


def pretrain_main(argv: Sequence[str] | None = None) -> int:
    """``streamd pretrain --config configs/pretrain.yaml [--resume] [--set KEY=VALUE ...]``."""
    from ..config import ConfigError
    from ..train.pretrain import load_pretrain_config, log, pretrain

    return run_config_command(argv, "streamd pretrain",
                              "Self-supervised data2vec-style pretraining of the streaming encoder on audio with "
                              "or without transcripts; fine-tune with `streamd train --set init_from=CHECKPOINT`.",
                              "pretraining YAML (see configs/pretrain.yaml)", "mask.prob=0.5", load_pretrain_config,
                              pretrain, (ConfigError, ValueError, FileNotFoundError), log)


def average_main(argv: Sequence[str] | None = None) -> int:
    """``streamd average (CHECKPOINT ... [--weights W ...] | --exp-dir DIR --last N) --out PATH [--half]``."""
    p = argparse.ArgumentParser(prog="streamd average", description="Average the weights of checkpoints.")
    p.add_argument("checkpoints", nargs="*", help="checkpoint files to average")
    p.add_argument("--exp-dir", help="take the newest --last checkpoint-<step>.pt files of this folder")
    p.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints (with --exp-dir)")
    p.add_argument("--out", required=True, help="output checkpoint path")
    p.add_argument("--half", action="store_true", help="store float16 weights")
    p.add_argument("--weights", type=float, nargs="+", metavar="W",
                   help="one weight per checkpoint file (normalized to sum 1): a weighted mean, e.g. "
                        "'old.pt new.pt --weights 0.3 0.7' interpolates a fine-tuned model with its start (WiSE-FT)")
    args = p.parse_args(argv)
    from ..model.checkpoint import CheckpointError
    from ..train.average import list_checkpoints, write_averaged_checkpoint

    if bool(args.checkpoints) == bool(args.exp_dir):
        print("streamd average: give either checkpoint files or --exp-dir (not both)", file=sys.stderr)
        return 2
    if args.exp_dir:
        if args.last < 1:
            print(f"streamd average: --last must be >= 1, got {args.last}", file=sys.stderr)
            return 2
        found = list_checkpoints(args.exp_dir)
        if not found:
            print(f"streamd average: no checkpoint-<step>.pt in {args.exp_dir}", file=sys.stderr)
            return 2
        paths = [path for _, path in found[-args.last:]]
    else:
        paths = [Path(c) for c in args.checkpoints]
    if args.weights is not None and args.exp_dir:
        print("streamd average: --weights goes with checkpoint files, not --exp-dir", file=sys.stderr)
        return 2
    try:
        out = write_averaged_checkpoint(paths, args.out, half=args.half, weights=args.weights)
    except (CheckpointError, ValueError) as e:
        print(f"streamd average: {e}", file=sys.stderr)
        return 2
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0


def lm_main(argv: Sequence[str] | None = None) -> int:
    """``streamd lm --out FILE [--model CKPT] [--sentences N] [--text FILE ...] ...``."""
    from ..train import lm

    ap = argparse.ArgumentParser(prog="streamd lm", description=lm.__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="LM file to write (for a model x.pt, x.lm.pt is found by "
                                                 "decoding.lm: auto)")
    ap.add_argument("--model", help="checkpoint whose token table the LM uses (default: the shipped model)")
    ap.add_argument("--sentences", type=int, default=300000, help="generated sentences (default 300000)")
    ap.add_argument("--seed", type=int, default=7, help="text generator seed (default 7)")
    ap.add_argument("--slot-focus", type=float, default=0.0,
                    help="share of name/place/grocery/artist drill sentences, as streamd synth (default 0)")
    ap.add_argument("--text", action="append", default=[], metavar="FILE", help="extra text, one sentence per line")
    ap.add_argument("--order", type=int, default=8, help="n-gram order (default 8)")
    ap.add_argument("--min-count", type=int, default=5, help="prune histories seen fewer times (default 5)")
    args = ap.parse_args(argv)
    from ..model.checkpoint import load_checkpoint
    from ..paths import model_arg

    tokens = load_checkpoint(model_arg(args.model)).tokens
    try:
        print(lm.train_lm(tokens, args.out, sentences=args.sentences, seed=args.seed, slot_focus=args.slot_focus,
                          text_files=args.text, order=args.order, min_count=args.min_count))
    except (ValueError, OSError) as e:
        print(f"streamd lm: {e}", file=sys.stderr)
        return 2
    return 0


def adapt_main(argv: Sequence[str] | None = None) -> int:
    """``streamd adapt --set MANIFEST [--set ...] --out FILE.adapter.npz [--rank R --epochs E ...]``."""
    from ..train.adapt import AdaptOptions

    d = AdaptOptions()
    p = argparse.ArgumentParser(
        prog="streamd adapt",
        description="Fine-tune the installed Moonshine base (the second pass) on transcribed speech into a small "
                    "low-rank adapter file; use it with --second-pass FILE.adapter.npz (docs/cli.md).")
    p.add_argument("--set", action="append", required=True, metavar="MANIFEST",
                   help="JSON lines with audio and text (spoken words); repeat to add sets")
    p.add_argument("--out", required=True, help="the adapter file to write (NAME.adapter.npz)")
    p.add_argument("--rank", type=int, default=d.rank, help=f"rank of each weight change (default {d.rank})")
    p.add_argument("--epochs", type=float, default=d.epochs, help=f"passes over the data (default {d.epochs:g})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"AdamW learning rate (default {d.lr:g})")
    p.add_argument("--accumulate", type=int, default=d.accumulate,
                   help=f"utterances per step (default {d.accumulate})")
    p.add_argument("--init", metavar="FILE.adapter.npz",
                   help="start from this adapter's weights (same --rank), e.g. to go on training it on other data")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed (default {d.seed})")
    p.add_argument("--threads", type=int, default=d.threads, help=f"torch threads (default {d.threads})")
    args = p.parse_args(argv)
    try:
        options = AdaptOptions(rank=args.rank, epochs=args.epochs, lr=args.lr, accumulate=args.accumulate,
                               seed=args.seed, threads=args.threads)
    except ValueError as e:
        print(f"streamd adapt: {e}", file=sys.stderr)
        return 2
    from ..audio.pcm import AudioError
    from ..audio.resample import load_audio_at
    from ..manifest_lines import iter_audio_lines
    from ..second_pass.models import ADAPTER_SUFFIX, TeacherUnavailable

    if not args.out.endswith(ADAPTER_SUFFIX):
        print(f"streamd adapt: --out must end in {ADAPTER_SUFFIX}, got {args.out!r}", file=sys.stderr)
        return 2

    try:
        from ..train.adapt import adapt
    except ImportError as e:
        print(f"streamd adapt: {e}; install with: pip install -e \".[train,second-pass]\"", file=sys.stderr)
        return 2
    utterances = []
    try:
        for path in args.set:
            for _n, where, obj, audio in iter_audio_lines(path):
                if "text" not in obj:
                    raise ValueError(f"{where}: no 'text'")
                utterances.append((load_audio_at(audio, 16000), obj["text"]))
    except (OSError, ValueError, AudioError) as e:
        print(f"streamd adapt: {e}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    bar = tqdm(total=1, unit="step", desc="adapt", file=sys.stderr)

    def progress(step: int, steps: int, loss: float) -> None:
        bar.total = steps
        bar.n = step
        bar.set_postfix(loss=f"{loss:.3f}")  # redraws the bar

    try:
        summary = adapt(utterances, args.out, options, meta={"sets": [Path(s).as_posix() for s in args.set]},
                        progress=progress, init=args.init)
    except (OSError, ValueError, TeacherUnavailable) as e:
        print(f"streamd adapt: {e}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    print(f"adapter -> {args.out}: {summary['utterances']} utterances ({summary['hours']} h), {summary['steps']} "
          f"steps, final loss {summary['final_loss']}, {summary['seconds']:.0f} s")
    return 0
