"""Runtime wake words on the CTC head (``wake_score: ctc``) against a slow per-stream oracle written from
the definition (streamd/decode/ctc_keyword_search.py docstring): Python dicts keyed by keyword prefixes,
one frame at a time; and the brute-force check of the best free-start CTC path's weight on tiny inputs."""

import itertools
import math
import random

import pytest
import torch

from helpers import make_model
from streamd.decode.ctc_keyword_search import CtcKeywordSearch
from streamd.decode.keyword_search import KeywordSet, KeywordState

from .test_keyword_search import random_sets, run_batched, same

SEP = 4  # the word separator of the toy vocabulary (tokens 1..5)
NEG = float("-inf")


class RefCtcKeywordStream:
    """One stream, from the definition: L[u] / B[u] per keyword prefix u (a tuple) as (weight, first frame,
    0, last token frame); tails[(p, k)] "L(e_p), then exactly k blanks"; sep[p] "then the separator"."""

    def __init__(self, keywords, thresholds, sep, tb, refractory, settle):
        self.keywords, self.thresholds, self.sep, self.tb = keywords, thresholds, sep, tb
        self.refr, self.settle = refractory, settle
        self.nodes = sorted({k[:d] for k in keywords for d in range(1, len(k) + 1)}, key=lambda x: (len(x), x))
        self.last_fire = -(2 ** 40)
        self.hits = []
        self.reset()

    def reset(self):
        self.L, self.B, self.tails, self.seps, self.best = {}, {}, {}, {}, None

    def frame(self, lp, t):
        w = [x - max(lp) for x in lp]
        root = (0.0, t, 0.0, t)
        L, B = {}, {}
        for u in self.nodes:
            par = u[:-1]
            froms = [self.L.get(u)]
            if par == ():
                froms.append(root)
            else:
                froms.append(self.B.get(par))
                if par[-1] != u[-1]:
                    froms.append(self.L.get(par))
            froms = [f for f in froms if f is not None]
            if froms:
                f = max(froms, key=lambda x: x[0])
                L[u] = (f[0] + w[u[-1]], f[1], 0.0, t)
            froms = [f for f in (self.B.get(u), self.L.get(u)) if f is not None]
            if froms:
                f = max(froms, key=lambda x: x[0])
                B[u] = (f[0] + w[0],) + f[1:]
        tails, seps = {}, {}
        for p, k in enumerate(self.keywords):
            for j in range(1, self.tb + 1):
                src = self.L.get(k) if j == 1 else self.tails.get((p, j - 1))
                if src is not None:
                    tails[(p, j)] = (src[0] + w[0],) + src[1:]
            if self.sep is not None:
                froms = [f for f in (self.L.get(k), self.B.get(k)) if f is not None]
                if froms:
                    f = max(froms, key=lambda x: x[0])
                    seps[p] = (f[0] + w[self.sep],) + f[1:]
        best = None
        for p, k in enumerate(self.keywords):
            if self.tb == 0:
                d = L.get(k)
            else:
                d = tails.get((p, self.tb))
                s = seps.get(p)
                if s is not None and (d is None or s[0] > d[0]):
                    d = s
            if d is None or d[0] == NEG:
                continue
            score = math.exp(d[0] / len(k))
            if score >= self.thresholds[p] and d[3] - self.last_fire >= self.refr:
                if best is None or score > best[1]:
                    best = (p, score, d[1], d[3])
        if best is not None and (self.best is None or best[1] > self.best[1]):
            self.best = best + (t,)
        self.L, self.B, self.tails, self.seps = L, B, tails, seps
        if self.best is not None and t - self.best[4] >= self.settle:
            self.hits.append(self.best[:4])
            self.last_fire = self.best[3]
            self.reset()

    def end(self):
        if self.best is not None:
            self.hits.append(self.best[:4])


