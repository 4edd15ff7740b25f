"""CTC greedy and prefix beam searches vs. plain per-utterance Python oracles.

The oracles work on one utterance at a time with Python floats and dicts
keyed by token tuples, straight from the definitions (module docstring of
streamd/decode/ctc.py).  The fast searches run batched, on random chunk
splits with NaN padding, mixed lengths and mixed beams.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from streamd.decode.ctc import CtcGreedySearch, CtcGreedyState, CtcPrefixBeamSearch, CtcPrefixState
from streamd.decode.hyps import HypOut

NEG = -math.inf
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def measure(lp: torch.Tensor) -> torch.Tensor:
    return lp.exp().max(-1).values


# --------------------------------------------------------------------------- slow oracles


def lae(a: float, b: float) -> float:
    if a == NEG:
        return b
    if b == NEG:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


def ref_greedy(lp: list[list[float]], conf: list[float], blank: int, offset: int = 0) -> tuple:
    """Returns (tokens, frames, confs, trailing) of one utterance."""
    toks, frs, cfs, prev, trailing = [], [], [], blank, 0
    for t, row in enumerate(lp):
        a = max(range(len(row)), key=lambda c: row[c])
        trailing += 1
        if a != blank and a != prev:
            toks.append(a), frs.append(offset + t), cfs.append(conf[t])
            trailing = 0
        prev = a
    return tuple(toks), tuple(frs), tuple(cfs), trailing


def ref_prefix(lp: list[list[float]], conf: list[float], blank: int, beam: int, offset: int = 0,
               penalty: float = 0.0) -> list[HypOut]:
    """Hannun et al. prefix beam search; returns the beam best first (HypOut, score = log(p_b + p_nb)); every
    extension adds -penalty."""
    v = len(lp[0]) if lp else 2
    beams = {(): (0.0, NEG)}
    meta = {(): ((), ())}  # prefix -> (frames, confs)
    for t, row in enumerate(lp):
        cands = sorted((c for c in range(v) if c != blank), key=lambda c: -row[c])[:beam]
        nb, nnb = defaultdict(lambda: NEG), defaultdict(lambda: NEG)
        stay, ext, ext_meta = {}, {}, {}
        for y, (pb, pnb) in beams.items():
            tot = lae(pb, pnb)
            s_b = tot + row[blank]
            s_nb = pnb + row[y[-1]] if y else NEG
            nb[y] = lae(nb[y], s_b)
            nnb[y] = lae(nnb[y], s_nb)
            stay[y] = lae(s_b, s_nb)
            for c in cands:
                z = y + (c,)
                val = (pb if y and c == y[-1] else tot) + row[c] - penalty
                nnb[z] = lae(nnb[z], val)
                ext[z] = val
                ext_meta[z] = (meta[y][0] + (offset + t,), meta[y][1] + (conf[t],))
        scored = sorted(((lae(nb[z], nnb[z]), z) for z in set(nb) | set(nnb)), key=lambda s: -s[0])
        scored = [(s, z) for s, z in scored if s > NEG][:beam]
        beams = {z: (nb[z], nnb[z]) for _, z in scored}
        # a new prefix takes its parent's timing plus frame t; a kept one retimes only its last token, when the
        # extension's contribution is strictly larger than its stay's
        meta = {z: meta[z] if ext.get(z, NEG) <= stay.get(z, NEG)
                else ext_meta[z] if z not in stay
                else (meta[z][0][:-1] + ext_meta[z][0][-1:], meta[z][1][:-1] + ext_meta[z][1][-1:])
                for _, z in scored}
    out = [HypOut(z, meta[z][0], meta[z][1], lae(*beams[z])) for z in beams]
    return sorted(out, key=lambda h: -h.score)


def ref_trailing(h: HypOut, n_frames: int, offset: int = 0) -> int:
    return n_frames + offset - h.frames[-1] - 1 if h.tokens else n_frames


# --------------------------------------------------------------------------- helpers


def rand_lp(gen: torch.Generator, b: int, t: int, v: int, scale: float = 2.0,
            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(b, t, v, generator=gen, dtype=torch.float64) * scale
    x[..., 0] += 1.0  # blank a bit more likely, as in real CTC output
    return torch.log_softmax(x, -1).to(dtype)


def random_chunks(gen: torch.Generator, lp: torch.Tensor, lengths: list[int], max_chunk: int,
                  offsets: list[int] | None = None):
    """Yield (chunk (B, T_i, V) NaN-padded, lengths (B,), frame_offset (B,)) covering each stream's frames."""
    b = lp.shape[0]
    offsets = offsets or [0] * b
    done = [0] * b
    while any(d < n for d, n in zip(done, lengths)):
        take = [min(int(torch.randint(0, max_chunk + 1, (1,), generator=gen)), n - d) for d, n in zip(done, lengths)]
        t = max(max(take), 1)
        chunk = torch.full((b, t, lp.shape[2]), float("nan"), dtype=lp.dtype)
        for i in range(b):
            chunk[i, :take[i]] = lp[i, done[i]:done[i] + take[i]]
        yield (chunk.to(lp.device), torch.tensor(take, device=lp.device),
               torch.tensor([o + d for o, d in zip(offsets, done)], device=lp.device))
        done = [d + k for d, k in zip(done, take)]


