"""Where the speech of a clip lies, by frame energy: for copies of evaluation sets cut tight to the speech
(``streamd bench trim-speech``), random tight crops in training (``streamd augment --tight-crop``) and the tests of
the end-of-stream flush."""

from __future__ import annotations

import numpy as np

__all__ = ["speech_span"]


def speech_span(x: np.ndarray, rate: int, above_noise: float = 12.0, below_peak: float = 35.0,
                margin: float = 0.02) -> tuple[int, int]:
    """[start, end) sample indices of the speech in ``x`` (N,) float samples at ``rate``, plus ``margin``
    seconds each side (clipped to the clip).

    Frame energies in dB (20 ms windows every 10 ms, DC removed); the speech runs from the first to the last
    frame at or above ``max(noise + above_noise, peak - below_peak)``, noise being the 10th percentile of the
    frame energies and peak the loudest.  No frame that loud (nothing stands out of the noise): the whole clip.
    Blind to any transcript; deterministic."""
    win, hop = int(0.02 * rate), int(0.01 * rate)
    if x.size < win:
        return 0, x.size
    n = 1 + (x.size - win) // hop
    frames = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), win)[::hop][:n]
    frames = frames - frames.mean(axis=1, keepdims=True)
    db = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-12)
    thr = max(np.percentile(db, 10) + above_noise, db.max() - below_peak)
    loud = np.flatnonzero(db >= thr)
    if loud.size == 0:  # nothing stands out of the noise: no speech found, the clip stays whole
        return 0, x.size
    pad = int(round(margin * rate))
    start = max(0, int(loud[0]) * hop - pad)
    end = min(x.size, int(loud[-1]) * hop + win + pad)
    return start, end
