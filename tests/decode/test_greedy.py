"""streamd.decode.greedy: the batched, chunked greedy transducer search.

Against the slow per-utterance reference (helpers.ref_greedy: one utterance, one frame and one symbol at
a time), and its sync-free (label-looping, GPU-friendly) path against the frame-looping one: both must
give exactly the same tokens, frames, confidences, scores and trailing blanks, and the sync-free path
must talk to the host a bounded number of times per chunk, however many frames the chunk has (counted on
CPU by the ``host_syncs`` fixture, which wraps the Tensor methods that copy device data to the host).
"""

import pytest
import torch

from helpers import make_model
from tests.decode.refs import (assert_same_hyp, count_step, max_prob, random_batch, ref_greedy,
                               run_chunked)
from streamd.decode.greedy import GreedySearch

torch.set_num_threads(1)


def biased_model(kind, seed, bias):
    """make_model with the blank logit shifted by bias: > 0 sparse tokens (speech-like), < 0 streams
    that rarely take blank and often hit max symbols per frame (the label loop's longest case)."""
    model = make_model(kind=kind, seed=seed)
    with torch.no_grad():
        model.joiner.out.bias[0] += bias
    return model


def greedy_pair(model, max_sym, **kw):
    return (GreedySearch(model, max_sym, max_prob, sync_free=False, **kw),
            GreedySearch(model, max_sym, max_prob, sync_free=True, **kw))


# ----------------------------------------------------------------- against the reference


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("b", [1, 3, 6])
def test_greedy_matches_reference(decoder_kind, seed, b):
    model = make_model(kind=decoder_kind, seed=seed)
    search = GreedySearch(model, max_symbols_per_frame=3, measure=max_prob)
    enc_p, lengths = random_batch(model, b, 17, seed)
    state = run_chunked(search, search.init_state(b), enc_p, lengths, seed)
    outs = search.best(state)
    emitted = 0
    for i in range(b):
        ys, frames, confs, score = ref_greedy(model, enc_p[i, :lengths[i]], 3)
        assert list(outs[i].tokens) == ys
        assert list(outs[i].frames) == frames
        assert outs[i].confs == pytest.approx(confs, abs=1e-5)
        assert outs[i].score == pytest.approx(score, abs=1e-4)
        emitted += len(ys)
    assert emitted > 0


def test_greedy_trailing_blanks_and_reset():
    model = make_model(seed=5)
    search = GreedySearch(model, max_symbols_per_frame=2)
    enc_p, lengths = random_batch(model, 2, 12, 5)
    lengths[:] = 12
    st = search.step(search.init_state(2), enc_p, lengths, torch.zeros(2, dtype=torch.long))
    outs = search.best(st)
    for i, o in enumerate(outs):
        expect = 12 - 1 - o.frames[-1] if o.tokens else 12
        assert int(search.trailing_blanks(st)[i]) == expect
    st = search.reset(st, torch.tensor([True, False]))
    outs2 = search.best(st)
    assert outs2[0].tokens == () and outs2[1].tokens == outs[1].tokens
    # after reset, stream 0 decodes like a fresh stream
    st = search.step(st, enc_p, lengths, torch.full((2,), 12))
    fresh = search.step(search.init_state(1), enc_p[:1], lengths[:1], torch.full((1,), 12))
    assert search.best(st)[0].tokens == search.best(fresh)[0].tokens


def test_greedy_state_cat_select():
    model = make_model(seed=7, kind="lstm")
    search = GreedySearch(model, measure=max_prob)
    enc_p, lengths = random_batch(model, 4, 10, 7)
    lengths[:] = 10
    zero = torch.zeros(4, dtype=torch.long)
    st = search.step(search.init_state(4), enc_p, lengths, zero)
    st = search.step(st, enc_p, lengths, zero + 10)
    st_a = search.step(search.init_state(4), enc_p, lengths, zero)
    from streamd.decode.greedy import GreedyState
    parts = [st_a.select(torch.tensor([i])) for i in (2, 0, 3, 1)]
    joined = GreedyState.cat(parts)
    perm = torch.tensor([2, 0, 3, 1])
    joined = search.step(joined, enc_p[perm], lengths[perm], zero + 10)
    a, bb = search.best(st), search.best(joined)
    for j, i in enumerate(perm.tolist()):
        assert a[i] == bb[j]


def test_greedy_blank_frames_in_confidence():
    """exclude_blank=False folds blank-frame measures into the next token (min aggregation)."""
    model = make_model(seed=11)
    enc_p, lengths = random_batch(model, 1, 15, 11)
    with_blank = GreedySearch(model, 3, max_prob, exclude_blank=False, aggregation="min")
    without = GreedySearch(model, 3, max_prob)
    o1 = with_blank.best(with_blank.step(with_blank.init_state(1), enc_p, lengths, torch.zeros(1, dtype=torch.long)))[0]
    o2 = without.best(without.step(without.init_state(1), enc_p, lengths, torch.zeros(1, dtype=torch.long)))[0]
    assert o1.tokens == o2.tokens
    assert all(a <= b + 1e-7 for a, b in zip(o1.confs, o2.confs))


# ----------------------------------------------------------------- sync-free (label looping)


