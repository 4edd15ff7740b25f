"""streamd eval end to end: sets, the report's figures vs direct engine runs, the CLI.

Metrics are tested in test_metrics.py, the recording machinery in test_recording.py."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from helpers import random_audio, write_checkpoint
from streamd.audio.resample import resample
from streamd.cli import main as cli_main
from streamd.feed import transcribe_files
from streamd.config import ConfidenceConfig, EngineConfig, KwsConfig
from streamd.decode.confidence import MEASURE_NAMES
from streamd.engine import Recognizer
from streamd.events import Final, WakeWord
from streamd.model.checkpoint import load_checkpoint
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator
from streamd.evaluation.sets import read_eval_set
from streamd.train.metrics import align_words, auc_roc, nce, normalize_words
from streamd.train.recording import KwsTrackRecorder, MeasureBank, recording_recognizer, replay_kws
from helpers import write_wav


pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


def _levenshtein(r, h):
    """Reference edit distance (textbook recursion, memoized)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (r[i - 1] != h[j - 1]))

    return d(len(r), len(h))


# --------------------------------------------------------------------------- sets


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


def test_evaluation_package_layout():
    """Every decode of streamd eval goes through streamd.feed (no second feeding loop), and the sets module
    stays light (no torch) for scripts that only read sets."""
    import subprocess
    import sys

    import streamd.evaluation as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        src = path.read_text(encoding="utf-8")
        assert "accept_audio" not in src and ".step()" not in src, path.name
    code = "import sys, streamd.evaluation.sets; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- through the engine


