"""Feeding a Recognizer in tests: random pieces with steps between, one stream through to its Finals, the
offline reference decode, the frames a finished stream decodes."""

from __future__ import annotations

import random

import numpy as np
import torch

from helpers import offline_heads
from streamd.audio.fbank import FbankStream
from streamd.config import EndpointConfig, EngineConfig
from streamd.events import Final


def feed(rec, sid, x, seed, max_piece=3000):
    rnd = random.Random(seed)
    pos, events = 0, []
    while pos < x.size:
        n = rnd.randint(0, max_piece)
        events += rec.accept_audio(sid, x[pos:pos + n])
        pos += n
        if rnd.random() < 0.5:
            events += rec.step()
    return events


def run_one(rec, x, seed=0, **opts):
    sid = rec.create_stream(**opts)
    ev = feed(rec, sid, x, seed)
    rec.finish(sid)
    ev += rec.drain()
    return [e for e in ev if e.stream == sid]


def finals_text(events):
    return " ".join(e.text for e in events if isinstance(e, Final) and e.text)


def final_tokens(events):
    return [t for e in events if isinstance(e, Final) for t in e.tokens]


@torch.no_grad()
def offline_tokens(rec, x, method="greedy", beam=None):
    """Whole utterance: fbank of the signal and the engine's end-of-stream flush, encoder forward under the
    chunk mask, one search call (beam: the stream's, by default the config's for the method)."""
    beam = rec.config.decoding.beam_for(method) if beam is None else beam
    heads, enc_len = offline_heads(rec, x)
    search = rec.searches[method]
    if method in ("greedy", "ctc_greedy"):
        state = search.init_state(1)
    else:
        state = search.init_state(torch.tensor([beam]))
    x_in = heads.ctc_log_probs if method.startswith("ctc") else heads.enc_p
    state = search.step(state, x_in, enc_len, torch.zeros(1, dtype=torch.long))
    return list(search.best(state)[0].tokens), int(enc_len[0])


NO_ENDPOINT = EngineConfig(device="cpu", endpoint=EndpointConfig(enabled=False))

def FbankStream_frames(rec, n):
    """Fbank frames a finished stream of n samples decodes (its end-of-stream flush included)."""
    fs = FbankStream(rec.model.cfg.fbank)
    fs.accept(np.zeros(n, dtype=np.float32))
    if n:
        fs.accept(rec.tail_padding)
    fs.finish()
    return fs.frames_ready()
