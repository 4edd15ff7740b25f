"""streamd.decode.beam: batched, chunked standard beam search against a slow per-utterance reference.

The reference follows Graves' Algorithm 1 (as icefall's ``beam_search``) line
by line: one utterance, Python dicts, and every decoder output recomputed from
scratch by feeding the whole token sequence (no caches, no batching).  The last test dates tokens
with all three transducer searches alike (a beam search regression).
"""

import math

import pytest
import torch

from helpers import make_model
from tests.decode.refs import max_prob, peaky_batch, peaky_model, random_batch, run_chunked
from streamd.decode.beam import BeamSearch, BeamSearchState
from streamd.decode.confidence import aggregate
from streamd.decode.greedy import GreedySearch
from streamd.decode.modified_beam import ModifiedBeamSearch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors gain nothing from intra-op threads; on a busy 2-core machine the
    thread pool's spinning made this file ~6x slower.  Restored after the module."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------- reference


def dec_out(model, ys):
    """Projected decoder output after the blank start symbol and the tokens ys."""
    st = model.decoder.init_state(1)
    out, st = model.decoder.step(st, torch.tensor([model.blank_id]))
    for y in ys:
        out, st = model.decoder.step(st, torch.tensor([y]))
    return model.decoder_proj(out)[0]


@torch.no_grad()
def ref_beam(model, enc_p, beam, max_sym=3, max_exp=None, exclude_blank=True, aggregation="min", stats=None):
    """enc_p: (T, J). Returns [(score, tokens, frames, confs, trailing)] best first."""
    blank = model.blank_id
    max_exp = 10 * beam if max_exp is None else max_exp
    stats = {} if stats is None else stats

    def add(hyps, ys, h):
        if ys in hyps:  # log-add; the more probable path keeps its timing and confidences (the stored one on a tie)
            stats["merges"] = stats.get("merges", 0) + 1
            old = hyps[ys]
            keep = old
            if h["score"] > old["score"]:
                keep = h
                stats["retimed"] = stats.get("retimed", 0) + (h["frames"] != old["frames"])
            hyps[ys] = dict(keep, score=float(torch.logaddexp(torch.tensor(old["score"], dtype=torch.float64),
                                                                torch.tensor(h["score"], dtype=torch.float64))))
        else:
            hyps[ys] = h

    B = {(): dict(score=0.0, frames=(), confs=(), pending=(), trailing=0)}
    for t in range(enc_p.shape[0]):
        A, B = B, {}
        pops = 0
        while True:
            ys = max(A, key=lambda k: A[k]["score"])
            y = A.pop(ys)
            logp = model.joiner.log_probs(enc_p[t], dec_out(model, ys))
            conf = float(max_prob(logp))
            emitted_here = len(y["frames"]) > 0 and y["frames"][-1] == t
            add(B, ys, dict(y, score=y["score"] + float(logp[blank]), pending=y["pending"] + (conf,),
                            trailing=0 if emitted_here else y["trailing"] + 1))
            if sum(f == t for f in y["frames"]) < max_sym:
                tok_conf = conf if exclude_blank else aggregate(y["pending"] + (conf,), aggregation)
                vals, toks = logp.topk(min(beam + 1, logp.shape[0]))
                for v, k in zip(vals.tolist(), toks.tolist()):
                    if k != blank:
                        add(A, ys + (k,), dict(score=y["score"] + v, frames=y["frames"] + (t,),
                                               confs=y["confs"] + (tok_conf,), pending=(), trailing=0))
            else:
                stats["sym_cap"] = stats.get("sym_cap", 0) + 1
            pops += 1
            best_a = max((h["score"] for h in A.values()), default=-math.inf)
            if not A or pops >= max_exp or sum(h["score"] > best_a for h in B.values()) >= beam:
                if pops >= max_exp:
                    stats["exp_cap"] = stats.get("exp_cap", 0) + 1
                B = dict(sorted(B.items(), key=lambda kv: -kv[1]["score"])[:beam])
                break
    return [(h["score"], ys, h["frames"], h["confs"], h["trailing"])
            for ys, h in sorted(B.items(), key=lambda kv: -kv[1]["score"])]


# ----------------------------------------------------------------- helpers


def assert_matches(search, state, model, enc_p, lengths, beams, **ref_kw):
    nbest = search.nbest(state, 8)
    trailing = search.trailing_blanks(state)
    stats = {}
    for i, beam in enumerate(beams):
        ref = ref_beam(model, enc_p[i, :lengths[i]], beam, stats=stats, **ref_kw)
        got = nbest[i]
        assert len(got) == len(ref) == min(beam, len(ref))
        for h, (score, ys, frames, confs, _) in zip(got, ref):
            assert h.tokens == ys
            assert h.frames == frames
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.confs == pytest.approx(confs, abs=1e-5)
        assert int(trailing[i]) == ref[0][4]
        # trailing blanks agree with the best hypothesis' timing
        n = int(lengths[i])
        assert ref[0][4] == (n - 1 - ref[0][2][-1] if ref[0][1] else n)
    return stats


