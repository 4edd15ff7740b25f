"""Slow search references (greedy, modified beam search, Witten-Bell n-gram, context graph, straight from
their definitions), the checks against them, and the frames they are run on (random and peaky models' batches)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from streamd.model.transducer import Transducer

from helpers import make_model


def peaky_model(vocab: int = 6, seed: int = 0, sharpness: float = 8.0, noise: float = 0.1) -> Transducer:
    """A small random transducer that aligns like a trained one, for timing tests (frames: peaky_batch).

    Stateless decoder with context 1 and the joiner's logit of token u ~ sharpness * tanh(enc_p[u] +
    dec_p[u]) plus make_model's random weights scaled by ``noise``: the projected encoder frame says
    which token is spoken, and after emitting token v the decoder output lowers v and raises blank, so
    a token is emitted once, as a trained model does.
    """
    m = make_model(vocab=vocab, kind="stateless-1", seed=seed)
    j, dec = m.joiner, m.decoder
    eye = torch.eye(vocab)
    with torch.no_grad():
        j.out.weight.mul_(noise)
        j.out.weight[:, :vocab] += sharpness * eye
        j.out.bias.zero_()
        dec.embedding.weight.zero_()
        dec.embedding.weight[:, :vocab] = eye  # decoder output relu(one-hot(last token))
        j.dec_proj.weight.mul_(noise)
        j.dec_proj.bias.zero_()
        j.dec_proj.weight[1:vocab, 1:vocab] -= 2.0 * eye[1:, 1:]  # the token just emitted is unlikely again
        j.dec_proj.weight[0, 1:vocab] += 1.0  # and blank likelier
    return m


def peaky_frames(model: Transducer, script, seed: int = 0, noise: float = 0.1) -> torch.Tensor:
    """Projected encoder frames (T, J) for peaky_model from a script of T frames: None is silence
    (blank), (v, a) token v with strength a in [0, 1] (0.8 and up: emitted there; 0.4: a few per cent;
    0.2: about 1e-4), so a token may rise over a few frames, as in speech."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab_size
    z = torch.full((len(script), model.cfg.joiner_dim), -1.0)
    for t, item in enumerate(script):
        v, a = (0, 0.0) if item is None else item
        z[t, 0] = 1.0 - 2.0 * a
        if v:
            z[t, v] = 2.0 * a - 1.0
    z[:, vocab:] = 0.0
    return z + noise * torch.randn(z.shape, generator=g)


# how a token's strength rises over the frames before the one that emits it (peaky_frames)
RISES = ((0.9,), (0.4, 0.9), (0.2, 0.4, 0.8), (0.2, 0.2, 0.4, 0.9))


def peaky_batch(model: Transducer, b: int, seed: int, max_tokens: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Frames (B, T, J) and lengths (B,) for peaky_model from random scripts: per stream 0-3 silent frames,
    then 1..max_tokens tokens (never the same twice in a row), each rising as one of RISES and followed
    by 0-2 silent frames; padding frames are zeros."""
    rng = random.Random(seed)
    vocab = model.cfg.vocab_size
    frames = []
    for i in range(b):
        script, prev = [None] * rng.randint(0, 3), 0
        for _ in range(rng.randint(1, max_tokens)):
            v = rng.choice([u for u in range(1, vocab) if u != prev])
            script += [(v, a) for a in rng.choice(RISES)] + [None] * rng.randint(0, 2)
            prev = v
        frames.append(peaky_frames(model, script, seed * 1000 + i))
    lengths = torch.tensor([len(f) for f in frames])
    enc_p = torch.zeros(b, int(lengths.max()), model.cfg.joiner_dim)
    for i, f in enumerate(frames):
        enc_p[i, :len(f)] = f
    return enc_p, lengths


def max_prob(lp):
    """A simple confidence measure for search tests: the top probability of log-probs (..., V)."""
    return lp.exp().max(-1).values


def random_batch(model, b, t_max, seed):
    """Random projected encoder frames (B, T, J) and lengths (B,) (the first stream full length)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t_max + 1, (b,), generator=g)
    lengths[0] = t_max
    enc_p = torch.randn(b, t_max, model.cfg.joiner_dim, generator=g)
    return enc_p, lengths


def run_chunked(search, state, enc_p, lengths, seed):
    """Feed enc_p in random chunks; each stream's frames beyond its length are padding."""
    rnd = random.Random(seed)
    t, t_max = 0, enc_p.shape[1]
    while t < t_max:
        chunk = enc_p[:, t:t + rnd.randint(1, 5)]
        ln = (lengths - t).clamp(0, chunk.shape[1])
        state = search.step(state, chunk, ln, torch.full((enc_p.shape[0],), t))
        t += chunk.shape[1]
    return state


