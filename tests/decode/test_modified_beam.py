"""streamd.decode.modified_beam: the batched, chunked modified beam search (icefall's modified_beam_search).

Against the slow per-utterance reference (helpers.ref_modified_beam: one utterance, one hypothesis at a
time, Python lists and dicts), with LM shallow fusion and hotword boosts as the reference defines them,
and its sync-free (GPU-friendly) path against the frame-looping one (identical n-best lists; one host
sync per chunk, counted by the ``host_syncs`` fixture).
"""

import random

import pytest
import torch

from helpers import make_model
from tests.decode.refs import (RefContext, RefWittenBell, assert_same_hyp, count_step, max_prob, random_batch,
                               ref_modified_beam, run_chunked)
from streamd.decode.context_graph import ContextGraph
from streamd.decode.greedy import GreedySearch
from streamd.decode.lm import build_ngram
from streamd.decode.modified_beam import BeamState, ModifiedBeamSearch

torch.set_num_threads(1)


# ----------------------------------------------------------------- against the reference


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beams", [[1], [4], [2, 4, 3], [1, 5, 2, 4]])
@pytest.mark.parametrize("max_sym", [1, 2, 3])
def test_modified_beam_matches_reference(decoder_kind, seed, beams, max_sym):
    model = make_model(kind=decoder_kind, seed=seed, vocab=5)
    search = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=max_sym)
    b = len(beams)
    enc_p, lengths = random_batch(model, b, 14, seed + 100)
    state = run_chunked(search, search.init_state(torch.tensor(beams)), enc_p, lengths, seed)
    nbest = search.nbest(state, 8)
    merged_somewhere, stacked = False, False
    for i in range(b):
        ref = ref_modified_beam(model, enc_p[i, :lengths[i]], beams[i], max_sym)
        got = nbest[i]
        assert len(got) == len(ref)
        merged_somewhere |= len(ref) < beams[i]
        stacked |= any(f[j] == f[j + 1] for _, _, f, _ in ref for j in range(len(f) - 1))
        for h, (score, ys, frames, confs) in zip(got, ref):
            assert list(h.tokens) == list(ys)
            assert list(h.frames) == list(frames)
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.confs == pytest.approx(confs, abs=1e-5)
    assert stacked == (max_sym > 1)  # several tokens on one frame only when allowed (and then they occur)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_sym", [1, 3])
@pytest.mark.parametrize("sync_free", [False, True])
def test_modified_beam_lm_fusion_matches_reference(decoder_kind, seed, max_sym, sync_free):
    vocab = 5
    model = make_model(kind=decoder_kind, seed=seed, vocab=vocab)
    rnd = random.Random(seed)
    text = [[rnd.choice([1, 2, 2, 3, 4]) for _ in range(rnd.randint(0, 6))] for _ in range(40)]
    lm = build_ngram(text, vocab, 0, 3, 1)
    ref_lm = RefWittenBell(text, 3, vocab, 0, 1)
    beams = [4, 2, 3]
    bonus = 0.5 * seed
    search = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=max_sym, sync_free=sync_free,
                                lm=lm, lm_weight=0.7, lm_bonus=bonus)
    enc_p, lengths = random_batch(model, len(beams), 12, seed + 50)
    state = run_chunked(search, search.init_state(torch.tensor(beams)), enc_p, lengths, seed)
    plain = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=max_sym)
    plain_best = plain.best(run_chunked(plain, plain.init_state(torch.tensor(beams)), enc_p, lengths, seed))
    changed = False
    for final in (False, True):
        nbest = search.nbest(state, 8, final=final)
        best = search.best(state, final=final)
        for i in range(len(beams)):
            ref = ref_modified_beam(model, enc_p[i, :lengths[i]], beams[i], max_sym, ref_lm, 0.7, final, bonus)
            assert [h.tokens for h in nbest[i]] == [tuple(r[1]) for r in ref]
            assert [h.score for h in nbest[i]] == pytest.approx([r[0] for r in ref], abs=1e-4)
            assert [list(h.frames) for h in nbest[i]] == [list(r[2]) for r in ref]
            assert best[i].tokens == tuple(ref[0][1])
            changed |= best[i].tokens != plain_best[i].tokens
    assert changed  # the LM changed some result (the test would be empty otherwise)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("max_sym", [1, 3])
