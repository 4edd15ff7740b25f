"""streamd transcribe / model-info through main()."""

import json

import pytest

from helpers import random_audio
from streamd.cli import main
from streamd.feed import transcribe_files
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from helpers import write_wav


@pytest.fixture()
def wavs(tmp_path):
    return [write_wav(tmp_path / "a.wav", random_audio(1.7, seed=1), 16000),
            write_wav(tmp_path / "b.wav", random_audio(1.1, rate=8000, seed=2), 8000)]


def test_transcribe_json_events(tiny_ckpt, wavs, capsys):
    assert main(["transcribe", *wavs, "--model", tiny_ckpt, "--json", "--device", "cpu"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for w in wavs:
        mine = [d for d in lines if d["file"] == w]
        types = [d["type"] for d in mine]
        assert "partial" in types and types[-2:] == ["final", "done"]
        fin = [d for d in mine if d["type"] == "final"][-1]
        assert set(fin) >= {"segment", "text", "words", "start", "end"}
        for word in fin["words"]:
            assert set(word) == {"word", "start", "end", "conf", "conf_raw"}


def test_transcribe_text_matches_engine(tiny_ckpt, wavs, capsys):
    assert main(["transcribe", *wavs, "--model", tiny_ckpt, "--method", "modified_beam", "--beam", "3"]) == 0
    out = dict(line.split("\t", 1) if "\t" in line else (line, "") for line in capsys.readouterr().out.splitlines())
    from streamd.config import DecodingConfig
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu",
                                                             decoding=DecodingConfig(method="modified_beam", beam=3)))
    ev = transcribe_files(rec, wavs)
    for w in wavs:
        text = " ".join(e.text for e in ev[w] if type(e).__name__ == "Final" and e.text)
        assert out[w] == text


def test_missing_file_and_model(tiny_ckpt, tmp_path, capsys):
    assert main(["transcribe", str(tmp_path / "nope.wav"), "--model", tiny_ckpt]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["transcribe", str(tmp_path / "nope.wav"), "--model", str(tmp_path / "missing.pt")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_model_info(tiny_ckpt, capsys):
    assert main(["model-info", tiny_ckpt]) == 0
    out = capsys.readouterr().out
    assert "parameters:" in out and "hey stream" in out
    assert main(["model-info", tiny_ckpt, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tokens"] == 29 and info["model_config"]["encoder"]["chunk_size"] == 4


def test_model_info_summarizes_a_calibration(tiny_ckpt, tmp_path, capsys):
    from streamd.decode.calibration import Calibration
    from streamd.model.checkpoint import copy_with_meta

    cal = Calibration((0.1, 0.5), (0.2, 0.9), "max_prob", 1.0, "mean", words=40)
    copy_with_meta(tiny_ckpt, tmp_path / "c.pt", {"calibration": cal.to_dict()})
    assert main(["model-info", str(tmp_path / "c.pt")]) == 0
    assert "meta.calibration: isotonic, 2 knots, for max_prob alpha 1.0 mean, exclude_blank true (fitted on 40 words)" \
        in capsys.readouterr().out


def test_delegated_commands_have_help(capsys):
    for name in ("train", "average", "calibrate", "eval"):
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        assert f"usage: streamd {name}" in capsys.readouterr().out


def test_version(capsys):
    from importlib.metadata import version

    import streamd

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamd {streamd.__version__}"
    assert version("streamd") == streamd.__version__  # the package metadata reads the same constant


def test_every_delegated_module_has_a_main():
    import importlib.util

    from streamd.cli import DELEGATED

    for name, (module, _) in DELEGATED.items():
        assert importlib.util.find_spec(module) is not None, name
    from streamd.evaluation.command import main as eval_main

    assert callable(eval_main)


@pytest.mark.parametrize("module", ["streamd", "streamd.cli"])
def test_python_m_entry_points(module):
    """``python -m streamd`` and ``python -m streamd.cli`` are both the ``streamd`` command."""
    import subprocess
    import sys

    import streamd

    r = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"streamd {streamd.__version__}"
    r = subprocess.run([sys.executable, "-m", module, "transcribe"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "usage: streamd transcribe" in r.stderr
