"""Test helpers: tiny random models and checkpoints, synthetic audio (no trained model needed), slow reference
implementations the fast code is checked against, and small clients for the daemon's wire tests."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import random
import time
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from streamd.config import DecoderConfig, EncoderConfig, ModelConfig
from streamd.events import Final
from streamd.tokens import TokenTable
from streamd.model.checkpoint import save_checkpoint
from streamd.model.transducer import Transducer

# the checkout: configs/, pyproject.toml, README.md, streamd/
ROOT = Path(__file__).resolve().parents[1]

CHARS = ("<blk>", " ") + tuple("abcdefghijklmnopqrstuvwxyz'")
# a small bpe table's pieces: word starts ("▁turn"), the bare "▁" word boundary and some single letters
PIECES = ["<blk>", "<unk>", "▁", "▁turn", "▁on", "▁the", "▁li", "ghts", "s", "▁t", "ur", "n", "o", "h", "e",
          "l", "i", "g", "t", "▁a", "▁b", "b", "a", "y"]


def tiny_model(seed: int = 0, kind: str = "stateless", keywords=("hey stream",), chunk_size: int = 4,
               left_chunks: int = 2, ctc: bool = True, blank_bias: float = 0.0) -> Transducer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=len(CHARS), blank_id=0, joiner_dim=32, ctc_head=ctc, keywords=tuple(keywords),
        encoder=EncoderConfig(num_features=80, d_model=32, num_layers=2, num_heads=4, ff_dim=64, conv_kernel=5,
                              subsampling_channels=8, chunk_size=chunk_size, left_chunks=left_chunks, dropout=0.0),
        decoder=decoder_config(kind, 32))
    model = Transducer(cfg).eval()
    with torch.no_grad():
        model.encoder.feat_mean.fill_(-8.0)
        model.encoder.feat_std.fill_(4.0)
        model.joiner.out.weight.mul_(3.0)
        model.joiner.out.bias[0] += blank_bias
        if model.ctc is not None:
            model.ctc.weight.mul_(3.0)
            model.ctc.bias[0] += blank_bias
    return model


def write_checkpoint(path, **kw) -> str:
    save_checkpoint(path, tiny_model(**kw), TokenTable(CHARS), meta={"name": "tiny-random"})
    return str(path)


def random_audio(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Speech-like test signal: random tones and noise bursts, float32 in [-1, 1]."""
    g = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = np.zeros(n, dtype=np.float64)
    for _ in range(6):
        f = g.uniform(150, min(3500, rate / 2 - 100))
        on = g.uniform(0, seconds)
        env = np.exp(-((t - on) ** 2) / (2 * g.uniform(0.05, 0.3) ** 2))
        x += g.uniform(0.05, 0.3) * env * np.sin(2 * np.pi * f * t)
    x += 0.01 * g.standard_normal(n)
    return np.clip(x, -1, 1).astype(np.float32)


def decoder_config(kind: str, dim: int) -> DecoderConfig:
    """kind: "lstm", "stateless" (context 2) or "stateless-N" (context N)."""
    kind, _, context = kind.partition("-")
    return DecoderConfig(kind=kind, dim=dim, context_size=int(context or 2))


def make_model(vocab=7, kind="stateless", seed=0, joiner_dim=16, keywords=(), ctc=True, scale=2.0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab, blank_id=0, joiner_dim=joiner_dim, ctc_head=ctc, keywords=tuple(keywords),
        encoder=EncoderConfig(num_features=20, d_model=16, num_layers=1, num_heads=2, ff_dim=32, conv_kernel=3,
                              subsampling_channels=4, chunk_size=4, left_chunks=2, dropout=0.0),
        decoder=decoder_config(kind, 12))
    m = Transducer(cfg).eval()
    with torch.no_grad():  # sharper distributions so searches actually disagree / emit
        m.joiner.out.weight.mul_(scale)
    return m


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


