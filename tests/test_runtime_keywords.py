"""Runtime wake words and hotwords through the engine and the v1 start message (issue: text-defined
wake words on the recognizer's own encoder). The shipped model and its sample recordings."""

from __future__ import annotations

import json
import random

import pytest
import soundfile as sf

from streamd.paths import default_model_path, default_samples
from streamd.config import ConfigError, EngineConfig, PhraseSpec, from_dict
from streamd.engine import Recognizer
from streamd.events import Final, WakeWord
from streamd.server.protocol import Open, V1Session
from streamd.config import LimitsConfig

SAMPLES = ("wake", "lights", "timer", "weather", "call", "digits")


def sample(name):
    x, sr = sf.read(default_samples().parent / f"{name}.wav", dtype="float32")
    return x, sr


def recognizer(**kws):
    cfg = from_dict(EngineConfig, {"num_threads": 1, "kws": {"wake_words": ["kitchen", "boston", "timer"], **kws}})
    return Recognizer.from_checkpoint(default_model_path(), cfg)


@pytest.fixture(scope="module")
def rec():
    return recognizer()


@pytest.fixture(scope="module", params=["ctc", "llr"])
def wake_rec(request):
    """The wake-word tests run with either score: the CTC head's and the transducer lattice's (each at the
    threshold its docs give)."""
    return recognizer(wake_score=request.param, wake_threshold={"ctc": 0.4, "llr": 0.5}[request.param])


def decode(rec, name, seed=0, **opts):
    x, sr = sample(name)
    sid = rec.create_stream(sample_rate=sr, **opts)
    rnd = random.Random(seed)
    pos, ev = 0, []
    while pos < x.size:
        n = rnd.randint(1, 6000)
        ev += rec.accept_audio(sid, x[pos:pos + n])
        pos += n
        if rnd.random() < 0.5:
            ev += rec.step()
    rec.finish(sid)
    ev += rec.drain()
    return [e for e in ev if e.stream == sid]


def wakes(events, keywords=None):
    return [(e.keyword, round(e.score, 6), round(e.start, 3), round(e.end, 3)) for e in events
            if isinstance(e, WakeWord) and (keywords is None or e.keyword in keywords)]


RUNTIME = ("kitchen", "boston", "timer")


def same_wakes(got, want):
    """The same detections: keyword and span exactly, the score to float32 rounding (a batch's encoder
    output differs from one stream's alone by float32 rounding; rounding the score to 6 places could land
    either side of a boundary)."""
    assert [(k, s, e) for k, _, s, e in got] == [(k, s, e) for k, _, s, e in want]
    assert [x[1] for x in got] == pytest.approx([x[1] for x in want], abs=1e-5)


def test_runtime_wake_words_fire_on_their_word_and_nowhere_else(wake_rec):
    fired = {name: wakes(decode(wake_rec, name), RUNTIME) for name in SAMPLES}
    assert [k for k, *_ in fired["lights"]] == ["kitchen"]
    assert [k for k, *_ in fired["weather"]] == ["boston"]
    assert [k for k, *_ in fired["timer"]] == ["timer"]
    assert fired["wake"] == fired["call"] == fired["digits"] == []
    # the span is the keyword as spoken: the recognizer's own word "kitchen" lies within it
    ev = decode(wake_rec, "lights")
    word = next(w for e in ev if isinstance(e, Final) for w in e.words if w.word == "kitchen")
    (_, score, start, end), = wakes(ev, RUNTIME)
    assert 0 < score <= 1 and start <= word.start + 0.08 and end >= word.end - 0.08 and end - start < 1.0


def test_builtin_head_keeps_working_beside_runtime_words(wake_rec):
    ev = decode(wake_rec, "wake")
    assert [e.keyword for e in ev if isinstance(e, WakeWord)] == ["hey stream"]


def test_streaming_and_batching_do_not_change_detections(wake_rec):
    """Random audio piece sizes, and all samples decoded concurrently with different lists, give the
    events each stream gives alone."""
    alone = {name: wakes(decode(wake_rec, name, seed=1)) for name in SAMPLES}
    assert any(alone.values())
    same_wakes(wakes(decode(wake_rec, "lights", seed=7)), alone["lights"])
    lists = {"lights": None, "weather": ["boston", "tomorrow"], "timer": [], "wake": ["music"], "call": None,
             "digits": None}
    alone_lists = {n: wakes(decode(wake_rec, n, seed=2, wake_words=lists[n])) for n in SAMPLES}
    sids, audio = {}, {}
    for n in SAMPLES:
        x, sr = sample(n)
        sids[n] = wake_rec.create_stream(sample_rate=sr, wake_words=lists[n])
        audio[n] = x
    rnd = random.Random(3)
    pos = dict.fromkeys(SAMPLES, 0)
    ev = []
    while any(pos[n] < audio[n].size for n in SAMPLES):
        for n in SAMPLES:
            if pos[n] < audio[n].size:
                k = rnd.randint(1, 5000)
                ev += wake_rec.accept_audio(sids[n], audio[n][pos[n]:pos[n] + k])
                pos[n] += k
                if pos[n] >= audio[n].size:
                    wake_rec.finish(sids[n])
        ev += wake_rec.step()
    ev += wake_rec.drain()
    for n in SAMPLES:
        same_wakes(wakes([e for e in ev if e.stream == sids[n]]), alone_lists[n])
    assert [k for k, *_ in alone_lists["weather"]][:1] == ["boston"] and not wakes([], None)
    assert not any(k == "timer" for k, *_ in alone_lists["timer"])  # [] turned the configured list off


