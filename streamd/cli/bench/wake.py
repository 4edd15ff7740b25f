"""``streamd bench wake-cost|wake-hey-stream|wake-mycroft``: the parsers of the trained wake models'
benchmarks (the work is :mod:`streamd.bench.wake` and :mod:`streamd.bench.wake_mycroft`)."""

from __future__ import annotations

import argparse

__all__ = ["add_parsers"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wake-cost", help="cost of trained wake models in the engine step, side by side in one "
                                         "process")
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--members", type=int, default=1, help="nets in each wake model's head")
    p.add_argument("--device", default="cpu")
    _precision_arg(p)
    p.set_defaults(run=_wake_cost)

    p = sub.add_parser("wake-hey-stream", help='"hey stream": the model\'s KWS head against a trained wake model, '
                                               "on the same files")
    p.add_argument("--wake-model", required=True)
    p.add_argument("--set", action="append", default=None)
    p.add_argument("--real-neg", action="append", default=None)
    p.add_argument("--batch", type=int, default=32)
    p.set_defaults(run=_wake_hey_stream)

    p = sub.add_parser("wake-mycroft", help="trained wake models on Mycroft's real recordings: thresholds on the "
                                            "dev half, figures on the test half")
    p.add_argument("models", nargs="*", metavar="MODEL.wake.pt", help="trained wake models (streamd wake train)")
    p.add_argument("--oww", nargs="*", metavar="MODEL.onnx", help="openWakeWord models as peers (no file: the four "
                   "wake-phrase models of its package)")
    p.add_argument("--verify", metavar="NAME", help="also each model followed by this second-pass model as a "
                   "verifier of its detections (e.g. moonshine-base-so762): thresholds of both on the dev half")
    p.add_argument("--verify-before", type=float, metavar="S", help="the verifier hears from S seconds before "
                   "the detection's end (engine.kws.verify_before_s; default the config's)")
    p.add_argument("--verify-after", type=float, metavar="S", help="to S seconds after it (engine.kws.verify_after_s; "
                   "default the config's)")
    p.add_argument("--talk-after", action="store_true", help="with --verify: also the test positives with three "
                   "command words said right after the keyword (the verifier hears the command's start)")
    _precision_arg(p)
    p.set_defaults(run=_wake_mycroft)


def _precision_arg(p: argparse.ArgumentParser) -> None:
    from ...config.decoding import EMBEDDING_PRECISIONS

    p.add_argument("--precision", choices=EMBEDDING_PRECISIONS, default="auto",
                   help="the speech embedding's arithmetic (engine.kws.embedding_precision; default auto)")


def _wake_cost(a: argparse.Namespace) -> int:
    from ...bench.wake import wake_cost

    wake_cost(a.streams, a.models, a.seconds, a.rounds, a.device, a.members, a.precision)
    return 0


def _wake_hey_stream(a: argparse.Namespace) -> int:
    from ...bench.wake import wake_hey_stream

    wake_hey_stream(a.wake_model, a.set or (), a.real_neg or (), a.batch)
    return 0


def _wake_mycroft(a: argparse.Namespace) -> int:
    from ...bench.wake_mycroft import wake_mycroft

    span = {k: v for k, v in (("verify_before_s", a.verify_before), ("verify_after_s", a.verify_after)) if v is not None}
    if (span or a.talk_after) and not a.verify:
        raise ValueError("--verify-before / --verify-after / --talk-after need --verify NAME")
    wake_mycroft(a.models, a.oww, precision=a.precision, verify=a.verify, verify_span=span, talk=a.talk_after)
    return 0
