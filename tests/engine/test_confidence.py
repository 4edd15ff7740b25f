"""Recognizer: calibrated word confidence (the map of the raw measure; another measure's or a bad
calibration)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import random_audio
from streamd.engine import Recognizer
from streamd.events import Final, Partial
from tests.engine.feeding import NO_ENDPOINT, run_one


def _calibrated_copy(src, dst, **kw):
    """A copy of checkpoint ``src`` carrying a hand-made calibration (default: for the default measure)."""
    from streamd.decode.calibration import Calibration
    from streamd.model.checkpoint import copy_with_meta, load_checkpoint

    spec = dict(measure="entropy_tsallis_exp", alpha=0.33, aggregation="min", **kw)
    cal = Calibration((0.0, 0.05, 0.3, 1.0), (0.05, 0.2, 0.7, 0.99), **spec)
    copy_with_meta(src, dst, {**load_checkpoint(src).meta, "calibration": cal.to_dict()})
    return str(dst), cal


def _words_of(events):
    """(kind, words) of every Partial and Final, in order."""
    return [(type(e).__name__, e.words) for e in events if isinstance(e, (Partial, Final))]


@pytest.mark.parametrize("method", ["greedy", "modified_beam", "beam", "ctc_greedy", "ctc_prefix_beam"])
def test_calibrated_conf_is_the_map_of_the_raw_measure(tiny_ckpt, tmp_path, method):
    """Partials and finals: conf = calibration(conf_raw), conf_raw = the uncalibrated engine's conf."""
    ckpt, cal = _calibrated_copy(tiny_ckpt, tmp_path / "cal.pt")
    x = random_audio(2.0, seed=6)
    plain = run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), x, 2, method=method, beam=3)
    rec = Recognizer.from_checkpoint(ckpt, NO_ENDPOINT)
    assert rec.calibration == cal and rec.model_info["calibrated"]
    calibrated = run_one(rec, x, 2, method=method, beam=3)
    got, want = _words_of(calibrated), _words_of(plain)
    assert [k for k, _ in got] == [k for k, _ in want] and "Final" in [k for k, _ in got]
    assert sum(len(ws) for _, ws in got) > 0
    for (_, ours), (_, raw) in zip(got, want):
        assert [(w.word, w.start, w.end) for w in ours] == [(w.word, w.start, w.end) for w in raw]
        assert [w.conf_raw for w in ours] == [w.conf for w in raw]
        assert [w.conf for w in ours] == pytest.approx([float(np.interp(w.conf, cal.x, cal.y)) for w in raw],
                                                       abs=1e-12)
    fin = [e for e in calibrated if isinstance(e, Final)][-1]
    assert fin.token_confs == [e for e in plain if isinstance(e, Final)][-1].token_confs  # tokens stay raw
    wire = fin.to_wire()["words"][0]
    assert wire["conf"] == round(fin.words[0].conf, 3) and wire["conf_raw"] == round(fin.words[0].conf_raw, 3)


def test_calibration_for_another_measure_is_not_applied(tiny_ckpt, tmp_path, caplog):
    """Another aggregation than the calibration's (warning) or calibration off (info): conf is the raw measure."""
    import dataclasses
    import logging

    from streamd.config import ConfidenceConfig

    ckpt, _ = _calibrated_copy(tiny_ckpt, tmp_path / "cal.pt")
    x = random_audio(1.6, seed=7)
    for cc, level in ((ConfidenceConfig(aggregation="mean"), logging.WARNING),
                      (ConfidenceConfig(calibrated=False), logging.INFO)):
        cfg = dataclasses.replace(NO_ENDPOINT, confidence=cc)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="streamd.engine"):
            rec = Recognizer.from_checkpoint(ckpt, cfg)
        assert rec.calibration is None and not rec.model_info["calibrated"]
        (msg,) = [r for r in caplog.records if "calibration not applied" in r.getMessage()]  # once, at load
        assert msg.levelno == level
        if level == logging.WARNING:
            assert "fitted for entropy_tsallis_exp alpha 0.33 min" in msg.getMessage() and "mean" in msg.getMessage()
        words = [w for _, ws in _words_of(run_one(rec, x, 1)) for w in ws]
        raw = [w for _, ws in _words_of(run_one(Recognizer.from_checkpoint(tiny_ckpt, cfg), x, 1)) for w in ws]
        assert words and [(w.conf, w.conf_raw) for w in words] == [(w.conf, w.conf) for w in raw]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING and level == logging.INFO]


def test_bad_calibration_in_checkpoint_is_an_error(tiny_ckpt, tmp_path):
    from streamd.decode.calibration import CalibrationError
    from streamd.model.checkpoint import copy_with_meta

    copy_with_meta(tiny_ckpt, tmp_path / "bad.pt", {"calibration": {"version": 1, "x": [0.5]}})
    with pytest.raises(CalibrationError, match="meta.calibration"):
        Recognizer.from_checkpoint(tmp_path / "bad.pt", NO_ENDPOINT)