class RefWittenBell:
    """Interpolated Witten-Bell n-gram straight from the definition (the oracle for streamd.decode.lm).

    p(w | h) = (c(h, w) + T(h) p(w | h')) / (c(h) + T(h)), h' = h without its oldest token; a history
    seen fewer than min_count times (or never) backs off entirely; the empty history interpolates with
    the uniform distribution over the non-blank tokens and </s>.  Histories are the last order - 1
    symbols of the sentence padded on the left with order - 1 <s>.
    """

    BOS, EOS = "<s>", "</s>"

    def __init__(self, seqs, order, vocab, blank=0, min_count=1):
        from collections import Counter
        self.order, self.vocab, self.blank, self.min_count = order, vocab, blank, min_count
        self.c = Counter()  # (history tuple, next) -> count, every history length 0..order-1
        for s in seqs:
            padded = [self.BOS] * (order - 1) + list(s) + [self.EOS]
            for i in range(order - 1, len(padded)):
                for n in range(order):
                    self.c[(tuple(padded[i - n:i]), padded[i])] += 1
        self.total, self.types = Counter(), Counter()
        for (h, _), k in self.c.items():
            self.total[h] += k
            self.types[h] += 1

    def prob(self, w, h):
        h = tuple(h)
        if not h:
            base = 1.0 / self.vocab  # vocab - 1 tokens without blank, plus </s>
        else:
            base = self.prob(w, h[1:])
        total = self.total[h]
        if total == 0 or (h and total < self.min_count):
            return base
        return (self.c[(h, w)] + self.types[h] * base) / (total + self.types[h])

    def history(self, ys):
        return ([self.BOS] * (self.order - 1) + list(ys))[len(ys):] if self.order > 1 else []

    def logp(self, ys, w):
        """log p(w | the token sequence ys so far); w a token id or '</s>'."""
        return math.log(self.prob(w, self.history(ys)))


class RefContext:
    """The context graph's definitions (streamd/decode/context_graph.py) on token strings: no trie,
    no fail links.  ``walk`` gives the state, total gain and matches; ``phi`` the total gain of a sequence."""

    def __init__(self, phrases, boosts, prefix=()):
        self.full = [tuple(prefix) + tuple(p) for p in phrases]
        self.boosts = list(boosts)
        self.pre = len(prefix)
        self.prefix = tuple(prefix)

    def is_state(self, u):
        return any(f[:len(u)] == u for f in self.full)

    def state(self, x):
        """Longest suffix of x that is a prefix of some prefix + phrase."""
        for i in range(len(x) + 1):
            if self.is_state(x[i:]):
                return x[i:]
        raise AssertionError

    def acc(self, u):
        return max([b * max(0, len(u) - self.pre) for f, b in zip(self.full, self.boosts) if f[:len(u)] == u],
                   default=0.0)

    def commit(self, u):
        for n in range(len(u), -1, -1):
            if u[:n] in self.full:
                return self.acc(u[:n])
        return 0.0

    def match(self, u):
        if u in self.full:
            return self.full.index(u)
        best = -1
        for i in range(1, len(u)):
            if u[i:] in self.full and (best < 0 or len(self.full[best]) < len(u) - i):
                best = self.full.index(u[i:])
        return best

    def walk(self, tokens):
        s, total, matches = self.state(self.prefix), 0.0, []
        for v in tokens:
            n = self.state(s + (v,))
            total += self.acc(n) - self.acc(s) + (0.0 if n == s + (v,) else self.commit(s))
            s = n
            matches.append(self.match(s))
        return s, total, matches


    def phi(self, tokens):
        return self.walk(tuple(tokens))[1]

    def gain(self, ys, v):
        """Boost of extending hypothesis ``ys`` by token ``v``."""
        return self.phi(tuple(ys) + (v,)) - self.phi(ys)

    def back(self, ys):
        s = self.walk(tuple(ys))[0]
        return self.commit(s) - self.acc(s)


def dec_init(model):
    """Decoder state and projected output (J,) of an empty hypothesis (slow references: one at a time)."""
    st = model.decoder.init_state(1)
    out, st = model.decoder.step(st, torch.tensor([model.blank_id]))
    return st, model.decoder_proj(out)[0]


def dec_push(model, st, tok):
    """The decoder after one more token: (state, projected output (J,))."""
    out, st = model.decoder.step(st, torch.tensor([tok]))
    return st, model.decoder_proj(out)[0]


