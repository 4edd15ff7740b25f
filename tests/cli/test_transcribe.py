"""streamd.cli.transcribe: ``streamd transcribe FILE...`` through main() (JSON events, text equal to the
engine's, clear errors for a missing file or model)."""

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
