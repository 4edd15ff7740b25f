"""streamd.cli.transcribe: ``streamd transcribe FILE...`` through main() (JSON events, one line per final as
the engine decodes it, any sample rate, one bad file among good ones, files checked before the model loads,
the progress line only on a terminal, hotwords choosing their search)."""

import io
import json

import pytest

from helpers import random_audio
from streamd.cli import main
from streamd.cli.transcribe import Progress, final_line
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


def _finals(events):
    return [e for e in events if type(e).__name__ == "Final" and e.text]


def test_transcribe_prints_one_line_per_final_with_its_times(tmp_path, capsys):
    """Plain output: every non-empty final of the engine, one line each, ``[start-end] text`` (after the path
    and a tab with several files), in the order the engine emits them (the shipped model on two of its sample
    recordings joined by a pause: an endpoint, two finals)."""
    import numpy as np

    from streamd.audio.pcm import load_audio
    from streamd.paths import default_model_path, default_samples

    samples = sorted(default_samples().parent.glob("*.wav"))[:3]
    (a, rate), (b, _), (c, _) = (load_audio(p) for p in samples)
    joined = np.concatenate([a, np.zeros(2 * rate, np.float32), b])
    wavs = [write_wav(tmp_path / "joined.wav", joined, rate), write_wav(tmp_path / "c.wav", c, rate)]
    ckpt = str(default_model_path())
    ev = transcribe_files(Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu")), wavs)
    assert len(_finals(ev[wavs[0]])) >= 2, "two finals expected from the joined recordings"
    assert main(["transcribe", *wavs, "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for w in wavs:
        assert [line for line in lines if line.startswith(w + "\t")] == [final_line(e, w) for e in _finals(ev[w])]
    assert main(["transcribe", wavs[0], "--device", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [final_line(e) for e in _finals(ev[wavs[0]])]
    assert final_line(_finals(ev[wavs[0]])[0]).startswith("[   0.")


def test_transcribe_text_matches_engine(tiny_ckpt, wavs, capsys):
    assert main(["transcribe", *wavs, "--model", tiny_ckpt, "--method", "modified_beam", "--beam", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    from streamd.config import DecodingConfig
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu",
                                                             decoding=DecodingConfig(method="modified_beam", beam=3)))
    ev = transcribe_files(rec, wavs)
    for w in wavs:
        assert [line for line in out if line.startswith(w + "\t")] == [final_line(e, w) for e in _finals(ev[w])]


def test_any_sample_rate_and_a_bad_file_among_good_ones(tiny_ckpt, tmp_path, capsys):
    """A 96 kHz file is decoded (resampled once to 16 kHz); a missing and a truncated file are errors naming
    them, the other files still get their results, and the status says so at the end (2)."""
    x = random_audio(1.5, rate=96000, seed=5)
    hi = write_wav(tmp_path / "x_96k.wav", x, 96000)
    ok = write_wav(tmp_path / "ok.wav", random_audio(1.2, seed=6), 16000)
    full = (tmp_path / "ok.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(full[:len(full) // 2])
    args = [hi, str(tmp_path / "nope.wav"), str(tmp_path / "cut.wav"), ok]
    assert main(["transcribe", *args, "--model", tiny_ckpt, "--json"]) == 2
    out, err = capsys.readouterr()
    done = {d["file"]: d for d in map(json.loads, out.splitlines()) if d["type"] == "done"}
    assert set(done) == {hi, ok}
    assert done[hi]["audio_seconds"] == pytest.approx(1.5, abs=0.01)
    assert "nope.wav" in err and "no such file" in err
    assert "cut.wav" in err and "truncated WAV" in err
    assert "8000..48000" not in err


def test_files_are_checked_before_the_model_loads(tiny_ckpt, wavs, tmp_path, capsys):
    assert main(["transcribe", str(tmp_path / "nope.wav"), "--model", tiny_ckpt]) == 2
    assert "no such file" in capsys.readouterr().err
    # only the file's error: the (missing) model was never loaded
    assert main(["transcribe", str(tmp_path / "nope.wav"), "--model", str(tmp_path / "missing.pt")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "checkpoint" not in err
    assert main(["transcribe", wavs[0], "--model", str(tmp_path / "missing.pt")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_hotwords_without_a_method_choose_modified_beam(tiny_ckpt, wavs, capsys):
    assert main(["transcribe", wavs[0], "--model", tiny_ckpt, "--hotwords", "anna", "--json"]) == 0
    err = capsys.readouterr().err
    assert "--hotwords: decoding with --method modified_beam" in err
    assert main(["transcribe", wavs[0], "--model", tiny_ckpt, "--hotwords", "anna", "--method", "greedy"]) == 2
    assert "need method modified_beam" in capsys.readouterr().err  # an explicit method is not overridden


def test_no_progress_line_when_stderr_is_not_a_terminal(tiny_ckpt, wavs, capsys):
    assert main(["transcribe", *wavs, "--model", tiny_ckpt]) == 0
    out, err = capsys.readouterr()
    assert "\r" not in out + err and "files" not in err


def test_progress_line():
    """Files done, audio seconds, speed: one line rewritten in place; cleared before other output."""
    out = io.StringIO()
    p = Progress(out, files=3, seconds=12.0)
    p.update(3.0, force=True)
    assert out.getvalue() == "\r\x1b[2K[#####               ] 0/3 files  3.0/12.0 s of audio"
    p.start -= 2.0  # two seconds in: the speed is shown
    p.file_done()
    assert out.getvalue().rsplit("\r\x1b[2K", 1)[1].startswith("[#####               ] 1/3 files  3.0/12.0 s of "
                                                                "audio  1.")
    p.update(4.0)  # within the interval: not drawn again
    assert "4.0/12.0" not in out.getvalue()
    p.close()
    assert out.getvalue().endswith("\r\x1b[2K")
