"""The batched keyword search (runtime wake words) against a slow per-stream reference written from
its definition (streamd/decode/keyword_search.py docstring): one stream, Python dicts of hypotheses,
the context boost and the last completed keyword computed from token strings (helpers.RefContext)."""

import random

import pytest
import torch

from helpers import RefContext, dec_init, dec_push, make_model, random_batch
from streamd.config import PhraseSpec
from streamd.decode.context_graph import ContextGraph
from streamd.decode.keyword_search import KeywordSearch, KeywordSet, KeywordState, keyword_set
from streamd.tokens import TokenTable

SEP = 4  # the word separator of the toy vocabulary (tokens 1..5)


class RefKeywordStream:
    """One stream of the keyword search: modified beam search (S rounds per frame) with the context
    boost, each token's own probability as its conf; detection at chunk ends, then a reset."""

    def __init__(self, model, phrases, boosts, thresholds, beam, max_sym, trailing, refractory):
        self.model, self.beam, self.max_sym = model, beam, max_sym
        self.ctx = RefContext(phrases, boosts, (SEP,))
        self.phrases, self.thresholds = phrases, thresholds
        self.trailing, self.refractory = trailing, refractory
        self.last_fire = -(2 ** 40)
        self.reset()

    def reset(self):
        st, dp = dec_init(self.model)
        self.hyps = {(): dict(score=0.0, st=st, dp=dp, frames=(), confs=())}

    @torch.no_grad()
    def frames(self, enc_p, t0):
        model = self.model
        for t in range(enc_p.shape[0]):
            cur = {(ys, False): h for ys, h in self.hyps.items()}
            for r in range(self.max_sym):
                if all(done for _, done in cur):
                    break
                cands = []
                for (ys, done), h in cur.items():
                    if done:
                        cands.append((h["score"], ys, True, None, None))
                        continue
                    logp = model.joiner.log_probs(enc_p[t], h["dp"])
                    for v in range(logp.shape[0]):
                        boost = self.ctx.gain(ys, v) if v != model.blank_id else 0.0
                        cands.append((h["score"] + float(logp[v]) + boost, ys, False, v, float(logp[v].exp())))
                cands.sort(key=lambda c: -c[0])
                new = {}
                for score, ys, done, v, p in cands[:self.beam]:
                    parent = cur[(ys, done)]
                    key = (ys, True) if done or v == model.blank_id else (ys + (v,), r == self.max_sym - 1)
                    if key in new:
                        new[key]["score"] = float(torch.logaddexp(torch.tensor(new[key]["score"], dtype=torch.float64),
                                                                  torch.tensor(score, dtype=torch.float64)))
                        continue
                    if done or v == model.blank_id:
                        new[key] = dict(parent, score=score)
                    else:
                        st2, dp2 = dec_push(model, parent["st"], v)
                        new[key] = dict(score=score, st=st2, dp=dp2, frames=parent["frames"] + (t0 + t,),
                                        confs=parent["confs"] + (p,))
                cur = new
            self.hyps = {ys: h for (ys, _), h in cur.items()}

    def detect(self, end_frame):
        """The module docstring's rule on the best hypothesis; returns (keyword index, score, first, last) or None."""
        ys, h = max(self.hyps.items(), key=lambda kv: kv[1]["score"])
        _, _, matches = self.ctx.walk(tuple(ys))
        done = [i + 1 for i, m in enumerate(matches) if m >= 0]
        if not done:
            return None
        m = done[-1]
        phrase, f_m = matches[m - 1], h["frames"][m - 1]
        confirmed = ys[m] == SEP if len(ys) > m else end_frame - f_m >= self.trailing
        if not confirmed or f_m - self.last_fire < self.refractory:
            return None
        n = len(self.phrases[phrase])
        score = sum(h["confs"][m - n:m]) / n
        if score < self.thresholds[phrase]:
            return None
        self.last_fire = f_m
        self.reset()
        return phrase, score, h["frames"][m - n], f_m


