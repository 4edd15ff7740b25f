"""streamd.decode.common: the pieces the transducer searches share (the rolling token-sequence hash, the
blank-frame confidence accumulator, the empty hypotheses' decoder state, the step input checks)."""

import itertools

import pytest
import torch

from helpers import make_model
from tests.decode.refs import dec_init, dec_push
from streamd.decode.common import HASH_START, BlankConfAcc, check_step_inputs, hash_extend, initial_decoder
from streamd.decode.confidence import AGGREGATIONS, aggregate
from streamd.decode.greedy import GreedySearch
from streamd.decode.modified_beam import ModifiedBeamSearch


# ----------------------------------------------------------------- the searches' step checks


@pytest.mark.parametrize("sync_free", [False, True])
def test_step_input_errors(sync_free):
    model = make_model(seed=0)
    g = GreedySearch(model, sync_free=sync_free)
    m = ModifiedBeamSearch(model, sync_free=sync_free)
    states = [(g, g.init_state(2)), (m, m.init_state(torch.tensor([2, 3])))]
    enc_p = torch.randn(2, 5, model.cfg.joiner_dim)
    ln, off = torch.tensor([5, 3]), torch.zeros(2, dtype=torch.long)
    for s, st in states:
        with pytest.raises(ValueError, match=r"enc_p must be \(B, T, J\), got shape \(5, 16\)"):
            s.step(st, enc_p[0], ln, off)
        with pytest.raises(ValueError, match="enc_p has 3 streams but the search state has 2"):
            s.step(st, torch.randn(3, 5, model.cfg.joiner_dim), torch.tensor([5, 5, 5]), torch.zeros(3).long())
        with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
            s.step(st, enc_p, ln[:1], off)
        with pytest.raises(ValueError, match="frame_offset must be an integer tensor, got torch.float32"):
            s.step(st, enc_p, ln, off.float())
    with pytest.raises(ValueError, match="max_symbols_per_frame must be >= 1, got 0"):
        GreedySearch(model, 0, sync_free=sync_free)


# ----------------------------------------------------------------- hash_extend


def test_hash_extend_tells_token_sequences_apart():
    """The rolling hash is a function of the whole sequence: equal sequences hash alike, and every
    sequence of up to 4 tokens over a 6-token vocabulary (order and length included) hashes apart."""
    seqs = [()] + [tuple(s) for n in range(1, 5) for s in itertools.product(range(6), repeat=n)]

    def h(seq):
        x = torch.tensor(HASH_START, dtype=torch.long)
        for v in seq:
            x = hash_extend(x, torch.tensor(v))
        return int(x)

    hashes = {h(s) for s in seqs}
    assert len(hashes) == len(seqs)
    assert h((1, 2)) != h((2, 1)) and h((0,)) != h(())  # token 0 changes the hash too (tokens + 1)
    assert h((3, 1, 4)) == h((3, 1, 4))


def test_hash_extend_is_elementwise_over_any_shape():
    rng = torch.Generator().manual_seed(0)
    h = torch.randint(-2**62, 2**62, (3, 4), generator=rng)
    tok = torch.randint(0, 50, (3, 4), generator=rng)
    out = hash_extend(h, tok)
    assert out.shape == (3, 4) and out.dtype == torch.long
    for i in range(3):
        for j in range(4):
            assert int(out[i, j]) == int(hash_extend(h[i, j], tok[i, j]))
    assert not torch.equal(hash_extend(h, tok), hash_extend(h, tok + 1))


# ----------------------------------------------------------------- BlankConfAcc


def blank_acc_reference(steps, token_conf, how):
    """Token confidence with the pending blank frames of one hypothesis folded in, by definition: the
    aggregate of the blank-frame confidences since the last token and the token's own."""
    return aggregate([c for took, c in steps if took] + [token_conf], how)


@pytest.mark.parametrize("how", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(3))
def test_blank_conf_acc_fold_matches_the_aggregate_of_pending_blanks(how, seed):
    g = torch.Generator().manual_seed(seed)
    b, k, n = 2, 3, 5
    acc = BlankConfAcc.zeros(b, k, "cpu")
    masks = torch.rand(n, b, k, generator=g) < 0.6
    confs = torch.rand(n, b, k, generator=g) * 0.9 + 0.05
    for m, c in zip(masks, confs):
        acc.add(m, c)
    token = torch.rand(b, k, generator=g) * 0.9 + 0.05
    got = acc.fold(token, how)
    for i in range(b):
        for j in range(k):
            steps = [(bool(masks[s, i, j]), float(confs[s, i, j])) for s in range(n)]
            assert float(got[i, j]) == pytest.approx(blank_acc_reference(steps, float(token[i, j]), how), rel=1e-5)


