"""streamd.paths: where the package's own files are (the shipped model, its sample recordings), and the
model argument's fallback to the shipped model."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import streamd
from streamd import paths


def test_everything_lives_in_the_package():
    pkg = Path(streamd.__file__).resolve().parent
    assert paths.ASSETS == pkg / "assets"
    assert paths.default_model_path() == paths.ASSETS / "default.pt" and paths.default_model_path().is_file()
    assert paths.default_samples() == paths.ASSETS / "samples" / "samples.jsonl" and paths.default_samples().is_file()


def test_the_samples_manifest_names_its_recordings():
    rows = [json.loads(line) for line in paths.default_samples().read_text(encoding="utf-8").splitlines() if line]
    assert rows and all((paths.default_samples().parent / r["audio"]).is_file() for r in rows)
    bench = paths.default_bench_audio()
    assert bench == sorted(bench) and bench and all(b.endswith(".wav") and Path(b).is_file() for b in bench)
    assert all(Path(b).parent == paths.default_samples().parent for b in bench)
    assert {Path(b).name for b in bench} >= {Path(r["audio"]).name for r in rows if r["audio"].endswith(".wav")}


def test_model_arg_falls_back_to_the_shipped_model(monkeypatch, tmp_path):
    assert paths.model_arg("some/where.pt") == "some/where.pt"  # given: as it is, checked by whoever loads it
    assert paths.model_arg(None) == paths.model_arg("") == str(paths.default_model_path())
    monkeypatch.setattr(paths, "default_model_path", lambda: tmp_path / "gone.pt")
    with pytest.raises(SystemExit) as e:
        paths.model_arg(None)
    assert "no model given and no default model at" in str(e.value) and "--model" in str(e.value)
    assert str(tmp_path / "gone.pt") in str(e.value)


def test_a_ground_floor_module():
    """Importing it reads nothing and loads nothing heavy (every command, the server and the benchmarks use it)."""
    code = "import sys, streamd.paths; bad = [m for m in ('torch', 'numpy', 'streamd.engine') if m in sys.modules]; " \
           "assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)