@torch.no_grad()
def ref_greedy(model, enc_p, max_sym):
    """enc_p: (T, J). Transducer greedy search, one frame and one symbol at a time."""
    st, dp = dec_init(model)
    ys, frames, confs, score = [], [], [], 0.0
    for t in range(enc_p.shape[0]):
        for _ in range(max_sym):
            logp = model.joiner.log_probs(enc_p[t], dp)
            tok = int(logp.argmax())
            score += float(logp[tok])
            if tok == model.blank_id:
                break
            ys.append(tok)
            frames.append(t)
            confs.append(float(max_prob(logp)))
            st, dp = dec_push(model, st, tok)
    return ys, frames, confs, score


@torch.no_grad()
def ref_modified_beam(model, enc_p, beam, max_sym=1, lm=None, lm_weight=0.0, final=False, lm_bonus=0.0, ctx=None):
    """icefall modified_beam_search for one utterance: top-`beam` of all (hypothesis, token)
    extensions, identical sequences merged by log-add (the first, best-scoring one keeps its
    timing).  max_sym=1: at most one symbol per frame (a token ends the frame).  max_sym=S:
    up to S rounds per frame; in each, hypotheses that have not consumed the frame extend by
    blank (consumes it) or a token (stays, unless it is round S), those that have compete
    unchanged, and the top `beam` of all of them survive; merges need the same sequence and
    the same consumed-or-not.  With an LM (helpers.RefWittenBell), shallow fusion: a token's
    extension also scores min(0, lm_weight * log p_lm(token | tokens so far) + lm_bonus); final=True ranks the
    non-empty hypotheses with lm_weight * log p_lm(</s> | tokens) added.  With hotwords (helpers.RefContext), a
    token's extension also scores the context boost Phi(ys + v) - Phi(ys), and final=True adds back(ys), the
    unfinished phrase's boost taken back."""
    st, dp = dec_init(model)
    hyps = {(): dict(score=0.0, st=st, dp=dp, frames=(), confs=())}
    for t in range(enc_p.shape[0]):
        cur = {(ys, False): h for ys, h in hyps.items()}
        for r in range(max_sym):
            if all(done for _, done in cur):
                break
            cands = []
            for (ys, done), h in cur.items():
                if done:
                    cands.append((h["score"], ys, True, None, None))
                    continue
                logp = model.joiner.log_probs(enc_p[t], h["dp"])
                conf = float(max_prob(logp))
                for v in range(logp.shape[0]):
                    fused = min(0.0, lm_weight * lm.logp(ys, v) + lm_bonus) if lm is not None and v != model.blank_id else 0.0
                    if ctx is not None and v != model.blank_id:
                        fused += ctx.gain(ys, v)
                    cands.append((h["score"] + float(logp[v]) + fused, ys, False, v, conf))
            cands.sort(key=lambda c: -c[0])
            new = {}
            for score, ys, done, v, conf in cands[:beam]:
                parent = cur[(ys, done)]
                if done or v == model.blank_id:
                    key = (ys, True)
                else:
                    key = (ys + (v,), r == max_sym - 1)
                if key in new:
                    new[key]["score"] = float(torch.logaddexp(torch.tensor(new[key]["score"], dtype=torch.float64),
                                                              torch.tensor(score, dtype=torch.float64)))
                    continue
                if done or v == model.blank_id:
                    new[key] = dict(parent, score=score)
                else:
                    st2, dp2 = dec_push(model, parent["st"], v)
                    new[key] = dict(score=score, st=st2, dp=dp2, frames=parent["frames"] + (t,),
                                    confs=parent["confs"] + (conf,))
            cur = new
        hyps = {ys: h for (ys, _), h in cur.items()}

    def end(ys):
        # an empty hypothesis is no sentence: it has nothing to end (no </s> term)
        e = lm_weight * lm.logp(ys, lm.EOS) if final and lm is not None and ys else 0.0
        return e + (ctx.back(ys) if final and ctx is not None else 0.0)

    return sorted(((h["score"] + end(ys), ys, h["frames"], h["confs"]) for ys, h in hyps.items()), key=lambda x: -x[0])


def assert_same_hyp(a, b, tol=1e-5):
    assert a.tokens == b.tokens
    assert a.frames == b.frames
    assert a.confs == pytest.approx(b.confs, abs=tol)
    assert a.score == pytest.approx(b.score, abs=tol)


def count_step(counts, search, state, enc_p, lengths):
    counts.clear()
    search.step(state, enc_p, lengths, torch.zeros(enc_p.shape[0], dtype=torch.long))
    return sum(counts.values())
