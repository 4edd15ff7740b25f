"""A wake model's own verifier threshold (:mod:`streamd.train.wake_verifier`): every detection on held-out
training-split negatives is verified on the clip the engine would send, the threshold sits a margin above the
highest gap (at least the floor), the file carries it, and the engine verifies that model's detections at it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamd.cli.wake import wake_main
from streamd.config import EngineConfig, KwsConfig, from_dict
from streamd.decode.endpoint import seconds_to_frames
from streamd.engine import Recognizer
from streamd.evaluation.wake import detect_frames, score_tracks
from streamd.events import WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.model.wake import WakeScorer, load_wake_model, own_gap, save_wake_model, verify_clip
from streamd.train import wake_verifier as wv

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "second_pass"))
from fakes import GapRecognizer  # noqa: E402
from test_wake_models import KW, _audio, _run, wake_files  # noqa: E402,F401 - the module's fixture


def _loudness(audio: np.ndarray) -> float:
    """A verifier double's gap: a function of the clip it hears (so a wrong clip gives another value)."""
    return float(20 * np.log10(np.sqrt(np.mean(audio.astype(np.float64) ** 2)) + 1e-9) + audio.size / 16000)


def test_own_gap_is_a_margin_above_the_ranked_negative_gap_and_at_least_the_floor():
    assert own_gap([-20.0, -7.5, -12.0], floor=-10.0, margin=2.0, rank=1) == -5.5
    assert own_gap([-20.0, -7.5, -12.0], floor=-11.0, margin=2.0, rank=2) == -10.0  # one negative let pass
    assert own_gap([-20.0, -7.5, -12.0], floor=-10.0, margin=2.0, rank=2) == -10.0  # the floor
    assert own_gap([-20.0, -15.0], floor=-10.0, margin=2.0, rank=1) == -10.0
    assert own_gap([], floor=-9.0, margin=2.0) == -9.0  # nothing detected: the floor
    assert own_gap([-3.0], floor=-9.0, margin=2.0, rank=2) == -9.0  # fewer than rank
    assert own_gap([-float("inf")], floor=-9.0, margin=1.0, rank=1) == -9.0  # one the verifier could not score
    with pytest.raises(ValueError, match="rank"):
        own_gap([1.0], rank=0)


def test_negative_gaps_verify_every_detection_on_the_clip_the_engine_sends(wake_files):
    """Oracle: the offline score tracks' detections at the verify threshold (refractory 1 s), each heard on
    verify_clip(...) of its own file."""
    models = [load_wake_model(p) for p in wake_files]
    audio = [_audio(6, 1), _audio(7, 2), _audio(3, 3)]
    kcfg = KwsConfig(verify_wake_threshold=0.3)
    got = wv.negative_gaps(models, audio, GapRecognizer(_loudness), kcfg, batch=3)
    tracks = score_tracks(WakeScorer(models), [(a, 16000) for a in audio])
    ref = seconds_to_frames(1.0, 0.08)
    for k, m in enumerate(models):
        want = [_loudness(verify_clip(a, (f + 1) * 0.08, 2.0, 0.5))
                for a, tr in zip(audio, tracks) for f in detect_frames(tr[:, k], 0.3, ref)]
        assert want, "the test audio must make the heads fire"
        assert got[k] == pytest.approx(want, abs=1e-9)


def test_negative_gaps_need_a_verifier_that_scores_texts(wake_files):
    class Plain:
        scores_rivals = False

    with pytest.raises(ValueError, match="score texts"):
        wv.negative_gaps([load_wake_model(wake_files[0])], [_audio(2, 1)], Plain())


