"""streamd.evaluation.confidence: the word-confidence table of a set equals the figures of the engine's own
word confidences under each setting; scored words and calibration figures by hand."""

import numpy as np
import pytest

from tests.evaluation.sets import final_texts as _texts
from tests.evaluation.sets import write_eval_set as _write_set
from streamd.feed import transcribe_files
from streamd.config import ConfidenceConfig, EngineConfig
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.model.checkpoint import load_checkpoint
from streamd.decode.calibration import Calibration
from streamd.evaluation.confidence import calibration_figures, scored_words, word_confs
from streamd.evaluation.decoding import Decoded
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.sets import EvalEntry
from streamd.evaluation.recognition import Evaluator
from streamd.scoring.metrics import align_words, auc_roc, nce, reliability

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


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


# --------------------------------------------------------------------------- scoring recorded words, by hand


def test_scored_words_and_word_confs_by_hand():
    """Words are labelled by the alignment with the reference after normalization (a hyphenated word scores
    as two, punctuation as none); a word's confidence aggregates its tokens' bank values."""
    entries = [EvalEntry("/a.wav", "a.wav", "turn on the lights"), EvalEntry("/b.wav", "b.wav", "stop")]
    v = [np.array([[0.9, 0.5], [0.7, 0.1]]), np.array([[0.2, 0.3]]), np.array([[0.6, 0.6], [0.4, 0.8]]),
         np.array([[1.0, 1.0]]), np.array([[0.5, 0.25]])]
    out = [Decoded(text="turn of the-lights", rec_text="turn of the-lights",
                   rec_words=[("turn", v[0]), ("of", v[1]), ("the-lights", v[2]), (",", v[3])]),
           Decoded(text="stop", rec_text="top", rec_words=[("top", v[4])])]
    sc = scored_words(entries, out)
    assert sc.labels == [True, False, True, True, False]
    assert sc.utterance == [0, 0, 0, 0, 1] and sc.mismatched == 1
    assert [x is y for x, y in zip(sc.values, [v[0], v[1], v[2], v[2], v[4]])] == [True] * 5
    assert word_confs(sc.values, 0, "min") == pytest.approx([0.7, 0.2, 0.4, 0.4, 0.5])
    assert word_confs(sc.values, 1, "mean") == pytest.approx([0.3, 0.3, 0.7, 0.7, 0.25])


def test_calibration_figures_raw_and_calibrated():
    labels = [True, True, False, True, False, False]
    raw = [0.9, 0.8, 0.7, 0.6, 0.2, 0.1]
    none = calibration_figures(labels, raw, None, None, None)
    assert none["calibration"] is None and none["reliability"]["calibrated"] is None
    bins = reliability(labels, raw)
    assert none["ece"] == pytest.approx(bins.ece) and none["reliability"]["raw"] == bins.to_dict()
    cal = Calibration((0.0, 1.0), (0.1, 0.9), "max_prob", 1.0, "min", words=6)
    probs = cal.apply(raw).tolist()
    applied = calibration_figures(labels, raw, probs, cal, None)
    info = applied["calibration"]
    assert (info["kind"], info["knots"], info["words"], info["applied"]) == (cal.kind, 2, 6, True)
    assert info["auc"] == pytest.approx(auc_roc(labels, probs)) and info["ece"] == pytest.approx(
        reliability(labels, probs).ece)
    assert applied["reliability"]["calibrated"] == reliability(labels, probs).to_dict()
    skipped = calibration_figures(labels, raw, None, cal, "fitted for another measure")
    assert skipped["calibration"]["applied"] is False and skipped["calibration"]["auc"] is None
    assert skipped["calibration"]["not_applied"] == "fitted for another measure"
