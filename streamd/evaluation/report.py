"""The readable text of ``streamd eval`` reports (recognition and keyword mode), and the reliability curves of
a report for ``--reliability-plot``."""

from __future__ import annotations

from pathlib import Path

from streamd.options import BEAM_METHODS
from streamd.scoring.metrics import ReliabilityBins

from .kws import FA_BUDGETS, budget_key

__all__ = ["format_report", "format_keyword_report", "reliability_curves"]


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:6.2f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _calibration_line(c: dict) -> str:
    """The report's calibration line: ECE of the engine setting's raw measure, then of the calibrated conf."""
    line = f"  ECE ({len(c['reliability']['raw']['counts'])} bins) of * (raw): {_num(c['ece'])};"
    cal = c["calibration"]
    if cal is None:
        return line + " the model has no calibration (streamd calibrate)"
    if not cal["applied"]:
        return line + f" the model's {cal['kind']} calibration is not applied: {cal['not_applied']}"
    return line + (f" calibrated ({cal['kind']}, {cal['knots']} knots): ECE {_num(cal['ece'])}  "
                   f"AUC {_num(cal['auc'])}  NCE {_num(cal['nce'])}")


def reliability_curves(report: dict) -> list[tuple[str, ReliabilityBins]]:
    """(label, bins) of every set's raw and (where applied) calibrated confidences, for the diagram."""
    curves = []
    for r in report["sets"]:
        name = "/".join(Path(r["set"]).parts[-2:])
        for which, bins in r["confidence"]["reliability"].items():
            if bins is not None:
                curves.append((f"{name} {which}", ReliabilityBins.from_dict(bins)))
    return curves


def format_report(report: dict, measures: bool = False) -> str:
    """Readable text of :meth:`~.recognition.Evaluator.evaluate` results (the ``report`` of
    :func:`~.recognition.run`).  ``measures``: the AUC / NCE of every confidence measure of the bank
    (``streamd eval --confidence-table``); else only the engine setting's."""
    beam = f" (beam {report['beam']})" if report["method"] in BEAM_METHODS else ""  # greedy searches have none
    lines = [f"model {report['model']}  method {report['method']}{beam}  device {report['device']}"]
    for r in report["sets"]:
        lines += ["", f"== {r['set']}: {r['utterances']} utterances, {r['audio_seconds']:.1f} s of audio "
                      f"(sample rate {r['sample_rate']})",
                  f"WER {_pct(r['wer'])}  (sub {r['sub']}, del {r['del']}, ins {r['ins']} / {r['ref_words']} words)"
                  f"   SER {_pct(r['ser'])}   exact {_pct(r['exact'])}"]
        for title, groups in (("voice", r["per_voice"]), ("source", r.get("per_source", {}))):
            if title == "source" and len(groups) < 2:  # a single source repeats the set line
                continue
            if title == "source":
                lines.append("  per source:")
            for v, pv in groups.items():
                lines.append(f"    {v:32s} WER {_pct(pv['wer'])}  SER {_pct(pv['ser'])}  "
                             f"({pv['ref_words']} words, {pv['utterances']} utts)")
        lines.append(f"RTF {_num(r['rtf'], '.4f')} ({r['batch_streams']} concurrent streams), "
                     f"single stream {_num(r['rtf_single'], '.4f')}")
        sp = r.get("second_pass")
        if sp is not None:
            fp, sc = sp["first_pass"], sp["confidence"]
            cal = sc["calibration"]
            lines.append(f"Second pass ({sp['model']}, select {sp['select']} margin {sp['select_margin']}): the WER "
                         f"above is the finals'; first pass {_pct(fp['wer'])}, second pass always "
                         f"{_pct(sp['second_pass_always']['wer'])} on the same files; {sp['seconds']} s, RTF "
                         f"{_num(sp['rtf'], '.4f')}")
            if sp["select_wer_by_margin"]:
                lines.append("  select confidence, WER by margin: " + ", ".join(
                    f"{m} {_pct(w)}" for m, w in sp["select_wer_by_margin"].items()))
            lines.append(f"  its words: {sp['words_scored']} scored, ECE raw {_num(sc['ece'])}, calibrated "
                         f"{_num(cal['ece'] if cal else None)} (AUC {_num(cal['auc'] if cal else None)})")
        for e in r["errors"]:
            lines.append(f"  error: {e}")
        c = r["confidence"]
        lines.append(f"Confidence: {c['words']} hypothesis words, {c['correct']} correct "
                     f"(* = engine setting; engine check max |diff| {_num(c['engine_conf_max_abs_diff'], '.2g')})")
        lines.append(f"  {'measure':22s} {'alpha':>5s} {'agg':>5s} {'AUC':>7s} {'NCE':>8s}"
                     + ("" if measures else "   (every measure of the bank: --confidence-table)"))
        for t in c["table"] if measures else [t for t in c["table"] if t["default"]]:
            lines.append(f"{'*' if t['default'] else ' '} {t['measure']:22s} {t['alpha']:5.2f} {t['aggregation']:>5s} "
                         f"{_num(t['auc']):>7s} {_num(t['nce']):>8s}")
        lines.append(_calibration_line(c))
        k = r["kws"]
        if k is None:
            continue
        lines.append(f"KWS: {k['positives']} positives, {k['negatives']} negatives ({k['negative_seconds'] / 60:.1f} "
                     f"min); threshold {k['threshold']}: FRR {_pct(k['frr'])}, {k['false_alarms']} false alarms "
                     f"= {_num(k['fa_per_hour'], '.2f')} FA/h")
        for budget, key in (("1", "frr_at_1_fa_per_hour"), ("0.1", "frr_at_0.1_fa_per_hour")):
            b = k[key]
            lines.append(f"  FRR at <= {budget} FA/h: " + ("none of the thresholds" if b is None else
                         f"{_pct(b['frr'])} (threshold {b['threshold']}, {_num(b['fa_per_hour'], '.2f')} FA/h)"))
        points = [f"{s['threshold']:.2f}: {_pct(s['frr']).strip()}, {_num(s['fa_per_hour'], '.2f')} FA/h"
                  for s in k["sweep"] if round(s["threshold"] * 100) % 5 == 0]
        lines.append("  DET (threshold: FRR, FA/h; every 0.05 of the sweep):")
        lines += ["    " + "   ".join(points[i:i + 4]) for i in range(0, len(points), 4)]
    if len(report["sets"]) > 1:
        lines += ["", "== summary", f"  {'set':56s} {'utts':>5s} {'WER':>7s} {'exact':>7s} {'RTF':>7s}"]
        for r in report["sets"]:
            name = r["set"] if len(r["set"]) <= 56 else "..." + r["set"][-53:]
            lines.append(f"  {name:56s} {r['utterances']:5d} {_pct(r['wer'])} {_pct(r['exact'])} "
                         f"{_num(r['rtf'], '.4f'):>7s}")
    return "\n".join(lines)


