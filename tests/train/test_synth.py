"""streamd.train.synth: the corpus plan (seeded, voices, keyword and negative shares, domain texts), a small
corpus with espeak-ng (reproducible, well formed, the same audio whatever the worker count), and the message
for a missing engine.

Engine-dependent tests skip with a reason when the engine is not installed;
CI installs espeak-ng (apt-get install espeak-ng).
"""

import json
import wave

import numpy as np
import pytest

from helpers import needs_espeak
from streamd.cli.data import synth_main
from streamd.train import synth, tts
from streamd.train.text import KEYWORD


def _read_wav(path):
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
        return w.readframes(w.getnframes())


def test_plan_corpus_validation_and_determinism():
    voices = [tts.Voice("espeak", "en-us"), tts.Voice("flite", "slt")]
    a = synth.plan_corpus(50, 4, 0.3, 0.2, voices)
    assert a == synth.plan_corpus(50, 4, 0.3, 0.2, voices)
    assert a != synth.plan_corpus(50, 5, 0.3, 0.2, voices)
    assert all((p.keyword == KEYWORD) == p.text.startswith(KEYWORD) or p.text.split()[1:3] == KEYWORD.split()
               for p in a)
    assert {p.voice.engine for p in a} == {"espeak", "flite"}
    assert a == synth.plan_corpus(50, 4, 0.3, 0.2, voices, slot_focus=0.0)
    focused = synth.plan_corpus(50, 4, 0.3, 0.2, voices, slot_focus=1.0)
    assert focused == synth.plan_corpus(50, 4, 0.3, 0.2, voices, slot_focus=1.0)
    assert [p.text for p in focused] != [p.text for p in a]
    with pytest.raises(ValueError, match="sum <= 1"):
        synth.plan_corpus(5, 0, 0.7, 0.5, voices)
    with pytest.raises(ValueError, match="no TTS voices"):
        synth.plan_corpus(5, 0, 0.2, 0.2, [])


def test_plan_corpus_domain_texts_replace_only_a_share_of_plain_sentences(tmp_path):
    voices = [tts.Voice("espeak", "en-us"), tts.Voice("flite", "slt")]
    f = tmp_path / "prompts.txt"
    f.write_text("Please enter your pin, followed by #.\n\nPress 1 for sales!\n", encoding="utf-8")
    texts = synth.read_texts(f)
    assert texts == ["please enter your pin followed by pound", "press one for sales"]
    base = synth.plan_corpus(400, 4, 0.2, 0.1, voices)
    mixed = synth.plan_corpus(400, 4, 0.2, 0.1, voices, texts=texts, texts_share=0.5)
    assert mixed == synth.plan_corpus(400, 4, 0.2, 0.1, voices, texts=texts, texts_share=0.5)
    assert synth.plan_corpus(400, 4, 0.2, 0.1, voices, texts=texts, texts_share=0.0) == base
    changed = [(a, b) for a, b in zip(base, mixed) if a.text != b.text]
    plain = [a for a in base if a.keyword is None]
    assert 0.35 * len(plain) < len(changed) < 0.65 * len(plain)  # about half the plain sentences
    for a, b in changed:
        assert b.text in texts and a.keyword is None and b.keyword is None
        # everything else about the utterance (voice, tempo, pitch) is drawn as before
        assert (a.voice, a.speed, a.pitch, a.index) == (b.voice, b.speed, b.pitch, b.index)
    # wake-word positives and the confusable negatives are never replaced
    assert [a.text for a in base if a.keyword] == [b.text for b in mixed if b.keyword]
    assert sum(b.text in texts for b in mixed) == len(changed)
    with pytest.raises(ValueError, match="texts_share must be in"):
        synth.plan_corpus(5, 0, 0.2, 0.2, voices, texts=texts, texts_share=1.5)
    with pytest.raises(ValueError, match="non-empty list"):
        synth.plan_corpus(5, 0, 0.2, 0.2, voices, texts_share=0.5)
    bad = tmp_path / "bad.txt"
    bad.write_text("fine words\n!!!\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt:2: no words left"):
        synth.read_texts(bad)
    with pytest.raises(SystemExit):
        synth_main(["--out", str(tmp_path / "o"), "--texts-share", "0.3"])


@needs_espeak
def test_corpus_is_reproducible_and_well_formed(tmp_path):
    kw = dict(seed=11, kws_fraction=0.5, negatives_fraction=0.2, engines=("espeak",), shard_size=4)
    m1 = synth.synthesize_corpus(tmp_path / "a", 6, workers=1, **kw)
    # the plan is drawn sequentially, so a shorter corpus is a prefix of a longer one
    m2 = synth.synthesize_corpus(tmp_path / "b", 3, workers=2, **kw)
    lines = m1.read_text().splitlines()
    assert m2.read_text().splitlines() == lines[:3]
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 6
    assert {r["audio"].split("/")[0] for r in rows} == {"shard-0000", "shard-0001"}
    for i, r in enumerate(rows):
        assert set(r) >= {"audio", "text", "voice", "duration", "keyword"}
        assert r["voice"].startswith("espeak:")
        assert r["keyword"] in (None, KEYWORD)
        assert (r["keyword"] is not None) == (KEYWORD in r["text"])
        pcm = _read_wav(tmp_path / "a" / r["audio"])
        if i < 3:
            assert pcm == _read_wav(tmp_path / "b" / r["audio"])  # same audio whatever the worker count
        assert r["duration"] == round(len(pcm) / 2 / 16000, 3) and r["duration"] > 0.5
        x = np.frombuffer(pcm, "<i2").astype(np.float64)
        assert np.sqrt(np.mean(x ** 2)) > 30  # not silent (> -60 dBFS)
    # clean.jsonl: exactly the lines without noise, reverberation or telephone channel, in order
    clean = (tmp_path / "a" / "clean.jsonl").read_text().splitlines()
    assert clean == [line for line, r in zip(lines, rows) if synth.is_clean(r["aug"])]
    assert all("snr" not in json.loads(c)["aug"] and "rt60" not in json.loads(c)["aug"] for c in clean)


def test_synth_names_the_package_of_a_missing_engine(monkeypatch, capsys):
    assert set(tts.INSTALL) == set(tts.ENGINES)
    monkeypatch.setattr(synth, "list_voices", lambda engines=None: [])  # nothing installed
    with pytest.raises(SystemExit):
        synth_main(["--engines", "flite,festival"])
    err = capsys.readouterr().err
    assert "engine flite is not installed" in err and "apt-get install flite" in err
    assert "festvox-us-slt-hts" in err
