"""streamd.evaluation.report: the readable text of ``streamd eval`` reports (recognition and keyword mode) and
the reliability curves for ``--reliability-plot``, on hand-made reports."""

import copy

from streamd.evaluation.report import format_keyword_report, format_report, reliability_curves
from streamd.scoring.metrics import ReliabilityBins


def bins(counts=(2, 0, 1)) -> dict:
    """Reliability bins in their JSON form (ReliabilityBins.to_dict)."""
    return {"counts": list(counts), "confidence": [0.1, None, 0.9], "accuracy": [0.0, None, 1.0]}


def set_report(name="/data/sets/dev.jsonl", **over) -> dict:
    r = {"set": name, "utterances": 2, "audio_seconds": 3.25, "sample_rate": "native",
         "wer": 0.125, "ser": 0.5, "exact": 0.5, "sub": 1, "del": 0, "ins": 0, "ref_words": 8, "hits": 7,
         "per_voice": {"voice0": {"wer": 0.25, "ser": 1.0, "ref_words": 4, "utterances": 1},
                       "voice1": {"wer": 0.0, "ser": 0.0, "ref_words": 4, "utterances": 1}},
         "per_source": {"real": {"wer": 0.125, "ser": 0.5, "ref_words": 8, "utterances": 2}},
         "rtf": 0.01234, "rtf_single": None, "batch_streams": 16, "errors": [],
         "confidence": {"words": 8, "correct": 7, "engine_conf_max_abs_diff": 0.0,
                        "table": [{"measure": "max_prob", "alpha": 1.0, "aggregation": "min", "auc": 0.75,
                                   "nce": -0.1234, "default": False},
                                  {"measure": "entropy_tsallis_exp", "alpha": 0.33, "aggregation": "min",
                                   "auc": None, "nce": 0.5, "default": True}],
                        "ece": 0.0456, "reliability": {"raw": bins(), "calibrated": None}, "calibration": None},
         "kws": None}
    r.update(over)
    return r


def report(*sets) -> dict:
    return {"model": "m.pt", "method": "greedy", "beam": 4, "device": "cpu", "sets": list(sets)}


def test_recognition_report_lines():
    text = format_report(report(set_report()))
    lines = text.splitlines()
    assert lines[0] == "model m.pt  method greedy  device cpu"  # a greedy search has no beam to show
    beam = format_report({**report(set_report()), "method": "modified_beam", "beam": 8}).splitlines()[0]
    assert beam == "model m.pt  method modified_beam (beam 8)  device cpu"
    assert lines[2] == "== /data/sets/dev.jsonl: 2 utterances, 3.2 s of audio (sample rate native)"
    assert lines[3] == "WER  12.50%  (sub 1, del 0, ins 0 / 8 words)   SER  50.00%   exact  50.00%"
    assert f"    {'voice0':32s} WER  25.00%  SER 100.00%  (4 words, 1 utts)" in lines
    assert "per source:" not in text  # one source repeats the set line
    assert "RTF 0.0123 (16 concurrent streams), single stream n/a" in lines
    assert "Confidence: 8 hypothesis words, 7 correct (* = engine setting; engine check max |diff| 0)" in lines
    assert f"* {'entropy_tsallis_exp':22s}  0.33   min     n/a    0.500" in lines
    assert "max_prob" not in text  # the bank's other measures: --confidence-table
    table = format_report(report(set_report()), measures=True).splitlines()
    assert f"  {'max_prob':22s}  1.00   min   0.750   -0.123" in table
    assert f"* {'entropy_tsallis_exp':22s}  0.33   min     n/a    0.500" in table
    assert "  ECE (3 bins) of * (raw): 0.046; the model has no calibration (streamd calibrate)" in lines
    assert "KWS" not in text and "== summary" not in text


