"""streamd.evaluation.kws: wake-word figures (FRR, false alarms per hour, operating points, DET curves) by
hand, and the built-in KWS head's replayed sweep against engine runs."""

import pytest

from tests.evaluation.sets import Det
from tests.evaluation.sets import write_eval_set as _write_set
from streamd.feed import transcribe_files
from streamd.config import EngineConfig, KwsConfig
from streamd.engine import Recognizer
from streamd.events import WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.evaluation.kws import (FA_BUDGETS, budget_key, det_curves, det_points, frr_at, kws_counts, plot_det,
                                  plot_det_panels)
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator
from streamd.scoring.recording import KwsTrackRecorder, MeasureBank, recording_recognizer, replay_kws

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


# --------------------------------------------------------------------------- arithmetic, by hand


def test_sweep_arithmetic_by_hand():
    """kws_counts / frr_at / det_points on a hand-computed example: 4 positives of "k", 0.5 h of negatives."""

    class E:
        def __init__(self, keyword):
            self.keyword = keyword

    entries = [E("k"), E("k"), E("k"), E("k"), E(None), E(None)]
    scores = {0: [0.9], 1: [0.6], 2: [0.3], 3: [], 4: [0.7, 0.35], 5: [0.25]}
    sweep = []
    for t in (0.2, 0.5, 0.8):
        dets = [[Det("k", s) for s in scores[i] if s >= t] for i in range(6)]
        sweep.append({"threshold": t, **kws_counts(dets, entries, 0.5)})
    # t=0.2: missed 1 (file 3), FA 3 -> 6/h;  t=0.5: missed 2, FA 1 -> 2/h;  t=0.8: missed 3, FA 0
    assert [(s["missed"], s["frr"], s["false_alarms"], s["fa_per_hour"]) for s in sweep] == \
        [(1, 0.25, 3, 6.0), (2, 0.5, 1, 2.0), (3, 0.75, 0, 0.0)]
    assert frr_at(sweep, 1.0) == {"frr": 0.75, "threshold": 0.8, "fa_per_hour": 0.0}
    assert frr_at(sweep, 0.0) == frr_at(sweep, 0.1) == frr_at(sweep, 1.0)
    assert frr_at(sweep, 2.0) == {"frr": 0.5, "threshold": 0.5, "fa_per_hour": 2.0}
    assert frr_at(sweep, 100) == {"frr": 0.25, "threshold": 0.2, "fa_per_hour": 6.0}
    assert det_points(sweep) == [[0.0, 0.75], [2.0, 0.5], [6.0, 0.25]]
    assert frr_at([{"threshold": 0.5, "frr": 0.1, "fa_per_hour": 3.0}], 1.0) is None


# --------------------------------------------------------------------------- the built-in head through the engine


def test_kws_sweep_agrees_with_engine_run(tiny_ckpt, wav_files, tmp_path):
    """Replayed detections at a threshold equal an engine run configured with that threshold."""
    t = 0.52
    keywords = ["hey stream", None, "hey stream", None]
    jsonl = _write_set(tmp_path / "kws.jsonl", [str(w) for w in wav_files], ["a"] * 4, keywords)
    # make the audio paths resolvable from tmp_path
    for w in wav_files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    loaded = load_checkpoint(tiny_ckpt)
    report = Evaluator(loaded, EngineConfig(device="cpu"), EvalOptions(batch_streams=4)).evaluate(jsonl)
    sweep = {s["threshold"]: s for s in report["kws"]["sweep"]}
    engine = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu", kws=KwsConfig(threshold=t)))
    direct = transcribe_files(engine, wav_files)
    wakes = [[e for e in direct[w] if isinstance(e, WakeWord)] for w in wav_files]
    assert sum(map(len, wakes)) > 0
    missed = sum(not wakes[i] for i in (0, 2))
    assert (sweep[t]["missed"], sweep[t]["false_alarms"]) == (missed, len(wakes[1]) + len(wakes[3]))
    assert sweep[0.05]["false_alarms"] != sweep[0.99]["false_alarms"]
    # detection by detection: record the tracks with the recording engine, replay, compare
    recorder = KwsTrackRecorder()
    rec = recording_recognizer(loaded, EngineConfig(device="cpu"), MeasureBank([("max_prob", 1.0)]), recorder)
    events = transcribe_files(rec, wav_files)
    tracks = recorder.take_tracks()
    sid = {w: next(e.stream for e in events[w]) for w in wav_files}
    replay = replay_kws([tracks[sid[w]] for w in wav_files], rec.keywords, KwsConfig(), rec.frame_shift_s, [t])[0]
    for f, w in enumerate(wav_files):
        assert [(d.keyword, d.score, d.start, d.end) for d in replay[f]] == \
            [(e.keyword, e.score, e.start, e.end) for e in wakes[f]]


