"""streamd.evaluation.keywords: keyword mode of ``streamd eval``: the exact threshold sweep of runtime wake
words, the report by hand, and the sweep against engine runs.

The engine's keyword search is tested in tests/decode; here it is only run through ``streamd eval``
(its CLI: tests/evaluation/test_command.py)."""

import random

import numpy as np
import pytest

from helpers import write_wav
from tests.evaluation.sets import Det
from helpers import write_jsonl as write_set
from streamd.config import EngineConfig, KwsConfig
from streamd.engine import Recognizer
from streamd.events import WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.evaluation.keywords import KeywordEvaluator, keyword_sweep
from streamd.evaluation.kws import kws_counts
from streamd.evaluation.options import EvalOptions
from streamd.feed import feed_streams

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


# --------------------------------------------------------------------------- the exact sweep


def resetting_detector(checks):
    """A detector with the engine's dependence on resets: check c of a file scores base[c] plus a bonus that
    grows with the checks since the last detection (the state a detection resets), capped below 1."""

    def run(file, t):
        out, last = [], -1
        for c, (kw, base) in enumerate(checks[file]):
            score = min(0.99, base + 0.05 * (c - last - 1))
            if score >= t:
                out.append(Det(kw, score))
                last = c
        return out

    return run


def test_keyword_sweep_equals_a_decode_per_threshold():
    """On random files of a detector whose later scores depend on its earlier detections, the sweep's
    detections at every threshold are those of a decode at that threshold, in fewer decodes; the naive
    offline sweep (one low decode, scores filtered) is not."""
    rng = random.Random(0)
    ts = [round(0.05 * i, 2) for i in range(1, 20)]
    naive_wrong = 0
    for case in range(30):
        checks = [[(rng.choice("ab"), rng.uniform(0, 0.8)) for _ in range(rng.randrange(0, 12))]
                  for _ in range(rng.randrange(1, 6))]
        run = resetting_detector(checks)
        calls = []

        def decode(items, item_ts):
            calls.append(list(zip(items, item_ts)))
            return [run(i, t) for i, t in zip(items, item_ts)]

        dets, runs = keyword_sweep(decode, len(checks), ts)
        for j, t in enumerate(ts):
            for i in range(len(checks)):
                assert dets[j][i] == run(i, t), (case, t, i)
                naive_wrong += [d for d in dets[0][i] if d.score >= t] != run(i, t)
        assert sum(runs) == sum(len(c) for c in calls) and all(r >= 1 for r in runs)
        assert sum(runs) <= len(checks) * len(ts)
        # every file once at the lowest threshold first; later decodes only above a detection's score
        assert calls[0] == [(i, ts[0]) for i in range(len(checks))]
    assert naive_wrong > 0


def test_keyword_sweep_decodes_a_file_without_detections_once():
    runs_seen = []

    def decode(items, item_ts):
        runs_seen.append(items)
        return [[Det("a", 0.5)] if i == 1 and t <= 0.5 else [] for i, t in zip(items, item_ts)]

    dets, runs = keyword_sweep(decode, 3, [0.1, 0.3, 0.5, 0.7])
    assert runs == [1, 2, 1] and runs_seen == [[0, 1, 2], [1]]
    assert [len(d[1]) for d in dets] == [1, 1, 1, 0]  # the second decode (at 0.7) found nothing


def test_keyword_sweep_errors():
    with pytest.raises(ValueError, match="strictly ascending"):
        keyword_sweep(lambda items, ts: [[] for _ in items], 1, [0.5, 0.2])
    with pytest.raises(ValueError, match="strictly ascending"):
        keyword_sweep(lambda items, ts: [[] for _ in items], 1, [])
    with pytest.raises(RuntimeError, match="below its decode's threshold"):
        keyword_sweep(lambda items, ts: [[Det("a", 0.1)] for _ in items], 1, [0.2, 0.4])


# --------------------------------------------------------------------------- the report, by hand