def format_keyword_report(report: dict) -> str:
    """Readable text of a keyword-mode report (:meth:`~.keywords.KeywordEvaluator.evaluate`)."""
    kw = ", ".join(f"{k['keyword']} (threshold {k['threshold']:g})" for k in report["keywords"])
    ts = report["thresholds"]
    lines = [f"model {report['model']}  method {report['method']}  device {report['device']}",
             f"runtime keywords: {kw}; score {report['wake_score']}, settle {report['wake_settle_frames']} frames, "
             f"trailing_blanks {report['trailing_blanks']}, "
             f"refractory {report['refractory_s']:g} s"]
    for s in report["sets"]:
        pos = ", ".join(f"{k} {n}" for k, n in s["positives"].items() if n)
        lines.append(f"  {s['set']}: {s['utterances']} utterances; positives: {pos or 'none'}; negatives "
                     f"{s['negatives']} ({s['negative_seconds'] / 60:.1f} min)"
                     + (f"; {s['ignored_positives']} positives of other keywords ignored" if s["ignored_positives"]
                        else "")
                     + (f"; {s['excluded_negatives']} negatives excluded (their text holds a keyword)"
                        if s["excluded_negatives"] else ""))
    lines += [f"negatives: {report['negatives']} files, {report['negative_hours']:.3f} h (one false alarm = "
              f"{_num(1 / report['negative_hours'] if report['negative_hours'] else None, '.2f')} FA/h); "
              f"{len(ts)} thresholds {ts[0]:g}..{ts[-1]:g}, exact sweep: {report['decodes']} decodes of "
              f"{report['files_decoded']} files ({report['decode_seconds']:.0f} s)", "",
              f"  {'keyword':24s} {'pos':>5s} {'miss@' + format(report['wake_threshold'], 'g'):>10s} {'FA/h':>7s}"
              + "".join(f"   {'miss@' + format(b, 'g') + 'FA/h (thr)':>22s}" for b in FA_BUDGETS)]
    rows = list(report["per_keyword"].items()) + [("(all keywords)", report["all"])]
    trained = (report.get("wake_models") or {}).get("per_model", {})
    rows += [(f"{name} (trained, own thr {k['threshold']:g})", k) for name, k in trained.items()]
    for name, k in rows:
        cells = []
        for b in FA_BUDGETS:
            op = k[budget_key(b)]
            cells.append("none" if op is None else f"{_pct(op['frr']).strip()} ({op['threshold']:.2f})")
        lines.append(f"  {name:24s} {k['positives']:5d} {_pct(k['frr']):>10s} {_num(k['fa_per_hour'], '.2f'):>7s}"
                     + "".join(f"   {c:>22s}" for c in cells))
    for e in report["errors"]:
        lines.append(f"  error: {e}")
    return "\n".join(lines)
