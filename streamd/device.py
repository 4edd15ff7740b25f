"""Device choice shared by the engine, training and benchmarks."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available else cpu; ``cuda``/``cuda:N`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available (use 'auto' or 'cpu')")
    return torch.device(name)