def decode(search, state, lp, lengths, gen=None, max_chunk=0, offsets=None):
    """Chunked when gen is given, else one call on the whole padded sequence."""
    if gen is None:
        off = torch.tensor(offsets or [0] * lp.shape[0], device=lp.device)
        return search.step(state, lp, torch.tensor(lengths, device=lp.device), off)
    for chunk, ln, off in random_chunks(gen, lp, lengths, max_chunk, offsets):
        state = search.step(state, chunk, ln, off)
    return state


def assert_hyp(got: HypOut, want: HypOut, score_tol: float = 1e-4) -> None:
    assert got.tokens == want.tokens
    assert got.frames == want.frames
    assert got.confs == pytest.approx(want.confs, abs=1e-6)
    assert got.score == pytest.approx(want.score, abs=score_tol)


# --------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed,b,v", [(0, 1, 5), (1, 3, 5), (2, 4, 30), (3, 2, 2)])
def test_greedy_matches_oracle_whole_and_chunked(device, seed, b, v):
    gen = torch.Generator().manual_seed(seed)
    n_max = 40
    lp = rand_lp(gen, b, n_max, v).to(device)
    lengths = [int(x) for x in torch.randint(0, n_max + 1, (b,), generator=gen)]
    conf = measure(lp).cpu()
    want = [ref_greedy(lp[i, :lengths[i]].tolist(), conf[i].tolist(), 0) for i in range(b)]
    s = CtcGreedySearch(0, measure)
    for g, mc in [(None, 0), (gen, 1), (gen, 5), (gen, 17)]:
        st = decode(s, s.init_state(b, device), lp, lengths, g, mc)
        for got, (tok, fr, cf, _) in zip(s.best(st), want):
            assert_hyp(got, HypOut(tok, fr, cf), score_tol=0)
        assert s.trailing_blanks(st).tolist() == [w[3] for w in want]


def test_greedy_nonzero_blank_and_no_measure():
    gen = torch.Generator().manual_seed(5)
    lp = rand_lp(gen, 2, 30, 6)
    lp = lp.roll(3, -1)  # blank (boosted column) is now id 3
    s = CtcGreedySearch(3)
    st = decode(s, s.init_state(2), lp, [30, 21], gen, 4)
    for i, (got, n) in enumerate(zip(s.best(st), [30, 21])):
        tok, fr, _, _ = ref_greedy(lp[i, :n].tolist(), [1.0] * n, 3)
        assert got.tokens == tok and got.frames == fr and got.confs == (1.0,) * len(tok)
        assert 3 not in got.tokens


def test_greedy_collapse_across_chunk_boundary_and_offsets():
    s = CtcGreedySearch(0)
    onehot = lambda ids: torch.log_softmax(torch.eye(4)[ids] * 20, -1)[None]  # noqa: E731
    st = s.init_state(1)
    st = s.step(st, onehot([1, 1]), torch.tensor([2]), torch.tensor([100]))
    st = s.step(st, onehot([1, 0, 1]), torch.tensor([3]), torch.tensor([102]))
    st = s.step(st, onehot([2, 0, 0]), torch.tensor([1]), torch.tensor([105]))  # frames 1, 2 are padding
    (h,) = s.best(st)
    assert h.tokens == (1, 1, 2) and h.frames == (100, 104, 105)
    assert s.trailing_blanks(st).tolist() == [0]
    st = s.step(st, onehot([0, 0]), torch.tensor([2]), torch.tensor([106]))
    assert s.trailing_blanks(st).tolist() == [2]