def test_errors_sources_calibration_and_kws_lines():
    cal = {"kind": "isotonic", "knots": 12, "applied": True, "ece": 0.01, "auc": 0.8, "nce": 0.2}
    sweep = [{"threshold": t, "frr": f, "fa_per_hour": fa} for t, f, fa in
             ((0.05, 0.0, 12.0), (0.07, 0.1, 8.0), (0.1, 0.25, 2.0), (0.5, 0.5, 0.0))]
    kws = {"positives": 4, "negatives": 6, "negative_seconds": 1800.0, "threshold": 0.5, "frr": 0.5,
           "false_alarms": 0, "fa_per_hour": 0.0, "frr_at_1_fa_per_hour": {"frr": 0.5, "threshold": 0.5,
                                                                            "fa_per_hour": 0.0},
           "frr_at_0.1_fa_per_hour": None, "sweep": sweep}
    r = set_report(errors=["a.wav: bad_audio: boom"], kws=kws,
                   per_source={"real": {"wer": 0.0, "ser": 0.0, "ref_words": 4, "utterances": 1},
                               "tts": {"wer": 0.25, "ser": 1.0, "ref_words": 4, "utterances": 1}})
    r["confidence"] = dict(r["confidence"], calibration=cal)
    lines = format_report(report(r)).splitlines()
    assert "  error: a.wav: bad_audio: boom" in lines
    assert "  per source:" in lines and f"    {'tts':32s} WER  25.00%  SER 100.00%  (4 words, 1 utts)" in lines
    assert lines[lines.index("  per source:") - 1].startswith(f"    {'voice1':32s}")  # after the voices
    assert ("  ECE (3 bins) of * (raw): 0.046; calibrated (isotonic, 12 knots): ECE 0.010  AUC 0.800  NCE 0.200"
            in lines)
    assert ("KWS: 4 positives, 6 negatives (30.0 min); threshold 0.5: FRR  50.00%, 0 false alarms = 0.00 FA/h"
            in lines)
    assert "  FRR at <= 1 FA/h:  50.00% (threshold 0.5, 0.00 FA/h)" in lines
    assert "  FRR at <= 0.1 FA/h: none of the thresholds" in lines
    # the DET lines: every 0.05 of the sweep (0.07 is left out)
    assert "    0.05: 0.00%, 12.00 FA/h   0.10: 25.00%, 2.00 FA/h   0.50: 50.00%, 0.00 FA/h" in lines
    r["confidence"]["calibration"] = {"kind": "logistic", "applied": False, "not_applied": "fitted for max_prob"}
    assert ("  ECE (3 bins) of * (raw): 0.046; the model's logistic calibration is not applied: fitted for max_prob"
            in format_report(report(r)).splitlines())


def test_several_sets_end_with_a_summary():
    long = "/" + "x" * 70 + "/set.jsonl"
    text = format_report(report(set_report(), set_report(long, wer=None, exact=None, rtf=None)))
    summary = text.split("== summary\n")[1].splitlines()
    assert summary[0] == f"  {'set':56s} {'utts':>5s} {'WER':>7s} {'exact':>7s} {'RTF':>7s}"
    assert summary[1] == f"  {'/data/sets/dev.jsonl':56s}     2  12.50%  50.00%  0.0123"
    assert summary[2] == f"  {'...' + long[-53:]:56s}     2    n/a    n/a     n/a"
    assert len("..." + long[-53:]) == 56


def test_reliability_curves_name_the_set_by_its_last_two_path_parts():
    r1 = set_report()
    r2 = set_report("/data/other/test.jsonl")
    r2["confidence"] = copy.deepcopy(r2["confidence"])
    r2["confidence"]["reliability"]["calibrated"] = bins((1, 1, 1))
    curves = reliability_curves(report(r1, r2))
    assert [name for name, _ in curves] == ["sets/dev.jsonl raw", "other/test.jsonl raw", "other/test.jsonl calibrated"]
    assert all(isinstance(b, ReliabilityBins) for _, b in curves)
    assert curves[2][1] == ReliabilityBins.from_dict(bins((1, 1, 1)))