def random_ctc(b, t_max, v, seed):
    """Random CTC log-probs (B, T, V), blank-heavy like a trained head, and lengths (B,) (the first full)."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(b, t_max, v, generator=g)
    logits[..., 0] += 1.0
    lengths = torch.randint(1, t_max + 1, (b,), generator=g)
    lengths[0] = t_max
    return logits.log_softmax(-1), lengths


@pytest.mark.parametrize("seed", range(10))
def test_ctc_keyword_search_matches_oracle(seed):
    rnd = random.Random(seed)
    model = make_model(seed=seed, vocab=6)
    tb, refr, settle = seed % 4, rnd.choice([0, 3]), rnd.choice([0, 2, 4])
    sep = SEP if seed % 3 else None
    search = CtcKeywordSearch(model, sep, tb, refr, settle)
    sets = random_sets(rnd, 4, (0.2, 0.3, 0.4))
    lp, lengths = random_ctc(len(sets), 60, 6, seed + 300)
    want = []
    for r, s in enumerate(sets):
        ref = RefCtcKeywordStream(s.tokens, s.thresholds, sep, tb, refr, settle)
        for t in range(int(lengths[r])):
            ref.frame(lp[r, t].double().tolist(), t)
        ref.end()
        want += [(r, p, f0, f1, sc) for p, sc, f0, f1 in ref.hits]
    assert len(want) >= 3, "too few detections: the test would say little"
    same(run_batched(search, sets, lp, lengths, None), want)  # whole
    for c in range(3):  # random chunkings, random detect() points
        same(run_batched(search, sets, lp, lengths, random.Random(seed * 10 + c)), want)
    r = max(range(len(sets)), key=lambda i: sum(h[0] == i for h in want))
    alone = run_batched(search, sets[r:r + 1], lp[r:r + 1, :int(lengths[r])], lengths[r:r + 1], random.Random(seed))
    same([(r,) + h[1:] for h in alone], [h for h in want if h[0] == r])


def collapse(path):
    out = []
    for i, s in enumerate(path):
        if s != 0 and (i == 0 or s != path[i - 1]):
            out.append(s)
    return tuple(out)


@pytest.mark.parametrize("seed", range(6))
def test_best_path_weight_is_the_brute_force_maximum(seed):
    """With trailing_blanks 0 and no threshold the first frame's candidate score of a one-keyword set is
    exp(max weight / n) over every alignment of the keyword that ends in a keyword token at that frame
    (free start: any first frame), found by enumerating all symbol sequences."""
    rnd = random.Random(seed)
    model = make_model(seed=seed, vocab=4)
    kw = tuple(rnd.choice([1, 2, 3]) for _ in range(rnd.randint(1, 3)))
    t_max = 6
    lp, _ = random_ctc(1, t_max, 4, seed)
    w = lp[0].double() - lp[0].double().amax(-1, keepdim=True)
    search = CtcKeywordSearch(model, None, 0, 0, 10 ** 6)  # never settles: the best candidate so far
    kset = KeywordSet(("k",), (1e-300,), (len(kw),), (kw,))
    for t in range(t_max):
        state = search.step(search.init_state(kset), lp[:, :t + 1], torch.tensor([t + 1]), torch.zeros(1))
        brute = NEG
        for start in range(t + 1):
            for path in itertools.product(range(4), repeat=t + 1 - start):
                if path[0] == 0 or path[-1] == 0 or collapse(path) != kw:
                    continue
                brute = max(brute, sum(float(w[start + i, s]) for i, s in enumerate(path)))
        best_so_far = max(brute, best_so_far) if t else brute
        got = float(state.best[0, 0])
        want = NEG if best_so_far == NEG else math.exp(best_so_far / len(kw))  # -inf: no candidate yet
        assert got == pytest.approx(want, rel=1e-9)


def test_shared_and_mixed_sets_and_state_roundtrip():
    model = make_model(seed=3, vocab=6)
    search = CtcKeywordSearch(model, SEP, 2, 3)
    a = KeywordSet(("k0", "k1"), (0.4, 0.4), (2, 3), ((1, 2), (3, 1, 2)))
    b = KeywordSet(("k0",), (0.4,), (1,), ((5,),))
    lp, lengths = random_ctc(3, 40, 6, 5)
    lengths[:] = 40
    shared = run_batched(search, [a, a, a], lp, lengths, random.Random(1))
    mixed = run_batched(search, [a, b, a], lp, lengths, random.Random(2))
    assert shared
    same([h for h in shared if h[0] != 1], [h for h in mixed if h[0] != 1])
    st = search.step(KeywordState.cat([search.init_state(a), search.init_state(b)]), lp[:2, :5],
                     torch.tensor([5, 5]), torch.zeros(2, dtype=torch.long))
    st, _ = search.detect(st)
    assert st.select(torch.tensor([1])).alpha.shape[1] == search.prepare(b).tables.states


def test_needs_a_ctc_head():
    with pytest.raises(ValueError, match="CTC head"):
        CtcKeywordSearch(make_model(seed=0, vocab=6, ctc=False))


def test_engine_with_ctc_score_needs_a_ctc_head(tmp_path):
    """A config asking for the CTC score on a model without a CTC head fails when the recognizer is built,
    saying why (not later, at the first wake word)."""
    from helpers import write_checkpoint
    from streamd.config import EngineConfig, KwsConfig
    from streamd.engine import Recognizer

    bare = write_checkpoint(tmp_path / "bare.pt", ctc=False)
    with pytest.raises(ValueError, match="wake_score ctc needs a model with a CTC head"):
        Recognizer.from_checkpoint(bare, EngineConfig(device="cpu", kws=KwsConfig(wake_score="ctc")))
    Recognizer.from_checkpoint(bare, EngineConfig(device="cpu"))  # the default score needs none