def speechlike(rng: np.random.Generator, seconds: float, rate: int = 16000) -> np.ndarray:
    """Harmonic signal with a wandering pitch (120 +- 30 Hz) and a syllable-rate (4 Hz) envelope, plus a
    faint noise floor: (round(seconds * rate),) float32, for augmentation tests that need voiced audio."""
    n = int(seconds * rate)
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * np.arange(n) / rate)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 15))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n) / rate)
    return (0.2 * x * env + 0.01 * rng.standard_normal(n)).astype(np.float32)


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


def write_wav(path, x, rate=16000, channels=1):
    """Write a 16-bit PCM WAV file and return its path as a string.

    x: float samples in [-1, 1] ((N,) mono, or (N * channels,) interleaved), or s16le bytes written as they are."""
    import wave

    pcm = x if isinstance(x, (bytes, bytearray)) else (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return str(path)


def dec_init(model):
    """Decoder state and projected output (J,) of an empty hypothesis (slow references: one at a time)."""
    st = model.decoder.init_state(1)
    out, st = model.decoder.step(st, torch.tensor([model.blank_id]))
    return st, model.decoder_proj(out)[0]


def dec_push(model, st, tok):
    """The decoder after one more token: (state, projected output (J,))."""
    out, st = model.decoder.step(st, torch.tensor([tok]))
    return st, model.decoder_proj(out)[0]


def app_config(**sections):
    """An AppConfig for tests: the given sections over the defaults, any free port, CPU, and one engine lane
    (``limits.light_lane: 0``: no second engine process per test app; the light lane's tests turn it on)."""
    from streamd.config import AppConfig, from_dict

    data = {k: dict(v) for k, v in sections.items()}
    data.setdefault("server", {}).setdefault("port", 0)
    data.setdefault("engine", {}).setdefault("device", "cpu")
    data.setdefault("limits", {}).setdefault("light_lane", 0)
    return from_dict(AppConfig, data)


def make_app(ckpt, **sections):
    """A daemon (streamd.server.app.App, not started) on checkpoint ``ckpt`` with :func:`app_config`."""
    from streamd.engine import Recognizer
    from streamd.server.app import App

    cfg = app_config(**sections)
    return App(cfg, recognizer=Recognizer.from_checkpoint(ckpt, cfg.engine))


# --------------------------------------------------------------------------- search references and checks


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


# --------------------------------------------------------------------------- capture and engine references


def real_portaudio_without_inputs():
    """Skip the calling test unless the real PortAudio library is usable and sees no input device."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        pytest.skip(f"sounddevice/PortAudio not usable here ({e}); CI installs libportaudio2")
    if any(d["max_input_channels"] > 0 for d in sd.query_devices()):
        pytest.skip("this machine has an audio input device")


def transcribe_events(ckpt, wav):
    """The events ``streamd.feed.transcribe_files`` gives for one file with a fresh recognizer on ``ckpt``."""
    from streamd.feed import transcribe_files
    from streamd.engine import Recognizer

    return transcribe_files(Recognizer.from_checkpoint(ckpt), [wav])[wav]


# --------------------------------------------------------------------------- evaluation sets and references


def levenshtein(r, h):
    """Reference edit distance (textbook recursion, memoized)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (r[i - 1] != h[j - 1]))

    return d(len(r), len(h))


def final_texts(events):
    """Per path, the text of its non-empty Finals joined (the hypothesis ``streamd eval`` scores)."""
    return {p: " ".join(e.text for e in evs if isinstance(e, Final) and e.text) for p, evs in events.items()}