# --------------------------------------------------------------------------- counts, keys, curves and plots


def test_kws_counts_without_positives_or_negative_audio():
    class E:
        def __init__(self, keyword):
            self.keyword = keyword

    # a positive is detected by its own keyword only; every event in a negative is a false alarm
    entries = [E("k"), E("j"), E(None)]
    c = kws_counts([[Det("j", 0.9)], [Det("j", 0.5), Det("j", 0.6)], [Det("k", 0.2), Det("j", 0.3)]], entries, 0.25)
    assert c == {"frr": 0.5, "missed": 1, "false_alarms": 2, "fa_per_hour": 8.0}
    assert kws_counts([[Det("k", 0.9)]], [E(None)], 0.0) == {"frr": None, "missed": 0, "false_alarms": 1,
                                                             "fa_per_hour": None}


def test_frr_at_breaks_ties_by_fewer_false_alarms_then_the_lower_threshold():
    sweep = [{"threshold": 0.2, "frr": 0.5, "fa_per_hour": 1.0}, {"threshold": 0.4, "frr": 0.5, "fa_per_hour": 0.5},
             {"threshold": 0.6, "frr": 0.5, "fa_per_hour": 0.5}, {"threshold": 0.8, "frr": None, "fa_per_hour": 0.0},
             {"threshold": 0.9, "frr": 0.25, "fa_per_hour": None}]
    assert frr_at(sweep, 1.0) == {"frr": 0.5, "threshold": 0.4, "fa_per_hour": 0.5}
    assert frr_at(sweep, 0.1) is None  # the only point within the budget has no FRR


def test_budget_keys_and_det_curves():
    assert [budget_key(b) for b in FA_BUDGETS] == ["frr_at_1_fa_per_hour", "frr_at_0.5_fa_per_hour",
                                                   "frr_at_0.1_fa_per_hour"]
    keyword_mode = {"mode": "keywords", "per_keyword": {"rr": {"positives": 2, "det": [[0.0, 0.5]]},
                                                        "vv": {"positives": 1, "det": [[1.0, 0.0]]}}}
    assert det_curves(keyword_mode) == [("rr (2 positives)", [[0.0, 0.5]]), ("vv (1 positives)", [[1.0, 0.0]])]
    evaluation = {"sets": [{"set": "/data/a/kws.jsonl", "kws": {"positives": 3, "det": [[2.0, 0.25]]}},
                           {"set": "/data/b/plain.jsonl", "kws": None}]}
    assert det_curves(evaluation) == [("a/kws.jsonl: built-in head (3 positives)", [[2.0, 0.25]])]


def test_plot_det_writes_a_png_and_refuses_nothing_to_draw(tmp_path):
    png = plot_det(tmp_path / "sub" / "det.png", [("k", [[0.0, 0.5], [2.0, 0.25], [None, 0.1], [4.0, None]])],
                   0.5, "title")
    assert png == tmp_path / "sub" / "det.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no panels"):
        plot_det_panels(tmp_path / "x.png", [])
    with pytest.raises(ValueError, match="no curves"):
        plot_det(tmp_path / "x.png", [], 1.0, "t")
    with pytest.raises(ValueError, match="negative_hours must be > 0, got 0.0"):
        plot_det(tmp_path / "x.png", [("k", [[0.0, 1.0]])], 0.0, "t")


def test_kws_figures_with_a_second_pass(tiny_ckpt, wav_files, tmp_path):
    """A wake-word set evaluated with a second pass: the second pass's figures and the KWS figures, whose
    negative seconds are the negative files' durations (the second pass's own time is another figure)."""
    from second_pass.fakes import FakeRecognizer
    from streamd.audio.pcm import load_audio
    from streamd.second_pass.rescore import SecondPass

    keywords = ["hey stream", None, "hey stream", None]
    jsonl = _write_set(tmp_path / "kws.jsonl", [str(w) for w in wav_files], ["a"] * 4, keywords)
    for w in wav_files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    ev = Evaluator(load_checkpoint(tiny_ckpt), EngineConfig(device="cpu"), EvalOptions(batch_streams=4))
    ev.second = SecondPass(FakeRecognizer("a"))
    report = ev.evaluate(jsonl)
    assert report["second_pass"] is not None and report["kws"]["positives"] == 2
    negative = sum(load_audio(w)[0].size / load_audio(w)[1] for w, k in zip(wav_files, keywords) if k is None)
    assert report["kws"]["negative_seconds"] == pytest.approx(negative, abs=1e-3)
