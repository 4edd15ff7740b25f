"""The batched keyword-constrained search (runtime wake words) against a slow per-stream oracle written
from its definition (streamd/decode/keyword_search.py docstring): one stream, Python dicts keyed by
keyword prefixes, one joiner call per prefix and frame, detections and resets frame by frame."""

import math
import random

import pytest
import torch

from helpers import make_model
from tests.decode.refs import dec_init, dec_push, random_batch
from streamd.config import PhraseSpec
from streamd.decode.keyword_search import KeywordSearch, KeywordSet, KeywordState, keyword_set
from streamd.tokens import TokenTable

SEP = 4  # the word separator of the toy vocabulary (tokens 1..5)


class RefKeywordStream:
    """One stream, from the definition: nodes are keyword prefixes (tuples), each with its decoder output
    (the stream-start blank, the separator, then the prefix); alpha[u] = (weight, first frame, sum of token
    probabilities, last frame) of the best path; tails[(p, k)] the same for "keyword p, then >= k blanks"."""

    def __init__(self, model, keywords, thresholds, sep, max_sym, tb, refractory, score, settle):
        self.model, self.keywords, self.thresholds, self.settle = model, keywords, thresholds, settle
        self.sep, self.max_sym, self.tb, self.refr, self.score = sep, max_sym, tb, refractory, score
        st, dp = dec_init(model)
        if sep is not None:
            st, dp = dec_push(model, st, sep)
        self.dp = {(): dp}
        todo = [((), st)]
        prefixes = {k[:d] for k in keywords for d in range(1, len(k) + 1)}
        while todo:
            u, st = todo.pop()
            for v in {x[len(u)] for x in prefixes if len(x) == len(u) + 1 and x[:len(u)] == u}:
                st2, self.dp[u + (v,)] = dec_push(model, st, v)
                todo.append((u + (v,), st2))
        self.nodes = sorted(prefixes, key=lambda x: (len(x), x))
        self.last_fire = -(2 ** 40)
        self.hits = []
        self.reset()

    def reset(self):
        self.alpha, self.tails, self.best = {}, {}, None

    def fire(self):
        self.hits.append(self.best[:4])
        self.last_fire = self.best[3]
        self.reset()

    @torch.no_grad()
    def frame(self, enc_t, t):
        model, blank = self.model, self.model.blank_id
        lp = {u: model.joiner.log_probs(enc_t, d).double().tolist() for u, d in self.dp.items()}

        def w(u, v):
            return lp[u][v] - (max(lp[u]) if self.score == "llr" else 0.0)

        a = dict(self.alpha)
        a[()] = (0.0, t, 0.0, t)
        for _ in range(self.max_sym):
            new = dict(a)
            for u in self.nodes:
                par = u[:-1]
                if par in a:
                    c = a[par][0] + w(par, u[-1])
                    if u not in a or c > a[u][0]:
                        new[u] = (c, a[par][1], a[par][2] + math.exp(lp[par][u[-1]]), t)
            a = new
        best = None
        for p, k in enumerate(self.keywords):
            end = a.get(k)
            if self.tb == 0:
                d = end
            else:
                tail = end if self.tb == 1 else self.tails.get((p, self.tb - 1))
                d = None if tail is None else (tail[0] + w(k, blank),) + tail[1:]
                if self.sep is not None and end is not None:
                    s = (end[0] + w(k, self.sep),) + end[1:]
                    if d is None or s[0] > d[0]:
                        d = s
            if d is None:
                continue
            score = math.exp(d[0] / len(k)) if self.score == "llr" else d[2] / len(k)
            if score >= self.thresholds[p] and d[3] - self.last_fire >= self.refr:
                if best is None or score > best[1]:
                    best = (p, score, d[1], d[3])
        if best is not None and (self.best is None or best[1] > self.best[1]):
            self.best = best + (t,)
        if self.best is not None and t - self.best[4] >= self.settle:
            self.fire()
            return
        self.alpha = {u: (x[0] + w(u, blank),) + x[1:] for u, x in a.items() if u != ()}
        tails = {}
        for p, k in enumerate(self.keywords):
            for j in range(1, self.tb):
                src = a.get(k) if j == 1 else self.tails.get((p, j - 1))
                if src is not None:
                    tails[(p, j)] = (src[0] + w(k, blank),) + src[1:]
        self.tails = tails

    def end(self):
        if self.best is not None:
            self.fire()


