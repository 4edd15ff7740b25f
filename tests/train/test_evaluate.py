"""streamd eval: WER alignment, AUC / NCE, KWS replay and end-to-end runs through the engine."""

import itertools
import json
import math
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import random_audio, write_checkpoint
from streamd.audio.resample import resample
from streamd.cli import main as cli_main
from streamd.cli import transcribe_files
from streamd.config import ConfidenceConfig, DecodingConfig, EngineConfig, KwsConfig
from streamd.decode.confidence import MEASURE_NAMES, aggregate, frame_confidence
from streamd.decode.kws import KwsDetector
from streamd.engine import Recognizer
from streamd.events import Final, WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.train.evaluate import (EvalOptions, Evaluator, MeasureBank, RecordingRecognizer, align_words, auc_roc,
                                    nce, normalize_words, read_eval_set, replay_kws)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on 2 shared cores: intra-op threads only add contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def write_wav(path, x, rate=16000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return str(path)


# --------------------------------------------------------------------------- WER


def test_normalize_words():
    assert normalize_words("Hello, World-wide 'quoted' don't  -- A.M.!") == \
        ["hello", "world", "wide", "quoted", "don't", "am"]
    assert normalize_words("  ") == []


@pytest.mark.parametrize("ref, hyp, counts, correct", [
    ("a b c", "a b c", (3, 0, 0, 0), [True, True, True]),
    ("a b c d", "a x c", (2, 1, 1, 0), [True, False, True]),
    ("", "a b", (0, 0, 0, 2), [False, False]),
    ("a b", "", (0, 0, 2, 0), []),
    ("a b", "b c", (1, 0, 1, 1), [True, False]),  # fewest errors (2), then most matches: D a, b=b, I c
    ("the cat sat", "the the cat sat", (3, 0, 0, 1), [False, True, True, True]),
    ("i like green eggs and ham", "i like eggs and the ham too", (5, 0, 1, 2),
     [True, True, True, True, False, True, False]),
    ("x y z", "p q", (0, 2, 1, 0), [False, False]),
])
def test_align_hand_cases(ref, hyp, counts, correct):
    a = align_words(ref.split(), hyp.split())
    assert (a.hits, a.subs, a.dels, a.ins) == counts
    assert list(a.hyp_correct) == correct


def _levenshtein(r, h):
    """Reference edit distance (textbook recursion, memoized)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (r[i - 1] != h[j - 1]))

    return d(len(r), len(h))


@pytest.mark.parametrize("seed", range(5))
def test_align_random_vs_reference(seed):
    g = np.random.default_rng(seed)
    for _ in range(40):
        ref = list(g.choice(list("abcd"), size=g.integers(0, 8)))
        hyp = list(g.choice(list("abcd"), size=g.integers(0, 8)))
        a = align_words(ref, hyp)
        assert a.errors == _levenshtein(tuple(ref), tuple(hyp))
        assert a.hits + a.subs + a.dels == len(ref) and a.hits + a.subs + a.ins == len(hyp)
        # the ops walk both sequences in order and matches are equal words
        assert [r for _, r, _ in a.ops if r is not None] == list(range(len(ref)))
        assert [h for _, _, h in a.ops if h is not None] == list(range(len(hyp)))
        assert all((op == "=") == (ref[r] == hyp[h]) for op, r, h in a.ops if r is not None and h is not None)


# --------------------------------------------------------------------------- AUC / NCE


def _auc_pairs(labels, scores):
    pos = [s for y, s in zip(labels, scores) if y]
    neg = [s for y, s in zip(labels, scores) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(6))
def test_auc_vs_pair_count_with_ties(seed):
    g = np.random.default_rng(seed)
    n = int(g.integers(2, 60))
    labels = g.random(n) < 0.6
    labels[0], labels[1] = True, False
    scores = np.round(g.random(n) * (3 if seed % 2 else 20)) / 20  # few distinct values: many ties
    assert auc_roc(labels, scores) == pytest.approx(_auc_pairs(labels, scores), abs=1e-12)


def test_auc_hand_cases():
    assert auc_roc([True, True, False], [0.9, 0.8, 0.1]) == 1.0
    assert auc_roc([True, False], [0.1, 0.9]) == 0.0
    assert auc_roc([True, False, True, False], [0.5] * 4) == 0.5
    assert auc_roc([True, False, False], [0.5, 0.5, 0.2]) == 0.75
    assert auc_roc([True, True], [0.1, 0.2]) is None
    with pytest.raises(ValueError, match="equal length"):
        auc_roc([True], [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        auc_roc([True, False], [float("nan"), 0.2])


def test_nce_hand_cases():
    # p_c = 1/2: H(p_c) = 1 bit; H_conf = -log2(0.8) per word
    assert nce([True, False], [0.8, 0.2]) == pytest.approx(1 + math.log2(0.8), abs=1e-12)
    assert nce([True, False], [0.2, 0.8]) == pytest.approx(1 + math.log2(0.2), abs=1e-12)  # worse than prior: < 0
    assert nce([True, True, True, False], [0.75] * 4) == pytest.approx(0.0, abs=1e-12)  # the prior itself
    assert nce([True, False], [1.0, 0.0]) == pytest.approx(1.0, abs=1e-12)  # perfect (clipped logs)
    # hand value: p_c = 2/3, H = 0.918296 bits; H_conf = -(log2 .9 + log2 .6 + log2 .7) / 3
    h_p = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    h_c = -(math.log2(0.9) + math.log2(0.6) + math.log2(0.7)) / 3
    assert nce([True, True, False], [0.9, 0.6, 0.3]) == pytest.approx((h_p - h_c) / h_p, abs=1e-12)
    assert nce([True, True], [0.5, 0.9]) is None
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        nce([True, False], [1.5, 0.2])


# --------------------------------------------------------------------------- sets


def test_read_eval_set_errors(tmp_path):
    write_wav(tmp_path / "a.wav", random_audio(0.3))
    p = tmp_path / "s.jsonl"
    p.write_text('{"audio": "a.wav", "text": "hi"}\n{"audio": "a.wav"}\n')
    with pytest.raises(ValueError, match=r"s.jsonl:2: field 'text' must be a string"):
        read_eval_set(p)
    p.write_text('{"audio": "a.wav", "text": "hi"}\nnot json\n')
    with pytest.raises(ValueError, match=r"s.jsonl:2: not valid JSON"):
        read_eval_set(p)
    p.write_text('{"audio": "b.wav", "text": "hi"}\n')
    with pytest.raises(ValueError, match=r"s.jsonl:1: audio file .*b.wav.* not found"):
        read_eval_set(p)
    p.write_text('{"audio": "a.wav", "text": "hi", "keyword": null}\n{"audio": "a.wav", "text": "x"}\n')
    entries, is_kws = read_eval_set(p, limit=1)
    assert is_kws and len(entries) == 1 and entries[0].keyword is None and entries[0].voice == "unknown"


# --------------------------------------------------------------------------- KWS replay vs the detector


@pytest.mark.parametrize("seed, smoothing, refractory", [(0, 1, 1.0), (1, 3, 0.2), (2, 2, 0.0)])
def test_replay_kws_equals_chunked_detector(seed, smoothing, refractory):
    """The batched many-threshold replay equals one detector per threshold fed chunk by chunk, per file."""
    g = np.random.default_rng(seed)
    keywords = ("hey stream", "stop")
    tracks = [g.random((int(g.integers(0, 40)), 2)).astype(np.float32).astype(np.float64) for _ in range(5)]
    cfg = KwsConfig(smoothing_frames=smoothing, refractory_s=refractory)
    thresholds = [0.3, 0.55, 0.8, 0.9]
    got = replay_kws(tracks, keywords, cfg, 0.04, thresholds, max_elements=200)  # small batches of files
    for i, t in enumerate(thresholds):
        det = KwsDetector(keywords, KwsConfig(threshold=t, smoothing_frames=smoothing, refractory_s=refractory), 0.04)
        for f, tr in enumerate(tracks):
            state, expect = det.init_state(1), []
            for off in range(0, len(tr), 4):
                x = torch.from_numpy(tr[off:off + 4]).float()[None]
                state, dets = det.step(state, x, torch.tensor([x.shape[1]]), torch.tensor([off]))
                expect += [(d.keyword, d.score, d.start, d.end) for d in dets]
            assert [(d.keyword, d.score, d.start, d.end) for d in got[i][f]] == expect
            assert all(d.row == f for d in got[i][f])
    assert sum(len(d) for d in got[0]) > sum(len(d) for d in got[-1])  # the sweep is not trivial


def test_measure_bank_tags_and_lookup():
    specs = [(n, a) for n in MEASURE_NAMES for a in (0.33, 1.0)]
    bank = MeasureBank(specs)
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(3, 7, generator=g).log_softmax(-1)
    x2 = torch.randn(2, 4, 7, generator=g).log_softmax(-1)
    t1, t2 = bank(x1), bank(x2)
    assert t1.shape == (3,) and t2.shape == (2, 4) and t1.dtype == torch.float32
    assert t1.tolist() == [0, 1, 2] and t2.flatten().tolist() == list(range(3, 11))
    vals = bank.lookup([bank.tag_of(c) for c in t2[1].tolist()])
    for m, (n, a) in enumerate(specs):
        assert vals[:, m].tolist() == frame_confidence(x2[1], n, a).tolist()
    with pytest.raises(RuntimeError, match="not a recorded tag"):
        bank.tag_of(0.5)
    bank.reset()
    assert bank.num_tags == 0
    with pytest.raises(ValueError, match="unknown measure"):
        MeasureBank([("entropy", 0.5)])


# --------------------------------------------------------------------------- through the engine


@pytest.fixture(scope="module")
def ckpt5(tmp_path_factory):
    """A random model that emits several words per file (so confidences and alignments vary)."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt5") / "seed5.pt", seed=5)