def test_greedy_reset_starts_new_segment():
    gen = torch.Generator().manual_seed(7)
    b, v, n1, n2 = 3, 7, 20, 15
    lp1, lp2 = rand_lp(gen, b, n1, v), rand_lp(gen, b, n2, v)
    s = CtcGreedySearch(0, measure)
    st = decode(s, s.init_state(b), lp1, [n1] * b, gen, 6)
    rows = torch.tensor([True, False, True])
    st = s.reset(st, rows)
    assert s.trailing_blanks(st).tolist()[0] == 0 and s.trailing_blanks(st).tolist()[2] == 0
    st = decode(s, st, lp2, [n2] * b, gen, 6, offsets=[n1] * b)
    conf1, conf2 = measure(lp1), measure(lp2)
    for i, got in enumerate(s.best(st)):
        if rows[i]:
            tok, fr, cf, tr = ref_greedy(lp2[i].tolist(), conf2[i].tolist(), 0, offset=n1)
        else:
            full = torch.cat([lp1[i], lp2[i]])
            tok, fr, cf, tr = ref_greedy(full.tolist(), torch.cat([conf1[i], conf2[i]]).tolist(), 0)
        assert_hyp(got, HypOut(tok, fr, cf), score_tol=0)
        assert int(s.trailing_blanks(st)[i]) == tr


def test_greedy_cat_select_roundtrip():
    gen = torch.Generator().manual_seed(11)
    b, v, n = 4, 9, 24
    lp = rand_lp(gen, b, n, v)
    s = CtcGreedySearch(0, measure)
    batch = decode(s, s.init_state(b), lp, [n] * b)
    # first half per stream alone, then cat (with a permutation via select) for the second half
    singles = [s.step(s.init_state(1), lp[i:i + 1, :10], torch.tensor([10]), torch.tensor([0])) for i in range(b)]
    perm = torch.tensor([2, 0, 3, 1])
    st = CtcGreedyState.cat([singles[i] for i in perm.tolist()])
    st = s.step(st, lp[perm, 10:], torch.full((b,), n - 10), torch.full((b,), 10))
    st = st.select(torch.argsort(perm))
    assert s.best(st) == s.best(batch)
    assert s.trailing_blanks(st).tolist() == s.trailing_blanks(batch).tolist()


def test_greedy_step_does_not_mutate_state():
    gen = torch.Generator().manual_seed(2)
    lp = rand_lp(gen, 2, 12, 5)
    s = CtcGreedySearch(0)
    st = decode(s, s.init_state(2), lp[:, :6], [6, 6])
    before = s.best(st)
    s.step(st, lp[:, 6:], torch.tensor([6, 6]), torch.tensor([6, 6]))
    assert s.best(st) == before


# --------------------------------------------------------------------------- prefix beam search

CASES = [  # seed, V, beams
    (0, 5, [1]), (1, 5, [2]), (2, 5, [4]), (3, 30, [4, 1, 2]), (4, 30, [2, 2]),
    (5, 5, [1, 4, 3, 2]), (6, 30, [3]), (7, 2, [1, 3]),
]


def check_prefix(s, st, lp, lengths, beams, conf, dtype_tol=1e-4, offsets=None):
    got_all = s.nbest(st, max(beams))
    assert len(got_all) == lp.shape[0]
    for i, got in enumerate(got_all):
        n = lengths[i]
        off = offsets[i] if offsets else 0
        want = ref_prefix(lp[i, :n].double().tolist(), conf[i].tolist(), 0, beams[i], off, s.insertion_penalty)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_hyp(g, w, dtype_tol)
        assert s.best(st)[i] == got[0]
        assert int(s.trailing_blanks(st)[i]) == ref_trailing(want[0], n, off)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed,v,beams", CASES)
def test_prefix_matches_oracle_whole_and_chunked(device, seed, v, beams):
    gen = torch.Generator().manual_seed(seed)
    b, n_max = len(beams), 25
    lp = rand_lp(gen, b, n_max, v).to(device)
    lengths = [int(x) for x in torch.randint(0, n_max + 1, (b,), generator=gen)]
    conf = measure(lp).cpu()
    s = CtcPrefixBeamSearch(0, measure)
    for g, mc in [(None, 0), (gen, 1), (gen, 4), (gen, 11)]:
        st = decode(s, s.init_state(torch.tensor(beams), device), lp, lengths, g, mc)
        check_prefix(s, st, lp.cpu(), lengths, beams, conf)


