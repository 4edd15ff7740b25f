"""The ready streams kept as a set (O(ready) per step) against a scan of every stream: the same streams in the
same order after random sequences of audio, resets, finishes, closes and steps (whole, ``only`` a part, and
over ``max_batch``)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from helpers import random_audio
from streamd.engine import Recognizer
from tests.engine.feeding import NO_ENDPOINT

SPECS = [dict(method="greedy"), dict(method="modified_beam", beam=2), dict(method="greedy", wake_words=["rr"]),
         dict(method="greedy", sample_rate=8000), dict(method="greedy", partials=False)]


def check(rec) -> None:
    scan = rec._ready_scan()  # noqa: SLF001 - the slow reference
    assert rec.ready_streams() == scan
    assert rec.pending() == bool(scan)
    assert rec.ready_streams() == scan  # asking again changes nothing


@pytest.mark.parametrize("seed,max_batch", [(0, 64), (1, 5), (2, 3)])
def test_ready_set_matches_a_scan(tiny_ckpt, seed, max_batch):
    rnd = random.Random(seed)
    rec = Recognizer.from_checkpoint(tiny_ckpt, dataclasses.replace(NO_ENDPOINT, max_batch=max_batch))
    audio = random_audio(3.0, seed=seed)
    live: dict[int, int] = {}  # open stream -> samples fed
    finished: set[int] = set()
    check(rec)
    for _ in range(300):
        op = rnd.random()
        if op < 0.08 or not live:
            sid = rec.create_stream(**rnd.choice(SPECS))
            live[sid] = 0
        elif op < 0.55:
            sid = rnd.choice(list(live))
            if sid not in finished:
                k = rnd.choice([0, 1, 160, 800, 2000, 5000])
                rec.accept_audio(sid, audio[live[sid] % 40000:][:k])
                live[sid] += k
        elif op < 0.6:
            rec.reset(rnd.choice(list(live)))
        elif op < 0.65:
            sid = rnd.choice(list(live))
            rec.finish(sid)
            finished.add(sid)
        elif op < 0.68:
            sid = rnd.choice(list(live))
            rec.close(sid)
            del live[sid]
        else:
            only = None
            if rnd.random() < 0.3:
                only = [s for s in rec._ready_scan() if rnd.random() < 0.5]  # noqa: SLF001
            for ev in rec.step(only=only):
                if type(ev).__name__ in ("Done", "Error"):
                    live.pop(ev.stream, None)
        check(rec)
    for sid in list(live):
        rec.finish(sid)
    check(rec)
    while rec.pending():
        rec.step()
        check(rec)
    assert rec.num_streams == 0 and rec.ready_streams() == []


def test_non_finite_encoder_rows_fail_their_streams_only(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    sids = [rec.create_stream(method="greedy", keywords=False) for _ in range(4)]  # (the KWS head refuses NaN)
    for k, sid in enumerate(sids):
        rec.accept_audio(sid, random_audio(1.0, seed=k))
    forward = rec.encoder.forward_chunk

    def poisoned(feats, lengths, cache):
        enc, enc_len, new = forward(feats, lengths, cache)
        enc = enc.clone()
        enc[1] = float("nan")
        enc[3, 0, 0] = float("inf")
        return enc, enc_len, new

    rec.encoder.forward_chunk = poisoned
    events = rec.step()
    errors = [e for e in events if type(e).__name__ == "Error"]
    assert [(e.stream, e.code) for e in errors] == [(sids[1], "internal"), (sids[3], "internal")]
    assert all("non-finite encoder output" in e.message for e in errors)
    assert not rec.has_stream(sids[1]) and not rec.has_stream(sids[3])
    rec.encoder.forward_chunk = forward
    for sid in (sids[0], sids[2]):
        rec.finish(sid)
    done = [e.stream for e in rec.drain() if type(e).__name__ == "Done"]
    assert sorted(done) == [sids[0], sids[2]]
    assert rec.ready_streams() == rec._ready_scan() == []  # noqa: SLF001
