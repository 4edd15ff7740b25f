"""Reliability diagrams of word confidence (``streamd calibrate --plot``, ``streamd eval --reliability-plot``).

Each curve is a :class:`~streamd.scoring.metrics.ReliabilityBins`: the share of
correct words against the mean confidence in each equal-width bin, drawn with
the diagonal (perfect calibration) above a panel with the share of words per
bin.  matplotlib (extra ``train``) is imported on use, through its
object-oriented API with the Agg canvas (no pyplot, no display, no global
backend switch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from streamd.scoring.metrics import ReliabilityBins

__all__ = ["require_matplotlib", "plot_reliability"]


def require_matplotlib() -> None:
    """Raise RuntimeError with the install hint when matplotlib is missing (call before long work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError("the reliability diagram needs matplotlib: pip install 'streamd[train]'") from None


def plot_reliability(path: str | Path, curves: Sequence[tuple[str, ReliabilityBins]], title: str) -> Path:
    """Write a PNG reliability diagram of ``curves`` (label, bins) to ``path``; returns the path.

    ``title`` may hold line breaks.
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("plot_reliability: no curves to draw")
    fig = Figure(figsize=(6.0, 7.0), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    top.plot([0, 1], [0, 1], linestyle="--", color="0.5", label="perfect calibration")
    for label, bins in curves:
        b = len(bins.counts)
        full = [i for i, k in enumerate(bins.counts) if k]
        ece = bins.ece
        name = f"{label} (ECE {ece:.3f})" if ece is not None else f"{label} (no words)"
        (line,) = top.plot([bins.confidence[i] for i in full], [bins.accuracy[i] for i in full], marker="o", label=name)
        share = [k / max(1, bins.words) for k in bins.counts]
        bottom.stairs(share, [i / b for i in range(b + 1)], color=line.get_color())
    top.set(xlim=(0, 1), ylim=(0, 1.02), ylabel="share of words correct")
    top.set_title(title, fontsize="medium")
    top.legend(loc="upper left", fontsize="small")
    top.grid(alpha=0.3)
    bottom.set(xlabel="word confidence (bin mean)", ylabel="share of words", ylim=(0, None))
    bottom.grid(alpha=0.3)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
