"""``streamd model-info [PATH]``: what a checkpoint holds (readable text, or everything as JSON with ``--json``)."""

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
            if k == META_KEY:
                print(f"meta.{k}: {Calibration.from_dict(v).describe()}")
            else:
                print("\n".join(_meta_lines(f"meta.{k}", v)))
    return 0


_MAX_LINES = 24  # a nested meta value with more lines than this is summarized (--json has it whole)


def _scalar(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)) and all(not isinstance(x, (dict, list, tuple)) for x in v):
        return ", ".join(_scalar(x) for x in v) or "-"
    return str(v)


def _meta_lines(key: str, v) -> list[str]:
    """``key: value`` lines of one meta entry: nested mappings as dotted keys, a list of mappings one line per
    item (``key[i]: a=1, b=2``), numbers to 4 digits; a long entry becomes one line that says what it holds."""
    if isinstance(v, dict):
        lines = [line for k, x in v.items() for line in _meta_lines(f"{key}.{k}", x)]
        if len(lines) > _MAX_LINES:
            return [f"{key}: {len(lines)} values ({', '.join(map(str, list(v)[:6]))}{', ...' if len(v) > 6 else ''}; "
                    "--json shows them)"]
        return lines or [f"{key}: -"]
    if isinstance(v, (list, tuple)) and any(isinstance(x, dict) for x in v):
        return [f"{key}[{i}]: " + (", ".join(f"{k}={_scalar(y)}" for k, y in x.items()) if isinstance(x, dict)
                                   else _scalar(x)) for i, x in enumerate(v)]
    return [f"{key}: {_scalar(v)}"]


def add_parser(sub) -> None:
    m = sub.add_parser("model-info", help="describe a checkpoint")
    m.add_argument("path", nargs="?", help="checkpoint (default: the shipped model)")
    m.add_argument("--json", action="store_true", help="everything, as one JSON object (the whole model config "
                                                       "and meta)")
    m.set_defaults(func=run)
