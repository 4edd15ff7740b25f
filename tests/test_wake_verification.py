"""Trained wake models verified by the second pass (``kws.verify``): the engine holds each detection until the
audio after it has come and emits it ``pending`` with exactly the samples around it; the second pass lets it
stand or rejects it by its gap; a server delivers only those that stand, in order, and counts every outcome;
overload and failures fall back to the model's own threshold; bad configurations are refused clearly."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect

from streamd.config import ConfigError, EngineConfig, from_dict
from streamd.decode.endpoint import seconds_to_frames
from streamd.engine import Recognizer
from streamd.evaluation.wake import detect_frames, score_tracks
from streamd.events import Done, Final, Partial, WakeCheck, WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.model.wake import WakeScorer, load_wake_model, verify_span
from streamd.second_pass.calibration import check_verifier
from streamd.second_pass.rescore import SecondPass, fallback
from streamd.second_pass.worker import FinalGate

sys.path.insert(0, str(Path(__file__).parent / "second_pass"))
from fakes import FakeRecognizer, GapRecognizer  # noqa: E402
from test_wake_models import KW, _audio, _run, wake_files  # noqa: E402,F401 - the module's fixture
from tests.server.wire import app_config, drain, http_get, pcm16, run  # noqa: E402

VERIFY = {"verify": True, "verify_wake_threshold": 0.3, "embedding_precision": "float32"}


def _cfg(paths, second="gap-model", **kws):
    return from_dict(EngineConfig, {"num_threads": 1, "kws": {"wake_models": paths, **VERIFY, **kws},
                                    "second_pass": {"model": second}})


def _offline(paths, audio, threshold):
    """(keyword, frame, score) of every detection at ``threshold`` (refractory 1 s), by the detector's rule."""
    models = [load_wake_model(p) for p in paths]
    tr = score_tracks(WakeScorer(models), [(audio, 16000)])[0]
    out = []
    for k, m in enumerate(models):
        out += [(m.keyword, f, float(tr[f, k])) for f in detect_frames(tr[:, k], threshold, seconds_to_frames(1.0, 0.08))]
    return sorted(out, key=lambda d: (d[1], d[0])), models


def test_the_engine_holds_each_detection_until_its_audio_after_and_sends_the_samples_around_it(tiny_ckpt, wake_files):
    audios = [_audio(7, 1), _audio(5, 2)]
    rec = Recognizer(load_checkpoint(tiny_ckpt, "cpu"), _cfg(wake_files))
    ids, events = _run(rec, audios, pieces_seed=4)
    for sid, a in zip(ids, audios):
        want, models = _offline(wake_files, a, 0.3)
        own = {m.keyword: m.threshold for m in models}
        mine = [e for e in events if e.stream == sid]
        wakes = sorted([e for e in mine if isinstance(e, WakeWord) and e.keyword in KW],
                       key=lambda w: (w.end, w.keyword))
        assert [(w.keyword, round(w.end / 0.08) - 1) for w in wakes] == [(k, f) for k, f, _ in want]  # fired at 0.3
        assert want, "the test audio must make the heads fire"
        for w, (_, _, score) in zip(wakes, want):
            assert w.verification == "pending" and abs(w.score - score) < 1e-4
            lo, hi = verify_span(w.end, 2.0, 0.5)
            assert np.array_equal(w.check.audio, a[lo:min(hi, a.size)])  # the stream's own samples, no padding
            assert w.check.min_gap == -8.0 and w.check.standalone == (w.score >= own[w.keyword])
        assert isinstance(mine[-1], Done)
    # each pending detection comes once its 0.5 s after are in, not before: fed in 0.1 s pieces
    rec = Recognizer(load_checkpoint(tiny_ckpt, "cpu"), _cfg(wake_files))
    sid, a, seen, got = rec.create_stream(), audios[0], 0, []
    for i in range(0, a.size, 1600):
        rec.accept_audio(sid, a[i:i + 1600])
        seen = min(a.size, i + 1600)
        got += [(w, seen) for w in rec.drain() if isinstance(w, WakeWord) and w.keyword in KW]
    rec.finish(sid)
    got += [(w, a.size) for w in rec.drain() if isinstance(w, WakeWord) and w.keyword in KW]
    ends = [verify_span(w.end, 2.0, 0.5)[1] for w, _ in got]
    assert got and all(seen >= min(b, a.size) for (_, seen), b in zip(got, ends))  # never before its audio came
    assert any(b < a.size - 16000 and seen < a.size for (_, seen), b in zip(got, ends))  # not all at the end