def keyword_report(**over) -> dict:
    k = {"positives": 2, "frr": 0.5, "fa_per_hour": 2.0, "frr_at_1_fa_per_hour": None,
         "frr_at_0.5_fa_per_hour": None, "frr_at_0.1_fa_per_hour": None}
    r = {"model": "m.pt", "method": "greedy", "device": "cpu",
         "keywords": [{"keyword": "computer", "threshold": 0.5}, {"keyword": "athena", "threshold": 0.35}],
         "wake_score": "llr", "wake_settle_frames": 4, "trailing_blanks": 1, "refractory_s": 0.5, "thresholds": [0.1, 0.3, 0.8],
         "wake_threshold": 0.3, "negatives": 2, "negative_hours": 0.5, "decodes": 11, "files_decoded": 5,
         "decode_seconds": 12.4,
         "sets": [{"set": "pos.jsonl", "utterances": 4, "positives": {"computer": 2, "athena": 0},
                   "negatives": 0, "negative_seconds": 0.0, "ignored_positives": 1, "excluded_negatives": 0},
                  {"set": "neg.jsonl", "utterances": 3, "positives": {"computer": 0, "athena": 0},
                   "negatives": 2, "negative_seconds": 1800.0, "ignored_positives": 0, "excluded_negatives": 1}],
         "per_keyword": {"computer": dict(k, **{"frr_at_1_fa_per_hour": {"frr": 0.5, "threshold": 0.8,
                                                                         "fa_per_hour": 0.0}})},
         "all": dict(k, positives=3, frr=2 / 3), "errors": []}
    r.update(over)
    return r


def test_keyword_report_lines():
    lines = format_keyword_report(keyword_report()).splitlines()
    assert lines[0] == "model m.pt  method greedy  device cpu"
    assert lines[1] == ("runtime keywords: computer (threshold 0.5), athena (threshold 0.35); score llr, "
                        "settle 4 frames, trailing_blanks 1, refractory 0.5 s")
    assert lines[2] == ("  pos.jsonl: 4 utterances; positives: computer 2; negatives 0 (0.0 min); "
                        "1 positives of other keywords ignored")
    assert lines[3] == ("  neg.jsonl: 3 utterances; positives: none; negatives 2 (30.0 min); "
                        "1 negatives excluded (their text holds a keyword)")
    assert lines[4] == ("negatives: 2 files, 0.500 h (one false alarm = 2.00 FA/h); 3 thresholds 0.1..0.8, "
                        "exact sweep: 11 decodes of 5 files (12 s)")
    assert lines[6].split() == ["keyword", "pos", "miss@0.3", "FA/h", "miss@1FA/h", "(thr)", "miss@0.5FA/h", "(thr)",
                                "miss@0.1FA/h", "(thr)"]
    assert lines[7].split() == ["computer", "2", "50.00%", "2.00", "50.00%", "(0.80)", "none", "none"]
    assert lines[8].split() == ["(all", "keywords)", "3", "66.67%", "2.00", "none", "none", "none"]
    assert len(lines) == 9


def test_keyword_report_without_negatives_and_with_errors():
    text = format_keyword_report(keyword_report(negative_hours=0.0, errors=["n1.wav: bad_audio: boom"]))
    assert "(one false alarm = n/a FA/h)" in text
    assert text.splitlines()[-1] == "  error: n1.wav: bad_audio: boom"


def test_keyword_report_rows_of_openwakeword_peers():
    """A peer (streamd eval --peer-wake-model) is a row after the runtime keywords, named as such."""
    peer = {"positives": 0, "frr": None, "fa_per_hour": 4.0, "threshold": 0.5, "frr_at_1_fa_per_hour": None,
            "frr_at_0.5_fa_per_hour": None, "frr_at_0.1_fa_per_hour": None}
    lines = format_keyword_report(keyword_report(peer_wake_models={"per_model": {"hey mycroft": peer}})).splitlines()
    assert lines[9].split() == ["hey", "mycroft", "(openWakeWord", "peer,", "thr", "0.5)", "0", "n/a", "4.00", "none",
                                "none", "none"]
    assert len(lines) == 10
