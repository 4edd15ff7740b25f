"""streamd.model.joiner: ``logits = out(tanh(enc_proj(e) + dec_proj(d)))`` with separable projections, for one
pair or a whole (frame, token) lattice by broadcasting."""

import pytest
import torch

from streamd.model.joiner import Joiner


@pytest.fixture
def joiner():
    torch.manual_seed(0)
    return Joiner(enc_dim=8, dec_dim=6, joiner_dim=5, vocab_size=7).eval()


def test_shapes_of_the_projections(joiner):
    assert joiner.enc_proj.weight.shape == (5, 8) and joiner.dec_proj.weight.shape == (5, 6)
    assert joiner.out.weight.shape == (7, 5)


@torch.no_grad()
def test_the_formula_by_hand(joiner):
    e, d = torch.randn(8), torch.randn(6)
    hidden = torch.tanh(joiner.enc_proj.weight @ e + joiner.enc_proj.bias + joiner.dec_proj.weight @ d
                        + joiner.dec_proj.bias)
    want = joiner.out.weight @ hidden + joiner.out.bias
    got = joiner(joiner.enc_proj(e), joiner.dec_proj(d))
    assert got.shape == (7,) and torch.allclose(got, want, atol=1e-6)


@torch.no_grad()
def test_the_lattice_by_broadcasting_equals_each_pair(joiner):
    b, t, u = 2, 4, 3
    enc_p = joiner.enc_proj(torch.randn(b, t, 8))
    dec_p = joiner.dec_proj(torch.randn(b, u, 6))
    lattice = joiner(enc_p[:, :, None], dec_p[:, None])
    assert lattice.shape == (b, t, u, 7)
    for i in range(b):
        for j in range(t):
            for k in range(u):
                assert torch.allclose(lattice[i, j, k], joiner(enc_p[i, j], dec_p[i, k]), atol=1e-6)


@torch.no_grad()
def test_log_probs_are_normalized_logits(joiner):
    enc_p, dec_p = torch.randn(3, 5), torch.randn(3, 5)
    lp = joiner.log_probs(enc_p, dec_p)
    assert torch.allclose(lp, torch.log_softmax(joiner(enc_p, dec_p), -1))
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3), atol=1e-6) and (lp <= 0).all()
    # shifting every logit alike changes nothing
    with torch.no_grad():
        joiner.out.bias += 3.0
    assert torch.allclose(joiner.log_probs(enc_p, dec_p), lp, atol=1e-5)
