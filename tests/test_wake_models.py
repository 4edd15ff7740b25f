"""Trained wake models (speech embedding + small heads) through the engine: streaming in arbitrary pieces
and batches equals the offline scores and detections, the model's real score in the events, per-stream
selection, refractory suppressions counted, bad files and names rejected clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import random_audio
from streamd.config import EngineConfig, from_dict
from streamd.decode.endpoint import seconds_to_frames
from streamd.engine import Recognizer
from streamd.evaluation.wake import detect_frames, score_tracks
from streamd.events import Done, WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.model.wake import WakeHead, WakeScorer, load_wake_model, save_wake_model


KW = ("hey jarvis", "computer")


def _audio(seconds: float, seed: int) -> np.ndarray:
    """Tones switching on and off (the random heads' scores then move) over faint noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    gate = (np.sin(2 * np.pi * 0.7 * t + seed) > 0).astype(np.float32)
    x = 0.3 * gate * np.sin(2 * np.pi * (300 + 200 * seed) * t) + 0.01 * rng.standard_normal(n)
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def wake_files(tmp_path_factory):
    """Two random heads with thresholds at their score tracks' medians on the test audio (so they fire)."""
    d = tmp_path_factory.mktemp("wake")
    paths = []
    for i, kw in enumerate(["hey jarvis", "computer"]):
        torch.manual_seed(10 + i)
        head = WakeHead(8)
        p = d / f"{i}.wake.pt"
        save_wake_model(p, kw, 0.5, head, {"note": "random head for tests"})
        sc = WakeScorer([load_wake_model(p)])
        tr = np.concatenate([t[:, 0] for t in score_tracks(sc, [(_audio(6, s), 16000) for s in (1, 2)])])
        save_wake_model(p, kw, float(np.clip(np.quantile(tr, 0.6), 0.01, 0.99)), head, {})
        paths.append(str(p))
    return paths


def _rec(ckpt, paths, **kws):
    """The engine with the wake models, its embedding in float32 unless ``embedding_precision`` says (the
    offline reference below computes in float32; bfloat16's closeness: tests/model/test_speech_embedding.py)."""
    kws.setdefault("embedding_precision", "float32")
    cfg = from_dict(EngineConfig, {"num_threads": 1, "kws": {"wake_models": paths, **kws}})
    return Recognizer(load_checkpoint(ckpt, "cpu"), cfg)


def _expected(paths, audio, refractory_s=1.0):
    """Offline: (keyword, frame, score) of every detection, by the detector's rule."""
    models = [load_wake_model(p) for p in paths]
    tr = score_tracks(WakeScorer(models), [(audio, 16000)])[0]
    ref = seconds_to_frames(refractory_s, 0.08)
    out = []
    for k, m in enumerate(models):
        out += [(m.keyword, f, float(tr[f, k])) for f in detect_frames(tr[:, k], m.threshold, ref)]
    return sorted(out, key=lambda d: (d[1], d[0])), tr, models


def _run(rec, audios, pieces_seed=0, **opts):
    rng = np.random.default_rng(pieces_seed)
    ids = [rec.create_stream(**opts) for _ in audios]
    pos = [0] * len(audios)
    events = []
    while any(p < len(a) for p, a in zip(pos, audios)):
        for sid, a, i in zip(ids, audios, range(len(audios))):
            n = int(rng.integers(500, 9000))
            if pos[i] < len(a):
                rec.accept_audio(sid, a[pos[i]:pos[i] + n])
                pos[i] += n
                if pos[i] >= len(a):
                    rec.finish(sid)
        events += rec.step()
    events += rec.drain()
    return ids, events


def test_engine_equals_offline_scores_and_detections(tiny_ckpt, wake_files):
    audios = [_audio(6, 1), _audio(5, 2), _audio(3, 1)]
    rec = _rec(tiny_ckpt, wake_files)
    ids, events = _run(rec, audios)
    for sid, a in zip(ids, audios):
        want, _, _ = _expected(wake_files, a)
        got = sorted([(e.keyword, round(e.end / 0.08) - 1, e.score) for e in events
                      if isinstance(e, WakeWord) and e.stream == sid and e.keyword in KW], key=lambda d: (d[1], d[0]))
        assert [(k, f) for k, f, _ in got] == [(k, f) for k, f, _ in want]
        assert np.allclose([s for *_, s in got], [s for *_, s in want], atol=1e-4)
        assert any(isinstance(e, Done) and e.stream == sid for e in events)
    assert sum(isinstance(e, WakeWord) and e.keyword in KW for e in events) > 0
    assert all(0 < e.score <= 1 for e in events if isinstance(e, WakeWord))
    assert {m["keyword"] for m in rec.model_info["wake_models"]} == {"hey jarvis", "computer"}


def test_embedding_precision_reaches_the_engine(tiny_ckpt, wake_files):
    for precision, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        rec = _rec(tiny_ckpt, wake_files, embedding_precision=precision)
        assert rec.wake_scorer.embedding.compute_dtype == dtype
        ids, events = _run(rec, [_audio(3, 1)])
        assert any(isinstance(e, Done) and e.stream == ids[0] for e in events)
        assert all(0 < e.score <= 1 for e in events if isinstance(e, WakeWord))


def test_suppressed_firings_are_counted(tiny_ckpt, wake_files):
    a = _audio(8, 2)
    rec = _rec(tiny_ckpt, wake_files, refractory_s=2.0)
    _, events = _run(rec, [a], pieces_seed=3)
    want, tr, models = _expected(wake_files, a, refractory_s=2.0)
    for k, m in enumerate(models):
        above = np.concatenate([[False], tr[:, k] >= m.threshold])
        rising = int((above[1:] & ~above[:-1]).sum())
        fired = sum(d[0] == m.keyword for d in want)
        stats = rec.wake_stats[m.keyword]
        assert stats["detections"] == fired
        assert stats["suppressed"] == rising - sum(1 for d in want if d[0] == m.keyword
                                                    and (d[1] == 0 or tr[d[1] - 1, k] < m.threshold))
    assert sum(isinstance(e, WakeWord) and e.keyword in KW for e in events) == len(want)


def test_stream_selects_models_and_keywords_false(tiny_ckpt, wake_files):
    rec = _rec(tiny_ckpt, wake_files)
    a = _audio(6, 1)
    _, events = _run(rec, [a], wake_models=["Computer"])
    assert {e.keyword for e in events if isinstance(e, WakeWord) and e.keyword in KW} == {"computer"}
    _, events = _run(rec, [a], keywords=False)
    assert not any(isinstance(e, WakeWord) for e in events)
    with pytest.raises(ValueError, match="no such wake model"):
        rec.create_stream(wake_models=["alexa"])


def test_bad_wake_model_files(tiny_ckpt, tmp_path):
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"kws.wake_models\[0\]"):
        _rec(tiny_ckpt, [str(bad)])
    with pytest.raises(ValueError, match="not found"):
        _rec(tiny_ckpt, [str(tmp_path / "missing.pt")])