def random_sets(rnd, n_sets, levels=(0.3, 0.4, 0.5)):
    sets = []
    for _ in range(n_sets):
        seqs = set()
        while len(seqs) < rnd.randint(1, 3):
            seqs.add(tuple(rnd.choice([1, 2, 3, 5]) for _ in range(rnd.randint(1, 3))))
        seqs = sorted(seqs)
        thr = tuple(rnd.choice(levels) for _ in seqs)
        sets.append(KeywordSet(tuple(f"k{i}" for i in range(len(seqs))), thr, tuple(map(len, seqs)),
                               tuple(seqs)))
    return sets


def run_batched(search, sets, enc_p, lengths, rnd):
    """Random chunks (rnd None: one chunk), random detect() calls; hits as (row, keyword, first, last, score)."""
    state = KeywordState.cat([search.init_state(s) for s in sets])
    t, got, t_max = 0, [], enc_p.shape[1]
    while t < t_max:
        n = t_max if rnd is None else rnd.randint(1, 6)
        ln = (lengths - t).clamp(0, n)
        state = search.step(state, enc_p[:, t:t + n], ln, torch.full((len(sets),), t))
        if rnd is None or rnd.random() < 0.7 or t + n >= t_max:
            flush = torch.full((len(sets),), t + n >= t_max)
            state, hits = search.detect(state, flush=flush)
            got += [(h.row, int(h.keyword[1:]), h.first_frame, h.frame, h.score) for h in hits]
        t += n
    return got


