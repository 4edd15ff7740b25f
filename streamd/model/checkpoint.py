"""Checkpoint format: one ``torch.save`` file with config, tokens and weights.

Layout (a plain dict, loadable with ``torch.load(weights_only=True)``)::

    {
      "format": "streamd-checkpoint",
      "version": 1,
      "model_config": {...},        # streamd.config.ModelConfig as a nested dict
      "tokens": ["<blk>", " ", ...],  # token table, index = token id
      "state_dict": {name: tensor},
      "meta": {...},                # free-form: training data, steps, metrics
    }

Loading validates the format, rebuilds :class:`~streamd.config.ModelConfig`
(unknown keys are an error naming the key) and loads the weights strictly:
missing or unexpected tensors are listed in the error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError, ModelConfig, from_dict, to_dict
from ..tokens import TokenTable
from .transducer import Transducer

__all__ = ["CheckpointError", "LoadedModel", "save_checkpoint", "load_checkpoint", "read_header", "copy_with_meta",
           "FORMAT", "VERSION"]

FORMAT = "streamd-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """The file is not a valid streamd checkpoint; the message says why."""


@dataclass
class LoadedModel:
    model: Transducer
    tokens: TokenTable
    meta: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def save_checkpoint(path: str | Path, model: Transducer, tokens: TokenTable, meta: dict | None = None,
                    half: bool = False) -> None:
    """Write ``model`` (its config and weights), ``tokens`` and ``meta`` to ``path``.

    half: store floating-point weights as float16 (loaded back as float32).
    """
    if len(tokens) != model.cfg.vocab_size:
        raise CheckpointError(f"token table has {len(tokens)} tokens but vocab_size is {model.cfg.vocab_size}")
    sd = {k: (v.detach().cpu().half() if half and v.is_floating_point() else v.detach().cpu())
          for k, v in model.state_dict().items()}
    obj = {"format": FORMAT, "version": VERSION, "model_config": to_dict(model.cfg),
           "tokens": list(tokens.tokens), "state_dict": sd, "meta": dict(meta or {})}
    _atomic_save(obj, path)


def _atomic_save(obj: dict, path: str | Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def copy_with_meta(src: str | Path, dst: str | Path, meta: dict) -> None:
    """Write the checkpoint at ``src`` to ``dst`` (which may be ``src``) with its meta replaced by ``meta``.

    Config, tokens and weights are copied as stored (float16 weights stay float16).
    """
    obj = read_versioned(src, FORMAT, VERSION, "checkpoint", CheckpointError)
    obj["meta"] = dict(meta)
    _atomic_save(obj, dst)


def read_versioned(path: str | Path, fmt: str, version: int, what: str,
                   error: type[Exception] = ValueError) -> dict:
    """The dict of a streamd ``torch.save`` file (``weights_only=True``) after checking its format and version.

    Any failure raises ``error`` with a message naming the file and ``what`` it should have been.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such {what} file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
        raise error(f"{path}: not a loadable {what} ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        raise error(f"{path}: not a streamd {what} (missing format={fmt!r})")
    if obj.get("version") != version:
        raise error(f"{path}: {what} version {obj.get('version')!r}, this streamd reads {version}")
    return obj


def _header(path: Path, obj: dict) -> tuple[ModelConfig, TokenTable]:
    missing = [k for k in ("model_config", "tokens", "state_dict") if k not in obj]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    try:
        cfg = from_dict(ModelConfig, obj["model_config"], "model_config")
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None
    tokens = TokenTable(tuple(obj["tokens"]), blank_id=cfg.blank_id)
    if len(tokens) != cfg.vocab_size:
        raise CheckpointError(f"{path}: {len(tokens)} tokens but model_config.vocab_size = {cfg.vocab_size}")
    return cfg, tokens


def read_header(path: str | Path) -> tuple[ModelConfig, TokenTable]:
    """A checkpoint's model config and token table, checked as :func:`load_checkpoint` checks them, without
    building the model (what a config check needs: the model's own keywords, what its tokens can spell)."""
    path = Path(path)
    return _header(path, read_versioned(path, FORMAT, VERSION, "checkpoint", CheckpointError))


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Load a checkpoint with ``weights_only=True`` and rebuild the model in eval mode."""
    path = Path(path)
    obj = read_versioned(path, FORMAT, VERSION, "checkpoint", CheckpointError)
    cfg, tokens = _header(path, obj)
    model = Transducer(cfg)
    sd = {k: v.float() if v.is_floating_point() else v for k, v in obj["state_dict"].items()}
    own = model.state_dict()
    unknown = sorted(set(sd) - set(own))
    absent = sorted(set(own) - set(sd))
    if unknown or absent:
        parts = []
        if absent:
            parts.append(f"missing weights: {', '.join(absent[:8])}{' ...' if len(absent) > 8 else ''}")
        if unknown:
            parts.append(f"unknown weights: {', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''}")
        raise CheckpointError(f"{path}: " + "; ".join(parts))
    bad = [k for k in own if own[k].shape != sd[k].shape]
    if bad:
        k = bad[0]
        raise CheckpointError(f"{path}: weight {k} has shape {tuple(sd[k].shape)}, model expects {tuple(own[k].shape)}")
    model.load_state_dict(sd, strict=True)
    model.to(device).eval()
    return LoadedModel(model=model, tokens=tokens, meta=dict(obj.get("meta") or {}), path=str(path))