def test_resampled_stream_gets_scores(tiny_ckpt, wake_files):
    rec = _rec(tiny_ckpt, wake_files)
    sid = rec.create_stream(sample_rate=8000)
    rec.accept_audio(sid, random_audio(3.0, 8000))
    rec.finish(sid)
    events = rec.drain()
    assert isinstance(events[-1], Done)
    assert rec._streams.get(sid) is None


def test_v1_start_message_wake_models():
    import json

    from streamd.config import LimitsConfig
    from streamd.server.protocol import Open, V1Session
    info = {"name": "m", "methods": ["greedy"], "chunk_seconds": 0.32, "keywords": [],
            "wake_models": [{"keyword": "hey jarvis", "threshold": 0.5, "path": "x"}]}
    s = V1Session("s", LimitsConfig(), info)
    (op,) = s.receive(json.dumps({"type": "start", "wake_models": ["hey jarvis"]}), 0.0)
    assert isinstance(op, Open) and op.options["wake_models"] == ("hey jarvis",)
    assert s.opened()[0].message["wake_models"] == ("hey jarvis",)
    s = V1Session("s", LimitsConfig(), info)
    acts = s.receive(json.dumps({"type": "start", "wake_models": "hey jarvis"}), 0.0)
    assert any("wake_models must be a list" in json.dumps(getattr(a, "message", "")) for a in acts)


