"""The fusion language model of a checkpoint: where it lives beside the model and which one
``decoding.lm`` names."""

from __future__ import annotations

from pathlib import Path

from ..decode.lm import NgramLM, load_lm
from ..model.checkpoint import LoadedModel


def lm_path_for(model_path: str | Path) -> Path:
    """Where a checkpoint's own language model lives: ``model.pt`` -> ``model.lm.pt``."""
    p = Path(model_path)
    return p.with_name(p.stem + ".lm.pt")


def resolve_lm(setting: str, loaded: LoadedModel) -> tuple[NgramLM | None, str]:
    """The fusion LM named by ``decoding.lm`` (``auto``, ``none`` or a path) and its path ("" for none).

    Raises ValueError when a named file is missing, unreadable or built for other tokens.
    """
    if setting == "none":
        return None, ""
    if setting == "auto":
        path = lm_path_for(loaded.path) if loaded.path else None
        if path is None or not path.is_file():
            return None, ""
    else:
        path = Path(setting)
    try:
        lm, _ = load_lm(path)
    except ValueError as e:
        raise ValueError(f"decoding.lm: {e}") from None
    if tuple(lm.tokens) != tuple(loaded.tokens.to_lines()):
        raise ValueError(f"decoding.lm: {path} was built for another token table than the model's")
    return lm, str(path)