# ----------------------------------------------------------------- tests


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beams", [[1], [4], [2, 4, 3], [1, 3, 2, 4]])
def test_beam_matches_reference(decoder_kind, seed, beams):
    model = make_model(kind=decoder_kind, seed=seed, vocab=5)
    search = BeamSearch(model, measure=max_prob)
    enc_p, lengths = random_batch(model, len(beams), 10, seed + 100)
    state = run_chunked(search, search.init_state(torch.tensor(beams)), enc_p, lengths, seed)
    assert_matches(search, state, model, enc_p, lengths, beams)


@pytest.mark.parametrize("max_sym,max_exp", [(1, None), (2, 3), (3, 2)])
def test_beam_caps_match_reference(max_sym, max_exp):
    """Both safety caps, with a flat joiner so that they are actually reached."""
    model = make_model(kind="lstm", seed=4, vocab=4, scale=0.3)
    beams = [3, 1, 4]
    search = BeamSearch(model, max_symbols_per_frame=max_sym, max_expansions_per_frame=max_exp, measure=max_prob)
    enc_p, lengths = random_batch(model, 3, 10, 4)
    state = run_chunked(search, search.init_state(beams), enc_p, lengths, 4)
    stats = assert_matches(search, state, model, enc_p, lengths, beams, max_sym=max_sym, max_exp=max_exp)
    assert stats.get("sym_cap", 0) + stats.get("exp_cap", 0) > 0


def test_beam_merges_and_emits_several_symbols_per_frame():
    model = make_model(seed=3, vocab=3, scale=0.5)
    search = BeamSearch(model, measure=max_prob)
    enc_p, lengths = random_batch(model, 2, 12, 3)
    state = search.step(search.init_state([4, 3]), enc_p, lengths, torch.zeros(2, dtype=torch.long))
    stats = assert_matches(search, state, model, enc_p, lengths, [4, 3])
    assert stats.get("merges", 0) > 0
    frames = [h.frames for hs in search.nbest(state, 4) for h in hs]
    assert any(len(set(f)) < len(f) for f in frames)  # some hypothesis emitted 2+ tokens in one frame


@pytest.mark.parametrize("seed", range(3))
def test_beam_dates_merged_hypotheses_by_their_best_path(seed):
    """Tokens rising over a few frames after silence: a path that emitted a token early stays in the
    beam with little probability until the likely path emits it and merges; the merged hypothesis
    then takes the likely path's frames (checked against the reference, which counts such merges)."""
    model = peaky_model(seed=seed)
    beams = [4, 3, 2, 4]
    search = BeamSearch(model, measure=max_prob)
    enc_p, lengths = peaky_batch(model, len(beams), seed)
    state = run_chunked(search, search.init_state(beams), enc_p, lengths, seed)
    stats = assert_matches(search, state, model, enc_p, lengths, beams)
    assert stats.get("retimed", 0) > 0


@pytest.mark.parametrize("aggregation", ["min", "mean", "prod"])
def test_beam_blank_frames_in_confidence(aggregation):
    model = make_model(seed=6, vocab=5)
    search = BeamSearch(model, measure=max_prob, exclude_blank=False, aggregation=aggregation)
    enc_p, lengths = random_batch(model, 2, 12, 6)
    state = run_chunked(search, search.init_state([3, 2]), enc_p, lengths, 6)
    assert_matches(search, state, model, enc_p, lengths, [3, 2], exclude_blank=False, aggregation=aggregation)


def test_beam_cat_select_and_reset():
    model = make_model(seed=9, kind="lstm")
    s = BeamSearch(model, measure=max_prob)
    enc_p, lengths = random_batch(model, 3, 10, 9)
    lengths[:] = 10
    z = torch.zeros(3, dtype=torch.long)
    beams = [2, 4, 3]
    full = s.step(s.step(s.init_state(beams), enc_p, lengths, z), enc_p, lengths, z + 10)
    # first chunk in two separate batches, recombined in another order
    half_a = s.step(s.init_state(beams[:1]), enc_p[:1], lengths[:1], z[:1])
    half_b = s.step(s.init_state(beams[1:]), enc_p[1:], lengths[1:], z[1:])
    joined = BeamSearchState.cat([half_b.select(torch.tensor([1])), half_a, half_b.select(torch.tensor([0]))])
    assert joined.beams == [3, 2, 4]
    perm = torch.tensor([2, 0, 1])
    joined = s.step(joined, enc_p[perm], lengths[perm], z + 10)
    a, b = s.nbest(full, 4), s.nbest(joined, 4)
    for j, i in enumerate(perm.tolist()):
        assert [h.tokens for h in a[i]] == [h.tokens for h in b[j]]
        assert [h.frames for h in a[i]] == [h.frames for h in b[j]]
        assert [h.score for h in a[i]] == pytest.approx([h.score for h in b[j]], abs=1e-5)
    # reset: stream 1 starts over and then decodes like a fresh stream
    before = s.best(full)
    st = s.reset(full, torch.tensor([False, True, False]))
    assert s.best(st)[1].tokens == () and s.best(st)[1].score == 0.0
    assert int(s.trailing_blanks(st)[1]) == 0
    assert s.best(st)[0] == before[0] and s.best(st)[2] == before[2]
    st = s.step(st, enc_p, lengths, z + 20)
    fresh = s.step(s.init_state([4]), enc_p[1:2], lengths[1:2], z[:1] + 20)
    got, exp = s.nbest(st, 4)[1], s.nbest(fresh, 4)[0]
    assert [(h.tokens, h.frames) for h in got] == [(h.tokens, h.frames) for h in exp]
    assert [h.score for h in got] == pytest.approx([h.score for h in exp], abs=1e-5)
    # the pool only holds rows of live hypotheses
    assert st.dec_p.shape[0] <= sum(len(h) for h in st.hyps)