@pytest.mark.parametrize("max_sym", [1, 2, 3])
@pytest.mark.parametrize("seed,b", [(0, 1), (1, 5), (2, 3)])
@pytest.mark.parametrize("blank_bias", [2.0, 0.0, -4.0])
def test_greedy_label_looping_matches(decoder_kind, max_sym, seed, b, blank_bias):
    model = biased_model(decoder_kind, seed, blank_bias)
    slow, fast = greedy_pair(model, max_sym)
    enc_p, lengths = random_batch(model, b, 15, seed)
    st_s = run_chunked(slow, slow.init_state(b), enc_p, lengths, seed)
    st_f = run_chunked(fast, fast.init_state(b), enc_p, lengths, seed)
    outs_s, outs_f = slow.best(st_s), fast.best(st_f)
    assert torch.equal(slow.trailing_blanks(st_s), fast.trailing_blanks(st_f))
    emitted = 0
    for i in range(b):
        assert_same_hyp(outs_f[i], outs_s[i])
        ys, frames, confs, score = ref_greedy(model, enc_p[i, :lengths[i]], max_sym)
        assert list(outs_f[i].tokens) == ys and list(outs_f[i].frames) == frames
        assert outs_f[i].confs == pytest.approx(confs, abs=1e-5)
        assert outs_f[i].score == pytest.approx(score, abs=1e-4)
        emitted += len(ys)
    assert emitted > 0
    if blank_bias < 0 and max_sym > 1:  # the test really exercises several symbols on one frame
        assert any(len(set(o.frames)) < len(o.frames) for o in outs_f)


@pytest.mark.parametrize("rounds", [1, 2, 5])
@pytest.mark.parametrize("blank_bias", [1.0, -4.0])
def test_greedy_any_round_limit_completes(rounds, blank_bias):
    """However few rounds are allowed, the last one runs the upper bound and finishes every stream."""
    model = biased_model("lstm", 8, blank_bias)
    slow, fast = greedy_pair(model, 3)
    fast.MAX_ROUNDS = rounds
    enc_p, lengths = random_batch(model, 4, 18, 8)
    a = slow.best(run_chunked(slow, slow.init_state(4), enc_p, lengths, 8))
    b = fast.best(run_chunked(fast, fast.init_state(4), enc_p, lengths, 8))
    for x, y in zip(a, b):
        assert_same_hyp(y, x)


@pytest.mark.parametrize("aggregation", ["min", "max", "mean", "prod"])
def test_greedy_blank_confidence_folding_same(aggregation):
    model = make_model(seed=11, kind="lstm")
    slow, fast = greedy_pair(model, 2, exclude_blank=False, aggregation=aggregation)
    enc_p, lengths = random_batch(model, 4, 16, 11)
    a = slow.best(run_chunked(slow, slow.init_state(4), enc_p, lengths, 3))
    b = fast.best(run_chunked(fast, fast.init_state(4), enc_p, lengths, 3))
    assert sum(len(o.tokens) for o in a) > 0
    for x, y in zip(a, b):
        assert_same_hyp(y, x)


def test_greedy_reset_odd_lengths_and_offsets():
    """Reset mid-stream, zero-length streams, lengths above T, empty chunks, nonzero frame offsets."""
    model = make_model(seed=6)
    slow, fast = greedy_pair(model, 3)
    enc_p, _ = random_batch(model, 4, 10, 6)
    offs = torch.tensor([0, 7, 100, 3])
    results = []
    for s in (slow, fast):
        st = s.step(s.init_state(4), enc_p, torch.tensor([10, 0, 25, 4]), offs)
        kept = s.best(st)
        st2 = s.step(st, enc_p[:, :0], torch.zeros(4, dtype=torch.long), offs + 10)
        st2 = s.step(st2, enc_p, torch.full((4,), 10), offs + 10)
        assert s.best(st) == kept  # stepping never mutates the caller's state
        st2 = s.reset(st, torch.tensor([False, True, True, False]))  # reset works in place
        st2 = s.step(st2, enc_p.flip(1), torch.tensor([10, 3, 10, 0]), offs + 10)
        results.append((kept, s.best(st2), s.trailing_blanks(st2)))
    (k_s, o_s, tb_s), (k_f, o_f, tb_f) = results
    assert k_f[1].tokens == () and k_s[1].tokens == ()
    assert_same_hyp(k_f[2], k_s[2])  # length 25 > T counts as T (float sums may differ in the last bits:
    assert k_f[2].tokens                # batch shapes differ between the two paths, so do the kernels)
    for x, y in zip(k_s + o_s, k_f + o_f):
        assert_same_hyp(y, x)
    assert torch.equal(tb_s, tb_f)


@pytest.mark.parametrize("kind", ["stateless", "lstm"])
def test_greedy_sync_free_host_syncs_per_chunk(host_syncs, kind):
    model = biased_model(kind, 2, 1.0)
    slow, fast = greedy_pair(model, 3, exclude_blank=False)
    counts = {}
    for t in (4, 32):
        enc_p, lengths = random_batch(model, 5, t, t)
        counts[t] = (count_step(host_syncs, slow, slow.init_state(5), enc_p, lengths),
                     count_step(host_syncs, fast, fast.init_state(5), enc_p, lengths))
    # frame looping syncs per frame and symbol (so the counter sees them) ...
    assert counts[32][0] > 32
    # ... label looping at most once before the loop and once between rounds
    assert counts[4][1] <= GreedySearch.MAX_ROUNDS and counts[32][1] <= GreedySearch.MAX_ROUNDS
