"""``--second-pass`` on the commands: a model that is neither a known name nor a model folder is a clear error
(status 2) naming what is wrong, before anything is decoded; ``none`` is off."""

from __future__ import annotations

import json

import pytest

from helpers import random_audio, write_wav
from streamd.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_bad_second_pass_model_is_a_clear_error(tiny_ckpt, tmp_path, capsys):
    wav = write_wav(tmp_path / "a.wav", random_audio(0.5))
    assert main(["transcribe", str(wav), "--model", tiny_ckpt, "--device", "cpu", "--second-pass",
                 str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "neither a known name" in err and "moonshine-base" in err
    (tmp_path / "empty").mkdir()
    assert main(["transcribe", str(wav), "--model", tiny_ckpt, "--device", "cpu", "--second-pass",
                 str(tmp_path / "empty")]) == 2
    assert "no model.bin" in capsys.readouterr().err


def test_second_pass_none_is_off(tiny_ckpt, tmp_path, capsys):
    wav = write_wav(tmp_path / "a.wav", random_audio(0.5))
    assert main(["transcribe", str(wav), "--model", tiny_ckpt, "--device", "cpu", "--json",
                 "--second-pass", "none"]) == 0
    finals = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"final"' in line]
    assert finals and all(f["pass"] == 1 and "second_pass" not in f for f in finals)