@pytest.mark.parametrize("how", AGGREGATIONS)
def test_blank_conf_acc_empty_and_cleared_fold_to_the_token_itself(how):
    token = torch.tensor([[0.3, 0.8]])
    acc = BlankConfAcc.zeros(1, 2, "cpu")
    assert acc.fold(token, how) == pytest.approx(token)
    acc.add(torch.tensor([[True, True]]), torch.tensor([[0.1, 0.99]]))
    acc.clear(torch.tensor([[True, False]]))  # hypothesis 0 emitted a token: its blanks are forgotten
    got = acc.fold(token, how)
    assert float(got[0, 0]) == pytest.approx(0.3)
    assert float(got[0, 1]) == pytest.approx(aggregate([0.99, 0.8], how))


def test_blank_conf_acc_unknown_aggregation():
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        BlankConfAcc.zeros(1, 1, "cpu").fold(torch.ones(1, 1), "median")


def test_blank_conf_acc_gather_select_widen_cat():
    acc = BlankConfAcc.zeros(2, 2, "cpu")
    acc.add(torch.tensor([[True, False], [False, True]]), torch.tensor([[0.2, 0.0], [0.0, 0.7]]))
    token = torch.full((2, 2), 0.5)
    before = acc.fold(token, "mean")
    # gather: hypothesis j follows its parent
    g = acc.gather(torch.tensor([[1, 0, 0], [1, 1, 0]]))
    assert g.sum.shape == (2, 3)
    parent = torch.tensor([[1, 0, 0], [1, 1, 0]])
    assert torch.allclose(g.fold(torch.full((2, 3), 0.5), "mean"), before.gather(1, parent))
    # select: a sub-batch of streams
    s = acc.select(torch.tensor([1]))
    assert torch.allclose(s.fold(token[:1], "mean"), before[1:])
    # widen: new slots are empty accumulators (they fold to the token itself)
    w = acc.widen(4)
    assert w.min.shape == (2, 4)
    assert torch.allclose(w.fold(torch.full((2, 4), 0.5), "min")[:, 2:], torch.full((2, 2), 0.5))
    assert torch.allclose(w.fold(torch.full((2, 4), 0.5), "mean")[:, :2], before)
    # cat: streams stacked along B, K padded to the largest
    c = BlankConfAcc.cat([acc.select(torch.tensor([0])), BlankConfAcc.zeros(1, 3, "cpu")])
    assert c.count.shape == (2, 3)
    assert torch.allclose(c.fold(torch.full((2, 3), 0.5), "mean")[0, :2], before[0])
    assert torch.allclose(c.fold(torch.full((2, 3), 0.5), "mean")[1], torch.full((3,), 0.5))


# ----------------------------------------------------------------- initial_decoder and check_step_inputs


def test_initial_decoder_is_n_empty_hypotheses(decoder_kind):
    model = make_model(kind=decoder_kind, seed=1)
    _, one = dec_init(model)
    st, dp = initial_decoder(model, 3, "cpu")
    assert dp.shape == (3, model.cfg.joiner_dim)
    for row in dp:
        assert torch.allclose(row, one, atol=1e-6)
    # the state continues like a single empty hypothesis's
    out, _ = model.decoder.step(st, torch.tensor([2, 2, 2]))
    _, pushed = dec_push(model, dec_init(model)[0], 2)
    assert torch.allclose(model.decoder_proj(out)[1], pushed, atol=1e-6)


def test_check_step_inputs_accepts_well_formed_chunks():
    enc_p = torch.zeros(2, 0, 8)  # an empty chunk is a chunk
    check_step_inputs(enc_p, torch.tensor([0, 0]), torch.tensor([5, 7], dtype=torch.int32), 2)
    check_step_inputs(torch.zeros(0, 3, 8), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0)


@pytest.mark.parametrize("enc_p, lengths, offset, batch, msg", [
    (torch.zeros(2, 3), torch.tensor([3, 3]), torch.tensor([0, 0]), 2,
     r"enc_p must be \(B, T, J\), got shape \(2, 3\)"),
    (torch.zeros(2, 3, 4), torch.tensor([3, 3]), torch.tensor([0, 0]), 1,
     "enc_p has 2 streams but the search state has 1"),
    (torch.zeros(2, 3, 4), torch.tensor([[3, 3]]), torch.tensor([0, 0]), 2, r"lengths must have shape \(2,\)"),
    (torch.zeros(2, 3, 4), torch.tensor([3, 3]), torch.tensor([0]), 2, r"frame_offset must have shape \(2,\)"),
    (torch.zeros(2, 3, 4), torch.tensor([True, True]), torch.tensor([0, 0]), 2,
     "lengths must be an integer tensor, got torch.bool"),
    (torch.zeros(2, 3, 4), torch.tensor([3, 3]), torch.tensor([0.0, 0.0]), 2, "frame_offset must be an integer tensor"),
])
def test_check_step_inputs_names_what_is_wrong(enc_p, lengths, offset, batch, msg):
    with pytest.raises(ValueError, match=msg):
        check_step_inputs(enc_p, lengths, offset, batch)