def test_without_verify_the_model_fires_at_its_own_threshold_and_nothing_waits(tiny_ckpt, wake_files):
    a = _audio(6, 1)
    cfg = from_dict(EngineConfig, {"num_threads": 1, "kws": {"wake_models": wake_files, "embedding_precision": "float32"}})
    _, events = _run(Recognizer(load_checkpoint(tiny_ckpt, "cpu"), cfg), [a])
    wakes = [e for e in events if isinstance(e, WakeWord) and e.keyword in KW]
    assert wakes and all(w.verification is None and w.check is None for w in wakes)
    assert all(w.score >= load_wake_model(p).threshold for w in wakes for p in wake_files
               if load_wake_model(p).keyword == w.keyword)


def _pending(score=0.5, standalone=True, n=16000):
    return WakeWord(3, "hey jarvis", score, 1.0, 1.2, "pending",
                    check=WakeCheck(np.full(n, 0.1, np.float32), -8.0, standalone))


def test_the_second_pass_verifies_by_the_gap_and_falls_back_to_the_models_own_threshold():
    model = GapRecognizer(lambda audio: -8.0 if audio.size == 16000 else -8.01)
    sp = SecondPass(model)
    ok = sp.verify(_pending())
    assert (ok.verification, ok.verifier_gap, ok.check, ok.stands) == ("verified", -8.0, None, True)
    assert model.heard[-1][0][0] == "hey jarvis" and model.heard[-1][1].size == 16000  # the keyword among the rivals
    no = sp.verify(_pending(n=15999))
    assert (no.verification, no.verifier_gap, no.stands) == ("rejected", -8.01, False)
    plain = WakeWord(3, "hey jarvis", 0.9, 1.0, 1.2)
    assert sp.verify(plain) is plain  # not pending: untouched
    # a model that raises, or one that scores no texts: the model's own threshold decides
    broken = GapRecognizer(lambda audio: 1 / 0)
    assert SecondPass(broken).verify(_pending()).verification == "failed"
    assert SecondPass(broken).verify(_pending(standalone=False)).verification == "unverified"
    assert SecondPass(FakeRecognizer()).verify(_pending()).verification == "failed"
    assert fallback(_pending(), "skipped_overload").stands and not fallback(_pending(standalone=False), "x").stands
    # in line (transcribe, eval): rejected detections are left out, the rest in order
    evs = sp.apply_events([_pending(n=15999), Partial(3, "a", (), 0.0, 0.0), _pending()])
    assert [type(e).__name__ for e in evs] == ["Partial", "WakeWord"] and evs[1].verification == "verified"


def test_the_gate_delivers_a_wake_only_if_it_stands_and_keeps_the_streams_order():
    submitted, skipped = [], []
    ok = [True]
    gate = FinalGate(lambda key, ev: ok[0] and not submitted.append((key, ev)),
                     on_skip=lambda key, ev: skipped.append(ev))
    p = Partial(3, "a", (), 0.0, 0.0)
    assert gate.route(3, _pending()) == [] and gate.waiting(3)
    assert gate.route(3, p) == [] and gate.route(4, p) == [(4, p)]  # other streams pass freely
    rejected = dataclasses.replace(_pending(), verification="rejected", verifier_gap=-20.0, check=None)
    assert gate.resolved(3, rejected) == [(3, p)] and not gate.waiting(3)
    assert gate.route(3, _pending()) == []
    second = _pending()
    assert gate.route(3, second) == []
    verified = dataclasses.replace(_pending(), verification="verified", verifier_gap=0.0, check=None)
    assert gate.resolved(3, verified) == [(3, verified)] and gate.waiting(3)  # the next pending one went on
    assert len(submitted) == 3 and submitted[-1][1] is second
    ok[0] = False  # the queue is full: the model's own threshold decides, and says so
    gate.resolved(3, verified)
    out = gate.route(3, _pending(standalone=False)) + gate.route(3, _pending())
    assert [e.verification for _, e in out] == ["skipped_overload"]
    assert [e.verification for e in skipped] == ["unverified", "skipped_overload"]


def test_verify_needs_a_second_pass_that_scores_texts(wake_files):
    with pytest.raises(ConfigError, match="kws.verify.*needs a second pass"):
        from_dict(EngineConfig, {"kws": {"wake_models": wake_files, "verify": True}})
    with pytest.raises(ConfigError, match="verify_wake_threshold"):
        _cfg(wake_files, verify_wake_threshold=1.5)
    cfg = _cfg(wake_files, second="whisper-tiny.en")
    with pytest.raises(ValueError, match="scores no texts"):
        check_verifier(cfg, SecondPass(FakeRecognizer()))
    sp = SecondPass(GapRecognizer())
    assert check_verifier(cfg, sp) is sp


