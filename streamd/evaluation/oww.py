"""openWakeWord's pretrained wake models as peers of the trained wake models (:mod:`.wake`), never shipped.

openWakeWord (pip package ``openwakeword``, 0.5.1; its bundled models ``hey_mycroft_v0.1.onnx``,
``alexa_v0.1.onnx``, ``hey_jarvis_v0.1.onnx``, ... are CC BY-NC-SA 4.0, non-commercial: measured here, not
shipped) is run as its own :class:`openwakeword.Model` runs a file: ``Model(wakeword_models=[path, ...],
inference_framework="onnx")``, ``predict_clip`` on 16-bit PCM at 16 kHz with 1 s of silence before and
after, 1280-sample (80 ms) frames, one score per model per frame (its first 5 scores are 0 by its own rule).
Every file starts from the state of a freshly built Model (the feature buffers openWakeWord keeps between
calls are restored, so no file hears the one before; the Model's start buffer, embeddings of random noise,
is drawn with a fixed seed).

The figures are :func:`~.wake.wake_model_figures`'s: the same roles (a positive is a file whose keyword is
the model's, ``hey_mycroft_v0.1.onnx`` -> "hey mycroft"), the same detector (score >= threshold, refractory
in 80 ms frames) and the same sweep, so a peer's row reads like a trained model's.  openwakeword is imported
only by :func:`require_openwakeword` (for :class:`OwwScorer`, and by ``streamd eval`` before it decodes);
without it the error names the pip package.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .sets import EvalEntry
from .wake import WAKE_THRESHOLDS, wake_model_figures

__all__ = ["OWW_FRAME_SAMPLES", "OWW_FRAME_SHIFT_S", "OWW_THRESHOLD", "OWW_PIP", "PeerWakeModel", "OwwScorer",
           "require_openwakeword", "oww_keyword", "pcm16", "prediction_track", "peer_figures", "run_peer_wake_models"]

OWW_FRAME_SAMPLES = 1280
OWW_FRAME_SHIFT_S = 0.08
OWW_THRESHOLD = 0.5
"""openWakeWord's default detection threshold (its README and examples)."""
OWW_PADDING_S = 1
OWW_PIP = ("pip install --no-deps openwakeword==0.5.1, then pip install onnxruntime scikit-learn scipy tqdm (what its "
           "ONNX path imports; pip install \"streamd[peers]\" also pulls tflite-runtime, which it does not use)")
_BUFFERS = ("raw_data_buffer", "melspectrogram_buffer", "accumulated_samples", "raw_data_remainder",
            "feature_buffer")


@dataclass(frozen=True)
class PeerWakeModel:
    """A peer model as :func:`~.wake.wake_model_figures` reads one: keyword, threshold, file (path)."""

    keyword: str
    path: str
    threshold: float = OWW_THRESHOLD


def oww_keyword(path: str | Path) -> str:
    """The keyword of an openWakeWord model file: ``.../hey_mycroft_v0.1.onnx`` -> ``"hey mycroft"``."""
    stem = Path(path).name.removesuffix(".onnx").removesuffix(".tflite")
    return re.sub(r"_v\d+(\.\d+)*$", "", stem).replace("_", " ").strip()


def pcm16(x: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] (N,) -> int16 (N,), clipped: the PCM openWakeWord's models were made for."""
    return np.round(np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0) * 32767.0).astype(np.int16)


def prediction_track(predictions: Sequence[dict[str, float]], names: Sequence[str]) -> np.ndarray:
    """openWakeWord's per-frame prediction dicts (one per 80 ms frame) -> the score track (T, K) of ``names``."""
    return np.array([[float(p[n]) for n in names] for p in predictions], dtype=np.float32).reshape(-1, len(names))


def require_openwakeword(paths: Sequence[str | Path] = ()) -> Any:
    """openWakeWord's Model class, and the model files checked to exist: RuntimeError naming the pip package
    when it is missing (before an evaluation's long decode), ValueError naming a missing file."""
    try:
        from openwakeword.model import Model
    except ImportError as e:
        raise RuntimeError(f"openWakeWord peers need the package openwakeword ({e}): {OWW_PIP}") from None
    for p in paths:
        if not Path(p).is_file():
            raise ValueError(f"openWakeWord model {p}: no such file")
    return Model


class OwwScorer:
    """openWakeWord's Model over the given ONNX files; :meth:`scores` gives one file's (T, K) track."""

    def __init__(self, paths: Sequence[str | Path], seed: int = 0) -> None:
        Model = require_openwakeword(paths)
        self.paths = [str(p) for p in paths]
        state = np.random.get_state()  # its feature buffer starts from random noise: made reproducible
        np.random.seed(seed)
        try:
            self.model: Any = Model(wakeword_models=list(self.paths), inference_framework="onnx")
        finally:
            np.random.set_state(state)
        self.names = list(self.model.models)  # the file stems, in the order given
        self._fresh = {k: copy.deepcopy(getattr(self.model.preprocessor, k)) for k in _BUFFERS}

    def reset(self) -> None:
        """The state of a freshly built Model: prediction buffer and feature buffers."""
        self.model.reset()
        for k, v in self._fresh.items():
            setattr(self.model.preprocessor, k, copy.deepcopy(v))

    def scores(self, x: np.ndarray, rate: int = 16000) -> np.ndarray:
        """One file's samples (N,) float -> scores (T, K), one row per 80 ms frame of the padded file."""
        if rate != 16000:
            from streamd.audio.resample import resample
            x = resample(np.asarray(x, dtype=np.float32), rate, 16000)
        self.reset()
        preds = self.model.predict_clip(pcm16(x), padding=OWW_PADDING_S, chunk_size=OWW_FRAME_SAMPLES)
        return prediction_track(preds, self.names)

    def tracks(self, audio: Sequence[tuple[np.ndarray, int]]) -> list[np.ndarray]:
        """Per file (samples, rate), the (T, K) tracks."""
        return [self.scores(x, r) for x, r in audio]


def peer_figures(models: Sequence[PeerWakeModel], entries: Sequence[EvalEntry], tracks: Sequence[np.ndarray],
                 seconds: Sequence[float], refractory_s: float,
                 thresholds: Sequence[float] = WAKE_THRESHOLDS) -> dict:
    """:func:`~.wake.wake_model_figures` of peer tracks (T, K): per 80 ms frame; ``seconds`` the files' own
    durations (the padding is not negative audio)."""
    return wake_model_figures(models, entries, tracks, seconds, refractory_s, OWW_FRAME_SHIFT_S, thresholds)


def run_peer_wake_models(paths: Sequence[str], sets: Sequence[str], options, refractory_s: float) -> dict:
    """``streamd eval --keywords ... --peer-wake-model FILE...``: openWakeWord models' figures on the same
    sets, side by side with the runtime keywords and trained models; ``options``: the run's
    :class:`~.options.EvalOptions` (``limit``)."""
    import time

    from .sets import load_entries, read_eval_set
    scorer = OwwScorer(paths)
    models = [PeerWakeModel(oww_keyword(p), str(p)) for p in paths]
    entries = [e for s in sets for e in read_eval_set(s, options.limit)[0]]
    audio = load_entries(entries, None)
    t0 = time.perf_counter()
    tracks = scorer.tracks(audio)
    wall = time.perf_counter() - t0
    secs = [len(x) / r for x, r in audio]
    return {"per_model": peer_figures(models, entries, tracks, secs, refractory_s),
            "score_seconds": round(wall, 3), "audio_seconds": round(sum(secs), 3),
            "package": "openwakeword", "licence": "CC BY-NC-SA 4.0 (models): peers only"}