def write_eval_set(path, wavs, texts, keywords=None):
    """An evaluation set (JSON lines) of ``wavs`` (in the set's folder) and their reference ``texts``: voices
    voice0/voice1 alternating, the first two files of source "real", the others "synthetic"; ``keywords`` adds
    a ``keyword`` field per line."""
    rows = []
    for i, (w, t) in enumerate(zip(wavs, texts)):
        row = {"audio": w.rsplit("/", 1)[1], "text": t, "voice": f"voice{i % 2}", "duration": 1.0,
               "source": "real" if i < 2 else "synthetic"}
        if keywords is not None:
            row["keyword"] = keywords[i]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_jsonl(path, rows):
    """Write ``rows`` (dicts) as JSON lines to ``path``; returns the path as a string."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


class Det:
    """A stand-in wake event: a keyword and a score, equal by value."""

    def __init__(self, keyword, score):
        self.keyword, self.score = keyword, score

    def __eq__(self, other):
        return (self.keyword, self.score) == (other.keyword, other.score)

    def __repr__(self):
        return f"Det({self.keyword!r}, {self.score})"


# --------------------------------------------------------------------------- training runs


# a model small enough to train for a few steps in a test
TINY_MODEL = {
    "vocab_size": 29, "joiner_dim": 32, "keywords": ["hey stream"],
    "encoder": {"num_features": 20, "d_model": 32, "num_layers": 2, "num_heads": 2, "ff_dim": 64, "conv_kernel": 5,
                "subsampling_channels": 8, "chunk_size": 4, "left_chunks": 2, "dropout": 0.0},
    "decoder": {"dim": 32}, "fbank": {"num_mel_bins": 20},
}


def make_corpus(root, items):
    """items: (text, seconds, keyword) -> manifest with 16 kHz 16-bit WAVs (a distinct tone + noise each)."""
    (root / "wav").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    lines = []
    for i, (text, sec, kw) in enumerate(items):
        t = np.arange(int(sec * 16000)) / 16000
        x = 0.3 * np.sin(2 * np.pi * (250 + 170 * i) * t * (1 + 0.5 * t)) + 0.01 * rng.standard_normal(len(t))
        with wave.open(str(root / "wav" / f"{i}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
        lines.append(json.dumps({"audio": f"wav/{i}.wav", "text": text, "duration": len(t) / 16000, "keyword": kw}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root / "manifest.jsonl"


def tiny_config(exp_dir, manifest, **over):
    """A TrainConfig of a tiny model (TINY_MODEL) for a few steps on ``manifest``; ``over``: keys like
    ``optim__lr`` (``__`` between levels) set over it."""
    from streamd.config import from_dict
    from streamd.train.trainer import TrainConfig

    data = {"exp_dir": str(exp_dir), "model": copy.deepcopy(TINY_MODEL),
            "data": {"train": [str(manifest)], "max_frames": 400, "num_workers": 0},
            "optim": {"lr": 5e-3, "warmup_steps": 3, "schedule": "constant"},
            "chunk_sizes": [2, 4, -1], "left_chunks": [1, -1],
            "steps": 30, "log_every": 10, "checkpoint_every": 100, "num_threads": 1, "seed": 3}
    return from_dict(TrainConfig, set_nested(data, over))


def _tts_engine_available(engine: str) -> bool:
    from streamd.train.tts import engine_available

    return engine_available(engine)


# marks the tests that synthesize speech with espeak-ng (CI installs it)
needs_espeak = pytest.mark.skipif(not _tts_engine_available("espeak"),
                                  reason="espeak-ng is not installed (apt-get install espeak-ng)")


# --------------------------------------------------------------------------- the daemon on loopback (wire tests)

TIMEOUT = 60  # seconds: how long a wire test may run before it is failed as hung

TENTH = b"\0\0" * 1600  # 0.1 s of s16le at 16 kHz


def run(coro, timeout: float = TIMEOUT):
    """Run one wire test's coroutine in a fresh event loop, failed after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def pcm16(x) -> bytes:
    """float samples in [-1, 1] -> s16le bytes."""
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


async def vosk_lockstep(ws, config: str, pcm: bytes, frame_bytes: int) -> list[dict]:
    """vosk-server's test.py client on an open ``/vosk`` websocket: the ``config`` message, then ``pcm`` in
    ``frame_bytes`` frames each waiting for its reply, then ``eof`` and its reply; the replies in order."""
    await ws.send(config)
    replies = []
    for i in range(0, len(pcm), frame_bytes):
        await ws.send(pcm[i:i + frame_bytes])
        replies.append(json.loads(await ws.recv()))
    await ws.send('{"eof" : 1}')
    replies.append(json.loads(await ws.recv()))
    return replies