@pytest.fixture(scope="module")
def ckpt5(tmp_path_factory):
    """A random model that emits several words per file (so confidences and alignments vary)."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt5") / "seed5.pt", seed=5)


@pytest.fixture(scope="module")
def wav_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalset")
    return [write_wav(d / f"f{i}.wav", random_audio(1.2 + 0.3 * i, seed=i)) for i in range(4)]


def _texts(events):
    return {p: " ".join(e.text for e in evs if isinstance(e, Final) and e.text) for p, evs in events.items()}


def _write_set(path, wavs, texts, keywords=None):
    rows = []
    for i, (w, t) in enumerate(zip(wavs, texts)):
        row = {"audio": w.rsplit("/", 1)[1], "text": t, "voice": f"voice{i % 2}", "duration": 1.0,
               "source": "real" if i < 2 else "synthetic"}
        if keywords is not None:
            row["keyword"] = keywords[i]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_eval_cli_report(tiny_ckpt, wav_files, capsys):
    """End to end with --json: every figure is there and the WER is that of the engine's own text."""
    texts = ["hey stream lights on", "hey stream stop", "ice cream", "extreme weather today"]
    jsonl = _write_set(Path(wav_files[0]).parent / "set.jsonl", wav_files, texts,
                       ["hey stream", "hey stream", None, None])
    assert cli_main(["eval", "--set", jsonl, "--model", tiny_ckpt, "--device", "cpu", "--json", "--rtf-single"]) == 0
    report = json.loads(capsys.readouterr().out)
    (r,) = report["sets"]
    for key in ("wer", "sub", "del", "ins", "ser", "per_voice", "rtf", "rtf_single", "confidence", "kws", "files"):
        assert key in r, key
    assert r["rtf"] > 0 and r["rtf_single"] > 0 and r["errors"] == []
    # the hypotheses are the engine's: the same files decoded as concurrent streams by transcribe_files
    direct = _texts(transcribe_files(Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu")), wav_files))
    assert [f["hyp"] for f in r["files"]] == [direct[w] for w in wav_files]
    errors = [_levenshtein(tuple(normalize_words(t)), tuple(normalize_words(direct[w])))
              for t, w in zip(texts, wav_files)]
    ref_words = sum(len(t.split()) for t in texts)
    assert r["sub"] + r["del"] + r["ins"] == sum(errors) and r["ref_words"] == ref_words
    assert r["wer"] == pytest.approx(sum(errors) / ref_words)
    assert r["ser"] == pytest.approx(np.mean([e > 0 for e in errors]))
    assert set(r["per_voice"]) == {"voice0", "voice1"}
    assert r["per_voice"]["voice0"]["ref_words"] == len(texts[0].split()) + len(texts[2].split())
    assert r["exact"] == pytest.approx(1.0 - r["ser"])
    assert set(r["per_source"]) == {"real", "synthetic"}
    real = r["per_source"]["real"]
    assert real["utterances"] == 2 and real["ref_words"] == len(texts[0].split()) + len(texts[1].split())
    assert real["exact"] == pytest.approx(np.mean([e == 0 for e in errors[:2]]))
    c = r["confidence"]
    assert len(c["table"]) == len(MEASURE_NAMES) * 4 * 4
    assert [(t["measure"], t["alpha"], t["aggregation"]) for t in c["table"] if t["default"]] == \
        [("entropy_tsallis_exp", 0.33, "min")]
    assert c["recording_text_mismatches"] == 0 and c["engine_conf_max_abs_diff"] == 0.0
    k = r["kws"]
    assert (k["positives"], k["negatives"]) == (2, 2) and k["sweep_matches_engine"]
    assert {"frr", "fa_per_hour", "frr_at_1_fa_per_hour", "frr_at_0.1_fa_per_hour", "sweep", "det"} <= set(k)
    assert len(k["det"]) == len(k["sweep"]) >= 95
    # the readable report too
    assert cli_main(["eval", "--set", jsonl, "--model", tiny_ckpt, "--device", "cpu", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "WER" in out and "RTF" in out and "* entropy_tsallis_exp" in out and "FRR at <= 1 FA/h" in out
    assert "exact" in out and "== summary" not in out
    # several sets: each one's figures, then one summary line per set
    assert cli_main(["eval", "--set", jsonl, "--set", jsonl, "--model", tiny_ckpt, "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "per source:" in out and "== summary" in out
    assert sum(line.strip().startswith(jsonl[-50:]) or jsonl[-50:] in line for line in
               out.split("== summary")[1].splitlines()) == 2


def test_kws_sweep_agrees_with_engine_run(tiny_ckpt, wav_files, tmp_path):
    """Replayed detections at a threshold equal an engine run configured with that threshold."""
    t = 0.52
    keywords = ["hey stream", None, "hey stream", None]
    jsonl = _write_set(tmp_path / "kws.jsonl", [str(w) for w in wav_files], ["a"] * 4, keywords)
    # make the audio paths resolvable from tmp_path
    for w in wav_files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    loaded = load_checkpoint(tiny_ckpt)
    report = Evaluator(loaded, EngineConfig(device="cpu"), EvalOptions(batch_streams=4)).evaluate(jsonl)
    sweep = {s["threshold"]: s for s in report["kws"]["sweep"]}
    engine = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu", kws=KwsConfig(threshold=t)))
    direct = transcribe_files(engine, wav_files)
    wakes = [[e for e in direct[w] if isinstance(e, WakeWord)] for w in wav_files]
    assert sum(map(len, wakes)) > 0
    missed = sum(not wakes[i] for i in (0, 2))
    assert (sweep[t]["missed"], sweep[t]["false_alarms"]) == (missed, len(wakes[1]) + len(wakes[3]))
    assert sweep[0.05]["false_alarms"] != sweep[0.99]["false_alarms"]
    # detection by detection: record the tracks with the recording engine, replay, compare
    recorder = KwsTrackRecorder()
    rec = recording_recognizer(loaded, EngineConfig(device="cpu"), MeasureBank([("max_prob", 1.0)]), recorder)
    events = transcribe_files(rec, wav_files)
    tracks = recorder.take_tracks()
    sid = {w: next(e.stream for e in events[w]) for w in wav_files}
    replay = replay_kws([tracks[sid[w]] for w in wav_files], rec.keywords, KwsConfig(), rec.frame_shift_s, [t])[0]
    for f, w in enumerate(wav_files):
        assert [(d.keyword, d.score, d.start, d.end) for d in replay[f]] == \
            [(e.keyword, e.score, e.start, e.end) for e in wakes[f]]


def test_confidence_table_matches_engine_words(ckpt5, wav_files, tmp_path):
    """A table row's AUC / NCE = those of the engine's own word confidences under that setting."""
    files = wav_files[:3]
    for w in files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    loaded = load_checkpoint(ckpt5)
    cc = ConfidenceConfig(measure="max_prob", alpha=0.5, aggregation="mean")
    engine = Recognizer(loaded, EngineConfig(device="cpu", confidence=cc))
    events = transcribe_files(engine, files)
    hyps = _texts(events)
    # references: keep every other hypothesis word and change the rest, so words are both right and wrong
    refs = [" ".join(w if i % 2 == 0 else "zz" for i, w in enumerate(hyps[p].split())) for p in files]
    jsonl = _write_set(tmp_path / "c.jsonl", files, refs)
    ev = Evaluator(loaded, EngineConfig(device="cpu"), EvalOptions(batch_streams=3))
    report = ev.evaluate(jsonl)
    # the recording engine is a plain Recognizer with the public hooks; nothing is left recorded
    assert type(ev.recording) is Recognizer and ev.recording.measure is ev.bank
    assert ev.recording.on_batch is ev.kws_tracks and not ev.kws_tracks.enabled and ev.kws_tracks.take_tracks() == {}
    assert ev.bank.num_tags == 0
    labels, confs = [], []
    for p, ref in zip(files, refs):
        words = [w for e in events[p] if isinstance(e, Final) for w in e.words]
        labels += align_words(ref.split(), [w.word for w in words]).hyp_correct
        confs += [w.conf for w in words]
    assert 0 < sum(labels) < len(labels)
    (row,) = [t for t in report["confidence"]["table"]
              if (t["measure"], t["alpha"], t["aggregation"]) == ("max_prob", 0.5, "mean")]
    assert row["auc"] == pytest.approx(auc_roc(labels, confs), abs=1e-9)
    assert row["nce"] == pytest.approx(nce(labels, confs), abs=1e-6)
    assert report["confidence"]["words"] == len(labels) and report["confidence"]["correct"] == sum(labels)
    assert report["kws"] is None  # no keyword field in this set


def test_resample_to_8000(tiny_ckpt, wav_files, tmp_path):
    files = wav_files[:2]
    for w in files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    jsonl = _write_set(tmp_path / "r.jsonl", files, ["a b", "c"])
    report = Evaluator(load_checkpoint(tiny_ckpt), EngineConfig(device="cpu"),
                       EvalOptions(resample_to=8000)).evaluate(jsonl)
    assert report["sample_rate"] == 8000
    # oracle: the same files downsampled and streamed at 8 kHz, 0.1 s pieces, one step per round
    from streamd.audio.pcm import load_audio

    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))
    xs = [resample(load_audio(w)[0], 16000, 8000) for w in files]
    sids = [rec.create_stream(sample_rate=8000) for _ in xs]
    events = []
    for r in itertools.count():
        if r * 800 >= max(x.size for x in xs):
            break
        for sid, x in zip(sids, xs):
            if r * 800 < x.size:
                rec.accept_audio(sid, x[r * 800:(r + 1) * 800])
                if (r + 1) * 800 >= x.size:
                    rec.finish(sid)
        events += rec.step()
    events += rec.drain()
    texts = [" ".join(e.text for e in events if isinstance(e, Final) and e.stream == sid and e.text) for sid in sids]
    assert [f["hyp"] for f in report["files"]] == texts
    assert report["audio_seconds"] == pytest.approx(sum(x.size for x in xs) / 8000, abs=1e-3)


def test_cli_errors(tiny_ckpt, tmp_path, capsys):
    assert cli_main(["eval", "--set", str(tmp_path / "none.jsonl"), "--model", tiny_ckpt]) == 2
    assert "no such evaluation set" in capsys.readouterr().err
    write_wav(tmp_path / "a.wav", random_audio(0.3))
    (tmp_path / "s.jsonl").write_text('{"audio": "a.wav", "text": "x"}\n')
    assert cli_main(["eval", "--set", str(tmp_path / "s.jsonl"), "--model", tiny_ckpt, "--batch-streams", "0"]) == 2
    assert "batch_streams must be an integer >= 1" in capsys.readouterr().err
    assert cli_main(["eval", "--set", str(tmp_path / "s.jsonl"), "--model", tiny_ckpt, "--resample-to", "4000"]) == 2
    assert "sample_rate" in capsys.readouterr().err


def test_eval_without_a_set_uses_the_shipped_samples(tiny_ckpt, capsys):
    from streamd.paths import default_samples
    from streamd.train.text import is_normalized

    entries, has_kws = read_eval_set(default_samples())
    assert len(entries) == 6 and has_kws  # one wake-word sample
    assert all(is_normalized(e.text) for e in entries)
    assert cli_main(["eval", "--model", tiny_ckpt, "--limit", "2", "--json"]) == 0
    cap = capsys.readouterr()
    report = json.loads(cap.out)
    assert [s["set"] for s in report["sets"]] == [str(default_samples())]
    assert "no --set given" in cap.err and "not an evaluation" in cap.err
