"""The compiled n-gram automaton against the straight Witten-Bell definition (tests/helpers.RefWittenBell)."""

import math
import random

import numpy as np
import pytest
import torch

from tests.decode.refs import RefWittenBell
from streamd.decode.lm import build_ngram, load_lm, save_lm


def corpus(seed, n=60, vocab=6):
    """Random sentences over tokens 1..vocab-1 with repeated patterns (so pruning and backoff matter)."""
    rnd = random.Random(seed)
    pats = [[rnd.randint(1, vocab - 1) for _ in range(rnd.randint(1, 4))] for _ in range(5)]
    out = []
    for _ in range(n):
        s = []
        for _ in range(rnd.randint(0, 4)):
            s += rnd.choice(pats) if rnd.random() < 0.7 else [rnd.randint(1, vocab - 1)]
        out.append(s)
    return out


@pytest.mark.parametrize("order", [1, 2, 3, 5])
@pytest.mark.parametrize("min_count", [1, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_automaton_scores_match_reference(order, min_count, seed):
    vocab = 6
    seqs = corpus(seed, vocab=vocab)
    lm = build_ngram(seqs, vocab, 0, order, min_count)
    ref = RefWittenBell(seqs, order, vocab, 0, min_count)
    rnd = random.Random(seed + 10)
    tests = seqs[:10] + [[rnd.randint(1, vocab - 1) for _ in range(rnd.randint(0, 9))] for _ in range(10)]
    for ys in tests:
        # step by step through the batched API (score every token, then advance)
        state = lm.initial((1,), "cpu")
        for i, w in enumerate(ys):
            row = lm.score(state)[0]
            for v in range(1, vocab):
                assert float(row[v]) == pytest.approx(ref.logp(ys[:i], v), abs=1e-5)
            assert float(row[0]) == 0.0  # blank does not touch the LM
            state = lm.advance(state, torch.tensor([w]))
        assert float(lm.end_score(state)[0]) == pytest.approx(ref.logp(ys, ref.EOS), abs=1e-5)
        want = sum(ref.logp(ys[:i], w) for i, w in enumerate(ys)) + ref.logp(ys, ref.EOS)
        assert lm.sequence_logprob(ys) == pytest.approx(want, abs=1e-4)


def test_rows_are_distributions_and_blank_keeps_state():
    lm = build_ngram(corpus(3), 6, 0, 4, 2)
    p = lm.logp[:, 1:].double().exp().sum(1) + lm.eos.double().exp()
    assert torch.allclose(p, torch.ones_like(p), atol=1e-5)
    assert torch.equal(lm.next[:, 0], torch.arange(lm.num_states))


def test_blank_id_not_zero():
    seqs = [[0, 1, 2], [2, 0, 0, 1]]
    lm = build_ngram(seqs, 4, 3, 3, 1)
    ref = RefWittenBell(seqs, 3, 4, 3, 1)
    assert lm.sequence_logprob([0, 1, 2]) == pytest.approx(
        ref.logp([], 0) + ref.logp([0], 1) + ref.logp([0, 1], 2) + ref.logp([0, 1, 2], ref.EOS), abs=1e-5)
    assert lm.sequence_logprob([0, 3, 1], eos=False) == pytest.approx(ref.logp([], 0) + ref.logp([0], 1), abs=1e-5)


def test_batched_gathers_any_shape():
    lm = build_ngram(corpus(4), 6, 0, 3, 1)
    st = lm.initial((2, 3), "cpu")
    assert lm.score(st).shape == (2, 3, 6)
    tok = torch.tensor([[1, 2, 0], [3, 4, 5]])
    nxt = lm.advance(st, tok)
    assert nxt.shape == (2, 3) and int(nxt[0, 2]) == lm.start


def test_save_load_round_trip(tmp_path):
    lm = build_ngram(corpus(5), 6, 0, 4, 2, tokens=("<blk>", "a", "b", "c", "d", "e"))
    save_lm(lm, tmp_path / "x.lm.pt", {"note": 1})
    back, meta = load_lm(tmp_path / "x.lm.pt")
    assert meta == {"note": 1} and back.tokens == lm.tokens and back.order == 4 and back.start == lm.start
    assert torch.equal(back.next, lm.next)
    assert torch.allclose(back.logp, lm.logp, atol=2e-2)  # float16 on disk
    assert torch.allclose(back.eos, lm.eos, atol=2e-2)


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="blank"):
        build_ngram([[1, 0]], 4, 0, 3)
    with pytest.raises(ValueError, match="order"):
        build_ngram([[1]], 4, 0, 0)
    with pytest.raises(ValueError, match="no training"):
        build_ngram([], 4, 0, 3)
    with pytest.raises(ValueError, match="no such language model file"):
        load_lm(tmp_path / "missing.pt")
    torch.save({"format": "other"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="not a streamd language model"):
        load_lm(tmp_path / "bad.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a loadable language model"):
        load_lm(tmp_path / "junk.pt")
    torch.save({"format": "streamd-ngram-lm", "version": 99}, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="language model version 99, this streamd reads 1"):
        load_lm(tmp_path / "future.pt")


def test_empty_sentences_only_predict_end():
    lm = build_ngram([[], [], [1]], 3, 0, 2, 1)
    ref = RefWittenBell([[], [], [1]], 2, 3, 0, 1)
    assert float(lm.end_score(lm.initial((1,), "cpu"))[0]) == pytest.approx(math.log(ref.prob(ref.EOS, ["<s>"])))
    assert np.isfinite(lm.logp.numpy()).all()
