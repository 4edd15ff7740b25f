"""streamd.evaluation.sets: evaluation sets (JSON lines) and their audio."""

import json

import numpy as np
import pytest

from helpers import random_audio, write_wav
from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.evaluation.sets import EvalEntry, load_entries, read_eval_set


def test_read_eval_set_errors(tmp_path):
    write_wav(tmp_path / "a.wav", random_audio(0.3))
    p = tmp_path / "s.jsonl"
    p.write_text('{"audio": "a.wav", "text": "hi"}\n{"audio": "a.wav"}\n')
    with pytest.raises(ValueError, match=r"s.jsonl:2: field 'text' must be a string"):
        read_eval_set(p)
    p.write_text('{"audio": "a.wav", "text": "hi"}\nnot json\n')
    with pytest.raises(ValueError, match=r"s.jsonl:2: not valid JSON"):
        read_eval_set(p)
    p.write_text('{"audio": "b.wav", "text": "hi"}\n')
    with pytest.raises(ValueError, match=r"s.jsonl:1: audio file .*b.wav.* not found"):
        read_eval_set(p)
    p.write_text('{"audio": "a.wav", "text": "hi", "keyword": null}\n{"audio": "a.wav", "text": "x"}\n')
    entries, is_kws = read_eval_set(p, limit=1)
    assert is_kws and len(entries) == 1 and entries[0].keyword is None and entries[0].voice == "unknown"


def test_read_eval_set_resolves_audio_and_fills_defaults(tmp_path):
    sub = tmp_path / "audio"
    sub.mkdir()
    write_wav(sub / "a.wav", random_audio(0.3))
    write_wav(sub / "b.wav", random_audio(0.2, seed=1))
    p = tmp_path / "set.jsonl"
    p.write_text(json.dumps({"audio": "audio/a.wav", "text": "turn it on"}) + "\n\n   \n"
                 + json.dumps({"audio": "audio/b.wav", "text": "hey stream", "voice": "en-us+f3", "source": "real",
                               "duration": 0.2}) + "\n")
    entries, is_kws = read_eval_set(p)
    assert not is_kws  # no line has a keyword field
    assert entries == [EvalEntry(str(tmp_path / "audio" / "a.wav"), "audio/a.wav", "turn it on"),
                       EvalEntry(str(tmp_path / "audio" / "b.wav"), "audio/b.wav", "hey stream", "en-us+f3", None,
                                 "real")]
    assert entries[0].voice == "unknown" and entries[0].keyword is None and entries[0].source == ""
    assert read_eval_set(p, limit=1)[0] == entries[:1]
    assert read_eval_set(str(p))[0] == entries  # a str path too


@pytest.mark.parametrize("content, msg", [
    ("", "no entries"),
    ("\n\n", "no entries"),
    ('["a.wav", "hi"]\n', r"set.jsonl:1: expected a JSON object, got list"),
    ('{"audio": 3, "text": "hi"}\n', r"set.jsonl:1: field 'audio' must be a string, got 3"),
    ('{"audio": "a.wav", "text": "hi", "keyword": " "}\n', r"set.jsonl:1: field 'keyword' must be a non-empty string"),
    ('{"audio": "a.wav", "text": "hi", "keyword": 7}\n', r"set.jsonl:1: field 'keyword' must be a non-empty string"),
])
def test_read_eval_set_names_the_file_line_and_field(tmp_path, content, msg):
    write_wav(tmp_path / "a.wav", random_audio(0.3))
    (tmp_path / "set.jsonl").write_text(content)
    with pytest.raises(ValueError, match=msg):
        read_eval_set(tmp_path / "set.jsonl")
    with pytest.raises(ValueError, match="nope.jsonl: no such evaluation set"):
        read_eval_set(tmp_path / "nope.jsonl")


def test_load_entries_at_the_native_rate_or_downsampled(tmp_path):
    x16 = random_audio(0.5, 16000, seed=2)
    x8 = random_audio(0.4, 8000, seed=3)
    entries = [EvalEntry(write_wav(tmp_path / "a.wav", x16, 16000), "a.wav", "a"),
               EvalEntry(write_wav(tmp_path / "b.wav", x8, 8000), "b.wav", "b")]
    native = load_entries(entries, None)
    assert [rate for _, rate in native] == [16000, 8000]
    for (x, _), e in zip(native, entries):
        np.testing.assert_array_equal(x, load_audio(e.audio)[0])
    down = load_entries(entries, 8000)
    assert [rate for _, rate in down] == [8000, 8000]
    np.testing.assert_array_equal(down[0][0], resample(native[0][0], 16000, 8000))
    np.testing.assert_array_equal(down[1][0], native[1][0])  # already at the rate: untouched
