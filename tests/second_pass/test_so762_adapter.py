"""The shipped ``moonshine-base-so762``: its adapter file matches the installed Moonshine base and loads as a
second-pass model (int8 decoder) that recognizes speech; adapters made for other files or naming weights the
model lacks are refused (skipped without moonshine-cpp, onnx, onnxruntime)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from streamd.paths import ASSETS

missing = [m for m in ("onnxruntime", "onnx", "moonshine_cpp") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: pip install -e '.[all]'")

SAMPLES = ASSETS / "samples"


def test_the_shipped_adapted_model_loads_and_foreign_adapters_are_refused(tmp_path):
    from streamd.audio.resample import load_audio_at
    from streamd.second_pass.adapter import save_adapter
    from streamd.second_pass.models import _moonshine_dir, load_recognizer, moonshine_file_sizes
    rec = load_recognizer("moonshine-base-so762", cpu_threads=1, int8=True)
    assert rec.name == "moonshine-base-so762" and rec.int8
    rows = [json.loads(line) for line in (SAMPLES / "samples.jsonl").read_text().splitlines() if line.strip()]
    lights = next(r for r in rows if r["audio"] == "lights.wav")
    text = rec.recognize(load_audio_at(SAMPLES / lights["audio"], 16000)).text.lower()
    assert "kitchen" in text and "lights" in text, text
    sizes = moonshine_file_sizes(_moonshine_dir())
    w = (np.zeros((416, 1), np.float32), np.zeros((1, 416), np.float32))
    save_adapter(tmp_path / "other.adapter.npz", {"onnx::MatMul_1947": w},
                 {"base": "moonshine-base", "files": {k: v + 1 for k, v in sizes.items()}})
    with pytest.raises(ValueError, match="made for"):
        load_recognizer(str(tmp_path / "other.adapter.npz"))
    save_adapter(tmp_path / "nope.adapter.npz", {"no such weight": w}, {"base": "moonshine-base", "files": sizes})
    with pytest.raises(ValueError, match="does not have"):
        load_recognizer(str(tmp_path / "nope.adapter.npz"))
