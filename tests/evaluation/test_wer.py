"""streamd.evaluation.wer: word and sentence error rates of a set, in total, per voice and per source."""

import random

import pytest

from tests.evaluation.sets import levenshtein
from streamd.evaluation.sets import EvalEntry
from streamd.evaluation.wer import wer_figures
from streamd.scoring.metrics import normalize_words


def entry(text, voice="unknown", source=""):
    return EvalEntry("/x.wav", "x.wav", text, voice, None, source)


def test_wer_figures_by_hand():
    entries = [entry("turn on the lights", "a", "real"), entry("hey stream", "b", "real"),
               entry("stop the music", "a", "synthetic"), entry("what time is it", "b")]
    hyps = ["Turn on the light.", "hey, stream", "stop music", "what time is it please"]  # 1 sub, 0, 1 del, 1 ins
    r = wer_figures(entries, hyps)
    assert (r["ref_words"], r["hits"], r["sub"], r["del"], r["ins"]) == (13, 11, 1, 1, 1)
    assert r["wer"] == pytest.approx(3 / 13)
    assert r["ser"] == pytest.approx(0.75) and r["exact"] == pytest.approx(0.25)
    assert "utterances" not in r  # the set line gives its utterances itself
    assert list(r["per_voice"]) == ["a", "b"]
    a, b = r["per_voice"]["a"], r["per_voice"]["b"]
    assert (a["ref_words"], a["sub"], a["del"], a["ins"], a["utterances"]) == (7, 1, 1, 0, 2)
    assert a["wer"] == pytest.approx(2 / 7) and a["ser"] == 1.0 and a["exact"] == 0.0
    assert (b["ref_words"], b["ins"], b["utterances"]) == (6, 1, 2) and b["ser"] == 0.5
    # the entry without a source is in no source group
    assert list(r["per_source"]) == ["real", "synthetic"]
    assert r["per_source"]["real"]["utterances"] == 2 and r["per_source"]["real"]["wer"] == pytest.approx(1 / 6)
    assert r["per_source"]["synthetic"]["del"] == 1 and r["per_source"]["synthetic"]["ser"] == 1.0


def test_no_reference_words_has_no_wer():
    r = wer_figures([entry(""), entry("...")], ["", ""])
    assert r["wer"] is None and r["ref_words"] == 0
    assert r["ser"] == 0.0 and r["exact"] == 1.0
    r = wer_figures([entry("")], ["words out of silence"])
    assert r["wer"] is None and r["ins"] == 4 and r["ser"] == 1.0
    assert wer_figures([], [])["ser"] is None and wer_figures([], [])["exact"] is None


@pytest.mark.parametrize("seed", range(4))
def test_errors_are_the_edit_distance(seed):
    """Random sets: the error count is the summed word edit distance, the SER the share of utterances with
    any, and every group's figures are those of its own entries."""
    rng = random.Random(seed)
    vocab = ["on", "off", "the", "light", "stream", "hey", "Stop!"]
    entries, hyps = [], []
    for _ in range(rng.randint(1, 12)):
        entries.append(entry(" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 6))),
                             rng.choice(["v1", "v2", "v3"]), rng.choice(["", "real", "tts"])))
        hyps.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 6))))
    dist = [levenshtein(tuple(normalize_words(e.text)), tuple(normalize_words(h))) for e, h in zip(entries, hyps)]
    r = wer_figures(entries, hyps)
    assert r["sub"] + r["del"] + r["ins"] == sum(dist)
    assert r["ref_words"] == sum(len(normalize_words(e.text)) for e in entries)
    assert r["ser"] == pytest.approx(sum(d > 0 for d in dist) / len(entries))
    for key, groups in (("voice", r["per_voice"]), ("source", r["per_source"])):
        for name, g in groups.items():
            idx = [i for i, e in enumerate(entries) if getattr(e, key) == name]
            assert g["utterances"] == len(idx)
            assert g["sub"] + g["del"] + g["ins"] == sum(dist[i] for i in idx)
    assert "" not in r["per_source"]