def _shared_tree(root: Path) -> list[str]:
    """A ../shared/real of training splits (and a dev split and mycroft, never read); the names written."""
    names = []
    for sub, prefix in (("speech_commands/train", ""), ("speechocean762/train", ""), ("speech_commands/dev", ""),
                        ("mycroft", "")):
        d = root / sub
        d.mkdir(parents=True)
        lines = []
        for i in range(24):
            name = f"{prefix}c{i}.wav"
            sf.write(d / name, _audio(1.0, i), 16000)
            noise = sub == "speech_commands/train" and i >= 20
            lines.append(json.dumps({"audio": name, "text": None if noise else "hey jarvis" if i == 3 else "go",
                                     **({"noise": True} if noise else {})}))
            names.append(f"{sub}/{name}")
        (d / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return names


def test_held_out_negatives_are_the_training_splits_quarter_held_out_from_training(tmp_path):
    from streamd.train.wake import _held_out, real_negative_files

    _shared_tree(tmp_path)
    got = wv.held_out_negatives("hey jarvis", tmp_path)
    files = real_negative_files("hey jarvis", tmp_path)
    usable = files["speech"] + files["noise"][: len(files["noise"]) // 2]
    assert got == [(p, n) for p, n in usable if _held_out(n)]
    assert got and len(got) < len(usable)
    assert not any(n.startswith(("speech_commands/dev", "mycroft")) for _, n in got)
    assert all("c3.wav" not in n for _, n in files["speech"])  # its text holds the keyword


def test_fit_writes_the_threshold_into_the_file_and_the_engine_verifies_that_model_at_it(tmp_path, wake_files,
                                                                                      tiny_ckpt, monkeypatch):
    _shared_tree(tmp_path / "real")
    paths = [str(tmp_path / Path(p).name) for p in wake_files]
    for src, dst in zip(wake_files, paths):
        shutil.copy(src, dst)
    verifier = GapRecognizer(_loudness)
    monkeypatch.setattr("streamd.second_pass.models.load_recognizer", lambda name, **kw: verifier)
    kcfg = KwsConfig(verify_wake_threshold=0.3)
    recs = wv.fit_verifier_gaps(paths[:1], "gap-model", floor=-30.0, margin=1.5, rank=1, kcfg=kcfg,
                                root=tmp_path / "real")
    m = load_wake_model(paths[0])
    files = wv.held_out_negatives(m.keyword, tmp_path / "real")
    audio = [sf.read(p, dtype="float32")[0] for p, _ in files]
    gaps = wv.negative_gaps([m], audio, GapRecognizer(_loudness), kcfg)[0]
    assert gaps, "the held-out files must make the head fire"
    assert m.verify_gap == pytest.approx(max(-30.0, max(gaps) + 1.5))
    assert recs[0]["detections"] == len(gaps) and recs[0]["negative_files"] == len(files)
    assert m.info["verifier"]["top_negative_gaps"] == pytest.approx(sorted(gaps, reverse=True)[:10], abs=1e-4)
    assert {k: v for k, v in m.info.items() if k != "verifier"} == load_wake_model(wake_files[0]).info  # kept
    assert load_wake_model(paths[1]).verify_gap is None  # only the files named
    # the engine: that model's detections carry its own threshold, the other's the config's
    cfg = from_dict(EngineConfig, {"num_threads": 1, "second_pass": {"model": "gap-model"},
                                   "kws": {"wake_models": paths, "verify": True, "verify_wake_threshold": 0.3,
                                           "verify_gap": -8.0, "embedding_precision": "float32"}})
    _, events = _run(Recognizer(load_checkpoint(tiny_ckpt, "cpu"), cfg), [_audio(7, 1), _audio(5, 2)])
    wakes = [e for e in events if isinstance(e, WakeWord) and e.keyword in KW]
    assert {w.keyword for w in wakes} == set(KW)
    assert all(w.check.min_gap == (m.verify_gap if w.keyword == m.keyword else -8.0) for w in wakes)


def test_a_wake_model_file_keeps_its_verifier_threshold_and_refuses_a_bad_one(tmp_path, wake_files):
    m = load_wake_model(wake_files[0])
    p = tmp_path / "own.wake.pt"
    save_wake_model(p, m.keyword, m.threshold, m.head, {"verifier": {"floor": -10.0}}, verify_gap=-6.25)
    back = load_wake_model(p)
    assert back.verify_gap == -6.25 and back.info["verifier"] == {"floor": -10.0}
    assert load_wake_model(wake_files[0]).verify_gap is None  # files without one
    import torch

    blob = torch.load(p, weights_only=True)
    blob["verify_gap"] = "high"
    torch.save(blob, p)
    with pytest.raises(ValueError, match="verify_gap"):
        load_wake_model(p)


def test_the_verifier_gap_command_refuses_what_it_cannot_use(tmp_path, capsys):
    with pytest.raises(SystemExit):
        wake_main(["verifier-gap", str(tmp_path / "x.wake.pt")])  # no --second-pass
    assert "--second-pass" in capsys.readouterr().err
    assert wake_main(["verifier-gap", str(tmp_path / "missing.wake.pt"), "--second-pass", "moonshine-base"]) == 2
    assert "wake model not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        wake_main(["verifier-gap", "a.wake.pt", "--second-pass", "x", "--margin", "-1"])
    assert "--margin" in capsys.readouterr().err


def test_wake_train_refuses_a_verifier_that_scores_no_texts_before_training(monkeypatch, capsys):
    class Plain:
        scores_rivals = False

    monkeypatch.setattr("streamd.second_pass.models.load_recognizer", lambda name, **kw: Plain())

    def never(*a, **k):
        raise AssertionError("trained before the verifier was checked")

    monkeypatch.setattr("streamd.train.wake.train_wake_model", never)
    assert wake_main(["train", "hey jarvis", "--verifier", "whisper-tiny.en"]) == 2
    assert "must score texts" in capsys.readouterr().err


def test_the_engine_warns_when_a_files_threshold_was_measured_at_another_wake_threshold(tmp_path, wake_files,
                                                                                      tiny_ckpt, caplog):
    m = load_wake_model(wake_files[0])
    p = tmp_path / "own.wake.pt"
    save_wake_model(p, m.keyword, m.threshold, m.head, {"verifier": {"wake_threshold": 0.05}}, verify_gap=-9.0)

    def engine(fires_at: float) -> None:
        cfg = from_dict(EngineConfig, {"num_threads": 1, "second_pass": {"model": "gap-model"},
                                       "kws": {"wake_models": [str(p)], "verify": True,
                                               "verify_wake_threshold": fires_at}})
        Recognizer(load_checkpoint(tiny_ckpt, "cpu"), cfg)

    with caplog.at_level("WARNING", logger="streamd.engine"):
        engine(0.05)
        assert not [r for r in caplog.records if "measured at wake threshold" in r.getMessage()]
        engine(0.3)
    assert [r for r in caplog.records if "measured at wake threshold 0.05" in r.getMessage()]
