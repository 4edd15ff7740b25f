"""streamd.manifest_lines: the one reader of JSON-lines audio manifests (paths, line numbers, errors that
name the file and line)."""

import json

import pytest

from streamd.manifest_lines import iter_audio_lines


def test_lines_in_order_with_resolved_audio(tmp_path):
    (tmp_path / "sub").mkdir()
    a = tmp_path / "sub" / "a.wav"
    b = tmp_path / "b.wav"
    a.write_bytes(b"RIFF")
    b.write_bytes(b"RIFF")
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps({"audio": "sub/a.wav", "text": "hi", "speaker": "s"}) + "\n\n  \n"
                 + json.dumps({"audio": str(b)}) + "\n")
    got = list(iter_audio_lines(m))
    assert [(n, where, audio) for n, where, _, audio in got] == [
        (1, f"manifest {m} line 1", str(a)), (4, f"manifest {m} line 4", str(b))]
    assert got[0][2] == {"audio": "sub/a.wav", "text": "hi", "speaker": "s"}  # the whole line object
    assert [w for _, w, _, _ in iter_audio_lines(m, what="noise manifest")][0] == f"noise manifest {m} line 1"


def test_relative_audio_is_found_from_another_working_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.wav").write_bytes(b"RIFF")
    (tmp_path / "data" / "m.jsonl").write_text('{"audio": "a.wav"}\n')
    monkeypatch.chdir(tmp_path)
    ((_, _, _, audio),) = iter_audio_lines("data/m.jsonl")
    assert audio == str(tmp_path / "data" / "a.wav")


@pytest.mark.parametrize("line, error, msg", [
    ("{not json", ValueError, r"line 2: invalid JSON"),
    ('["a.wav"]', ValueError, r"line 2: expected a JSON object, got list"),
    ('{"text": "hi"}', ValueError, r"line 2: 'audio' must be a string, got None"),
    ('{"audio": "a.wav", "text": 3}', ValueError, r"line 2: 'text' must be a string, got 3"),
    ('{"audio": "gone.wav"}', FileNotFoundError, r"line 2: audio file .*gone.wav does not exist"),
])
def test_errors_name_the_file_and_line(tmp_path, line, error, msg):
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    m = tmp_path / "m.jsonl"
    m.write_text('{"audio": "a.wav"}\n' + line + "\n")
    lines = iter_audio_lines(m, what="train manifest")
    assert next(lines)[0] == 1  # lines before the bad one are read
    with pytest.raises(error, match=msg) as e:
        next(lines)
    assert str(e.value).startswith(f"train manifest {m} line 2: ")


def test_missing_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"manifest .*nope.jsonl: no such file"):
        next(iter_audio_lines(tmp_path / "nope.jsonl"))