def test_the_daemon_sends_only_verified_wakes_and_counts_every_outcome(tiny_ckpt, wake_files):
    """Two streams of the same audio: one verifier accepts everything (every detection sent, ``verified``
    with its gap), the other rejects everything (no wake event); the stream's partials, final and done come."""
    from streamd.server.app import App

    audio = pcm16(_audio(6, 1))
    cfg = app_config(engine={"kws": {"wake_models": wake_files, **VERIFY},
                             "second_pass": {"model": "gap-model", "warp": 1.0}}, limits={"max_load": 0})
    rec = Recognizer.from_checkpoint(tiny_ckpt, cfg.engine)

    async def stream(port):
        async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start"}))
            for i in range(0, len(audio), 3200):
                await ws.send(audio[i:i + 3200])
            await ws.send('{"type": "eof"}')
            return await drain(ws)

    async def body(gap):
        async with App(cfg, recognizer=rec, second_pass=SecondPass(GapRecognizer(lambda a: gap), cfg.engine.second_pass)) as app:
            msgs = await stream(app.port)
            _, _, metrics = await http_get(app.port, "/metrics")
            return msgs, metrics.decode()

    msgs, metrics = run(body(0.0))
    wakes = [m for m in msgs if m["type"] == "wake" and m["keyword"] in KW]  # (the model's own head: not verified)
    assert wakes and all(m["verification"] == "verified" and m["verifier_gap"] == 0.0 for m in wakes)
    assert [m["type"] for m in msgs][-2:] == ["final", "done"]
    assert f'streamd_wake_verifications_total{{keyword="{wakes[0]["keyword"]}",outcome="verified"}}' in metrics
    msgs, metrics = run(body(-30.0))
    assert not [m for m in msgs if m["type"] == "wake" and m["keyword"] in KW] and [m["type"] for m in msgs][-1] == "done"
    assert 'outcome="rejected"' in metrics and 'outcome="verified"' not in metrics


def test_transcribe_verifies_in_line_and_prints_only_the_wakes_that_stand(tiny_ckpt, wake_files, tmp_path, capsys,
                                                                          monkeypatch):
    """``streamd transcribe --wake-model ... --verify-wake --second-pass NAME``: the second pass (a double here)
    verifies each detection before it is printed; a model that scores no texts is refused (status 2)."""
    import streamd.second_pass.calibration as calibration
    from helpers import write_wav
    from streamd.cli import main

    wav = write_wav(tmp_path / "a.wav", _audio(6, 1))
    args = ["transcribe", str(wav), "--model", tiny_ckpt, "--device", "cpu", "--json", "--wake-model", *wake_files,
            "--verify-wake", "--second-pass", "moonshine-base-so762"]
    for gap, verified in ((0.0, True), (-30.0, False)):
        monkeypatch.setattr(calibration, "load_second_pass",
                            lambda cfg, hotwords=(), first=False, g=gap: SecondPass(GapRecognizer(lambda a: g), cfg))
        assert main(args) == 0
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        wakes = [m for m in out if m["type"] == "wake" and m["keyword"] in KW]
        assert bool(wakes) == verified and all(m["verification"] == "verified" for m in wakes)
        assert out[-1]["type"] == "done"
    monkeypatch.setattr(calibration, "load_second_pass", lambda cfg, hotwords=(), first=False:
                        SecondPass(FakeRecognizer(), cfg))
    assert main(args) == 2 and "scores no texts" in capsys.readouterr().err


def test_keyword_rivals_put_the_keyword_in_place_of_the_spans_most_alike_it():
    from streamd.second_pass.models import keyword_rivals

    assert keyword_rivals("", "hey savant") == ["hey savant"]
    got = keyword_rivals("High stream play some music in the.", "hey stream")
    assert got[0] == "hey stream" and got[1] == "hey stream play some music in the." and len(got) == 4
    assert all(g.endswith("in the.") for g in got[1:])  # the rest of the text kept, its punctuation too
    assert keyword_rivals("Okay, Amelia, what time is it?", "amelia")[1] == "Okay, amelia, what time is it?"
    assert keyword_rivals("Hey Savant.", "hey savant", spans=1) == ["hey savant", "hey savant."]