@pytest.mark.parametrize("sync_free", [False, True])
def test_modified_beam_hotwords_match_reference(decoder_kind, seed, max_sym, sync_free):
    """Hotword boosts change scores exactly as the context graph defines them, with the LM on or off,
    for streams with different phrase lists (and one without) in one batch."""
    vocab = 5
    model = make_model(kind=decoder_kind, seed=seed, vocab=vocab)
    rnd = random.Random(seed)
    lists = [(((1, 2), (3,)), (1.5, 0.5), (4,)), (((2, 2, 1),), (2.0,), ()), None]
    graphs = [ContextGraph(p, b, vocab, pre) if p else None for p, b, pre in
              [(lst if lst else (None, None, None)) for lst in lists]]
    refs = [RefContext(p, b, pre) if p else None for p, b, pre in [(lst if lst else (None, None, None)) for lst in lists]]
    lm = ref_lm = None
    if seed % 2:
        text = [[rnd.choice([1, 2, 2, 3, 4]) for _ in range(rnd.randint(0, 6))] for _ in range(40)]
        lm, ref_lm = build_ngram(text, vocab, 0, 3, 1), RefWittenBell(text, 3, vocab, 0, 1)
    beams = [4, 3, 2]
    search = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=max_sym, sync_free=sync_free,
                                lm=lm, lm_weight=0.7 if lm else 0.0, lm_bonus=0.3)
    states = [search.init_state(torch.tensor([bm]), graph=g) for bm, g in zip(beams, graphs)]
    enc_p, lengths = random_batch(model, len(beams), 12, seed + 70)
    state = run_chunked(search, BeamState.cat(states), enc_p, lengths, seed)
    plain = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=max_sym,
                               lm=lm, lm_weight=0.7 if lm else 0.0, lm_bonus=0.3)
    plain_best = plain.best(run_chunked(plain, plain.init_state(torch.tensor(beams)), enc_p, lengths, seed))
    changed = False
    for final in (False, True):
        nbest = search.nbest(state, 8, final=final)
        for i in range(len(beams)):
            ref = ref_modified_beam(model, enc_p[i, :lengths[i]], beams[i], max_sym, ref_lm, 0.7 if lm else 0.0,
                                    final, 0.3, ctx=refs[i])
            assert [h.tokens for h in nbest[i]] == [tuple(r[1]) for r in ref]
            assert [h.score for h in nbest[i]] == pytest.approx([r[0] for r in ref], abs=1e-4)
            assert [list(h.frames) for h in nbest[i]] == [list(r[2]) for r in ref]
            changed |= graphs[i] is not None and nbest[i][0].tokens != plain_best[i].tokens
        # the stream without hotwords decodes exactly as without any
        assert nbest[2][0].tokens == plain.best(run_chunked(plain, plain.init_state(torch.tensor(beams)), enc_p,
                                                            lengths, seed), final=final)[2].tokens
    assert changed  # the boosts changed some result (the test would be empty otherwise)
    # reset puts every hypothesis back at its graph's start state
    st = search.reset(state, torch.tensor([True, False, True]))
    assert int(st.ctx_state[0, 0]) == int(st.ctx.starts(st.ctx_part)[0])


def test_modified_beam_empty_hotword_list_is_neutral(decoder_kind):
    model = make_model(kind=decoder_kind, seed=3, vocab=5)
    search = ModifiedBeamSearch(model, measure=max_prob, max_symbols_per_frame=2)
    enc_p, lengths = random_batch(model, 2, 12, 3)
    empty = ContextGraph((), (), 5, (4,))
    zero = ContextGraph(((1, 2), (3,)), (0.0, 0.0), 5, (4,))
    base = search.nbest(run_chunked(search, search.init_state(torch.tensor([4, 4])), enc_p, lengths, 3), 4, final=True)
    for g in (empty, zero):
        got = search.nbest(run_chunked(search, search.init_state(torch.tensor([4, 4]), graph=g), enc_p, lengths, 3),
                           4, final=True)
        for a, b in zip(base, got):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)