@pytest.mark.parametrize("penalty", [0.3, 2.0])
def test_prefix_insertion_penalty_matches_oracle(penalty):
    gen = torch.Generator().manual_seed(44)
    beams, v, n = [4, 2, 3], 6, 30
    lp = rand_lp(gen, 3, n, v, scale=1.0, dtype=torch.float64)
    s = CtcPrefixBeamSearch(0, measure, insertion_penalty=penalty)
    for g, mc in [(None, 0), (gen, 5)]:
        st = decode(s, s.init_state(torch.tensor(beams), dtype=torch.float64), lp, [n, 17, 29], g, mc)
        check_prefix(s, st, lp, [n, 17, 29], beams, measure(lp), dtype_tol=1e-9)


def test_prefix_insertion_penalty_keeps_a_weak_token_out_of_noise():
    # no frame prefers the token to blank (greedy writes nothing), but summed over the alignments "t" is
    # slightly more likely than nothing; a small penalty keeps it out, a clear token stays
    p_tok = [0.03, 0.19, 0.31, 0.13]
    rows = [[math.log(1 - p), math.log(p)] for p in p_tok]
    lp = torch.tensor([[[0.0, NEG]] * 3 + rows + [[0.0, NEG]] * 3], dtype=torch.float64)
    for penalty, want in [(0.0, (1,)), (0.3, ())]:
        s = CtcPrefixBeamSearch(0, measure, insertion_penalty=penalty)
        st = decode(s, s.init_state(torch.tensor([2]), dtype=torch.float64), lp, [10])
        assert s.best(st)[0].tokens == want
    clear = torch.tensor([[[0.0, NEG]] * 3 + [[math.log(0.1), math.log(0.9)]] + [[0.0, NEG]] * 3],
                         dtype=torch.float64)
    s = CtcPrefixBeamSearch(0, measure, insertion_penalty=1.0)
    assert s.best(decode(s, s.init_state(torch.tensor([2]), dtype=torch.float64), clear, [7]))[0].tokens == (1,)


def test_prefix_float64_exact_scores():
    gen = torch.Generator().manual_seed(21)
    beams, v, n = [4, 2, 3], 8, 30
    lp = rand_lp(gen, 3, n, v, scale=1.0, dtype=torch.float64)
    s = CtcPrefixBeamSearch(0, measure)
    st = decode(s, s.init_state(torch.tensor(beams), dtype=torch.float64), lp, [n, 17, 29], gen, 5)
    check_prefix(s, st, lp, [n, 17, 29], beams, measure(lp), dtype_tol=1e-9)


def test_prefix_flat_distribution_merges_many_paths():
    # small V, long sequence, flat-ish distribution: lots of prefix merges and beam churn
    gen = torch.Generator().manual_seed(33)
    beams, v, n = [4, 3], 3, 40
    lp = rand_lp(gen, 2, n, v, scale=0.5)
    s = CtcPrefixBeamSearch(0, measure)
    st = decode(s, s.init_state(torch.tensor(beams)), lp, [n, n], gen, 7)
    check_prefix(s, st, lp, [n, n], beams, measure(lp))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prefix_peaky_equals_greedy(seed):
    gen = torch.Generator().manual_seed(seed)
    b, v, n = 4, 12, 40
    ids = torch.randint(0, v, (b, n), generator=gen)
    ids[torch.rand(b, n, generator=gen) < 0.5] = 0
    logits = torch.randn(b, n, v, generator=gen) + 25.0 * torch.nn.functional.one_hot(ids, v)
    lp = torch.log_softmax(logits, -1)
    g = CtcGreedySearch(0, measure)
    greedy = g.best(decode(g, g.init_state(b), lp, [n] * b, gen, 6))
    s = CtcPrefixBeamSearch(0, measure)
    for beams in ([1] * b, [2] * b, [1, 2, 3, 4]):
        best = s.best(decode(s, s.init_state(torch.tensor(beams)), lp, [n] * b, gen, 6))
        for x, y in zip(best, greedy):
            assert x.tokens == y.tokens and x.frames == y.frames
            assert x.confs == pytest.approx(y.confs)