def test_beam_invalid_inputs():
    model = make_model(seed=1)
    s = BeamSearch(model)
    with pytest.raises(ValueError, match="beam sizes must be >= 1"):
        s.init_state([2, 0])
    with pytest.raises(ValueError, match="unknown aggregation"):
        BeamSearch(model, aggregation="median")
    with pytest.raises(ValueError, match="max_symbols_per_frame"):
        BeamSearch(model, max_symbols_per_frame=0)
    st = s.init_state([2, 2])
    enc_p = torch.randn(2, 4, model.cfg.joiner_dim)
    z = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"enc_p must be \(B, T, J\)"):
        s.step(st, enc_p[0], z + 4, z)
    with pytest.raises(ValueError, match="3 streams but the state holds 2"):
        s.step(st, torch.randn(3, 4, model.cfg.joiner_dim), torch.full((3,), 4), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"lengths\[1\] = 5 is outside \[0, 4\]"):
        s.step(st, enc_p, torch.tensor([4, 5]), z)
    with pytest.raises(ValueError, match=r"frame_offset must have shape \(2,\)"):
        s.step(st, enc_p, z + 4, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"rows must be a \(2,\) bool tensor"):
        s.reset(st, torch.tensor([0, 1]))


def test_beam_network_calls_are_batched():
    """Streams run in lockstep: per frame, the joiner runs max(pops) times for the batch,
    i.e. fewer calls than decoding the streams one by one."""
    model = make_model(seed=2, vocab=5)
    calls = {"joiner": 0, "decoder": 0}
    joiner_lp, decoder_step = model.joiner.log_probs, model.decoder.step

    def count(name, fn):
        def wrapped(*a):
            calls[name] += 1
            return fn(*a)
        return wrapped

    model.joiner.log_probs = count("joiner", joiner_lp)
    model.decoder.step = count("decoder", decoder_step)
    s = BeamSearch(model)
    enc_p, lengths = random_batch(model, 4, 8, 2)
    lengths[:] = 8
    z = torch.zeros(4, dtype=torch.long)
    batched = s.nbest(s.step(s.init_state([3, 2, 4, 3]), enc_p, lengths, z), 4)
    n_batched = dict(calls)
    calls.update(joiner=0, decoder=0)
    single = [s.nbest(s.step(s.init_state([b]), enc_p[i:i + 1], lengths[:1], z[:1]), 4)[0]
              for i, b in enumerate([3, 2, 4, 3])]
    assert [[h.tokens for h in hs] for hs in batched] == [[h.tokens for h in hs] for hs in single]
    assert n_batched["joiner"] < calls["joiner"]
    assert n_batched["decoder"] < calls["decoder"]


# ----------------------------------------------------------------- all searches


@pytest.mark.parametrize("seed", range(6))
def test_searches_date_tokens_alike(seed):
    """On a model that aligns like a trained one (tokens rising over a few frames after silence), greedy,
    modified beam and beam search emit their common tokens within one frame of each other.  Regression:
    beam search dated a token by the first path that had emitted it, which an improbable path carried in
    the beam from the silence (tokens up to 7 frames early here)."""
    model = peaky_model(seed=seed)
    b = 4
    enc_p, lengths = peaky_batch(model, b, seed)
    beams = torch.full((b,), 4)
    searches = {"greedy": (GreedySearch(model, max_symbols_per_frame=3, measure=max_prob), b),
                "modified_beam": (ModifiedBeamSearch(model, max_symbols_per_frame=3, measure=max_prob), beams),
                "beam": (BeamSearch(model, measure=max_prob), beams)}
    best = {name: search.best(run_chunked(search, search.init_state(init), enc_p, lengths, seed))
            for name, (search, init) in searches.items()}
    compared = 0
    for i in range(b):
        g = best["greedy"][i]
        for name in ("modified_beam", "beam"):
            h = best[name][i]
            if h.tokens != g.tokens:
                continue
            compared += len(h.tokens)
            assert all(abs(x - y) <= 1 for x, y in zip(h.frames, g.frames)), (name, h.frames, g.frames)
    assert compared >= 2 * b  # the searches agree on most tokens here: the test is not vacuous
