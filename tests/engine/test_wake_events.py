"""Recognizer: the KWS head's wake-word events and their spans."""

from __future__ import annotations

import pytest
import torch

from helpers import random_audio, write_checkpoint
from streamd.config import EngineConfig, KwsConfig
from streamd.engine import Recognizer
from streamd.events import Final, WakeWord
from tests.engine.feeding import finals_text, NO_ENDPOINT, run_one


def test_wake_word_events(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m.pt")
    rec = Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu", kws=KwsConfig(threshold=0.5, refractory_s=1.0)))
    with torch.no_grad():
        rec.model.kws[-1].bias.fill_(30.0)  # head says "keyword" on every frame
    ev = run_one(rec, random_audio(3.0, seed=9))
    wakes = [e for e in ev if isinstance(e, WakeWord)]
    assert 2 <= len(wakes) <= 4  # refractory 1 s over 3 s and the end-of-stream flush (0.32 s)
    assert wakes[0].keyword == "hey stream" and wakes[0].score > 0.99
    assert wakes[1].end - wakes[0].end >= 1.0
    rec2 = Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu"))
    with torch.no_grad():
        rec2.model.kws[-1].bias.fill_(30.0)
    assert not any(isinstance(e, WakeWord) for e in run_one(rec2, random_audio(3.0), keywords=False))


class RampKws(torch.nn.Module):
    """Stand-in KWS head for a single stream: logit 0.2 * (t - fire) + 0.1 at the stream's encoder frame t,
    so the score rises gradually, crosses threshold / 2 = 0.25 at fire - 5 and 0.5 at ``fire``."""

    def __init__(self, fire: int):
        super().__init__()
        self.fire, self.t = fire, 0

    def forward(self, enc):  # (1, T', D) -> (1, T', 1)
        t = torch.arange(self.t, self.t + enc.shape[1], dtype=enc.dtype)
        self.t += enc.shape[1]
        return (0.2 * (t - self.fire) + 0.1)[None, :, None]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_wake_span_follows_a_gradual_rise_of_the_head(tiny_ckpt, method):
    """A random model's hypothesis does not hold the keyword: the wake event spans the head's rise,
    from its first frame >= threshold / 2 to the end of the firing frame (six frames here)."""
    cfg = EngineConfig(device="cpu", kws=KwsConfig(threshold=0.5, refractory_s=10))
    rec = Recognizer.from_checkpoint(tiny_ckpt, cfg)
    rec.model.kws = RampKws(fire=30)
    ev = run_one(rec, random_audio(2.0, seed=4), method=method)
    text = finals_text(ev)
    assert "hey stream" not in text and "stream" not in text
    wakes = [e for e in ev if isinstance(e, WakeWord)]
    assert [(w.start, w.end) for w in wakes] == [pytest.approx((25 * 0.04, 31 * 0.04))]
    assert wakes[0].start < wakes[0].end and wakes[0].end - wakes[0].start > 0.04


def test_wake_span_is_the_keyword_as_the_hypothesis_aligned_it(tmp_path):
    """When the stream's hypothesis holds the keyword, the wake event spans its words, even when the
    head fires well after them (but within MAX_KEYWORD_S of their start).  The keyword is the word this
    random model writes anyway (a one-output KWS head is the same for any keyword name)."""
    x = random_audio(3.0, seed=5)
    plain = Recognizer.from_checkpoint(write_checkpoint(tmp_path / "a.pt", seed=2), NO_ENDPOINT)
    words = [w for e in run_one(plain, x) if isinstance(e, Final) for w in e.words]
    assert words and words[0].end - words[0].start > 0.04  # (the model also writes a word into the flush)
    word = words[0]
    rec = Recognizer.from_checkpoint(write_checkpoint(tmp_path / "b.pt", seed=2, keywords=(word.word,)),
                                     NO_ENDPOINT)
    fire = round(word.end / 0.04) + 10  # the head fires 10 frames after the word
    rec.model.kws = RampKws(fire=fire)
    ev = run_one(rec, x)
    assert [w for e in ev if isinstance(e, Final) for w in e.words] == words  # same model, same words
    wakes = [e for e in ev if isinstance(e, WakeWord)]
    # the ramp stays high: fires at `fire` and every refractory second (25 frames) after it; the third
    # firing (frame fire + 50) is more than MAX_KEYWORD_S (50 frames) after the word began: the head's
    # span, clamped to the 50 frames up to the end of the firing frame
    assert len(wakes) == 3
    assert [(w.keyword, w.start, w.end) for w in wakes[:2]] == [(word.word, word.start, word.end)] * 2
    assert (wakes[2].start, wakes[2].end) == pytest.approx(((fire + 1) * 0.04, (fire + 51) * 0.04))
