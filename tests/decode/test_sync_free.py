"""Sync-free (GPU-friendly) search paths against the frame-looping ones and the slow references.

``sync_free=True`` must give exactly what ``sync_free=False`` gives (tokens,
frames, confidences, scores, trailing blanks), both must match the
per-utterance references of test_transducer_search.py, and the sync-free
paths must talk to the host a bounded number of times per chunk, however
many frames the chunk has (counted on CPU by wrapping the Tensor methods
that copy device data to the host).
"""

import collections

import pytest
import torch

from helpers import make_model, max_prob, random_batch, run_chunked
from streamd.decode.greedy import GreedySearch
from streamd.decode.modified_beam import ModifiedBeamSearch
from test_transducer_search import ref_greedy, ref_modified_beam

torch.set_num_threads(1)


def assert_same_hyp(a, b, tol=1e-5):
    assert a.tokens == b.tokens
    assert a.frames == b.frames
    assert a.confs == pytest.approx(b.confs, abs=tol)
    assert a.score == pytest.approx(b.score, abs=tol)


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


# ----------------------------------------------------------------- greedy


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


# ----------------------------------------------------------------- modified beam


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("beams", [[1], [3], [2, 4, 3], [1, 5, 2, 4]])
@pytest.mark.parametrize("max_sym", [1, 3])
def test_modified_beam_sync_free_matches(decoder_kind, seed, beams, max_sym):
    model = make_model(kind=decoder_kind, seed=seed, vocab=5)
    b = len(beams)
    enc_p, lengths = random_batch(model, b, 13, seed + 50)
    res = []
    for sync_free in (False, True):
        s = ModifiedBeamSearch(model, measure=max_prob, sync_free=sync_free, max_symbols_per_frame=max_sym)
        st = run_chunked(s, s.init_state(torch.tensor(beams)), enc_p, lengths, seed)
        res.append((s.nbest(st, 8), s.trailing_blanks(st)))
    (nb_s, tb_s), (nb_f, tb_f) = res
    assert torch.equal(tb_s, tb_f)
    for i in range(b):
        assert len(nb_f[i]) == len(nb_s[i])
        for x, y in zip(nb_s[i], nb_f[i]):
            assert_same_hyp(y, x)
        ref = ref_modified_beam(model, enc_p[i, :lengths[i]], beams[i], max_sym)
        assert len(ref) == len(nb_f[i])
        for h, (score, ys, frames, confs) in zip(nb_f[i], ref):
            assert list(h.tokens) == list(ys) and list(h.frames) == list(frames)
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.confs == pytest.approx(confs, abs=1e-5)


@pytest.mark.parametrize("aggregation", ["min", "mean"])
def test_modified_beam_blank_confidence_folding_same(aggregation):
    model = make_model(seed=12, kind="lstm", vocab=6)
    enc_p, lengths = random_batch(model, 3, 14, 12)
    res = []
    for sync_free in (False, True):
        s = ModifiedBeamSearch(model, max_prob, exclude_blank=False, aggregation=aggregation, sync_free=sync_free)
        res.append(s.nbest(run_chunked(s, s.init_state(torch.tensor([3, 1, 4])), enc_p, lengths, 2), 4))
    for a, b in zip(*res):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_hyp(y, x)


# ----------------------------------------------------------------- host syncs

SYNC_METHODS = ("item", "__bool__", "nonzero", "tolist", "cpu", "numpy", "__int__", "__float__", "__index__")


@pytest.fixture
def host_syncs(monkeypatch):
    """Counter of calls to Tensor methods that copy device data to the host."""
    counts = collections.Counter()

    def wrap(name, orig):
        def counted(self, *a, **kw):
            counts[name] += 1
            return orig(self, *a, **kw)
        return counted

    for name in SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))
    return counts


def count_step(counts, search, state, enc_p, lengths):
    counts.clear()
    search.step(state, enc_p, lengths, torch.zeros(enc_p.shape[0], dtype=torch.long))
    return sum(counts.values())


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


def test_modified_beam_sync_free_host_syncs_per_chunk(host_syncs, decoder_kind):
    model = make_model(kind=decoder_kind, seed=3, vocab=5)
    counts = {}
    for t in (4, 32):
        enc_p, lengths = random_batch(model, 3, t, t)
        counts[t] = [count_step(host_syncs, s, s.init_state(torch.tensor([4, 2, 3])), enc_p, lengths)
                     for s in (ModifiedBeamSearch(model, sync_free=False), ModifiedBeamSearch(model, sync_free=True))]
    assert counts[32][0] > 32
    assert counts[4][1] == counts[32][1] == 1  # the buffer capacity bound before the frame loop


# ----------------------------------------------------------------- errors


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
