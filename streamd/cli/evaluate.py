"""``streamd eval`` and ``streamd calibrate``: the parsers of the commands that measure a model.

* ``streamd eval``: the command line of :mod:`streamd.evaluation` (recognition, or keyword mode with
  ``--keywords``); reports as text or JSON, optional reliability and DET plots;
* ``streamd calibrate``: :func:`streamd.train.calibrate.calibrate` (or ``calibrate_second_pass``), the
  word-confidence calibration fitted on validation sets and stored with the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Sequence

from streamd.cli.engine_args import add_engine_args, engine_config_from_args, run_guarded
from streamd.scoring.reliability import plot_reliability, require_matplotlib

from ..evaluation.keywords import run_keywords
from ..evaluation.kws import det_curves, plot_det
from ..evaluation.options import EvalOptions
from ..evaluation.recognition import run
from ..evaluation.report import format_keyword_report, format_report, reliability_curves

__all__ = ["eval_parser", "eval_main", "calibrate_parser", "calibrate_main"]


def eval_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="streamd eval", description="Evaluate a model through the streaming engine: "
                                 "WER, real-time factor, confidence quality (AUC, NCE), wake words (FRR, FA/h).")
    ap.add_argument("--set", dest="sets", action="append", metavar="PATH.jsonl",
                    help="evaluation set (JSON lines: audio, text[, voice, keyword]); repeatable "
                         "(default: the package's sample recordings, a smoke test, not an evaluation)")
    ap.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(ap)
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--resample-to", type=int, metavar="RATE",
                    help="downsample the audio to RATE Hz first and stream it at that rate (e.g. 8000)")
    ap.add_argument("--batch-streams", type=int, default=16, metavar="N", help="concurrent streams (default 16)")
    ap.add_argument("--rtf-single", action="store_true", help="also time the files one at a time (one stream)")
    ap.add_argument("--limit", type=int, metavar="N", help="only the first N entries of each set")
    ap.add_argument("--second-pass-batch", type=int, default=1, metavar="N",
                    help="with --second-pass: read the set's segments in rounds of N, one model call a round (as "
                         "the daemon's worker when N segments wait: engine.second_pass.max_batch); default 1: "
                         "each segment alone")
    ap.add_argument("--json", action="store_true", help="one JSON object with every figure")
    ap.add_argument("--confidence-table", action="store_true",
                    help="AUC and NCE of every word-confidence measure of the bank (measure, alpha, aggregation; "
                         "default: only the engine's setting)")
    ap.add_argument("--reliability-plot", metavar="PNG", help="write a reliability diagram of word confidence "
                    "(raw and calibrated, every set) to PNG (needs matplotlib)")
    ap.add_argument("--keywords", nargs="?", const="", metavar="LIST",
                    help="keyword mode: evaluate runtime wake words instead of recognition: LIST of comma-separated "
                         "phrases (without LIST: every 'keyword' of the sets); per keyword the miss rate on its "
                         "positives and false alarms per hour on all negatives (keyword null) over an exact "
                         "threshold sweep, and the miss rate at 1, 0.5 and 0.1 FA/h")
    ap.add_argument("--thresholds", metavar="LO:HI:STEP", type=_threshold_grid,
                    help="the threshold sweep (default 0.05:0.99:0.01), or a comma-separated list")
    ap.add_argument("--peer-wake-model", nargs="+", metavar="MODEL.onnx", default=[],
                    help="keyword mode: openWakeWord models (e.g. hey_mycroft_v0.1.onnx of the pip package "
                         "openwakeword; non-commercial models: peers, never shipped) scored on the same sets with "
                         "the trained models' rules, side by side")
    ap.add_argument("--det-plot", metavar="PNG", help="write a DET plot (miss rate against false alarms per hour, "
                    "log axis; one curve per keyword, or per set of the built-in head) to PNG (needs matplotlib)")
    return ap


def _threshold_grid(text: str) -> tuple[float, ...]:
    """``LO:HI:STEP`` (both ends included) or a comma-separated list of thresholds in (0, 1)."""
    try:
        if ":" in text:
            lo, hi, step = (float(x) for x in text.split(":"))
            if not step > 0 or hi < lo:
                raise ValueError
            n = int(round((hi - lo) / step))
            out = tuple(round(lo + i * step, 6) for i in range(n + 1))
        else:
            out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI:STEP or a comma-separated list, got {text!r}") from None
    if not out or any(not 0 < t < 1 for t in out):
        raise argparse.ArgumentTypeError(f"thresholds must be in (0, 1), got {text!r}")
    return tuple(sorted(set(out)))


def _run_keywords(args: argparse.Namespace, model: str, options: EvalOptions) -> int:
    if not args.sets:
        raise ValueError("keyword mode needs --set: positive sets (keyword fields) and negative sets (keyword null)")
    if args.wake_words is not None:
        raise ValueError("keyword mode evaluates the --keywords list; --wake-words would not be used")
    if args.reliability_plot:
        raise ValueError("--reliability-plot is for recognition (word confidence), not keyword mode")
    if args.det_plot:
        require_matplotlib()
    if args.peer_wake_model:
        from ..evaluation.oww import require_openwakeword
        require_openwakeword(args.peer_wake_model)
    cfg = engine_config_from_args(args)
    if cfg.kws.verify:
        raise ValueError("keyword mode scores the trained wake models without a verifier; their figures with one: "
                         "streamd bench wake-mycroft MODEL... --verify NAME")
    wake_models = cfg.kws.wake_models  # trained models: scored on their own, side by side
    cfg = dataclasses.replace(cfg, kws=dataclasses.replace(cfg.kws, wake_models=()))
    report = run_keywords(model, args.sets, cfg, options, args.keywords or None)
    if wake_models:
        from ..evaluation.wake import run_wake_models
        report["wake_models"] = run_wake_models(wake_models, args.sets, options, cfg.kws.refractory_s,
                                                 cfg.kws.embedding_precision)
    if args.peer_wake_model:
        from ..evaluation.oww import run_peer_wake_models
        report["peer_wake_models"] = run_peer_wake_models(args.peer_wake_model, args.sets, options,
                                                          cfg.kws.refractory_s)
    if args.det_plot:
        plot_det(args.det_plot, det_curves(report), report["negative_hours"],
                 f"runtime wake words: {Path(model).name}, score {report['wake_score']}, "
                 + (f"{len(wake_models)} trained models, " if wake_models else "")
                 + (f"{len(args.peer_wake_model)} openWakeWord peers, " if args.peer_wake_model else "")
                 + f"{report['negative_hours']:.2f} h of negatives")
    print(json.dumps(report) if args.json else format_keyword_report(report))
    for e in report["errors"]:
        print(f"streamd eval: {e}", file=sys.stderr)
    return 1 if report["errors"] else 0


def _run_eval(args: argparse.Namespace) -> int:
    if args.model:
        model = args.model
    else:
        from streamd.paths import default_model_path

        model = str(default_model_path())
        if not Path(model).is_file():
            raise ValueError(f"no model given and no default model at {model}; pass --model PATH")
    extra = {"thresholds": args.thresholds} if args.thresholds else {}
    if args.keywords is not None:
        return _run_keywords(args, model, EvalOptions(resample_to=args.resample_to, batch_streams=args.batch_streams,
                                                      limit=args.limit, **extra))
    if args.peer_wake_model:
        raise ValueError("--peer-wake-model is for keyword mode (--keywords)")
    if not args.sets:
        from streamd.paths import default_samples

        args.sets = [str(default_samples())]
        print(f"streamd eval: no --set given: using the sample recordings {args.sets[0]} "
              "(six TTS sentences: a smoke test, not an evaluation)", file=sys.stderr)
    options = EvalOptions(resample_to=args.resample_to, batch_streams=args.batch_streams,
                          rtf_single=args.rtf_single, limit=args.limit, second_pass_batch=args.second_pass_batch,
                          **extra)
    if args.reliability_plot or args.det_plot:
        require_matplotlib()
    report = run(model, args.sets, engine_config_from_args(args), options)
    if args.reliability_plot:
        plot_reliability(args.reliability_plot, reliability_curves(report),
                         f"word confidence: {Path(model).name}, {report['method']}")
    if args.det_plot:
        curves = det_curves(report)
        if not curves:
            raise ValueError("--det-plot: no set has wake-word figures (keyword fields and a model KWS head)")
        hours = min(r["kws"]["negative_seconds"] for r in report["sets"] if r.get("kws")) / 3600
        if not hours > 0:
            raise ValueError("--det-plot: a set with keyword fields has no negatives (keyword null)")
        plot_det(args.det_plot, curves, hours, f"built-in wake word: {Path(model).name}")
    if args.json:
        print(json.dumps(report))
    else:
        print(format_report(report, measures=args.confidence_table))
    errors = [e for r in report["sets"] for e in r["errors"]]
    for e in errors:
        print(f"streamd eval: {e}", file=sys.stderr)
    return 1 if errors else 0


def eval_main(argv: Sequence[str] | None = None) -> int:
    """``streamd eval [--set PATH.jsonl ...] [--model CKPT] [engine flags] ...``."""
    args = eval_parser().parse_args(argv)
    return run_guarded("streamd eval", lambda: _run_eval(args))


def calibrate_parser() -> argparse.ArgumentParser:
    from ..decode.calibration import CALIBRATION_KINDS
    from ..train.calibrate import SECOND_PASS_FEATURES

    ap = argparse.ArgumentParser(prog="streamd calibrate", description="Fit a calibration of word confidence "
                                 "(the configured measure -> P(word correct)) on validation sets through the "
                                 "streaming engine, report it on held-out words, and store it in a copy of the model.")
    ap.add_argument("--model", help="checkpoint to calibrate (with --second-pass: the first pass's, default the "
                                    "shipped model)")
    ap.add_argument("--set", dest="sets", action="append", required=True, metavar="PATH.jsonl",
                    help="validation set (JSON lines: audio, text), never the test set; repeatable")
    ap.add_argument("--out", help="where the calibrated copy of the checkpoint goes (may be --model); with "
                                  "--second-pass: where its calibration goes (default: the shipped "
                                  "streamd/assets/second_pass.calibration.json for a name, the model folder's "
                                  "streamd.calibration.json for a folder, NAME.calibration.json beside an adapter "
                                  "file NAME.adapter.npz)")
    ap.add_argument("--kind", choices=(*CALIBRATION_KINDS, SECOND_PASS_FEATURES),
                    help="calibration stored: isotonic (the default) or logistic; with --second-pass also "
                         "features (its default: a logistic model of the word probability, the first pass's "
                         "confidence, the segment's word counts and the stream's input rate); all are reported "
                         "on held-out words")
    ap.add_argument("--plot", metavar="PNG", help="write the held-out reliability diagram to PNG (needs matplotlib)")
    add_engine_args(ap)
    ap.add_argument("--device", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--batch-streams", type=int, default=16, metavar="N", help="concurrent streams (default 16)")
    ap.add_argument("--limit", type=int, metavar="N", help="only the first N entries of each set")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return ap


def _run_calibrate(args: argparse.Namespace) -> int:
    from ..paths import model_arg
    from ..train.calibrate import (SECOND_PASS_FEATURES, CalibrateOptions, calibrate, calibrate_second_pass,
                                   format_report)

    config = engine_config_from_args(args)
    kind = args.kind or (SECOND_PASS_FEATURES if config.second_pass.enabled else "isotonic")
    if kind == SECOND_PASS_FEATURES and not config.second_pass.enabled:
        raise ValueError(f"--kind {SECOND_PASS_FEATURES} is for a second pass (--second-pass NAME)")
    options = CalibrateOptions(kind=kind, limit=args.limit, batch_streams=args.batch_streams)
    if config.second_pass.enabled:  # the second pass's word probability, not the checkpoint's measure
        report = calibrate_second_pass(model_arg(args.model), args.sets, config, options, args.out)
    elif not args.model or not args.out:
        raise ValueError("--model and --out are required (unless --second-pass)")
    else:
        report = calibrate(args.model, args.sets, args.out, config, options, args.plot)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """``streamd calibrate --set PATH.jsonl ... (--model CKPT --out CKPT | --second-pass NAME) ...``."""
    args = calibrate_parser().parse_args(argv)
    return run_guarded("streamd calibrate", lambda: _run_calibrate(args))