async def drain(ws) -> list[dict]:
    """Every message a websocket client receives until the server closes, as JSON objects."""
    from websockets.exceptions import ConnectionClosed

    out = []
    try:
        while True:
            out.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return out


async def http_get(port, path, headers=None):
    """Minimal HTTP/1.1 GET: (status, headers, body); the server closes the connection after answering."""
    extra = "".join(f"\r\n{k}: {v}" for k, v in (headers or {}).items())
    return await raw_http(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}{extra}")


async def raw_http(port: int, head: str) -> tuple[int, dict, bytes]:
    """Send ``head`` (request line + headers, \\r\\n separated, no blank line) and read the whole answer:
    (status, headers with lower-case names, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode("latin-1") + b"\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    hdrs = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


async def until(cond, timeout=5.0):
    """Wait until ``cond()`` holds (failing after ``timeout`` seconds)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "condition not reached"
        await asyncio.sleep(0.01)


def slowed(rec, seconds):
    """Make every batch step of ``rec`` take ``seconds`` longer (an overloaded engine)."""
    real = rec.step

    def step(*args, **kw):  # the runner may restrict a step to some streams (Recognizer.step(only))
        time.sleep(seconds)
        return real(*args, **kw)

    rec.step = step
    return rec


def headers(*pairs):
    """websockets Headers with the (name, value) pairs, repeated names included."""
    from websockets.datastructures import Headers

    h = Headers()
    for k, v in pairs:
        h[k] = v  # Headers appends: a repeated name keeps every value
    return h


def bad(fn, *args, **kw):
    """The BadRequest ``fn(*args, **kw)`` raises (streamd.server.guard)."""
    from streamd.server.guard import BadRequest

    with pytest.raises(BadRequest) as e:
        fn(*args, **kw)
    return e.value


def error_of(actions):
    """(code, message, close code) of an error + close action pair (sans-I/O sessions' actions)."""
    from streamd.server.protocol import CLOSE_CODES, Close, Send

    assert len(actions) == 2 and isinstance(actions[0], Send) and isinstance(actions[1], Close), actions
    msg = actions[0].message
    assert msg["type"] == "error" and set(msg) == {"type", "code", "message"}
    assert actions[1].code == CLOSE_CODES[msg["code"]] and actions[1].reason == msg["code"]
    return msg["code"], msg["message"], actions[1].code


def set_nested(data: dict, over: dict) -> dict:
    """``data`` with ``over``'s values set in place, keys ``a__b__c`` naming nested mappings (created as needed)."""
    for k, v in over.items():
        node = data
        *parents, last = k.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return data


class LocalWsServer:
    """A websocket server on a free loopback port for client tests: ``async with Sub() as srv`` serves
    ``srv.handler`` (connections) after ``srv.http`` (process_request) at ``srv.url`` (the /v1/stream path)."""

    async def __aenter__(self):
        from websockets.asyncio.server import serve

        self.server = await serve(self.handler, "127.0.0.1", 0, process_request=self.http)
        self.url = f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/stream"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def self_signed_cert(folder) -> tuple[str, str]:
    """A self-signed certificate for ``localhost`` / 127.0.0.1 (the ``openssl`` command): (cert.pem, key.pem)."""
    import subprocess

    cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


@torch.no_grad()
def offline_heads(rec, x):
    """The reference for streaming: the whole utterance's fbank (the signal, then the engine's end-of-stream
    flush), one encoder forward under the chunk mask, the heads.  Returns (HeadOutputs, enc_len (1,))."""
    from streamd.audio.fbank import Fbank, FbankStream

    fs = FbankStream(rec.model.cfg.fbank)
    fs.accept(x)
    fs.accept(rec.tail_padding)
    fs.finish()
    n = fs.frames_ready()
    feats = Fbank(rec.model.cfg.fbank)(torch.from_numpy(fs.take(n))[None])
    enc, enc_len = rec.model.encoder(feats, torch.tensor([n]))
    return rec.model.heads(enc), enc_len