@pytest.fixture(scope="module")
def hand_sets(tmp_path_factory):
    """Two sets (positives, negatives) of silent WAVs; the detections come from a stub decoder."""
    d = tmp_path_factory.mktemp("kwhand")
    for name in ("c1", "c2", "a1", "j1", "n1", "n2", "n3"):
        write_wav(d / f"{name}.wav", np.zeros(1600, dtype=np.float32))
    pos = write_set(d / "pos.jsonl", [
        {"audio": "c1.wav", "text": "computer", "keyword": "Computer"},
        {"audio": "c2.wav", "text": "computer", "keyword": "computer"},
        {"audio": "a1.wav", "text": "athena", "keyword": "athena"},
        {"audio": "j1.wav", "text": "hey jarvis", "keyword": "hey  jarvis"}])  # not listed: ignored
    neg = write_set(d / "neg.jsonl", [
        {"audio": "n1.wav", "text": "lights on", "keyword": None},
        {"audio": "n2.wav", "text": "what time is it"},
        {"audio": "n3.wav", "text": "my computer is slow", "keyword": None}])  # holds a keyword: excluded
    return pos, neg


FIXED = {"c1.wav": [("computer", 0.9)], "c2.wav": [("computer", 0.4), ("athena", 0.6)], "a1.wav": [("athena", 0.7)],
         "n1.wav": [("computer", 0.5), ("athena", 0.3)], "n2.wav": [("computer", 0.2)]}


def stub_decode(self, files, items, thresholds):
    """A detector without resets: the fixed detections at or above the threshold; 900 s per file."""
    out = []
    for i, t in zip(items, thresholds):
        f = files[i]
        assert f.entry.rel_audio in FIXED, f"{f.entry.rel_audio} should not be decoded"
        f.seconds = 900.0
        out.append([WakeWord(0, k, s, 0.0, 1.0) for k, s in FIXED[f.entry.rel_audio] if s >= t])
    return out


def test_keyword_report_by_hand(tiny_ckpt, hand_sets, monkeypatch):
    """The report's per-keyword and pooled figures on a hand-computed example (negatives: 2 x 900 s = 0.5 h)."""
    monkeypatch.setattr(KeywordEvaluator, "_decode", stub_decode)
    cfg = EngineConfig(device="cpu", kws=KwsConfig(wake_threshold=0.3))
    ev = KeywordEvaluator(load_checkpoint(tiny_ckpt), cfg, EvalOptions(thresholds=(0.1, 0.45, 0.8)),
                          "computer, athena")
    r = ev.evaluate(hand_sets)
    assert r["thresholds"] == [0.1, 0.3, 0.45, 0.8] and r["negative_hours"] == 0.5
    # decodes (file: thresholds decoded at): c1 0.1 | c2 0.1, 0.45, 0.8 | a1 0.1, 0.8 | n1 0.1, 0.45, 0.8 | n2 0.1, 0.3
    assert (r["positives"], r["negatives"], r["decodes"], r["files_decoded"]) == (3, 2, 11, 5)
    assert [f["decodes"] for f in r["files"]] == [1, 3, 2, 3, 2]
    assert r["sets"][0]["positives"] == {"computer": 2, "athena": 1} and r["sets"][0]["ignored_positives"] == 1
    assert (r["sets"][1]["negatives"], r["sets"][1]["negative_seconds"], r["sets"][1]["excluded_negatives"]) == \
        (2, 1800.0, 1)

    def points(k):
        return [(s["threshold"], s["missed"], s["false_alarms"], s["fa_per_hour"]) for s in k["sweep"]]

    c = r["per_keyword"]["computer"]
    assert c["positives"] == 2
    assert points(c) == [(0.1, 0, 2, 4.0), (0.3, 0, 1, 2.0), (0.45, 1, 1, 2.0), (0.8, 1, 0, 0.0)]
    assert (c["threshold"], c["frr"], c["false_alarms"], c["fa_per_hour"]) == (0.3, 0.0, 1, 2.0)
    assert c["frr_at_1_fa_per_hour"] == c["frr_at_0.1_fa_per_hour"] == {"frr": 0.5, "threshold": 0.8,
                                                                          "fa_per_hour": 0.0}
    assert c["det"] == [[0.0, 0.5], [2.0, 0.5], [2.0, 0.0], [4.0, 0.0]]
    # athena's detection in a computer positive is neither a hit nor a false alarm
    a = r["per_keyword"]["athena"]
    assert points(a) == [(0.1, 0, 1, 2.0), (0.3, 0, 1, 2.0), (0.45, 0, 0, 0.0), (0.8, 1, 0, 0.0)]
    assert a["frr_at_0.5_fa_per_hour"] == {"frr": 0.0, "threshold": 0.45, "fa_per_hour": 0.0}
    # all keywords: a positive counts when its own keyword fires
    al = r["all"]
    assert points(al) == [(0.1, 0, 3, 6.0), (0.3, 0, 2, 4.0), (0.45, 1, 1, 2.0), (0.8, 2, 0, 0.0)]
    assert al["frr_at_1_fa_per_hour"]["frr"] == pytest.approx(2 / 3)
    assert [f["role"] for f in r["files"]] == ["positive"] * 3 + ["negative"] * 2
    assert r["files"][1]["detections"] == [["computer", 0.4, 0.0, 1.0], ["athena", 0.6, 0.0, 1.0]]
    # the keywords from the sets: every keyword field, in order (then "hey jarvis" has a positive)
    ev = KeywordEvaluator(load_checkpoint(tiny_ckpt), cfg, EvalOptions(thresholds=(0.1, 0.45, 0.8)))
    monkeypatch.setitem(FIXED, "j1.wav", [])
    r = ev.evaluate(hand_sets)
    assert [k["keyword"] for k in r["keywords"]] == ["Computer", "athena", "hey jarvis"]
    assert r["sets"][0]["ignored_positives"] == 0 and r["per_keyword"]["hey jarvis"]["frr"] == 1.0


