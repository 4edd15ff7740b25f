"""Checkpoint averaging and the experiment folder's checkpoint naming.

The trainer writes ``<exp_dir>/checkpoint-<step>.pt`` (streamd checkpoint
format, see :mod:`streamd.model.checkpoint`).  Averaging the weights of the
last few checkpoints usually gives a better model than the last one alone:
:func:`average_checkpoints` returns the element-wise mean of every
floating-point tensor (accumulated in float64, cast back to the stored
dtype); integer tensors must be equal in all files and are copied.  All
files must hold the same model configuration and the same tensor names and
shapes; errors name the offending file and tensor.

With ``weights`` (one positive number per file, normalized to sum 1) the
mean is weighted: ``sum_i w_i theta_i``.  Two checkpoints of one lineage
weighted ``1 - a`` and ``a`` interpolate between them, as in WiSE-FT
(Wortsman et al. 2022, "Robust fine-tuning of zero-shot models"): a model
fine-tuned on new data (real speech) averaged with the model it started
from (synthetic speech) can keep most of both.  Only meaningful for
checkpoints that share an ancestor (the trainer's ``init_from`` chain).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from ..config import ModelConfig, from_dict
from ..tokens import TokenTable
from ..model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..model.transducer import Transducer

__all__ = ["CHECKPOINT_RE", "checkpoint_path", "list_checkpoints", "average_checkpoints",
           "write_averaged_checkpoint"]

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)\.pt$")


def checkpoint_path(exp_dir: str | Path, step: int) -> Path:
    """``<exp_dir>/checkpoint-<step>.pt``."""
    return Path(exp_dir) / f"checkpoint-{step}.pt"


def list_checkpoints(exp_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``checkpoint-<step>.pt`` in ``exp_dir``, by increasing step."""
    d = Path(exp_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and p.is_file()]
    return sorted(found)


def _load_raw(path: Path) -> dict:
    # validate the file like any checkpoint (format, config, strict weights) before averaging it
    load_checkpoint(path)
    return torch.load(path, map_location="cpu", weights_only=True)


def _normalized_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """``n`` equal weights, or ``weights`` checked (one per file, finite, > 0) and scaled to sum 1."""
    if weights is None:
        return [1.0 / n] * n
    w = [float(x) for x in weights]
    if len(w) != n:
        raise ValueError(f"weights: {len(w)} given for {n} checkpoints; give one per checkpoint")
    if not all(x > 0 and x < float("inf") for x in w):
        raise ValueError(f"weights: each must be a finite number > 0, got {list(weights)}")
    total = sum(w)
    return [x / total for x in w]


def average_checkpoints(paths: Sequence[str | Path], weights: Sequence[float] | None = None) -> dict[str, Tensor]:
    """(Weighted) mean state dict of the checkpoints at ``paths`` (see module docstring)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    w = _normalized_weights(weights, len(paths))
    first = _load_raw(paths[0])
    ref_cfg = first["model_config"]
    acc: dict[str, Tensor] = {}
    ints: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for k, v in first["state_dict"].items():
        dtypes[k] = v.dtype
        if v.is_floating_point():
            acc[k] = v.double() * w[0]
        else:
            ints[k] = v
    for p, wi in zip(paths[1:], w[1:]):
        obj = _load_raw(p)
        if obj["model_config"] != ref_cfg:
            raise CheckpointError(f"{p}: model_config differs from {paths[0]}; only checkpoints of the same "
                                  "model can be averaged")
        sd = obj["state_dict"]
        if set(sd) != set(dtypes):
            diff = sorted(set(sd) ^ set(dtypes))
            raise CheckpointError(f"{p}: tensor names differ from {paths[0]} ({', '.join(diff[:5])})")
        for k, v in sd.items():
            if k in acc:
                if v.shape != acc[k].shape:
                    raise CheckpointError(f"{p}: tensor {k} has shape {tuple(v.shape)}, "
                                          f"{paths[0]} has {tuple(acc[k].shape)}")
                acc[k] += v.double() * wi
            elif not torch.equal(v, ints[k]):
                raise CheckpointError(f"{p}: integer tensor {k} differs from {paths[0]}; cannot average it")
    return {k: acc[k].to(dtypes[k]) if k in acc else ints[k] for k in dtypes}


def write_averaged_checkpoint(paths: Sequence[str | Path], out_path: str | Path, half: bool = False,
                              weights: Sequence[float] | None = None) -> Path:
    """Average ``paths`` (weighted by ``weights``, if given) and save a loadable checkpoint at ``out_path``.

    Tokens and meta come from the last checkpoint; meta gains
    ``averaged_from`` (the input paths), ``averaged_weights`` (the normalized
    weights, when given) and keeps its ``step``.
    """
    paths = [Path(p) for p in paths]
    sd = average_checkpoints(paths, weights)
    last = torch.load(paths[-1], map_location="cpu", weights_only=True)
    cfg = from_dict(ModelConfig, last["model_config"], "model_config")
    model = Transducer(cfg)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()}, strict=True)
    meta = dict(last.get("meta") or {})
    meta["averaged_from"] = [str(p) for p in paths]
    if weights is not None:
        meta["averaged_weights"] = _normalized_weights(weights, len(paths))
    out_path = Path(out_path)
    save_checkpoint(out_path, model, TokenTable(tuple(last["tokens"]), blank_id=cfg.blank_id), meta, half=half)
    return out_path