def test_modified_beam_lm_reset_and_weight_zero():
    model = make_model(seed=2, vocab=4)
    lm = build_ngram([[1, 2, 3], [3, 2]], 4, 0, 2, 1)
    s = ModifiedBeamSearch(model, lm=lm, lm_weight=0.5)
    enc_p, lengths = random_batch(model, 2, 8, 2)
    st = s.step(s.init_state(torch.tensor([3, 3])), enc_p, lengths, torch.zeros(2, dtype=torch.long))
    st = s.reset(st, torch.tensor([True, False]))
    assert (st.lm_state[0] == lm.start).all()
    assert ModifiedBeamSearch(model, lm=lm, lm_weight=0.0).lm is None
    with pytest.raises(ValueError, match="tokens"):
        ModifiedBeamSearch(model, lm=build_ngram([[1]], 3, 0, 2), lm_weight=0.5)
    with pytest.raises(ValueError, match="lm_weight"):
        ModifiedBeamSearch(model, lm=lm, lm_weight=-1)


def test_modified_beam_merges_identical_sequences():
    """With a sharp blank/token split, paths like (a, blank) and (blank, a) must merge."""
    model = make_model(seed=3, vocab=3, scale=0.5)
    search = ModifiedBeamSearch(model)
    enc_p, lengths = random_batch(model, 1, 12, 3)
    lengths[:] = 12
    st = search.step(search.init_state(torch.tensor([6])), enc_p, lengths, torch.zeros(1, dtype=torch.long))
    seqs = [h.tokens for h in search.nbest(st, 6)[0]]
    assert len(seqs) == len(set(seqs))
    ref = ref_modified_beam(model, enc_p[0], 6)
    assert [tuple(r[1]) for r in ref] == seqs


def test_modified_beam_beam1_equals_greedy_one_symbol():
    model = make_model(seed=4)
    enc_p, lengths = random_batch(model, 3, 16, 4)
    g = GreedySearch(model, max_symbols_per_frame=1)
    m = ModifiedBeamSearch(model)
    z = torch.zeros(3, dtype=torch.long)
    og = g.best(g.step(g.init_state(3), enc_p, lengths, z))
    om = m.best(m.step(m.init_state(torch.tensor([1, 1, 1])), enc_p, lengths, z))
    assert [o.tokens for o in og] == [o.tokens for o in om]
    assert [o.score for o in og] == pytest.approx([o.score for o in om], abs=1e-4)


def test_modified_beam_cat_select_and_reset():
    model = make_model(seed=9, kind="lstm")
    s = ModifiedBeamSearch(model)
    enc_p, lengths = random_batch(model, 3, 10, 9)
    lengths[:] = 10
    z = torch.zeros(3, dtype=torch.long)
    full = s.step(s.step(s.init_state(torch.tensor([2, 4, 3])), enc_p, lengths, z), enc_p, lengths, z + 10)
    # decode the first chunk in two separate batches with different grid widths (K = 2 and 4),
    # then recombine them in another order
    half_a = s.step(s.init_state(torch.tensor([2])), enc_p[:1], lengths[:1], z[:1])
    half_b = s.step(s.init_state(torch.tensor([4, 3])), enc_p[1:], lengths[1:], z[1:])
    assert half_a.k == 2 and half_b.k == 4
    joined = BeamState.cat([half_b.select(torch.tensor([1])), half_a, half_b.select(torch.tensor([0]))])
    perm = torch.tensor([2, 0, 1])
    joined = s.step(joined, enc_p[perm], lengths[perm], z + 10)
    a, b = s.nbest(full, 4), s.nbest(joined, 4)
    for j, i in enumerate(perm.tolist()):
        assert [h.tokens for h in a[i]] == [h.tokens for h in b[j]]
        assert [h.score for h in a[i]] == pytest.approx([h.score for h in b[j]], abs=1e-5)
    st = s.reset(full, torch.tensor([False, True, False]))
    assert s.best(st)[1].tokens == () and s.best(st)[1].score == 0.0
    assert s.best(st)[0].tokens == s.best(full)[0].tokens