# --------------------------------------------------------------------------- through the engine


@pytest.mark.parametrize("score", ["prob", "ctc"])
def test_exact_sweep_equals_engine_runs_per_threshold(ckpt5, engine_sets, score):
    """The evaluator's detections at each threshold = an engine configured with that wake_threshold (the
    transducer lattice's token-probability score, and the CTC head's)."""
    jsonl, wavs = engine_sets
    # where this toy model's scores lie: its random CTC head scores "rr" at 0.0010-0.0017
    ts = {"prob": tuple(round(0.09 + 0.01 * i, 2) for i in range(8)),
          "ctc": tuple(round(0.0009 + 0.0001 * i, 4) for i in range(8))}[score]
    # the token-probability score and no settling: detections at the first passing frame, where the naive
    # offline sweep goes wrong on this set
    kcfg = KwsConfig(refractory_s=0.2, trailing_blanks=1, wake_score=score, wake_settle_frames=0)
    loaded = load_checkpoint(ckpt5)
    ev = KeywordEvaluator(loaded, EngineConfig(device="cpu", kws=kcfg), EvalOptions(thresholds=ts, batch_streams=4),
                          "rr,vv")
    r = ev.evaluate([jsonl])
    from streamd.audio.pcm import load_audio

    audio = [load_audio(w) for w in wavs]
    naive_differs = False
    low = [[(d[0], d[1]) for d in f["detections"]] for f in r["files"]]
    assert sum(map(len, low)) > 0
    for t in ts:
        rec = Recognizer(loaded, EngineConfig(device="cpu", kws=KwsConfig(refractory_s=0.2, trailing_blanks=1,
                                                                          wake_score=score, wake_settle_frames=0,
                                                                          wake_words=("rr", "vv"),
                                                                          wake_threshold=t)))
        _, events = feed_streams(rec, audio, 0.1, partials=False)
        direct = [[(e.keyword, e.score) for e in evs if isinstance(e, WakeWord) and e.keyword in ("rr", "vv")]
                  for evs in events]
        entries = [type("E", (), {"keyword": f["keyword"]})() for f in r["files"]]
        dets = [[Det(k, s) for k, s in f] for f in direct]
        for name in ("rr", "vv"):
            mine = [s for s in r["per_keyword"][name]["sweep"] if s["threshold"] == t][0]
            sel = [i for i, e in enumerate(entries) if e.keyword in (None, name)]
            want = kws_counts([[d for d in dets[i] if d.keyword == name] for i in sel], [entries[i] for i in sel],
                               r["negative_hours"])
            assert {k: mine[k] for k in want} == want, (t, name)
        naive_differs |= [[d for d in f if d[1] >= t] for f in low] != direct
    assert naive_differs or score == "ctc"  # with prob this set needs the exact sweep
    assert r["decodes"] > len(wavs)
