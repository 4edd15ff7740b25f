"""streamd calibrate end to end on a tiny model and a generated set; streamd eval's calibration figures."""

import hashlib
import json

import numpy as np
import pytest
import torch

from helpers import random_audio, write_checkpoint
from streamd.cli import main as cli_main
from streamd.feed import transcribe_files
from streamd.config import EngineConfig
from streamd.decode.calibration import Calibration, fit_isotonic
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.model.checkpoint import load_checkpoint
from streamd.second_pass.confidence import SecondPassCalibration
from streamd.train.calibrate import CalibrateOptions, compare_fits, format_report, heldout_mask
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator
from streamd.scoring.metrics import align_words, ece, normalize_words
from helpers import write_wav
from tests.evaluation.sets import write_eval_set as _write_set


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


@pytest.fixture(scope="module")
def calib_set(tmp_path_factory):
    """A random model that emits several words per file, and a set whose references keep every other
    hypothesis word (so words are both right and wrong)."""
    d = tmp_path_factory.mktemp("calib")
    ckpt = write_checkpoint(d / "seed5.pt", seed=5)
    wavs = [write_wav(d / f"u{i}.wav", random_audio(1.3 + 0.25 * i, seed=20 + i)) for i in range(8)]
    events = transcribe_files(Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu")), wavs)
    hyps = [" ".join(e.text for e in events[w] if isinstance(e, Final) and e.text) for w in wavs]
    refs = [" ".join(w if i % 2 == 0 else "zz" for i, w in enumerate(h.split())) for h in hyps]
    return ckpt, _write_set(d / "valid.jsonl", wavs, refs), wavs, refs


def test_heldout_split_is_by_utterance_and_stable():
    keys = ["a.wav\thi", "a.wav\thi", "b.wav\tyo"] + [f"{i}.wav\tx" for i in range(200)]
    m = heldout_mask(keys)
    assert m[0] == m[1] and m.tolist() == heldout_mask(keys).tolist()
    assert 0.35 < m[3:].mean() < 0.65


def test_compare_fits_scores_on_the_heldout_words_only():
    from streamd.config import ConfidenceConfig

    g = np.random.default_rng(0)
    raw = g.uniform(0, 1, 400)
    correct = g.uniform(0, 1, 400) < raw
    held = np.arange(400) % 2 == 1
    figures, bins = compare_fits(raw, correct, held, ConfidenceConfig())
    assert (figures["heldout_words"], figures["fit_words"]) == (200, 200)
    iso = fit_isotonic(raw[~held], correct[~held], ConfidenceConfig())
    assert figures["isotonic"]["ece"] == pytest.approx(ece(correct[held], iso.apply(raw[held])))
    assert figures["raw"]["ece"] == pytest.approx(ece(correct[held], raw[held]))
    assert set(bins) == {"raw", "isotonic", "logistic"} and bins["raw"].words == 200
    figures, bins = compare_fits(raw, correct, np.zeros(400, dtype=bool), ConfidenceConfig())  # nothing held out
    assert figures["isotonic"] == {"auc": None, "nce": None, "ece": None} and set(bins) == {"raw"}


def test_the_report_of_a_second_pass_s_feature_calibration():
    cal = SecondPassCalibration((0.5, 1.0, -1.0, 0.1, 0.3, -0.2), -0.2, "min", 300)
    report = {"model": "second pass fake", "method": "greedy", "beam": 4, "sets": [], "out": "x.json", "plot": None,
              "calibration": cal.to_dict(), "kind": cal.describe(),
              "heldout": {"heldout_words": 0, "fit_words": 0, "raw": {"ece": 0.2, "auc": 0.7, "nce": 0.1},
                          "features": {"ece": 0.03, "auc": 0.8, "nce": 0.2}}}
    text = format_report(report)
    assert "measure max_prob alpha 1.0 min" in text and "stored: logistic over logit_prob +0.500" in text
    assert "features     0.030" in text
    with pytest.raises(ValueError, match="kind must be one of"):
        CalibrateOptions(kind="age")


def test_calibrate_end_to_end(calib_set, tmp_path, capsys):
    ckpt, jsonl, wavs, refs = calib_set
    out, png = tmp_path / "calibrated.pt", tmp_path / "rel.png"
    assert cli_main(["calibrate", "--model", ckpt, "--set", jsonl, "--out", str(out), "--plot", str(png),
                     "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    h = report["heldout"]
    assert h["heldout_words"] > 0 and h["fit_words"] > 0
    assert all(h[k]["ece"] is not None for k in ("raw", "isotonic", "logistic"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the stored map is the isotonic fit of the engine's raw word confidences against the alignment labels
    loaded = load_checkpoint(out)
    cal = Calibration.from_dict(loaded.meta["calibration"])
    plain = Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu"))
    events = transcribe_files(plain, wavs)
    raw, labels = [], []
    for w, ref in zip(wavs, refs):
        words = [x for e in events[w] if isinstance(e, Final) for x in e.words]
        labels += align_words(normalize_words(ref), [x.word for x in words]).hyp_correct
        raw += [x.conf for x in words]
    assert 0 < sum(labels) < len(labels)
    assert cal == fit_isotonic(raw, labels, EngineConfig().confidence)
    assert loaded.meta["name"] == "tiny-random" and loaded.meta["calibration_fit"]["heldout"] == h
    assert report["calibration"] == cal.to_dict() and report["sets"][0]["words"] == len(labels)
    for k, v in load_checkpoint(ckpt).model.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k
    # the engine uses it: conf = calibration(conf_raw), conf_raw = the uncalibrated engine's conf
    calibrated = transcribe_files(Recognizer.from_checkpoint(out, EngineConfig(device="cpu")), wavs)
    ours = [x for w in wavs for e in calibrated[w] if isinstance(e, Final) for x in e.words]
    assert [x.conf_raw for x in ours] == raw
    assert [x.conf for x in ours] == pytest.approx(cal.apply(raw).tolist(), abs=1e-12)
    # the text report and the other kind
    assert cli_main(["calibrate", "--model", ckpt, "--set", jsonl, "--out", str(out), "--kind", "logistic",
                     "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "held out:" in text and "isotonic" in text and "stored: logistic" in text
    assert Calibration.from_dict(load_checkpoint(out).meta["calibration"]).kind == "logistic"


def test_calibrate_errors(calib_set, tmp_path, capsys):
    ckpt, jsonl, _, _ = calib_set
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  confidence:\n    exclude_blank: false\n")
    assert cli_main(["calibrate", "--model", ckpt, "--set", jsonl, "--out", str(tmp_path / "o.pt"),
                     "--config", str(cfg)]) == 2
    assert "exclude_blank" in capsys.readouterr().err and not (tmp_path / "o.pt").exists()
    assert cli_main(["calibrate", "--model", ckpt, "--set", str(tmp_path / "none.jsonl"),
                     "--out", str(tmp_path / "o.pt")]) == 2
    assert "no such evaluation set" in capsys.readouterr().err


def test_eval_reports_calibration_figures(calib_set, tmp_path, capsys):
    """ECE of the raw measure always; AUC / NCE / ECE of the calibrated conf when the engine applies the map."""
    ckpt, jsonl, _, _ = calib_set
    out = tmp_path / "cal.pt"
    assert cli_main(["calibrate", "--model", ckpt, "--set", jsonl, "--out", str(out), "--limit", "5"]) == 0
    capsys.readouterr()
    cal = Calibration.from_dict(load_checkpoint(out).meta["calibration"])
    ev = Evaluator(load_checkpoint(out), EngineConfig(device="cpu"), EvalOptions(batch_streams=4))
    c = ev.evaluate(jsonl)["confidence"]
    sample = ev.word_confidences(jsonl)  # the same scored words
    assert c["words"] == sample.raw.size and c["engine_conf_max_abs_diff"] == 0.0
    assert c["ece"] == pytest.approx(ece(sample.correct, sample.raw))
    k = c["calibration"]
    assert k["applied"] and k["not_applied"] is None and k["kind"] == "isotonic" and k["words"] == cal.words
    assert k["ece"] == pytest.approx(ece(sample.correct, cal.apply(sample.raw)))
    assert sum(c["reliability"]["calibrated"]["counts"]) == c["words"]
    # the CLI: text and JSON, the diagram; without a calibration, and with one for another measure
    png = tmp_path / "eval.png"
    assert cli_main(["eval", "--set", jsonl, "--model", str(out), "--device", "cpu", "--reliability-plot",
                     str(png)]) == 0
    assert "calibrated (isotonic" in capsys.readouterr().out and png.read_bytes()[:4] == b"\x89PNG"
    assert cli_main(["eval", "--set", jsonl, "--model", ckpt, "--device", "cpu", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["sets"][0]["confidence"]
    assert c["ece"] is not None and c["calibration"] is None and c["reliability"]["calibrated"] is None
    cfg = tmp_path / "mean.yaml"
    cfg.write_text("engine:\n  confidence:\n    aggregation: mean\n")
    assert cli_main(["eval", "--set", jsonl, "--model", str(out), "--device", "cpu", "--config", str(cfg)]) == 0
    assert "calibration is not applied: fitted for" in capsys.readouterr().out


def test_calibrate_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["calibrate", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: streamd calibrate" in out and "--kind" in out and "--plot" in out


def test_a_second_pass_calibration_is_stored_with_a_segment_choice_fitted_on_its_files():
    import dataclasses

    from streamd.evaluation.sets import EvalEntry
    from streamd.events import Final, Word
    from streamd.train.calibrate import _with_choice

    cal = SecondPassCalibration((1.0, 0, 0, 0, 0, 0), 0.0, "min", 10)  # conf = the model's probability
    rng = np.random.default_rng(3)
    entries, first, both = [], [], []
    for i in range(120):  # the second pass is right where it is surer than the first, and wrong elsewhere
        c1, c2 = float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.05, 0.95))
        f1 = Final(i, 0, "hallo wold", (Word("hallo", 0.1, 0.4, c1), Word("wold", 0.5, 0.8, c1)), 0.0, 1.0,
                   second_pass="pending")
        said = "hello world" if c2 > c1 else "hallo wold"
        f2 = dataclasses.replace(f1, text="hello world", pass_no=2, second_pass="done",
                                 words=(Word("hello", 0.1, 0.3, c2, c2), Word("world", 0.3, 0.5, c2, c2)))
        entries.append(EvalEntry(f"{i}.wav", f"{i}.wav", said))
        first.append([f1])
        both.append([f2])
    out, report = _with_choice(cal, [(entries, first, both)], 0.1)
    assert out.choice is not None and out.weights == cal.weights and report["fitted_on"] == 120
    assert out.choice.second_better([0.2], [0.8]) and not out.choice.second_better([0.8], [0.2])
    h = report["heldout_errors"]
    assert report["heldout_segments"] == sum(hashlib.sha256(f"{i}.wav\t{e.text}".encode()).digest()[0] & 1
                                             for i, e in enumerate(entries))
    assert h["learned"] <= h["confidence_margin_0.1"] < min(h["first_pass"], h["second_pass"])
    text = format_report({"model": "second pass fake", "method": "greedy", "beam": 4, "sets": [], "out": "x.json",
                          "plot": None, "calibration": out.to_dict(), "kind": out.describe(), "choice": report,
                          "heldout": {"heldout_words": 0, "fit_words": 0}})
    assert "segment choice (select: learned): second pass when first_conf" in text and "learned" in text
    same, none = _with_choice(cal, [(entries[:1], first[:1], both[:1])], 0.1)  # one kind of example: no choice
    assert same is cal and none is None