@pytest.mark.parametrize("variant", ["plain", "blank_folding", "lm", "hotwords"])
def test_modified_beam_compacted_rounds_equal_streams_alone(decoder_kind, variant, monkeypatch):
    """A batch where only some streams still have a hypothesis in a frame's later rounds (those rounds run on
    those streams only) decodes every stream exactly as that stream decoded alone."""
    vocab = 6
    model = make_model(kind=decoder_kind, seed=21, vocab=vocab)
    kw = {"measure": max_prob, "max_symbols_per_frame": 3}
    graphs = [None] * 5
    if variant == "blank_folding":
        kw.update(exclude_blank=False, aggregation="mean")
    if variant == "lm":
        rnd = random.Random(21)
        text = [[rnd.choice([1, 2, 2, 3, 4, 5]) for _ in range(rnd.randint(0, 6))] for _ in range(40)]
        kw.update(lm=build_ngram(text, vocab, 0, 3, 1), lm_weight=0.7, lm_bonus=0.3)
    if variant == "hotwords":
        kw.update(track_matches=True)
        graphs = [ContextGraph(((1, 2), (3,)), (1.5, 0.5), vocab), None, ContextGraph(((2, 2, 1),), (2.0,), vocab),
                  None, ContextGraph(((4,),), (1.0,), vocab)]
    search = ModifiedBeamSearch(model, **kw)
    beams = [4, 1, 3, 2, 4]
    enc_p, lengths = random_batch(model, len(beams), 16, 21)
    compacted = []
    monkeypatch.setattr(ModifiedBeamSearch, "COMPACT_MIN_STREAMS", 1)  # compaction's batch-size bar off
    round_rows = BeamState.round_rows
    monkeypatch.setattr(BeamState, "round_rows", lambda st, rows: compacted.append(len(rows)) or round_rows(st, rows))
    state = run_chunked(search, BeamState.cat([search.init_state(torch.tensor([bm]), graph=g)
                                               for bm, g in zip(beams, graphs)]), enc_p, lengths, 21)
    assert compacted and max(compacted) < len(beams)  # some rounds ran on part of the batch
    for i, (bm, g) in enumerate(zip(beams, graphs)):
        alone = run_chunked(search, search.init_state(torch.tensor([bm]), graph=g), enc_p[i:i + 1],
                            lengths[i:i + 1], 21)
        for final in (False, True):
            got, want = search.nbest(state, 8, final=final)[i], search.nbest(alone, 8, final=final)[0]
            assert len(got) == len(want)
            for x, y in zip(got, want):  # float sums in another batch shape may differ in the last bits
                assert_same_hyp(x, y)
        assert torch.equal(search.trailing_blanks(state)[i:i + 1], search.trailing_blanks(alone))
        if state.matches is not None:
            slot, slot_alone = search.best_slots(state)[i], search.best_slots(alone)[0]
            assert torch.equal(state.matches[i, slot], alone.matches[0, slot_alone])


# ----------------------------------------------------------------- sync-free


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


def test_modified_beam_sync_free_host_syncs_per_chunk(host_syncs, decoder_kind):
    model = make_model(kind=decoder_kind, seed=3, vocab=5)
    counts = {}
    for t in (4, 32):
        enc_p, lengths = random_batch(model, 3, t, t)
        counts[t] = [count_step(host_syncs, s, s.init_state(torch.tensor([4, 2, 3])), enc_p, lengths)
                     for s in (ModifiedBeamSearch(model, sync_free=False), ModifiedBeamSearch(model, sync_free=True))]
    assert counts[32][0] > 32
    assert counts[4][1] == counts[32][1] == 1  # the buffer capacity bound before the frame loop
