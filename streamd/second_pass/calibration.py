"""Calibrations of the second-pass models' word probabilities, and :func:`load_second_pass`.

A model's word probability (its tokens' softmax probabilities aggregated: ``min`` for Moonshine,
faster-whisper's ``mean`` for Whisper) ranks words but is not P(word right).  ``streamd calibrate
--second-pass NAME`` fits a :class:`~.confidence.SecondPassCalibration` (two maps, isotonic by default: words
the first pass also wrote, and the others) on training / validation sets (never dev) and stores it:

* for a registered name, in ``streamd/assets/second_pass.calibration.json`` (``{name: calibration}``);
* for a model folder, in ``<folder>/streamd.calibration.json`` (one calibration);
* for a Moonshine adapter file ``NAME.adapter.npz``, in ``NAME.calibration.json`` beside it.

The stored maps record the measure as ``max_prob`` (the chosen token's probability), alpha 1, and the
model's aggregation; a calibration fitted for another aggregation is not applied (a warning is logged).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from streamd.config import EngineConfig, SecondPassConfig
from streamd.decode.calibration import CalibrationError
from streamd.paths import ASSETS

from .confidence import SecondPassCalibration
from .models import ADAPTER_SUFFIX, load_recognizer
from .rescore import SecondPass

__all__ = ["ASSET", "FOLDER_FILE", "calibration_path", "read_calibration", "write_calibration", "load_second_pass", "engine_hotwords", "second_pass_for",
           "check_verifier"]

log = logging.getLogger("streamd.second_pass")

ASSET = ASSETS / "second_pass.calibration.json"
FOLDER_FILE = "streamd.calibration.json"


def calibration_path(model: str) -> tuple[Path, str | None]:
    """Where ``model``'s calibration is stored: (file, key in it or None for a folder's own file)."""
    d = Path(model)
    if d.is_dir():
        return d / FOLDER_FILE, None
    if d.name.endswith(ADAPTER_SUFFIX) and d.is_file():
        return d.with_name(d.name[:-len(ADAPTER_SUFFIX)] + ".calibration.json"), None
    return ASSET, model


def read_calibration(model: str) -> SecondPassCalibration | None:
    """``model``'s stored calibration, or None (none stored; a bad file is an error naming it)."""
    path, key = calibration_path(model)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if key is not None:
            data = data.get(key)
        return None if data is None else SecondPassCalibration.from_dict(data)
    except (ValueError, CalibrationError, AttributeError) as e:
        raise ValueError(f"{path}: not a second-pass calibration ({e})") from None


def write_calibration(model: str, cal: SecondPassCalibration, path: str | Path | None = None) -> Path:
    """Store ``cal`` for ``model`` (in ``path`` when given, else where :func:`calibration_path` says)."""
    dest, key = calibration_path(model)
    if path is not None:
        dest = Path(path)
    data = cal.to_dict()
    if key is not None:
        old = json.loads(dest.read_text(encoding="utf-8")) if dest.is_file() else {}
        old[key] = data
        data = dict(sorted(old.items()))
    dest.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return dest


def load_second_pass(cfg: SecondPassConfig, hotwords: Sequence[str] = (), first_calibrated: bool = False
                     ) -> SecondPass | None:
    """The configured second pass (None when ``cfg.model`` is ``none``): the model loaded now (ValueError or
    :class:`~.models.TeacherUnavailable`, an ImportError naming the pip packages, when it cannot be), with
    its calibration when ``cfg.calibrated`` and one is stored for its aggregation.  ``first_calibrated``: the
    first pass's ``conf`` is calibrated too (:class:`~.rescore.SecondPass`; needed by ``select: confidence``)."""
    if not cfg.enabled:
        return None
    model = load_recognizer(cfg.model, cpu_threads=cfg.cpu_threads, beam_size=cfg.beam, int8=cfg.int8,
                            device=cfg.device)
    cal = read_calibration(cfg.model) if cfg.calibrated else None
    if cal is not None and cal.aggregation != model.aggregation:
        log.warning("second pass %s: the stored calibration is for %s, the model aggregates with %s: not applied",
                    cfg.model, cal.aggregation, model.aggregation)
        cal = None
    if cfg.calibrated and cal is None:
        log.warning("second pass %s: no calibration stored (streamd calibrate --second-pass); conf is the model's "
                    "raw word probability", cfg.model)
    return SecondPass(model, cfg, cal, hotwords, first_calibrated)


def engine_hotwords(config: EngineConfig) -> tuple[str, ...]:
    """The phrases of an engine's decoding hotwords: what its second pass is given (Whisper's prompt)."""
    return tuple(p.phrase for p in config.decoding.hotwords)


def second_pass_for(config: EngineConfig, first_calibrated: bool = False) -> SecondPass | None:
    """:func:`load_second_pass` for an engine's config: its ``second_pass`` with :func:`engine_hotwords`
    (ValueError from :func:`check_verifier`)."""
    return check_verifier(config, load_second_pass(config.second_pass, engine_hotwords(config), first_calibrated))


def check_verifier(config: EngineConfig, second):
    """``second`` (a loaded second pass, in this process or its own), or ValueError (``second`` closed) when
    ``kws.verify`` asks it to verify wake detections and its model scores no texts (Whisper)."""
    if second is None or not config.kws.verify or getattr(second, "scores_texts", False):
        return second
    close = getattr(second, "close", None)
    if callable(close):
        close()
    raise ValueError(f"kws.verify: the second pass {config.second_pass.model} scores no texts, so it cannot "
                     "verify wake detections (a Moonshine model can: moonshine-base-so762)")