@pytest.fixture(scope="module")
def wav_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalset")
    return [write_wav(d / f"f{i}.wav", random_audio(1.2 + 0.3 * i, seed=i)) for i in range(4)]


def _texts(events):
    return {p: " ".join(e.text for e in evs if isinstance(e, Final) and e.text) for p, evs in events.items()}


def _write_set(path, wavs, texts, keywords=None):
    rows = []
    for i, (w, t) in enumerate(zip(wavs, texts)):
        row = {"audio": w.rsplit("/", 1)[1], "text": t, "voice": f"voice{i % 2}", "duration": 1.0}
        if keywords is not None:
            row["keyword"] = keywords[i]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_eval_cli_report(tiny_ckpt, wav_files, capsys):
    """End to end with --json: every figure is there and the WER is that of the engine's own text."""
    texts = ["hey stream lights on", "hey stream stop", "ice cream", "extreme weather today"]
    jsonl = _write_set(Path(wav_files[0]).parent / "set.jsonl", wav_files, texts,
                       ["hey stream", "hey stream", None, None])
    assert cli_main(["eval", "--set", jsonl, "--model", tiny_ckpt, "--device", "cpu", "--json", "--rtf-single"]) == 0
    report = json.loads(capsys.readouterr().out)
    (r,) = report["sets"]
    for key in ("wer", "sub", "del", "ins", "ser", "per_voice", "rtf", "rtf_single", "confidence", "kws", "files"):
        assert key in r, key
    assert r["rtf"] > 0 and r["rtf_single"] > 0 and r["errors"] == []
    # the hypotheses are the engine's: the same files decoded as concurrent streams by transcribe_files
    direct = _texts(transcribe_files(Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu")), wav_files))
    assert [f["hyp"] for f in r["files"]] == [direct[w] for w in wav_files]
    errors = [_levenshtein(tuple(normalize_words(t)), tuple(normalize_words(direct[w])))
              for t, w in zip(texts, wav_files)]
    ref_words = sum(len(t.split()) for t in texts)
    assert r["sub"] + r["del"] + r["ins"] == sum(errors) and r["ref_words"] == ref_words
    assert r["wer"] == pytest.approx(sum(errors) / ref_words)
    assert r["ser"] == pytest.approx(np.mean([e > 0 for e in errors]))
    assert set(r["per_voice"]) == {"voice0", "voice1"}
    assert r["per_voice"]["voice0"]["ref_words"] == len(texts[0].split()) + len(texts[2].split())
    c = r["confidence"]
    assert len(c["table"]) == len(MEASURE_NAMES) * 4 * 4
    assert [(t["measure"], t["alpha"], t["aggregation"]) for t in c["table"] if t["default"]] == \
        [("entropy_tsallis_exp", 0.33, "min")]
    assert c["recording_text_mismatches"] == 0 and c["engine_conf_max_abs_diff"] == 0.0
    k = r["kws"]
    assert (k["positives"], k["negatives"]) == (2, 2) and k["sweep_matches_engine"]
    assert {"frr", "fa_per_hour", "frr_at_1_fa_per_hour", "frr_at_0.1_fa_per_hour", "sweep", "det"} <= set(k)
    assert len(k["det"]) == len(k["sweep"]) >= 95
    # the readable report too
    assert cli_main(["eval", "--set", jsonl, "--model", tiny_ckpt, "--device", "cpu", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "WER" in out and "RTF" in out and "* entropy_tsallis_exp" in out and "FRR at <= 1 FA/h" in out


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
    bank = MeasureBank([("max_prob", 1.0)])
    rec = RecordingRecognizer(loaded, EngineConfig(device="cpu"), bank)
    events = transcribe_files(rec, wav_files)
    tracks = rec.take_kws_tracks()
    sid = {w: next(e.stream for e in events[w]) for w in wav_files}
    replay = replay_kws([tracks[sid[w]] for w in wav_files], rec.keywords, KwsConfig(), rec.frame_shift_s, [t])[0]
    for f, w in enumerate(wav_files):
        assert [(d.keyword, d.score, d.start, d.end) for d in replay[f]] == \
            [(e.keyword, e.score, e.start, e.end) for e in wakes[f]]


def _confidence_config(name, alpha, how):
    if name == "max_prob":
        return ConfidenceConfig(measure="max_prob", alpha=alpha, aggregation=how)
    _, kind, norm = name.split("_")
    return ConfidenceConfig(measure="entropy", entropy_type=kind, entropy_norm=norm, alpha=alpha, aggregation=how)


@pytest.mark.parametrize("method, ckpt, settings", [
    ("greedy", "ckpt5",
     [("entropy_tsallis_exp", 0.25, "min"), ("max_prob", 1.0, "prod"), ("entropy_renyi_lin", 0.5, "mean")]),
    ("modified_beam", "ckpt5", [("entropy_gibbs_lin", 0.25, "max"), ("entropy_renyi_exp", 1.0, "min")]),
    ("beam", "tiny_ckpt", [("entropy_gibbs_exp", 0.5, "mean"), ("entropy_tsallis_lin", 0.25, "prod")]),
    ("ctc_prefix_beam", "ckpt5", [("max_prob", 0.5, "max"), ("entropy_tsallis_exp", 0.5, "min")]),
])
def test_recorded_confidences_equal_engine(request, wav_files, method, ckpt, settings):
    """Word confidences recomputed from recorded frames = the engine's when configured with that measure."""
    files = wav_files[:2]
    dec = DecodingConfig(method=method, beam=3)
    loaded = load_checkpoint(request.getfixturevalue(ckpt))
    bank = MeasureBank([(n, a) for n in MEASURE_NAMES for a in (0.25, 0.5, 1.0)])
    rec = RecordingRecognizer(loaded, EngineConfig(device="cpu", decoding=dec), bank)
    rec_words = {p: [w for e in evs if isinstance(e, Final) for w in e.words]
                 for p, evs in transcribe_files(rec, files).items()}
    assert sum(len(w.tags) for ws in rec_words.values() for w in ws) >= 3
    for name, alpha, how in settings:
        m = bank.specs.index((name, alpha))
        engine = Recognizer(loaded, EngineConfig(device="cpu", decoding=dec,
                                                 confidence=_confidence_config(name, alpha, how)))
        for p, evs in transcribe_files(engine, files).items():
            words = [w for e in evs if isinstance(e, Final) for w in e.words]
            assert [w.word for w in words] == [w.word for w in rec_words[p]]
            vals = bank.lookup([t for w in rec_words[p] for t in w.tags])
            pos, confs = 0, []
            for rw in rec_words[p]:
                confs.append(aggregate(vals[pos:pos + len(rw.tags), m].tolist(), how))
                pos += len(rw.tags)
            assert confs == pytest.approx([w.conf for w in words], abs=1e-7), (name, alpha, how)
            assert len(set(confs)) > 1 or len(confs) <= 1 or how == "max"


def test_confidence_table_matches_engine_words(ckpt5, wav_files, tmp_path):
    """A table row's AUC / NCE = those of the engine's own word confidences under that setting."""
    files = wav_files[:3]
    for w in files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    loaded = load_checkpoint(ckpt5)
    cc = ConfidenceConfig(measure="max_prob", alpha=0.5, aggregation="mean")
    engine = Recognizer(loaded, EngineConfig(device="cpu", confidence=cc))
    events = transcribe_files(engine, files)
    hyps = _texts(events)
    # references: keep every other hypothesis word and change the rest, so words are both right and wrong
    refs = [" ".join(w if i % 2 == 0 else "zz" for i, w in enumerate(hyps[p].split())) for p in files]
    jsonl = _write_set(tmp_path / "c.jsonl", files, refs)
    report = Evaluator(loaded, EngineConfig(device="cpu"), EvalOptions(batch_streams=3)).evaluate(jsonl)
    labels, confs = [], []
    for p, ref in zip(files, refs):
        words = [w for e in events[p] if isinstance(e, Final) for w in e.words]
        labels += align_words(ref.split(), [w.word for w in words]).hyp_correct
        confs += [w.conf for w in words]
    assert 0 < sum(labels) < len(labels)
    (row,) = [t for t in report["confidence"]["table"]
              if (t["measure"], t["alpha"], t["aggregation"]) == ("max_prob", 0.5, "mean")]
    assert row["auc"] == pytest.approx(auc_roc(labels, confs), abs=1e-9)
    assert row["nce"] == pytest.approx(nce(labels, confs), abs=1e-6)
    assert report["confidence"]["words"] == len(labels) and report["confidence"]["correct"] == sum(labels)
    assert report["kws"] is None  # no keyword field in this set


def test_resample_to_8000(tiny_ckpt, wav_files, tmp_path):
    files = wav_files[:2]
    for w in files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    jsonl = _write_set(tmp_path / "r.jsonl", files, ["a b", "c"])
    report = Evaluator(load_checkpoint(tiny_ckpt), EngineConfig(device="cpu"),
                       EvalOptions(resample_to=8000)).evaluate(jsonl)
    assert report["sample_rate"] == 8000
    # oracle: the same files downsampled and streamed at 8 kHz, 0.1 s pieces, one step per round
    from streamd.audio.pcm import load_audio

    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))
    xs = [resample(load_audio(w)[0], 16000, 8000) for w in files]
    sids = [rec.create_stream(sample_rate=8000) for _ in xs]
    events = []
    for r in itertools.count():
        if r * 800 >= max(x.size for x in xs):
            break
        for sid, x in zip(sids, xs):
            if r * 800 < x.size:
                rec.accept_audio(sid, x[r * 800:(r + 1) * 800])
                if (r + 1) * 800 >= x.size:
                    rec.finish(sid)
        events += rec.step()
    events += rec.drain()
    texts = [" ".join(e.text for e in events if isinstance(e, Final) and e.stream == sid and e.text) for sid in sids]
    assert [f["hyp"] for f in report["files"]] == texts
    assert report["audio_seconds"] == pytest.approx(sum(x.size for x in xs) / 8000, abs=1e-3)


def test_cli_errors(tiny_ckpt, tmp_path, capsys):
    assert cli_main(["eval", "--set", str(tmp_path / "none.jsonl"), "--model", tiny_ckpt]) == 2
    assert "no such evaluation set" in capsys.readouterr().err
    write_wav(tmp_path / "a.wav", random_audio(0.3))
    (tmp_path / "s.jsonl").write_text('{"audio": "a.wav", "text": "x"}\n')
    assert cli_main(["eval", "--set", str(tmp_path / "s.jsonl"), "--model", tiny_ckpt, "--batch-streams", "0"]) == 2
    assert "batch_streams must be an integer >= 1" in capsys.readouterr().err
    assert cli_main(["eval", "--set", str(tmp_path / "s.jsonl"), "--model", tiny_ckpt, "--resample-to", "4000"]) == 2
    assert "sample_rate" in capsys.readouterr().err
