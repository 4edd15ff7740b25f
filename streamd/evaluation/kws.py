"""Wake-word figures: FRR and false alarms per hour, the best operating point within a false-alarm budget, DET
curves and plots; :func:`builtin_kws_figures` scores the model's built-in KWS head on one set.

The rule: a positive file (``keyword`` set) is detected when its keyword fires at least once; every wake event
in a negative file (``keyword`` null) is a false alarm; FRR = missed / positives, FA/h per hour of negative
audio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from streamd.config import KwsConfig
from streamd.events import WakeWord
from streamd.scoring.recording import replay_kws
from streamd.scoring.reliability import require_matplotlib

from .sets import EvalEntry

__all__ = ["kws_counts", "FA_BUDGETS", "frr_at", "det_points", "budget_key", "builtin_kws_figures", "det_curves",
           "plot_det", "plot_det_panels"]


def kws_counts(dets_per_file: Sequence[Sequence[Any]], entries: Sequence[EvalEntry], neg_hours: float) -> dict:
    """FRR / false alarms from per-file wake events (objects with a ``keyword``)."""
    pos = [i for i, e in enumerate(entries) if e.keyword is not None]
    neg = [i for i, e in enumerate(entries) if e.keyword is None]
    missed = sum(not any(d.keyword == entries[i].keyword for d in dets_per_file[i]) for i in pos)
    fa = sum(len(dets_per_file[i]) for i in neg)
    return {"frr": missed / len(pos) if pos else None, "missed": missed, "false_alarms": fa,
            "fa_per_hour": fa / neg_hours if neg_hours > 0 else None}


FA_BUDGETS: tuple[float, ...] = (1.0, 0.5, 0.1)
"""False alarms per hour at which the reports give the lowest FRR (miss rate) of a sweep."""


def frr_at(sweep: Sequence[dict], budget: float) -> dict | None:
    """The best operating point of a threshold sweep within a false-alarm budget.

    sweep: points with ``threshold``, ``frr`` and ``fa_per_hour`` (:func:`kws_counts` figures).  Among the
    points with ``fa_per_hour <= budget`` the one with the lowest FRR (ties: fewer FA/h, then the lower
    threshold) as {frr, threshold, fa_per_hour}; None when no point qualifies.
    """
    ok = [s for s in sweep if s["fa_per_hour"] is not None and s["fa_per_hour"] <= budget and s["frr"] is not None]
    if not ok:
        return None
    s = min(ok, key=lambda s: (s["frr"], s["fa_per_hour"], s["threshold"]))
    return {"frr": s["frr"], "threshold": s["threshold"], "fa_per_hour": s["fa_per_hour"]}


def det_points(sweep: Sequence[dict]) -> list[list]:
    """The DET curve of a sweep: [FA/h, FRR] per point, by increasing FA/h (then decreasing FRR)."""
    return [[s["fa_per_hour"], s["frr"]]
            for s in sorted(sweep, key=lambda s: (s["fa_per_hour"] or 0.0, -(s["frr"] or 0.0)))]


def budget_key(budget: float) -> str:
    """The report key of the operating point within ``budget`` false alarms per hour."""
    return f"frr_at_{budget:g}_fa_per_hour"


def builtin_kws_figures(entries: Sequence[EvalEntry], wakes: Sequence[Sequence[WakeWord]],
                        tracks: Sequence[np.ndarray | None], seconds: Sequence[float], keywords: Sequence[str],
                        kcfg: KwsConfig, thresholds: Sequence[float], frame_shift_s: float) -> dict:
    """The report's ``kws`` figures of one set for the model's built-in KWS head.

    wakes: the plain decode's wake events per file (the configured thresholds); tracks: the recorded KWS
    score tracks per file, replayed (:func:`~streamd.scoring.recording.replay_kws`) over ``thresholds`` and
    the configured threshold; seconds: each file's duration; keywords: the head's keywords.
    """
    neg_s = sum(s for e, s in zip(entries, seconds) if e.keyword is None)
    hours = neg_s / 3600.0
    unknown = sorted({e.keyword for e in entries if e.keyword is not None and e.keyword not in keywords})
    default = kws_counts(wakes, entries, hours)
    thresholds = sorted(set(thresholds) | {kcfg.threshold})
    dets = replay_kws(list(tracks), keywords, kcfg, frame_shift_s, thresholds)
    sweep = [{"threshold": t, **kws_counts(dt, entries, hours)} for t, dt in zip(thresholds, dets)]
    at_cfg = next(s for s in sweep if s["threshold"] == kcfg.threshold)
    return {"positives": sum(e.keyword is not None for e in entries),
            "negatives": sum(e.keyword is None for e in entries), "negative_seconds": round(neg_s, 3),
            "threshold": kcfg.threshold, "per_keyword_thresholds": dict(kcfg.thresholds),
            "smoothing_frames": kcfg.smoothing_frames, "refractory_s": kcfg.refractory_s,
            "unknown_keywords": unknown, **default,
            "sweep_matches_engine": (not kcfg.thresholds and kcfg.enabled
                                     and (at_cfg["missed"], at_cfg["false_alarms"])
                                     == (default["missed"], default["false_alarms"])),
            "frr_at_1_fa_per_hour": frr_at(sweep, 1.0), "frr_at_0.1_fa_per_hour": frr_at(sweep, 0.1),
            "sweep": sweep, "det": det_points(sweep)}


def det_curves(report: dict) -> list[tuple[str, list[list]]]:
    """(label, DET points) per keyword of a keyword-mode report, or per set with a KWS head of an evaluation."""
    if report.get("mode") == "keywords":
        trained = (report.get("wake_models") or {}).get("per_model", {})
        peers = (report.get("peer_wake_models") or {}).get("per_model", {})
        return ([(f"{k} ({v['positives']} positives)", v["det"]) for k, v in report["per_keyword"].items()]
                + [(f"{k}: trained model ({v['positives']} positives)", v["det"]) for k, v in trained.items()]
                + [(f"{k}: openWakeWord peer ({v['positives']} positives)", v["det"]) for k, v in peers.items()
                   if v["positives"]])
    return [(f"{'/'.join(Path(r['set']).parts[-2:])}: built-in head ({r['kws']['positives']} positives)",
             r["kws"]["det"]) for r in report["sets"] if r.get("kws")]


def plot_det(path: str | Path, curves: Sequence[tuple[str, Sequence[Sequence[float | None]]]],
             negative_hours: float, title: str) -> Path:
    """Write a DET plot (PNG): miss rate against false alarms per hour (log axis), one curve per label.

    curves: (label, [[fa_per_hour, frr], ...]) as :func:`det_points` gives; points without an FRR are
    skipped.  Zero false alarms cannot sit on a log axis: such points are drawn at half a false alarm
    over the negative audio (``0.5 / negative_hours``), left of the dotted line at one false alarm.
    """
    return plot_det_panels(path, [(title, curves, negative_hours)])


def plot_det_panels(path: str | Path, panels: Sequence[tuple[str, Sequence, float]]) -> Path:
    """:func:`plot_det` of several runs side by side: panels are (title, curves, negative_hours)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ValueError("plot_det: no panels to draw")
    fig = Figure(figsize=(7.0 * len(panels), 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, curves, negative_hours) in zip(axes, panels):
        if not curves:
            raise ValueError("plot_det: no curves to draw")
        if not negative_hours > 0:
            raise ValueError(f"plot_det: negative_hours must be > 0, got {negative_hours!r}")
        floor = 0.5 / negative_hours
        top = floor
        for label, pts in curves:
            xy = [(max(fa, floor), 100.0 * frr) for fa, frr in pts if fa is not None and frr is not None]
            if xy:
                top = max(top, max(x for x, _ in xy))
                ax.plot([x for x, _ in xy], [y for _, y in xy], drawstyle="steps-post", marker=".", label=label)
        ax.axvline(1.0 / negative_hours, linestyle=":", color="0.5",
                   label=f"1 false alarm in {negative_hours:.2f} h")
        ax.set_xscale("log")
        ax.set(xlim=(floor / 1.5, top * 1.5), ylim=(0, 100), ylabel="miss rate (%)",
               xlabel="false alarms per hour (0 drawn at 0.5 / hours)")
        ax.set_title(title, fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small", loc="lower left")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