def test_prefix_reset_starts_new_segment():
    gen = torch.Generator().manual_seed(8)
    beams, v, n1, n2 = [3, 2, 1], 6, 15, 12
    lp1, lp2 = rand_lp(gen, 3, n1, v), rand_lp(gen, 3, n2, v)
    s = CtcPrefixBeamSearch(0, measure)
    st = decode(s, s.init_state(torch.tensor(beams)), lp1, [n1] * 3, gen, 5)
    rows = torch.tensor([True, False, True])
    st = s.reset(st, rows)
    assert s.trailing_blanks(st).tolist() == [0, int(s.trailing_blanks(st)[1]), 0]
    assert [len(x) for x in s.nbest(st, 5)][0] == 1 and s.best(st)[0].tokens == ()
    st = decode(s, st, lp2, [n2] * 3, gen, 5, offsets=[n1] * 3)
    got_all = s.nbest(st, 3)
    for i in range(3):
        if rows[i]:
            want = ref_prefix(lp2[i].double().tolist(), measure(lp2)[i].tolist(), 0, beams[i], n1)
        else:
            full = torch.cat([lp1[i], lp2[i]])
            want = ref_prefix(full.double().tolist(), measure(full).tolist(), 0, beams[i])
        assert len(got_all[i]) == len(want)
        for g, w in zip(got_all[i], want):
            assert_hyp(g, w)
        assert int(s.trailing_blanks(st)[i]) == ref_trailing(want[0], n2 + (0 if rows[i] else n1),
                                                            n1 if rows[i] else 0)


def test_prefix_cat_select_roundtrip():
    gen = torch.Generator().manual_seed(13)
    beams, v, n = [4, 1, 2, 3], 7, 20
    lp = rand_lp(gen, 4, n, v)
    s = CtcPrefixBeamSearch(0, measure)
    batch = decode(s, s.init_state(torch.tensor(beams)), lp, [n] * 4)
    singles = [s.step(s.init_state(torch.tensor([beams[i]])), lp[i:i + 1, :8], torch.tensor([8]), torch.tensor([0]))
               for i in range(4)]
    perm = torch.tensor([1, 3, 0, 2])
    st = CtcPrefixState.cat([singles[i] for i in perm.tolist()])
    assert st.k == 4
    st = s.step(st, lp[perm, 8:], torch.full((4,), n - 8), torch.full((4,), 8))
    st = st.select(torch.argsort(perm))
    assert s.nbest(st, 4) == s.nbest(batch, 4)
    assert s.trailing_blanks(st).tolist() == s.trailing_blanks(batch).tolist()
    sub = batch.select(torch.tensor([1, 2]))  # beams 1 and 2: K shrinks to 2
    assert sub.k == 2 and s.nbest(sub, 4) == s.nbest(batch, 4)[1:3]


def test_prefix_step_does_not_mutate_state():
    gen = torch.Generator().manual_seed(4)
    lp = rand_lp(gen, 2, 12, 5)
    s = CtcPrefixBeamSearch(0)
    st = decode(s, s.init_state(torch.tensor([3, 2])), lp[:, :6], [6, 6])
    before = s.nbest(st, 3)
    s.step(st, lp[:, 6:], torch.tensor([6, 6]), torch.tensor([6, 6]))
    assert s.nbest(st, 3) == before


