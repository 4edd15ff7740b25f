"""``streamd model-info [PATH]``: what a checkpoint holds (text, or JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json

from ..paths import model_arg

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    from ..decode.calibration import META_KEY, Calibration
    from ..model.checkpoint import load_checkpoint

    lm = load_checkpoint(model_arg(args.path))
    from ..config import to_dict

    info = {"path": lm.path, "parameters": lm.model.num_params(), "tokens": len(lm.tokens),
            "token_kind": lm.tokens.kind, "keywords": list(lm.model.cfg.keywords),
            "chunk_seconds": lm.model.cfg.encoder.chunk_size * lm.model.cfg.frame_shift_s,
            "model_config": to_dict(lm.model.cfg), "meta": lm.meta}
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print(f"path:        {info['path']}")
        print(f"parameters:  {info['parameters']:,}")
        print(f"tokens:      {info['tokens']} ({info['token_kind']})")
        print(f"keywords:    {', '.join(info['keywords']) or '-'}")
        e = lm.model.cfg.encoder
        print(f"encoder:     {e.num_layers} layers, d_model {e.d_model}, {e.num_heads} heads, chunk "
              f"{e.chunk_size} frames ({info['chunk_seconds']:.2f} s), left context {e.left_chunks} chunks")
        d = lm.model.cfg.decoder
        print(f"decoder:     {d.kind}, dim {d.dim}" + (f", context {d.context_size}" if d.kind == "stateless" else ""))
        print(f"ctc head:    {'yes' if lm.model.ctc is not None else 'no'}")
        for k, v in lm.meta.items():
            print(f"meta.{k}: {Calibration.from_dict(v).describe() if k == META_KEY else v}")
    return 0


def add_parser(sub) -> None:
    m = sub.add_parser("model-info", help="describe a checkpoint")
    m.add_argument("path", nargs="?", help="checkpoint (default: the shipped model)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=run)
