"""streamd.cli.evaluate: ``streamd eval`` end to end through the CLI (``streamd.cli.main``): the report's
figures vs direct engine runs (text and JSON, one and several sets), keyword mode, DET plots, usage errors.

Metrics are tested in tests/train/test_metrics.py, the recording machinery in tests/train/test_recording.py."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.evaluation.sets import final_texts as _texts
from tests.evaluation.sets import levenshtein as _levenshtein
from helpers import random_audio, write_wav
from tests.evaluation.sets import write_eval_set as _write_set
from helpers import write_jsonl as write_set
from streamd.cli import main as cli_main
from streamd.feed import transcribe_files
from streamd.config import EngineConfig
from streamd.decode.confidence import MEASURE_NAMES
from streamd.engine import Recognizer
from streamd.evaluation.sets import read_eval_set
from streamd.scoring.metrics import normalize_words

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


# --------------------------------------------------------------------------- recognition


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


# --------------------------------------------------------------------------- keyword mode and DET plots


def test_cli_keyword_mode(ckpt5, engine_sets, tmp_path, capsys):
    jsonl, _ = engine_sets
    png = tmp_path / "det.png"
    args = ["eval", "--model", ckpt5, "--device", "cpu", "--set", jsonl, "--keywords", "rr,vv",
            "--thresholds", "0.1:0.2:0.05"]
    assert cli_main(args + ["--json", "--det-plot", str(png)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["mode"] == "keywords" and r["thresholds"] == [0.1, 0.15, 0.2, 0.5]  # the configured 0.5 added
    for k in ("rr", "vv"):
        assert {"frr", "fa_per_hour", "frr_at_1_fa_per_hour", "frr_at_0.5_fa_per_hour", "frr_at_0.1_fa_per_hour",
                "sweep", "det"} <= set(r["per_keyword"][k])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli_main(args[:-2] + ["--keywords"]) == 0  # the sets' keywords
    out = capsys.readouterr().out
    assert "runtime keywords: rr (threshold 0.5), vv (threshold 0.5)" in out and "(all keywords)" in out
    assert "miss@1FA/h" in out and "exact sweep" in out


def test_cli_keyword_mode_errors(ckpt5, engine_sets, tmp_path, capsys):
    jsonl, _ = engine_sets
    base = ["eval", "--model", ckpt5, "--device", "cpu", "--set", jsonl]
    for extra, message in [(["--keywords", "rr,hey stream"], "'hey stream' is the model's built-in KWS keyword"),
                           (["--keywords", "rr,r2d2"], r"keywords\[1\] 'r2d2': characters not in the token table"),
                           (["--keywords", "rr,RR"], r"keywords\[1\].*duplicate"),
                           (["--keywords", "zz"], "no positives of the keywords"),
                           (["--keywords", "rr", "--wake-words", "vv"], "--wake-words would not be used"),
                           (["--keywords", "rr", "--reliability-plot", "x.png"], "not keyword mode"),
                           (["--keywords", "rr", "--verify-wake"], "kws.verify.*needs a second pass"),
                           (["--keywords", "rr", "--verify-wake", "--second-pass", "moonshine-base-so762"],
                            "without a verifier.*bench wake-mycroft"),
                           (["--keywords"], None)]:
        if message is None:  # no set: nothing decoded
            assert cli_main(["eval", "--model", ckpt5, "--keywords", "rr"]) == 2
            assert "keyword mode needs --set" in capsys.readouterr().err
            continue
        assert cli_main(base + extra) == 2, extra
        assert re.search(message, capsys.readouterr().err), extra
    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines()]
    for r in rows:
        (tmp_path / r["audio"]).write_bytes(Path(jsonl).with_name(r["audio"]).read_bytes())
    positives = write_set(tmp_path / "pos.jsonl", [r for r in rows if r["keyword"]])
    assert cli_main(["eval", "--model", ckpt5, "--set", positives, "--keywords"]) == 2
    assert "no negatives" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(base + ["--keywords", "rr", "--thresholds", "0:1.5:0.1"])
    assert "thresholds must be in (0, 1)" in capsys.readouterr().err


def test_cli_det_plot_of_the_built_in_head(tiny_ckpt, engine_sets, tmp_path, capsys):
    """Without --keywords, --det-plot draws the model's KWS head, one curve per set with keyword fields."""
    jsonl, _ = engine_sets
    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines()]
    for r in rows:
        (tmp_path / r["audio"]).write_bytes(Path(jsonl).with_name(r["audio"]).read_bytes())
        r["keyword"] = "hey stream" if r["keyword"] else None
    kws = write_set(tmp_path / "kws.jsonl", rows)
    png = tmp_path / "head.png"
    assert cli_main(["eval", "--model", tiny_ckpt, "--device", "cpu", "--set", kws, "--det-plot", str(png),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sets"][0]["kws"]["det"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plain = write_set(tmp_path / "plain.jsonl", [{"audio": rows[0]["audio"], "text": "x"}])
    assert cli_main(["eval", "--model", tiny_ckpt, "--device", "cpu", "--set", plain, "--det-plot", str(png)]) == 2
    assert "no set has wake-word figures" in capsys.readouterr().err
