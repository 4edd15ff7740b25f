"""streamd.audio.trim.speech_span: where the speech of a clip lies, by frame energy."""

import numpy as np

from streamd.audio.trim import speech_span


def test_a_burst_in_noise_is_found_with_its_margins():
    rng = np.random.default_rng(0)
    x = (0.001 * rng.standard_normal(16000)).astype(np.float32)  # 1 s of quiet noise
    t = np.arange(4000) / 16000
    x[6000:10000] += 0.3 * np.sin(2 * np.pi * 440 * t)  # 0.375-0.625 s
    start, end = speech_span(x, 16000, margin=0.02)
    # 20 ms margins around the loud 20 ms windows, of which the first and last may hang over the burst
    assert 6000 - 320 - 320 <= start <= 6000 - 320
    assert 10000 + 320 <= end <= 10000 + 320 + 320


def test_nothing_stands_out_the_clip_stays_whole():
    x = (0.01 * np.random.default_rng(1).standard_normal(8000)).astype(np.float32)
    assert speech_span(x, 16000) == (0, 8000)
    assert speech_span(np.zeros(100, np.float32), 16000) == (0, 100)  # shorter than a window