def same(got, want):
    key = lambda h: h[:4]  # noqa: E731
    assert [h[:4] for h in sorted(got, key=key)] == [h[:4] for h in sorted(want, key=key)]
    for g, w in zip(sorted(got, key=key), sorted(want, key=key)):
        assert g[4] == pytest.approx(w[4], abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("score", ["llr", "prob"])
def test_keyword_search_matches_oracle(seed, score):
    rnd = random.Random(seed)
    kind = ["stateless", "stateless-1", "stateless-3", "lstm"][seed % 4]
    model = make_model(seed=seed, vocab=6, kind=kind, scale=1.0)
    max_sym, tb, refr, settle = 1 + seed % 3, (seed // 2) % 4, rnd.choice([0, 3]), rnd.choice([0, 2, 4])
    sep = SEP if seed % 3 else None
    search = KeywordSearch(model, max_sym, sep, tb, refr, score, settle)
    sets = random_sets(rnd, 4, (0.3, 0.4, 0.5) if score == "llr" else (0.15, 0.2, 0.25))
    enc_p, lengths = random_batch(model, len(sets), 50, seed + 300)
    want = []
    for r, s in enumerate(sets):
        ref = RefKeywordStream(model, s.tokens, s.thresholds, sep, max_sym, tb, refr, score, settle)
        for t in range(int(lengths[r])):
            ref.frame(enc_p[r, t], t)
        ref.end()
        want += [(r, p, f0, f1, sc) for p, sc, f0, f1 in ref.hits]
    assert len(want) >= 3, "too few detections: the test would say little"
    same(run_batched(search, sets, enc_p, lengths, None), want)  # whole
    for c in range(3):  # random chunkings, random detect() points
        same(run_batched(search, sets, enc_p, lengths, random.Random(seed * 10 + c)), want)
    # one stream alone gives its rows of the batch
    r = max(range(len(sets)), key=lambda i: sum(h[0] == i for h in want))
    alone = run_batched(search, sets[r:r + 1], enc_p[r:r + 1, :int(lengths[r])], lengths[r:r + 1], random.Random(seed))
    assert alone
    same([(r,) + h[1:] for h in alone], [h for h in want if h[0] == r])


def test_shared_set_and_mixed_sets_agree():
    """Streams with the same prepared set (the expanded layout) and with different sets (padded) detect alike."""
    model = make_model(seed=3, vocab=6, scale=1.0)
    search = KeywordSearch(model, 2, SEP, 2, 3)
    a = KeywordSet(("k0", "k1"), (0.4, 0.4), (2, 3), ((1, 2), (3, 1, 2)))
    b = KeywordSet(("k0",), (0.4,), (1,), ((5,),))
    enc_p, lengths = random_batch(model, 3, 40, 5)
    lengths[:] = 40
    shared = run_batched(search, [a, a, a], enc_p, lengths, random.Random(1))
    mixed = run_batched(search, [a, b, a], enc_p, lengths, random.Random(2))
    assert shared
    same([h for h in shared if h[0] != 1], [h for h in mixed if h[0] != 1])
    assert search.prepare(a) is search.prepare(a) and search.prepare(search.prepare(a)) is search.prepare(a)


def test_keyword_state_select_cat_roundtrip_and_reset():
    model = make_model(seed=1, vocab=6)
    search = KeywordSearch(model, 2, SEP, 1, 0)
    sets = [KeywordSet(("a",), (0.99,), (2,), ((1, 2),)),
            KeywordSet(("b", "c"), (0.99, 0.99), (1, 3), ((3,), (5, 1, 2)))]
    enc_p, lengths = random_batch(model, 2, 9, 1)
    lengths[:] = 9
    zero = torch.zeros(2, dtype=torch.long)
    whole = search.step(KeywordState.cat([search.init_state(s) for s in sets]), enc_p, lengths, zero)
    whole, _ = search.detect(whole)
    parts = [search.detect(search.step(search.init_state(s), enc_p[i:i + 1], lengths[i:i + 1], zero[:1]))[0]
             for i, s in enumerate(sets)]
    joined = KeywordState.cat([whole.select(torch.tensor([1])), parts[0]])
    assert joined.sets == (search.prepare(sets[1]), search.prepare(sets[0]))
    n1 = search.prepare(sets[1]).tables.states
    assert torch.allclose(joined.alpha[0, :n1], parts[1].alpha[0], equal_nan=True)
    assert whole.select(torch.tensor([0])).alpha.shape[1] == search.prepare(sets[0]).tables.states
    reset = search.reset(joined, torch.tensor([True, False]))
    fresh = search.init_state(sets[1]).alpha[0]
    assert torch.equal(reset.alpha[0, :n1], fresh) and torch.equal(reset.alpha[1], joined.alpha[1])
    with pytest.raises(ValueError, match="detect"):
        search.step(joined, enc_p[:, :2], torch.tensor([2, 2]), zero).select(torch.tensor([0]))


def test_prepared_tables_share_stateless_contexts():
    """A stateless decoder's output depends on its last context_size tokens: prefixes ending alike share one
    row; the precomputed rows are the decoder's own outputs."""
    model = make_model(seed=2, vocab=6, kind="stateless-2")
    search = KeywordSearch(model, 3, SEP, 2, 3)
    ks = search.prepare(KeywordSet(("a", "b"), (0.5, 0.5), (3, 4), ((1, 2, 3), (5, 1, 2, 3))))
    t = ks.tables
    # nodes: root, (1), (5), (1,2), (5,1), (1,2,3), (5,1,2), (5,1,2,3); contexts (2 tokens): (1,2) == (5,1,2)'s
    assert t.dec_p.shape[0] == 8 - 2  # (5,1,2) shares (1,2)'s context, (5,1,2,3) shares (1,2,3)'s
    st, dp = dec_init(model)
    st, dp = dec_push(model, st, SEP)
    for v in (5, 1, 2, 3):
        st, dp = dec_push(model, st, v)
    assert any(torch.allclose(dp, row, atol=1e-6) for row in t.dec_p)
    assert t.states == 8 + 2 * 1  # one tail (tau_1) per keyword for trailing_blanks 2


def test_keyword_set_errors_name_the_entry():
    table = TokenTable(("<blk>", " ", "a", "b", "c"))
    ks = keyword_set(table, (PhraseSpec("ab"), PhraseSpec("c a", threshold=0.7)), 0.3, "wake_words")
    assert ks.names == ("ab", "c a") and ks.thresholds == (0.3, 0.7) and ks.lengths == (2, 3)
    assert ks.tokens == ((2, 3), (4, 1, 2)) and ks.tables is None
    with pytest.raises(ValueError, match=r"wake_words\[1\] 'x': characters not in the token table"):
        keyword_set(table, (PhraseSpec("ab"), PhraseSpec("x")), 0.3, "wake_words")


def test_bad_settings():
    model = make_model(seed=0, vocab=6)
    with pytest.raises(ValueError, match="score"):
        KeywordSearch(model, score="beam")
    with pytest.raises(ValueError, match="trailing_blanks"):
        KeywordSearch(model, trailing_blanks=-1)