KEYWORD_LISTS = [  # (phrases, boosts, thresholds)
    (((1, 2), (3, 1, 2)), (2.0, 1.0), (0.05, 0.05)),
    (((2,), (5, 2)), (3.0, 3.0), (0.02, 0.3)),
    (((1, 3, 5),), (4.0,), (0.01,)),
]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_sym", [1, 3])
def test_keyword_search_matches_reference(seed, max_sym):
    vocab = 6
    model = make_model(seed=seed, vocab=vocab, scale=1.0)
    search = KeywordSearch(model, beam=3, max_symbols_per_frame=max_sym, separator=SEP, trailing_blanks=2,
                           refractory_frames=3)
    sets = [KeywordSet(tuple(f"k{i}" for i in range(len(p))), th, tuple(len(x) for x in p),
                       ContextGraph(p, b, vocab, (SEP,))) for p, b, th in KEYWORD_LISTS]
    refs = [RefKeywordStream(model, p, b, th, 3, max_sym, 2, 3) for p, b, th in KEYWORD_LISTS]
    state = KeywordState.cat([search.init_state(s) for s in sets])
    enc_p, lengths = random_batch(model, len(sets), 60, seed + 300)
    rnd = random.Random(seed)
    t, got, want = 0, [], []
    while t < enc_p.shape[1]:
        n = rnd.randint(1, 6)
        ln = (lengths - t).clamp(0, n)
        state = search.step(state, enc_p[:, t:t + n], ln, torch.full((len(sets),), t))
        done = torch.minimum(lengths, torch.tensor(t + n))
        state, hits = search.detect(state, done)
        got += [(h.row, h.keyword, h.first_frame, h.frame, round(h.score, 4)) for h in hits]
        for r, ref in enumerate(refs):
            if int(ln[r]) > 0:
                ref.frames(enc_p[r, t:t + int(ln[r])], t)
            hit = ref.detect(int(done[r]))
            if hit is not None:
                want.append((r, f"k{hit[0]}", hit[2], hit[3], round(hit[1], 4)))
        t += n
    assert sorted(got) == sorted(want)
    assert want, "no detection at all: the test would be empty"


def test_keyword_state_select_cat_roundtrip():
    model = make_model(seed=1, vocab=6)
    search = KeywordSearch(model, beam=2, separator=SEP)
    sets = [KeywordSet(("a",), (0.1,), (2,), ContextGraph(((1, 2),), (1.0,), 6, (SEP,))),
            KeywordSet(("b", "c"), (0.1, 0.1), (1, 2), ContextGraph(((3,), (5, 1)), (2.0, 1.0), 6, (SEP,)))]
    enc_p, lengths = random_batch(model, 2, 9, 1)
    whole = search.step(KeywordState.cat([search.init_state(s) for s in sets]), enc_p, lengths,
                        torch.zeros(2, dtype=torch.long))
    parts = [search.step(search.init_state(s), enc_p[i:i + 1], lengths[i:i + 1], torch.zeros(1, dtype=torch.long))
             for i, s in enumerate(sets)]
    joined = KeywordState.cat([whole.select(torch.tensor([1])), parts[0]])
    assert joined.sets == (sets[1], sets[0])
    a = search.search.nbest(whole.beam, 2)
    b = search.search.nbest(joined.beam, 2)
    assert [h.tokens for h in a[0]] == [h.tokens for h in b[1]]
    assert [h.score for h in a[1]] == pytest.approx([h.score for h in b[0]], abs=1e-6)
    assert torch.equal(joined.beam.ctx.back[joined.beam.ctx_state[1]], whole.beam.ctx.back[whole.beam.ctx_state[0]])


def test_keyword_set_errors_name_the_entry():
    table = TokenTable(("<blk>", " ", "a", "b", "c"))
    ks = keyword_set(table, (PhraseSpec("ab"), PhraseSpec("c a", threshold=0.7)), 0.3, 1.5, "wake_words")
    assert ks.names == ("ab", "c a") and ks.thresholds == (0.3, 0.7) and ks.lengths == (2, 3)
    assert ks.graph.prefix == (1,)
    with pytest.raises(ValueError, match=r"wake_words\[1\] 'x': characters not in the token table"):
        keyword_set(table, (PhraseSpec("ab"), PhraseSpec("x")), 0.3, 1.5, "wake_words")