def test_keywords_false_turns_every_wake_event_off(wake_rec):
    assert wakes(decode(wake_rec, "wake", keywords=False)) == []
    assert wakes(decode(wake_rec, "lights", keywords=False)) == []


def test_bad_lists_name_the_entry(rec):
    with pytest.raises(ValueError, match=r"wake_words\[1\] 'hey 7': characters not in the token table"):
        rec.create_stream(wake_words=["kitchen", "hey 7"])
    with pytest.raises(ValueError, match=r"wake_words\[1\]: duplicate phrase"):
        rec.create_stream(wake_words=["kitchen", "Kitchen"])
    with pytest.raises(ValueError, match="at most 256"):
        rec.create_stream(wake_words=[f"word {chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(300)])
    with pytest.raises(ValueError, match=r"wake_words\[1\] 'Hey Stream': the model's own wake word"):
        rec.create_stream(wake_words=["kitchen", "Hey Stream"])
    with pytest.raises(ValueError, match="hotwords: need method modified_beam"):
        rec.create_stream(hotwords=["kitchen"])
    with pytest.raises(ConfigError, match=r"kws.wake_words\[0\].threshold"):
        from_dict(EngineConfig, {"kws": {"wake_words": [{"phrase": "a", "threshold": 1.5}]}})
    with pytest.raises(ConfigError, match="decoding.hotwords: need method modified_beam"):
        from_dict(EngineConfig, {"decoding": {"hotwords": ["a"]}})
    with pytest.raises(ValueError, match=r"kws.wake_words\[0\] '9 lives'"):
        Recognizer.from_checkpoint(default_model_path(), from_dict(EngineConfig, {"kws": {"wake_words": ["9 lives"]}}))


def test_hotwords_in_modified_beam(rec):
    plain = decode(rec, "call", method="modified_beam")
    boosted = decode(rec, "call", method="modified_beam", hotwords=["mom", {"phrase": "cell phone", "boost": 2.0}])
    empty = decode(rec, "call", method="modified_beam", hotwords=[])
    text = lambda ev: " ".join(e.text for e in ev if isinstance(e, Final))  # noqa: E731
    assert text(empty) == text(plain)
    assert "cell phone" in text(boosted)
    assert text(decode(rec, "call", seed=5, method="modified_beam", hotwords=["mom", "cell phone"])) == \
        text(decode(rec, "call", seed=6, method="modified_beam", hotwords=["mom", "cell phone"]))


# ----------------------------------------------------------------------------- the v1 start message

INFO = {"name": "m", "methods": ["greedy", "modified_beam"], "chunk_seconds": 0.32}


def start(**fields):
    s = V1Session("s", LimitsConfig(), INFO)
    return s, s.receive(json.dumps({"type": "start", **fields}), 0.0)


def test_start_message_wake_words_and_hotwords():
    s, (op,) = start(wake_words=["computer", {"phrase": "hey  jarvis", "threshold": 0.4}], method="modified_beam",
                     hotwords="alice, bob")
    assert isinstance(op, Open)
    assert op.options["wake_words"] == (PhraseSpec("computer"), PhraseSpec("hey jarvis", threshold=0.4))
    assert op.options["hotwords"] == (PhraseSpec("alice"), PhraseSpec("bob"))
    ready = s.opened()[0].message
    assert ready["wake_words"] == ["computer", {"phrase": "hey jarvis", "threshold": 0.4}]
    assert ready["hotwords"] == ["alice", "bob"]
    _, (op,) = start()
    assert "wake_words" not in op.options and "hotwords" not in op.options  # the server's lists


@pytest.mark.parametrize("fields, needle", [
    ({"wake_words": 5}, "wake_words: expected a list of phrases"),
    ({"wake_words": ["a", 3]}, "wake_words[1]: expected a phrase string or a mapping"),
    ({"wake_words": [{"phrase": "a", "thresold": 0.3}]}, "wake_words[0].thresold: unknown key"),
    ({"wake_words": [""]}, "wake_words[0].phrase: must be a non-empty string"),
    ({"hotwords": ["alice"]}, "hotwords: need method modified_beam"),
    ({"hotwords": [{"phrase": "a", "boost": 99}], "method": "modified_beam"}, "hotwords[0].boost: must be in [0, 20]"),
])
def test_start_message_phrase_errors(fields, needle):
    s, acts = start(**fields)
    msg = acts[0].message
    assert msg["type"] == "error" and msg["code"] == "bad_message" and needle in msg["message"], msg
    assert s.closed


# ----------------------------------------------------------------------------- pauses without endpointing


@pytest.mark.parametrize("method", ["greedy", "modified_beam"])
def test_endpointing_off_restarts_the_search_after_pauses_and_joins_the_text(rec, method):
    """With endpointing off a pause still restarts the search (the prediction network's context of the
    words before a long pause lost the first word after it: "minutes stream" for "minutes hey stream"),
    and the segment's one final is the endpointed segments joined: same words, same times."""
    import numpy as np

    a, _ = sample("timer")
    b, _ = sample("wake")
    x = np.concatenate([a, np.zeros(3 * 16000, np.float32), b, np.zeros(16000, np.float32), a])
    out = {}
    for ep in (True, False):
        sid = rec.create_stream(endpointing=ep, method=method, keywords=False)
        rec.accept_audio(sid, x)
        rec.finish(sid)
        out[ep] = [e for e in rec.drain() if isinstance(e, Final) and e.stream == sid]
    on, (off,) = [f for f in out[True] if f.text], out[False]
    assert len(on) >= 2
    assert off.text == " ".join(f.text for f in on)
    assert "hey stream" in off.text
    assert off.words == tuple(w for f in on for w in f.words)
    assert off.start == 0.0 and off.end == on[-1].end and off.reason == "eos"
