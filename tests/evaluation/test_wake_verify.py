"""A wake model followed by a verifier (:func:`streamd.evaluation.wake.verified_sweep`), counted by hand."""

from __future__ import annotations

import numpy as np

from streamd.evaluation.sets import EvalEntry
from streamd.evaluation.wake import verified_sweep


def track(peaks: dict[int, float], frames: int = 40) -> np.ndarray:
    t = np.zeros((frames, 1), np.float32)
    for f, v in peaks.items():
        t[f, 0] = v
    return t


def test_a_detection_stands_only_when_the_verifier_accepts_it():
    entries = [EvalEntry("a", "a", "hey savant", keyword="hey savant"),   # a positive
               EvalEntry("b", "b", "hey vermont"),                         # a negative
               EvalEntry("c", "c", "well hey savant then"),                # says the keyword: not a negative
               EvalEntry("d", "d", "athena", keyword="athena")]            # another keyword's clip: ignored
    tracks = [track({5: 0.6}), track({2: 0.3, 20: 0.7}), track({3: 0.9}), track({4: 0.9})]
    gaps = {(0, 5): -3.0, (1, 2): -20.0, (1, 20): -1.0}
    asked = []

    def gap(i, f):
        asked.append((i, f))
        return gaps[(i, f)]

    pts = verified_sweep(0, "hey savant", entries, tracks, [3600.0, 3600.0, 3600.0, 3600.0], gap, 5,
                         wake_thresholds=(0.2, 0.5), gaps=(None, -5.0, -2.0))
    got = {(p["wake_threshold"], p["gap"]): (p["missed"], p["false_alarms"], p["verified"]) for p in pts}
    # at 0.2 three detections are asked about (a's frame 5, b's frames 2 and 20), at 0.5 two (a's 5, b's 20)
    assert got == {(0.2, None): (0, 2, 0), (0.2, -5.0): (0, 1, 3), (0.2, -2.0): (1, 1, 3),
                   (0.5, None): (0, 1, 0), (0.5, -5.0): (0, 1, 2), (0.5, -2.0): (1, 1, 2)}
    assert all(p["positives"] == 1 and p["fa_per_hour"] == p["false_alarms"] for p in pts)  # one hour of negatives
    assert set(asked) == set(gaps)  # only fired frames of the model's own files are verified