def test_prefix_zero_length_chunk_and_empty_batch():
    s = CtcPrefixBeamSearch(0)
    st = s.init_state(torch.tensor([2]))
    st = s.step(st, torch.zeros(1, 0, 4), torch.tensor([0]), torch.tensor([0]))
    assert s.best(st)[0] == HypOut((), (), (), 0.0)
    st0 = s.init_state(torch.zeros(0, dtype=torch.long))
    st0 = s.step(st0, torch.zeros(0, 3, 4), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert s.best(st0) == [] and s.nbest(st0, 2) == []


def test_long_segment_then_reset_shrinks_buffer():
    # 120 frames of alternating tokens grow the token buffer; after a reset it shrinks and stays correct
    ids = torch.tensor([[1, 2] * 60, [0, 3] * 60])
    lp = torch.log_softmax(25.0 * torch.nn.functional.one_hot(ids, 4).float(), -1)
    for s, st in [(CtcGreedySearch(0), CtcGreedySearch(0).init_state(2)),
                  (CtcPrefixBeamSearch(0), CtcPrefixBeamSearch(0).init_state(torch.tensor([2, 3])))]:
        gen = torch.Generator().manual_seed(0)
        st = decode(s, st, lp, [120, 120], gen, 40)
        assert [len(h.tokens) for h in s.best(st)] == [120, 60]
        assert st.hyps.capacity >= 120
        st = s.reset(st, torch.tensor([True, True]))
        st = decode(s, st, lp[:, :5], [5, 5], gen, 5, offsets=[120, 120])
        assert st.hyps.capacity < 120
        assert [h.tokens for h in s.best(st)] == [(1, 2, 1, 2, 1), (3, 3)]
        assert [h.frames for h in s.best(st)] == [(120, 121, 122, 123, 124), (121, 123)]
        assert s.trailing_blanks(st).tolist() == [0, 1]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("which", ["greedy", "prefix"])
def test_invalid_inputs_raise_clear_errors(which):
    if which == "greedy":
        s = CtcGreedySearch(0)
        st = s.init_state(2)
    else:
        s = CtcPrefixBeamSearch(0)
        st = s.init_state(torch.tensor([2, 3]))
    lp = torch.log_softmax(torch.randn(2, 4, 5), -1)
    ln, off = torch.tensor([4, 2]), torch.tensor([0, 0])
    with pytest.raises(ValueError, match=r"log_probs: expected shape \(B, T, V\)"):
        s.step(st, lp[0], ln, off)
    with pytest.raises(ValueError, match="log_probs: batch 1 does not match the state's batch 2"):
        s.step(st, lp[:1], ln, off)
    with pytest.raises(TypeError, match="log_probs: expected a floating tensor"):
        s.step(st, lp.long(), ln, off)
    with pytest.raises(ValueError, match=r"lengths: every value must be in \[0, T=4\], got \[5, 2\]"):
        s.step(st, lp, torch.tensor([5, 2]), off)
    with pytest.raises(ValueError, match=r"lengths: every value must be in \[0, T=4\], got \[-1, 2\]"):
        s.step(st, lp, torch.tensor([-1, 2]), off)
    with pytest.raises(ValueError, match=r"lengths: expected shape \(2,\), got \(3,\)"):
        s.step(st, lp, torch.tensor([1, 2, 3]), off)
    with pytest.raises(TypeError, match="lengths: expected an integer tensor, got dtype torch.float32"):
        s.step(st, lp, ln.float(), off)
    with pytest.raises(ValueError, match=r"frame_offset: every value must be >= 0, got \[0, -3\]"):
        s.step(st, lp, ln, torch.tensor([0, -3]))
    with pytest.raises(ValueError, match="blank_id 7 is out of range for vocabulary size V=5"):
        type(s)(7).step(st, lp, ln, off)
    with pytest.raises(ValueError, match=r"measure: must map log_probs \(2, 4, 5\) to shape \(2, 4\)"):
        type(s)(0, lambda x: x.exp()).step(st, lp, ln, off)
    with pytest.raises(ValueError, match=r"rows: expected a \(2,\) bool tensor"):
        s.reset(st, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="rows: expected a \\(B',\\) int64 index tensor"):
        st.select(torch.tensor([True, False]))
    with pytest.raises(ValueError, match="cat: expected at least one state"):
        type(st).cat([])
    with pytest.raises(ValueError, match="blank_id: must be an int >= 0, got -1"):
        type(s)(-1)


def test_prefix_specific_errors():
    s = CtcPrefixBeamSearch(0)
    with pytest.raises(ValueError, match=r"beams: every beam size must be >= 1, got \[2, 0\]"):
        s.init_state(torch.tensor([2, 0]))
    with pytest.raises(ValueError, match="beams: expected a \\(B,\\) int64 tensor"):
        s.init_state(torch.tensor([[2]]))
    st = s.init_state(torch.tensor([2]))
    with pytest.raises(ValueError, match="prefix beam search needs V >= 2"):
        s.step(st, torch.zeros(1, 3, 1), torch.tensor([3]), torch.tensor([0]))
    with pytest.raises(ValueError, match="n: must be an int >= 1, got 0"):
        s.nbest(st, 0)
    for bad in (-0.1, float("nan"), float("inf"), "1"):
        with pytest.raises(ValueError, match="insertion_penalty: must be a finite number >= 0"):
            CtcPrefixBeamSearch(0, insertion_penalty=bad)
    st64 = s.init_state(torch.tensor([2]), dtype=torch.float64)
    with pytest.raises(ValueError, match="cat: states have different score dtypes"):
        CtcPrefixState.cat([st, st64])
