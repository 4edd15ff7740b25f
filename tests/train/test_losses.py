"""Tests for streamd.train.losses against slow, obviously-correct oracles."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from streamd.train.losses import (
    ctc_loss,
    max_pooling_kws_loss,
    rnnt_lattice_log_probs,
    rnnt_loss,
    rnnt_loss_simple_lattice,
)

# --------------------------------------------------------------------------- oracles


def rnnt_brute_force(logits: torch.Tensor, targets: list[int], blank: int) -> torch.Tensor:
    """-log sum over every alignment of one utterance; logits (T, U+1, V)."""
    lp = logits.double().log_softmax(-1)
    T, U = lp.shape[0], len(targets)
    path_scores = []
    # first T+U-1 moves: choose which are labels; the last move is the final blank
    for label_pos in itertools.combinations(range(T + U - 1), U):
        t = u = 0
        score = lp.new_zeros(())
        for i in range(T + U - 1):
            if i in label_pos:
                score = score + lp[t, u, targets[u]]
                u += 1
            else:
                score = score + lp[t, u, blank]
                t += 1
        assert (t, u) == (T - 1, U)
        path_scores.append(score + lp[t, u, blank])
    return -torch.logsumexp(torch.stack(path_scores), 0)


def rnnt_dp(logits: torch.Tensor, targets: list[int], blank: int) -> torch.Tensor:
    """Textbook O(T*U) double-loop forward recursion for one utterance (float64)."""
    lp = logits.double().log_softmax(-1)
    T, U = lp.shape[0], len(targets)
    alpha = [[None] * (U + 1) for _ in range(T)]
    for t in range(T):
        for u in range(U + 1):
            terms = []
            if t == 0 and u == 0:
                terms.append(lp.new_zeros(()))
            if t > 0:
                terms.append(alpha[t - 1][u] + lp[t - 1, u, blank])
            if u > 0:
                terms.append(alpha[t][u - 1] + lp[t, u - 1, targets[u - 1]])
            alpha[t][u] = torch.logsumexp(torch.stack(terms), 0)
    return -(alpha[T - 1][U] + lp[T - 1, U, blank])


def ctc_brute_force(log_probs: torch.Tensor, targets: list[int], blank: int) -> torch.Tensor:
    """-log sum over every length-T frame labelling that collapses to targets; (T, V)."""
    T, V = log_probs.shape
    scores = []
    for path in itertools.product(range(V), repeat=T):
        collapsed = [k for i, k in enumerate(path) if k != blank and (i == 0 or path[i - 1] != k)]
        if collapsed == targets:
            scores.append(sum(log_probs[t, k] for t, k in enumerate(path)))
    if not scores:
        return log_probs.new_tensor(math.inf)
    return -torch.logsumexp(torch.stack(scores), 0)


def kws_double_loop(probs, target, lengths, min_duration=0):
    """wekws max_pooling_loss, written as there (loops over utterances and keywords)."""
    B, T, K = probs.shape
    mask = torch.arange(T)[None, :] >= lengths[:, None]  # True = padding
    loss = 0.0
    for i in range(B):
        for j in range(K):
            if target[i] == j:
                prob = probs[i, :, j]
                m = mask[i].clone().detach()
                m[:min_duration] = True
                prob = prob.masked_fill(m, 0.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                loss += -torch.log(prob.max())
            else:
                prob = 1 - probs[i, :, j]
                prob = prob.masked_fill(mask[i], 1.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                loss += -torch.log(prob.min())
    return loss / B


# --------------------------------------------------------------------------- helpers


def random_rnnt_batch(gen, B, T, U, V, blank, dtype=torch.float64, scale=2.0):
    logits = (torch.randn(B, T, U + 1, V, generator=gen, dtype=dtype) * scale).requires_grad_()
    t_len = torch.randint(1, T + 1, (B,), generator=gen)
    t_len[0] = T
    u_len = torch.randint(0, U + 1, (B,), generator=gen)
    u_len[-1] = U
    nonblank = [k for k in range(V) if k != blank]
    targets = torch.tensor(nonblank)[torch.randint(0, V - 1, (B, U), generator=gen)]
    for b in range(B):
        targets[b, u_len[b]:] = -1  # padding that is not a valid id
    return logits, targets, t_len, u_len


# --------------------------------------------------------------------------- RNN-T


@pytest.mark.parametrize("seed", range(6))
def test_rnnt_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    B = [1, 2, 3, 5, 4, 3][seed]
    T = 1 + seed % 4
    U = seed % 4
    V = 3 + seed % 3
    blank = seed % V
    logits, targets, t_len, u_len = random_rnnt_batch(gen, B, T, U, V, blank)
    got = rnnt_loss(logits, targets, t_len, u_len, blank=blank, reduction="none")
    got.sum().backward()
    for b in range(B):
        x = logits.detach()[b, : t_len[b], : u_len[b] + 1].clone().requires_grad_()
        ref = rnnt_brute_force(x, targets[b, : u_len[b]].tolist(), blank)
        torch.testing.assert_close(got[b], ref)
        ref.backward()
        torch.testing.assert_close(logits.grad[b, : t_len[b], : u_len[b] + 1], x.grad)


@pytest.mark.parametrize("seed", range(3))
def test_rnnt_matches_dp_oracle_medium(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    B, T, U, V = 3, 9, 6, 7
    logits, targets, t_len, u_len = random_rnnt_batch(gen, B, T, U, V, blank=0)
    got = rnnt_loss(logits, targets, t_len, u_len, reduction="none")
    for b in range(B):
        ref = rnnt_dp(logits.detach()[b, : t_len[b], : u_len[b] + 1], targets[b, : u_len[b]].tolist(), 0)
        torch.testing.assert_close(got[b], ref)


def test_rnnt_dp_oracle_agrees_with_brute_force():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(4, 4, 5, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(rnnt_dp(logits, [1, 3, 2], 0), rnnt_brute_force(logits, [1, 3, 2], 0))


@pytest.mark.parametrize("seed", range(3))
def test_rnnt_padding_invariance(seed):
    """Loss and valid gradients do not depend on padding content (even nan/inf)."""
    gen = torch.Generator().manual_seed(200 + seed)
    B, T, U, V = 4, 7, 4, 6
    logits, targets, t_len, u_len = random_rnnt_batch(gen, B, T, U, V, blank=0)
    valid = torch.zeros(B, T, U + 1, V, dtype=torch.bool)
    for b in range(B):
        valid[b, : t_len[b], : u_len[b] + 1] = True
    base = logits.detach()
    garbage = torch.randn(base.shape, generator=gen, dtype=base.dtype) * 1e4
    garbage[..., 0] = float("nan") if seed == 0 else float("inf")
    padded = torch.where(valid, base, garbage).requires_grad_()
    clean = base.clone().requires_grad_()
    targets2 = targets.clone()
    targets2[targets2 < 0] = 0  # blank in the padding region: also ignored
    l_clean = rnnt_loss(clean, targets, t_len, u_len, reduction="none")
    l_pad = rnnt_loss(padded, targets2, t_len, u_len, reduction="none")
    torch.testing.assert_close(l_clean, l_pad)
    l_clean.sum().backward()
    l_pad.sum().backward()
    torch.testing.assert_close(padded.grad[valid], clean.grad[valid])
    assert torch.all(clean.grad[~valid] == 0)


def test_rnnt_batch_equals_single():
    gen = torch.Generator().manual_seed(3)
    logits, targets, t_len, u_len = random_rnnt_batch(gen, 5, 8, 5, 9, blank=0, dtype=torch.float32)
    batched = rnnt_loss(logits, targets, t_len, u_len, reduction="none")
    for b in range(5):
        single = rnnt_loss(
            logits[b : b + 1, : t_len[b], : u_len[b] + 1],
            targets[b : b + 1, : u_len[b]],
            t_len[b : b + 1],
            u_len[b : b + 1],
            reduction="none",
        )
        torch.testing.assert_close(batched[b : b + 1], single)


def test_rnnt_reductions():
    gen = torch.Generator().manual_seed(4)
    logits, targets, t_len, u_len = random_rnnt_batch(gen, 3, 5, 3, 5, blank=0)
    per = rnnt_loss(logits, targets, t_len, u_len, reduction="none")
    assert per.shape == (3,)
    torch.testing.assert_close(rnnt_loss(logits, targets, t_len, u_len, reduction="sum"), per.sum())
    torch.testing.assert_close(rnnt_loss(logits, targets, t_len, u_len), per.mean())


def test_rnnt_gradcheck():
    gen = torch.Generator().manual_seed(5)
    logits, targets, t_len, u_len = random_rnnt_batch(gen, 3, 3, 2, 4, blank=1)
    assert torch.autograd.gradcheck(
        lambda x: rnnt_loss(x, targets, t_len, u_len, blank=1, reduction="sum"), (logits,)
    )
    blank_lp = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64).requires_grad_()
    label_lp = torch.randn(2, 4, 2, generator=gen, dtype=torch.float64).requires_grad_()
    lengths = (torch.tensor([4, 2]), torch.tensor([1, 2]))
    assert torch.autograd.gradcheck(
        lambda a, b: rnnt_loss_simple_lattice(a, b, *lengths, reduction="none"), (blank_lp, label_lp)
    )


def test_rnnt_lattice_log_probs():
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(2, 3, 4, 5, generator=gen)
    targets = torch.tensor([[1, 4, 2], [3, 3, 1]])
    blank_lp, label_lp = rnnt_lattice_log_probs(logits, targets, blank=0)
    lsm = logits.log_softmax(-1)
    torch.testing.assert_close(blank_lp, lsm[..., 0])
    for b in range(2):
        for u in range(3):
            torch.testing.assert_close(label_lp[b, :, u], lsm[b, :, u, targets[b, u]])


def test_rnnt_float32_stable_long_utterance():
    gen = torch.Generator().manual_seed(8)
    B, T, U, V = 2, 200, 80, 16
    logits64 = torch.randn(B, T, U + 1, V, generator=gen, dtype=torch.float64) * 3
    targets = torch.randint(1, V, (B, U), generator=gen)
    t_len, u_len = torch.tensor([200, 150]), torch.tensor([80, 61])
    ref = rnnt_loss(logits64, targets, t_len, u_len, reduction="none")
    logits32 = logits64.float().requires_grad_()
    got = rnnt_loss(logits32, targets, t_len, u_len, reduction="none")
    assert torch.isfinite(got).all() and (got > 0).all()
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=0)
    got.sum().backward()
    assert torch.isfinite(logits32.grad).all()


def test_rnnt_masked_vocab_minus_inf():
    """-inf logits (a masked token) that no path uses leave the loss finite and exact."""
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(1, 3, 3, 5, generator=gen, dtype=torch.float64)
    logits[..., 4] = -math.inf
    targets = torch.tensor([[2, 3]])
    got = rnnt_loss(logits, targets, torch.tensor([3]), torch.tensor([2]))
    torch.testing.assert_close(got, rnnt_brute_force(logits[0], [2, 3], 0))
    # the target itself impossible at one lattice point: still finite (floored) and no nan
    logits[0, 1, 1, 3] = -math.inf
    x = logits.clone().requires_grad_()
    loss = rnnt_loss(x, targets, torch.tensor([3]), torch.tensor([2]))
    loss.backward()
    torch.testing.assert_close(loss, rnnt_brute_force(logits[0], [2, 3], 0))
    assert not torch.isnan(x.grad).any()


def test_rnnt_errors():
    logits = torch.randn(2, 3, 3, 4)
    targets = torch.tensor([[1, 2], [3, 0]])
    t_len, u_len = torch.tensor([3, 2]), torch.tensor([2, 1])
    rnnt_loss(logits, targets, t_len, u_len)  # valid (targets[1, 1] is padding)
    with pytest.raises(ValueError, match=r"targets\[1, 1\] is the blank id 0"):
        rnnt_loss(logits, targets, t_len, torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"targets\[0, 1\] = 7 is out of the vocabulary range \[0, 4\)"):
        rnnt_loss(logits, torch.tensor([[1, 7], [3, 0]]), t_len, u_len)
    with pytest.raises(ValueError, match=r"logit_lengths must lie in \[1, 3\]"):
        rnnt_loss(logits, targets, torch.tensor([4, 2]), u_len)
    with pytest.raises(ValueError, match=r"logit_lengths must lie in \[1, 3\]"):
        rnnt_loss(logits, targets, torch.tensor([0, 2]), u_len)
    with pytest.raises(ValueError, match=r"target_lengths must lie in \[0, 2\]"):
        rnnt_loss(logits, targets, t_len, torch.tensor([3, 1]))
    with pytest.raises(ValueError, match=r"targets must have shape \(B, U\) = \(2, 2\)"):
        rnnt_loss(logits, targets[:, :1], t_len, u_len)
    with pytest.raises(ValueError, match=r"logits must be \(B, T, U\+1, V\)"):
        rnnt_loss(logits[0], targets, t_len, u_len)
    with pytest.raises(ValueError, match=r"reduction must be one of"):
        rnnt_loss(logits, targets, t_len, u_len, reduction="avg")
    with pytest.raises(ValueError, match=r"blank must be in \[0, 4\)"):
        rnnt_loss(logits, targets, t_len, u_len, blank=4)
    with pytest.raises(ValueError, match=r"logit_lengths must have shape \(2,\)"):
        rnnt_loss(logits, targets, torch.tensor([3]), u_len)
    with pytest.raises(ValueError, match=r"label_lp must have shape \(B, T, U\)"):
        rnnt_loss_simple_lattice(torch.zeros(2, 3, 3), torch.zeros(2, 3, 3), t_len, u_len)


# --------------------------------------------------------------------------- CTC


@pytest.mark.parametrize("seed", range(4))
def test_ctc_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(300 + seed)
    B, T, U, V = 3, 4, 2, 3
    blank = seed % V
    # gradients are compared w.r.t. pre-softmax logits: torch's ctc backward assumes
    # log_probs come from log_softmax (its gradient w.r.t. log_probs alone is not the true one)
    raw = torch.randn(B, T, V, generator=gen, dtype=torch.float64).requires_grad_()
    log_probs = raw.log_softmax(-1)
    in_len = torch.tensor([4, 3, 2])
    tg_len = torch.tensor([2, 1, 2])
    nonblank = [k for k in range(V) if k != blank]
    targets = torch.tensor(nonblank)[torch.randint(0, V - 1, (B, U), generator=gen)]
    targets[1, 1] = -5  # padding
    per = ctc_loss(log_probs, targets, in_len, tg_len, blank=blank, reduction="none")
    per.sum().backward(retain_graph=True)
    for b in range(B):
        x = raw.detach()[b, : in_len[b]].clone().requires_grad_()
        ref = ctc_brute_force(x.log_softmax(-1), targets[b, : tg_len[b]].tolist(), blank)
        if torch.isinf(ref):  # zero_infinity
            assert per[b] == 0 and torch.all(raw.grad[b] == 0)
            continue
        torch.testing.assert_close(per[b], ref)
        ref.backward()
        torch.testing.assert_close(raw.grad[b, : in_len[b]], x.grad)
        assert torch.all(raw.grad[b, in_len[b] :] == 0)
    torch.testing.assert_close(ctc_loss(log_probs, targets, in_len, tg_len, blank=blank), per.mean())
    torch.testing.assert_close(
        ctc_loss(log_probs, targets, in_len, tg_len, blank=blank, reduction="sum"), per.sum()
    )


def test_ctc_impossible_is_zero_and_errors():
    raw = torch.randn(1, 2, 4).requires_grad_()
    log_probs = raw.log_softmax(-1)
    loss = ctc_loss(log_probs, torch.tensor([[1, 1]]), torch.tensor([2]), torch.tensor([2]))
    loss.backward()
    assert loss == 0 and torch.all(raw.grad == 0)
    with pytest.raises(ValueError, match=r"targets\[0, 0\] is the blank id 0"):
        ctc_loss(log_probs, torch.tensor([[0, 1]]), torch.tensor([2]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"input_lengths must lie in \[0, 2\]"):
        ctc_loss(log_probs, torch.tensor([[1, 2]]), torch.tensor([3]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"log_probs must be \(B, T, V\)"):
        ctc_loss(log_probs[0], torch.tensor([[1, 2]]), torch.tensor([2]), torch.tensor([2]))


# --------------------------------------------------------------------------- KWS


@pytest.mark.parametrize("seed", range(6))
def test_kws_matches_double_loop(seed):
    gen = torch.Generator().manual_seed(400 + seed)
    B, T, K = [(1, 5, 1), (4, 7, 3), (6, 10, 2), (3, 4, 4), (8, 12, 3), (5, 6, 1)][seed]
    min_duration = [0, 2, 3, 0, 5, 7][seed]
    probs = torch.rand(B, T, K, generator=gen, dtype=torch.float64)
    probs[probs < 0.05] = 0.0  # exercise the 1e-8 clamps
    probs = probs.requires_grad_()
    target = torch.randint(-1, K, (B,), generator=gen)
    target[0] = -1
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[-1] = T
    got = max_pooling_kws_loss(probs, target, lengths, min_duration)
    (g_got,) = torch.autograd.grad(got, probs)
    ref = kws_double_loop(probs, target, lengths, min_duration)
    (g_ref,) = torch.autograd.grad(ref, probs)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(g_got, g_ref)
    per = max_pooling_kws_loss(probs, target, lengths, min_duration, reduction="none")
    assert per.shape == (B,)
    torch.testing.assert_close(per.mean(), got)
    torch.testing.assert_close(max_pooling_kws_loss(probs, target, lengths, min_duration, "sum"), per.sum())


def test_kws_errors():
    probs = torch.rand(2, 3, 2)
    with pytest.raises(ValueError, match=r"target must be in \[-1, 1\]"):
        max_pooling_kws_loss(probs, torch.tensor([0, 2]), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 3\]"):
        max_pooling_kws_loss(probs, torch.tensor([0, 1]), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match=r"min_duration must be >= 0"):
        max_pooling_kws_loss(probs, torch.tensor([0, 1]), torch.tensor([3, 3]), min_duration=-1)
    with pytest.raises(ValueError, match=r"target must be an integer tensor of shape \(2,\)"):
        max_pooling_kws_loss(probs, torch.tensor([0.0, 1.0]), torch.tensor([3, 3]))
