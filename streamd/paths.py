"""Where the package's own files are: the shipped model, its sample recordings, the benchmarks' default audio.

Nothing here reads a file; a ground-floor module every command, the server and the benchmarks may import.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["ASSETS", "default_model_path", "default_samples", "model_arg", "default_bench_audio"]

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
    """The first 16 WAVs of the dev set beside the checkout (the figures in docs/benchmarks.md), else the
    package's sample recordings (a plain clone)."""
    dev = Path(__file__).resolve().parents[2] / "shared" / "eval" / "dev" / "asr"
    files = sorted(str(p) for p in dev.glob("*.wav"))[:16]
    if not files:
        files = sorted(str(p) for p in default_samples().parent.glob("*.wav"))
        print(f"streamd bench: no dev set at {dev}: replaying the package's {len(files)} sample recordings "
              "(pass --audio FILE... for others)", file=sys.stderr)
    return files
