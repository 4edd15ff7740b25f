"""openWakeWord's models as peers (streamd.evaluation.oww): the counting glue on fake score tracks (no
openwakeword needed), and the real package on a short clip where it is installed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from streamd.cli import main as cli_main
from streamd.evaluation.oww import (OWW_FRAME_SAMPLES, OWW_PIP, OWW_THRESHOLD, OwwScorer, PeerWakeModel, oww_keyword,
                                    pcm16, peer_figures, prediction_track)
from streamd.evaluation.sets import EvalEntry


def _entry(name: str, keyword: str | None, text: str = "") -> EvalEntry:
    return EvalEntry(audio=name, rel_audio=name, text=text or (keyword or ""), keyword=keyword)


def test_keyword_names_and_pcm():
    assert oww_keyword("/x/hey_mycroft_v0.1.onnx") == "hey mycroft"
    assert oww_keyword("alexa_v0.1.tflite") == "alexa"
    assert oww_keyword("my_word.onnx") == "my word"
    x = np.array([-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0])
    assert pcm16(x).tolist() == [-32767, -32767, -16384, 0, 8192, 32767, 32767]
    assert pcm16(x).dtype == np.int16
    preds = [{"a": 0.0, "b": 0.1}, {"a": 0.9, "b": 0.2}]
    t = prediction_track(preds, ["b", "a"])
    assert t.shape == (2, 2) and t.dtype == np.float32 and np.allclose(t[:, 1], [0.0, 0.9])
    assert prediction_track([], ["a"]).shape == (0, 1)


def test_peer_figures_count_as_the_trained_models_do():
    """Positives: detected when the score reaches the threshold once; negatives: every firing at least the
    refractory window (1 s = 12.5 -> 13 frames of 80 ms) after the last one is a false alarm."""
    m = PeerWakeModel("hey mycroft", "hey_mycroft_v0.1.onnx")
    assert m.threshold == OWW_THRESHOLD == 0.5
    ents = [_entry("p1", "hey mycroft"), _entry("p2", "Hey  Mycroft"), _entry("o", "athena"),
            _entry("n1", None, "turn on the lights"), _entry("n2", None, "hey mycroft what time is it")]
    z = np.zeros((40, 1), np.float32)
    p1 = z.copy(); p1[10, 0] = 0.7                  # detected at 0.5
    p2 = z.copy(); p2[12, 0] = 0.4                  # missed at 0.5, detected at 0.4
    other = z.copy(); other[5, 0] = 0.99            # a positive of another keyword: ignored
    n1 = z.copy(); n1[[3, 8, 21, 30], 0] = [0.9, 0.95, 0.6, 0.45]  # 8 is 5 frames after 3: one firing; 21: two
    n2 = z.copy(); n2[4, 0] = 0.99                  # its text holds the keyword: not a negative
    secs = [1.0, 1.0, 1.0, 1800.0, 1800.0]
    figs = peer_figures([m], ents, [p1, p2, other, n1, n2], secs, 1.0)["hey mycroft"]
    assert (figs["positives"], figs["negatives"], figs["negative_hours"]) == (2, 1, 0.5)
    assert (figs["threshold"], figs["missed"], figs["frr"], figs["false_alarms"], figs["fa_per_hour"]) == (
        0.5, 1, 0.5, 2, 4.0)
    at = {s["threshold"]: s for s in figs["sweep"]}
    assert (at[0.4]["missed"], at[0.4]["false_alarms"]) == (0, 2)   # 0.45 at frame 30: 9 frames after 21
    assert (at[0.45]["missed"], at[0.45]["false_alarms"]) == (1, 2)
    assert (at[0.7]["missed"], at[0.7]["false_alarms"]) == (1, 1)
    assert (at[0.71]["missed"], at[0.71]["false_alarms"]) == (2, 1)
    assert (at[0.96]["missed"], at[0.96]["false_alarms"]) == (2, 0)
    # within 0.5 FA/h (no false alarm on 0.5 h) every threshold misses both: the lowest such one, 0.96
    assert figs["frr_at_0.5_fa_per_hour"] == figs["frr_at_1_fa_per_hour"] == {"frr": 1.0, "threshold": 0.96,
                                                                               "fa_per_hour": 0.0}
    # refractory: 13 frames apart is two firings, 12 one
    n3 = z.copy(); n3[[0, 13], 0] = 0.9
    n4 = z.copy(); n4[[0, 12], 0] = 0.9
    f = peer_figures([m], [_entry("a", None, "x"), _entry("b", None, "y")], [n3, n4], [1.0, 1.0], 1.0)
    assert f["hey mycroft"]["false_alarms"] == 3


def test_scorer_names_the_pip_package_when_openwakeword_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "openwakeword", None)
    monkeypatch.setitem(sys.modules, "openwakeword.model", None)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps openwakeword==0\.5\.1"):
        OwwScorer(["hey_mycroft_v0.1.onnx"])


def test_peer_option_is_for_keyword_mode(tmp_path, capsys, monkeypatch):
    assert cli_main(["eval", "--model", "none.pt", "--peer-wake-model", "a.onnx"]) == 2
    assert "--peer-wake-model is for keyword mode" in capsys.readouterr().err
    # keyword mode: the package is checked before anything is decoded
    monkeypatch.setitem(sys.modules, "openwakeword", None)
    monkeypatch.setitem(sys.modules, "openwakeword.model", None)
    s = tmp_path / "s.jsonl"
    s.write_text("")
    assert cli_main(["eval", "--model", "none.pt", "--set", str(s), "--keywords", "x", "--peer-wake-model",
                     "a.onnx"]) == 2
    assert "pip install --no-deps openwakeword" in capsys.readouterr().err


def _oww_models() -> Path:
    if importlib.util.find_spec("openwakeword") is None:
        pytest.skip(f"openwakeword is not installed ({OWW_PIP})")
    try:
        import openwakeword
        import openwakeword.model  # noqa: F401
    except ImportError as e:
        pytest.skip(f"openwakeword does not import here: {e}")
    return Path(openwakeword.__file__).parent / "resources" / "models"


def test_real_openwakeword_model_on_a_short_clip(tmp_path):
    d = _oww_models()
    from openwakeword.model import Model

    from streamd.audio.pcm import load_audio
    from streamd.evaluation.options import EvalOptions
    from streamd.evaluation.oww import run_peer_wake_models
    from streamd.paths import default_samples

    paths = [str(d / "hey_mycroft_v0.1.onnx"), str(d / "alexa_v0.1.onnx")]
    with pytest.raises(ValueError, match="no such file"):
        OwwScorer([str(tmp_path / "hey_nobody_v0.1.onnx")])
    scorer = OwwScorer(paths)
    assert scorer.names == ["hey_mycroft_v0.1", "alexa_v0.1"]
    x, rate = load_audio(str(default_samples().with_name("weather.wav")))
    y, rate_y = load_audio(str(default_samples().with_name("lights.wav")))
    a = scorer.scores(x, rate)
    x16 = x if rate == 16000 else __import__("streamd.audio.resample", fromlist=["resample"]).resample(x, rate, 16000)
    n = len(x16) + 2 * 16000
    assert a.shape == (len(range(0, n - OWW_FRAME_SAMPLES, OWW_FRAME_SAMPLES)), 2)
    assert np.all(a[:5] == 0) and np.all((a >= 0) & (a <= 1))
    scorer.scores(y, rate_y)
    assert np.array_equal(scorer.scores(x, rate), a)  # every file from a fresh Model's state
    # ... which is the state of a Model built afresh (same seed of its random start buffer)
    np.random.seed(0)
    fresh = Model(wakeword_models=paths, inference_framework="onnx")
    own = prediction_track(fresh.predict_clip(pcm16(x16), padding=1, chunk_size=1280), scorer.names)
    assert np.array_equal(own, a)
    # the report of streamd eval --keywords --peer-wake-model on the shipped samples (no Mycroft clip there)
    rep = run_peer_wake_models(paths, [str(default_samples())], EvalOptions(limit=3), 1.0)
    json.dumps(rep)
    assert set(rep["per_model"]) == {"hey mycroft", "alexa"}
    f = rep["per_model"]["hey mycroft"]
    assert f["positives"] == 0 and f["threshold"] == 0.5 and f["negatives"] >= 1
    assert "CC BY-NC-SA" in rep["licence"]
