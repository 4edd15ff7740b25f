"""``streamd wake train``: confusable phrases, which real files may be negatives, window labels, the detection
rule of the threshold choice, and a tiny end-to-end run (TTS needed) whose file loads as a wake model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import write_wav
from streamd.model.wake import load_wake_model
from streamd.cli.wake import wake_main
from streamd.train import wake as W


def test_confusable_phrases_are_never_the_keyword():
    rng = np.random.default_rng(0)
    out = W.confusable_phrases("hey jarvis", rng, 200)
    assert len(out) == 200
    assert "hey jarvis" not in {p.casefold() for p in out}
    assert {"hey", "jarvis", "jarvis hey"} <= set(out)
    assert any(p.startswith("hey ") and p != "hey jarvis" and p.endswith("arvis") for p in out)


def _fake_real(root):
    lines = {
        "speech_commands/train": [{"audio": "yes/a.wav", "text": "yes"}, {"audio": "_silence_/n.wav", "text": "",
                                                                           "noise": True}],
        "speech_commands/dev": [{"audio": "yes/d.wav", "text": "yes"}],
        "speechocean762/train": [{"audio": "s/b.wav", "text": "we say hey jarvis now"},
                                 {"audio": "s/c.wav", "text": "hello there"}],
        "librispeech_unlabeled": [{"audio": "librispeech_train-clean-100/x.wav"},
                                  {"audio": "librispeech_test-other/y.wav"}],
        "mycroft": [{"audio": "wake/m.wav", "text": "hey jarvis", "keyword": "hey jarvis"}],
    }
    rng = np.random.default_rng(1)
    for sub, objs in lines.items():
        d = root / sub
        for o in objs:
            (d / o["audio"]).parent.mkdir(parents=True, exist_ok=True)
            write_wav(d / o["audio"], (0.1 * rng.standard_normal(16000)).astype(np.float32))
        (d / "manifest.jsonl").write_text("".join(json.dumps(o) + "\n" for o in objs))
    return root


def test_real_negatives_come_from_training_splits_only(tmp_path):
    files = W.real_negative_files("Hey  Jarvis", _fake_real(tmp_path))
    names = [n for _, n in files["speech"]]
    assert names == ["speech_commands/train/yes/a.wav", "speechocean762/train/s/c.wav",
                     "librispeech_unlabeled/librispeech_train-clean-100/x.wav"]
    assert [n for _, n in files["noise"]] == ["speech_commands/train/_silence_/n.wav"]


def test_window_labels():
    pos, neg = W._labels(40, start=16000, end=24000)
    ends = (np.arange(40) + 1) * 1280
    assert pos.any() and np.all((ends[pos] >= 24000) & (ends[pos] <= 24000 + 0.32 * 16000))
    assert np.all(ends[neg] <= 20000) and not (pos & neg).any()


def test_detection_rule_counts_refractory():
    s = np.zeros(60)
    s[[5, 6, 10, 30]] = 0.9       # 5 fires; 6 and 10 are within 1 s (12.5 frames); 30 fires again
    assert W._detections(s, 0.5) == 2
    det = W.det_curve(np.array([0.95, 0.4]), [s], 1.0, [0.5, 0.95])
    assert det == [[0.5, 0.5, 2.0], [0.95, 0.5, 0.0]]


def test_train_end_to_end(tmp_path, monkeypatch):
    from streamd.train.tts import list_voices
    if not list_voices():
        pytest.skip("no TTS engine installed (espeak-ng, flite, festival or piper-tts)")
    monkeypatch.setenv("STREAMD_SHARED", str(tmp_path / "shared"))
    _fake_real(tmp_path / "shared" / "real")
    W._REAL_CACHE.clear()
    out = tmp_path / "m.wake.pt"
    rc = wake_main(["train", "hey jarvis", "--out", str(out), "--tts-positives", "4", "--copies", "1",
                 "--tts-negatives", "4", "--real-negatives", "3", "--epochs", "1", "--workers", "1"])
    assert rc == 0
    m = load_wake_model(out)
    assert m.keyword == "hey jarvis" and 0 < m.threshold < 1
    assert m.info["data"]["real_negative_files"] >= 1 and m.info["det"]
    assert all(not s.startswith("real/mycroft") for s in m.info["data"]["sources"])


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        wake_main(["train", "a", "b", "--out", "x.pt"])
    assert "--out names one file" in capsys.readouterr().err
    assert wake_main(["train", "hey 7"]) == 2