def test_wyoming_lists_trained_models():
    pytest.importorskip("wyoming", reason="the Wyoming server needs the wyoming package (streamd[server])")
    from streamd.server.wyoming import wake_words
    info = {"keywords": ["hey stream"], "wake_words": [], "wake_models": [{"keyword": "hey jarvis"}]}
    assert wake_words(info) == ["hey stream", "hey jarvis"]


def test_engine_start_option_reaches_the_stream(tiny_ckpt, wake_files):
    rec = _rec(tiny_ckpt, wake_files)
    sid = rec.create_stream(wake_models=("computer",))
    assert rec._streams[sid].wake_on.tolist() == [False, True]


def test_keyword_mode_figures_of_trained_models(tmp_path, wake_files):
    import json

    from helpers import write_wav
    from streamd.evaluation.kws import det_curves
    from streamd.evaluation.options import EvalOptions
    from streamd.evaluation.wake import run_wake_models
    lines = []
    for i, (kw, seed) in enumerate([("hey jarvis", 1), ("hey jarvis", 2), (None, 3), (None, 4), ("other", 5)]):
        write_wav(tmp_path / f"{i}.wav", _audio(4, seed))
        lines.append({"audio": f"{i}.wav", "text": kw or "some words", "keyword": kw})
    lines.append({"audio": "0.wav", "text": "he said hey jarvis", "keyword": None})  # holds the keyword: left out
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(o) + "\n" for o in lines))
    rep = run_wake_models(wake_files, [str(tmp_path / "set.jsonl")], EvalOptions(), 1.0)
    hj = rep["per_model"]["hey jarvis"]
    assert hj["positives"] == 2 and hj["negatives"] == 2
    assert rep["per_model"]["computer"]["positives"] == 0 and rep["per_model"]["computer"]["negatives"] == 3
    low = hj["sweep"][0]
    assert low["threshold"] == 0.01 and low["frr"] == 0.0  # random heads fire somewhere at 0.01
    assert all(a["fa_per_hour"] >= b["fa_per_hour"] for a, b in zip(hj["sweep"], hj["sweep"][1:]))
    curves = det_curves({"mode": "keywords", "per_keyword": {}, "wake_models": rep})
    assert [c[0] for c in curves] == ["hey jarvis: trained model (2 positives)", "computer: trained model (0 positives)"]


def test_ensemble_head_is_the_mean_of_its_nets_and_the_scorer_batches_it(tmp_path):
    """A head of several nets: its logit is the mean of theirs; the file keeps them; the batched scorer (nets of
    every model in one product, a mean per model) equals the slow path, the head's own forward, per model."""
    torch.manual_seed(0)
    nets = [WakeHead(8) for _ in range(3)]
    ens = WakeHead.average(nets).eval()
    x = torch.randn(20, 16, 96)
    with torch.no_grad():
        assert torch.allclose(ens(x), torch.stack([h(x) for h in nets]).mean(0), atol=1e-6)
    save_wake_model(tmp_path / "e.wake.pt", "hey jarvis", 0.5, ens, {})
    single = WakeHead(8)
    save_wake_model(tmp_path / "s.wake.pt", "computer", 0.5, single, {})
    other = WakeHead(16, members=2)
    save_wake_model(tmp_path / "o.wake.pt", "alexa", 0.5, other, {})
    models = [load_wake_model(tmp_path / f"{n}.wake.pt") for n in "eso"]
    assert [m.head.members for m in models] == [3, 1, 2]
    got = WakeScorer(models).head_scores(x)
    with torch.no_grad():
        want = torch.stack([torch.sigmoid(h(x)) for h in (ens, single, other)], 1)
    assert torch.allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="one hidden size"):
        WakeHead.average([WakeHead(8), WakeHead(16)])


def test_a_file_of_one_net_written_before_ensembles_still_loads(tmp_path):
    torch.manual_seed(1)
    head = WakeHead(8).eval()
    old = {"net." + k[len("nets.0."):]: v for k, v in head.state_dict().items()}
    torch.save({"format": "streamd-wake-1", "keyword": "computer", "threshold": 0.5, "hidden": 8, "window": 16,
                "state_dict": old, "info": {}}, tmp_path / "old.wake.pt")
    m = load_wake_model(tmp_path / "old.wake.pt")
    x = torch.randn(5, 16, 96)
    with torch.no_grad():
        assert m.head.members == 1 and torch.equal(m.head(x), head(x))
