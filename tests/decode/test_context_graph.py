"""The context graph's dense tables against a brute-force matcher written from the definitions
(streamd/decode/context_graph.py docstring): states as token strings, no trie, no fail links."""

import numpy as np
import pytest

from tests.decode.refs import RefContext as BruteForce
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


@pytest.mark.parametrize("seed", range(30))
def test_end_token_reads_the_segment_end_as_that_token(seed):
    """back(s) with an end token = the brute force's gain of reading it, then taking back what is unfinished."""
    rng = np.random.default_rng(100 + seed)
    vocab, sep = 5, 1
    phrases, boosts, _ = _random_case(rng, vocab)
    phrases = sorted({p + (sep,) for p in phrases if sep not in p} or {(2, sep)})
    boosts = boosts[:len(phrases)] + [1.0] * (len(phrases) - len(boosts))
    g = ContextGraph(tuple(phrases), tuple(boosts), vocab, (sep,), end_token=sep)
    bf = BruteForce(phrases, boosts, (sep,))
    for _ in range(20):
        toks = [int(t) for t in rng.integers(1, vocab, size=int(rng.integers(0, 10)))]
        s, total = g.walk(toks)
        s_bf, total_end, _ = bf.walk(toks + [sep])
        assert total == pytest.approx(bf.walk(toks)[1], abs=1e-5)
        assert total + float(g.back[s]) == pytest.approx(total_end + bf.commit(s_bf) - bf.acc(s_bf), abs=1e-5)


def test_whole_words_credit_a_phrase_only_where_its_word_ends():
    from streamd.config import PhraseSpec
    from streamd.decode.context_graph import phrase_graph
    from streamd.tokens import TokenTable

    table = TokenTable(("<blk>", " ") + tuple("abcdefghijklmnopqrstuvwxyz"))
    enc = table.encode
    whole = phrase_graph(table, (PhraseSpec("mark"),), 1.0, "hotwords", whole_words=True)
    plain = phrase_graph(table, (PhraseSpec("mark"),), 1.0, "hotwords")
    for text, want_whole, want_plain in [("mark", 5.0, 4.0), ("market", 0.0, 4.0), ("call mark now", 5.0, 4.0),
                                         ("call market", 0.0, 4.0), ("mar", 0.0, 0.0)]:
        for g, want in ((whole, want_whole), (plain, want_plain)):
            s, total = g.walk(enc(text))
            assert total + float(g.back[s]) == pytest.approx(want), (text, want)


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


def test_shared_boost_divides_a_list_boost_among_its_phrases():
    import math

    from streamd.decode.context_graph import shared_boost

    assert shared_boost(4.0, 1) == 4.0
    assert shared_boost(4.0, 2) == pytest.approx(4.0 / (1 + math.log(2)))
    assert shared_boost(4.0, 100) == pytest.approx(4.0 / (1 + math.log(100)))
    assert [shared_boost(1.0, n) for n in (1, 2, 10, 100)] == sorted([shared_boost(1.0, n) for n in (1, 2, 10, 100)],
                                                                      reverse=True)
    with pytest.raises(ValueError, match="at least one phrase"):
        shared_boost(1.0, 0)


def test_engine_hotword_graph_shares_the_boost_and_keeps_a_phrase_own(tiny_ckpt):
    """A list's phrases get shared_boost(hotword_boost, N) per token; a phrase with its own boost keeps it;
    phrases are whole words."""
    import dataclasses

    from streamd.config import EngineConfig, PhraseSpec
    from streamd.decode.context_graph import shared_boost
    from streamd.engine import Recognizer

    base = EngineConfig(device="cpu")
    cfg = dataclasses.replace(base, decoding=dataclasses.replace(base.decoding, method="modified_beam",
                                                                 hotword_boost=3.0))
    rec = Recognizer.from_checkpoint(tiny_ckpt, cfg)
    specs = (PhraseSpec("ab"), PhraseSpec("ba"), PhraseSpec("abc", boost=0.5))
    g = rec._hotword_graph(specs, "hotwords")
    assert g.boosts == pytest.approx((shared_boost(3.0, 3), shared_boost(3.0, 3), 0.5))
    sep = g.prefix[0]
    assert all(p[-1] == sep for p in g.phrases) and g.end_token == sep
    assert rec._hotword_graph((PhraseSpec("ab"),), "hotwords").boosts == (3.0,)
