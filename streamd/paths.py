"""Where the package's own files are: the shipped model, its sample recordings, the benchmarks' default audio;
and where the shared data folder beside a checkout is.

Nothing here reads a file; a ground-floor module every command, the server and the benchmarks may import.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ASSETS", "default_model_path", "default_samples", "model_arg", "default_bench_audio", "shared_root"]

ASSETS = Path(__file__).resolve().parent / "assets"


def default_model_path() -> Path:
    """The checkpoint shipped with the package (``streamd/assets/default.pt``)."""
    return ASSETS / "default.pt"


def default_samples() -> Path:
    """Manifest of the short sample recordings shipped with the package (``streamd/assets/samples``):
    demonstration audio for commands run without an evaluation set, not an evaluation set."""
    return ASSETS / "samples" / "samples.jsonl"


def model_arg(path: str | None) -> str:
    """``path``, or the shipped model's when none is given (SystemExit naming --model when it is missing)."""
    if path:
        return path
    p = default_model_path()
    if not p.is_file():
        raise SystemExit(f"streamd: no model given and no default model at {p}; pass --model PATH")
    return str(p)


def default_bench_audio() -> list[str]:
    """The package's sample recordings, what the benchmarks replay when no ``--audio`` is given: nothing
    outside the package is read (docs/benchmarks.md names the files its figures replayed)."""
    return sorted(str(p) for p in default_samples().parent.glob("*.wav"))


def shared_root() -> Path:
    """The shared data folder: ``$STREAMD_SHARED``, else ``../shared`` beside the repository (the evaluation
    sets and real recordings the benchmarks and wake training read)."""
    return Path(os.environ.get("STREAMD_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
