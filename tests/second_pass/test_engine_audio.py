"""The engine's side of the second pass: a stream that asks keeps its open segment's 16 kHz audio and hands it out
with the segment's Final (second_pass "pending", with the stream's declared input rate); everything else (partials, finals' text, words, endpoints) is the
same as without it; a segment longer than max_segment_s says so instead."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from helpers import random_audio
from streamd.config import EndpointConfig, EngineConfig, SecondPassConfig
from streamd.engine import Recognizer
from streamd.events import Final, Partial

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(rec, x, seed=0, resets=(), **opts):
    sid = rec.create_stream(**opts)
    rnd, pos, events = random.Random(seed), 0, []
    while pos < x.size:
        n = rnd.randint(1, 3000)
        events += rec.accept_audio(sid, x[pos:pos + n])
        pos += n
        if any(pos - n < r <= pos for r in resets):
            rec.reset(sid)
        events += rec.step()
    rec.finish(sid)
    events += rec.drain()
    return [e for e in events if e.stream == sid]


def strip(ev):
    """An event as a stream without the second pass gets it (stream ids aside)."""
    if isinstance(ev, Final):
        ev = dataclasses.replace(ev, first_pass_text=None, second_pass=None, audio=None, sample_rate=None)
    return dataclasses.replace(ev, stream=0)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_finals_carry_their_segments_audio_and_nothing_else_changes(ep_ckpt, rate):
    cfg = EngineConfig(device="cpu", endpoint=EndpointConfig(rule1_trailing_silence=0.6, rule2_trailing_silence=0.4))
    x = np.concatenate([random_audio(1.5, rate, seed=1), np.zeros(rate), random_audio(1.2, rate, seed=2)]).astype(np.float32)
    rec = Recognizer.from_checkpoint(ep_ckpt, cfg)
    plain = run(rec, x, resets=(int(0.8 * rate),), sample_rate=rate)
    second = run(rec, x, resets=(int(0.8 * rate),), second_pass=True, sample_rate=rate)
    finals = [e for e in second if isinstance(e, Final)]
    assert len(finals) >= 2 and all(f.second_pass == "pending" and f.first_pass_text == f.text for f in finals)
    assert all(f.sample_rate == rate for f in finals)  # a narrowband stream's finals say so to the second pass
    assert all(f.sample_rate is None for f in plain if isinstance(f, Final))
    assert [strip(e) for e in second] == [strip(e) for e in plain]  # same partials, finals, words, times
    assert [e.to_wire() for e in second if isinstance(e, Partial)] == [e.to_wire() for e in plain
                                                                       if isinstance(e, Partial)]
    for f in finals:  # each final's audio spans its segment, 16 kHz int16
        assert f.audio.dtype == np.int16
        assert f.audio.size == min(round(f.end * 16000), round(x.size / rate * 16000)) - round(f.start * 16000)
    if rate == 16000:  # the samples themselves, from the segment's start
        ref = np.round(np.clip(x, -1, 1) * 32767).astype(np.int16)
        for f in finals:
            a = round(f.start * 16000)
            np.testing.assert_array_equal(f.audio, ref[a:a + f.audio.size])
    assert finals[-1].audio.size > 0 and finals[-1].end >= x.size / rate - 0.04


def test_a_segment_longer_than_max_segment_s_keeps_the_first_pass(ep_ckpt):
    cfg = EngineConfig(device="cpu", second_pass=SecondPassConfig(model="fake", max_segment_s=1.0, window_s=1.0))
    rec = Recognizer.from_checkpoint(ep_ckpt, cfg)
    x = random_audio(3.0, seed=4)
    evs = run(rec, x, endpointing=False)  # the config's second pass: on by default for its streams
    (f,) = [e for e in evs if isinstance(e, Final)]
    assert f.second_pass == "skipped_too_long" and f.audio is None and f.pass_no == 1
    sid = rec.create_stream(second_pass=False)
    assert rec.stream_options(sid).second_pass is False
    with pytest.raises(ValueError, match="second_pass must be true or false"):
        rec.create_stream(second_pass="yes")
