"""The context graph's dense tables against a brute-force matcher written from the definitions
(streamd/decode/context_graph.py docstring): states as token strings, no trie, no fail links."""

import numpy as np
import pytest

from helpers import RefContext as BruteForce
from streamd.decode.context_graph import ContextGraph


def _random_case(rng, vocab):
    n = int(rng.integers(1, 6))
    phrases = set()
    while len(phrases) < n:
        phrases.add(tuple(int(t) for t in rng.integers(1, vocab, size=int(rng.integers(1, 5)))))
    phrases = sorted(phrases)
    boosts = [float(rng.choice([0.5, 1.0, 2.0])) for _ in phrases]
    prefix = (1,) if rng.random() < 0.5 else ()
    return phrases, boosts, prefix


@pytest.mark.parametrize("seed", range(60))
def test_tables_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    vocab = 5
    phrases, boosts, prefix = _random_case(rng, vocab)
    g = ContextGraph(tuple(phrases), tuple(boosts), vocab, prefix)
    bf = BruteForce(phrases, boosts, prefix)
    # tokens drawn mostly from the phrases so that matches and partial matches happen
    for _ in range(20):
        toks = []
        while len(toks) < 12:
            if rng.random() < 0.6:
                toks += list(phrases[int(rng.integers(len(phrases)))])
            else:
                toks.append(int(rng.integers(1, vocab)))
        s_bf, total_bf, matches_bf = bf.walk(toks)
        s, total = g.start, 0.0
        for i, v in enumerate(toks):
            total += float(g.gain[s, v])
            s = int(g.next[s, v])
            assert g.match[s] == matches_bf[i]
        assert total == pytest.approx(total_bf, abs=1e-5)
        assert float(g.back[s]) == pytest.approx(bf.commit(s_bf) - bf.acc(s_bf), abs=1e-5)
        # after taking back the unfinished match, what remains is the credit of completed phrases
        assert total + float(g.back[s]) >= -1e-5


def test_word_start_prefix_and_take_back():
    # char-like table: 1 is the separator; phrase "2 3" boosted 1.5 per token, matched at word starts only
    g = ContextGraph(((2, 3),), (1.5,), 6, prefix=(1,))
    assert g.walk([2, 3])[1] == pytest.approx(3.0)          # at the segment start
    assert g.walk([4, 2, 3])[1] == pytest.approx(0.0)       # inside a word: no credit
    assert g.walk([4, 1, 2, 3])[1] == pytest.approx(3.0)    # after a separator
    s, total = g.walk([2])
    assert total == pytest.approx(1.5) and g.back[s] == pytest.approx(-1.5)  # unfinished: taken back at the end
    s, total = g.walk([2, 4])
    assert total == pytest.approx(0.0)                      # left the phrase: taken back at once
    s, total = g.walk([2, 3, 4, 4])
    assert total == pytest.approx(3.0) and g.back[s] == 0   # completed: kept
    assert g.match[g.walk([2, 3])[0]] == 0 and g.match[g.walk([2])[0]] == -1


def test_bad_graphs():
    with pytest.raises(ValueError, match="duplicate"):
        ContextGraph(((1,), (1,)), (1.0, 1.0), 4)
    with pytest.raises(ValueError, match="no tokens"):
        ContextGraph(((),), (1.0,), 4)
    with pytest.raises(ValueError, match="token ids"):
        ContextGraph(((7,),), (1.0,), 4)
    with pytest.raises(ValueError, match="boost"):
        ContextGraph(((1,),), (-1.0,), 4)
