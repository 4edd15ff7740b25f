"""The kept batch and the pools: streams stepped in changing sets, gone idle, closed, with every kind of state
(encoder cache, searches of several methods and options, the KWS head, runtime wake words, hotwords) decode as
each alone, and the state kept for idle streams stays within a few times the live streams'."""

from __future__ import annotations

import logging
import random

from helpers import random_audio
from streamd.engine import Recognizer
from streamd.events import Done
from tests.engine.feeding import final_tokens, NO_ENDPOINT, run_one

SPECS = [dict(method="greedy"), dict(method="modified_beam", beam=2), dict(method="greedy", keywords=False),
         dict(method="modified_beam", beam=3, hotwords=["vv"]), dict(method="greedy", wake_words=["rr"]),
         dict(method="ctc_greedy"), dict(method="greedy", sample_rate=8000)]


def pools_of(rec) -> list:
    """Every pool a stream's state lives in, with its live rows counted from the streams."""
    pools: dict[int, list] = {}
    for st in rec._streams.values():  # noqa: SLF001 - the test reads where the state lives
        if st.pool is not None:
            pools.setdefault(id(st.pool[0]), [st.pool[0], 0])[1] += 1
    return list(pools.values())


def test_changing_sets_idle_and_closed_streams_decode_as_alone(tiny_ckpt, caplog):
    caplog.set_level(logging.WARNING)
    rnd = random.Random(3)
    n = 48  # more than a pool's compaction minimum
    specs = [SPECS[i % len(SPECS)] for i in range(n)]
    audios = [random_audio(1.2 + 0.05 * (i % 9), rate=s.get("sample_rate", 16000), seed=100 + i)
              for i, s in enumerate(specs)]
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    sids = [rec.create_stream(**s) for s in specs]
    closed = set(sids[5::11])  # clients that go away half-way
    pos = [0] * n
    events, compacted = [], 0
    for tick in range(400):
        if all(pos[i] >= a.size or sids[i] in closed and pos[i] > a.size // 2 for i, a in enumerate(audios)):
            break
        # eight streams wait while the others talk (ticks 6-14: their pools empty out), then everyone; packets
        # of random sizes
        talking = range(8, n) if 6 <= tick < 14 else range(n)
        for i in talking:
            sid, a = sids[i], audios[i]
            if pos[i] >= a.size or sid in closed and pos[i] > a.size // 2:
                continue
            k = rnd.randint(400, 3000)
            events += rec.accept_audio(sid, a[pos[i]:pos[i] + k])
            pos[i] += k
            if sid in closed and pos[i] > a.size // 2:
                rec.close(sid)
            elif pos[i] >= a.size:
                rec.finish(sid)
        ready = rec.ready_streams()  # every other step a random part of the ready streams: the sets change
        events += rec.step(only=[s for s in ready if tick % 2 == 0 or rnd.random() < 0.7])
        for pool, live in pools_of(rec):  # a pool keeps its rows while a quarter of them are live
            assert pool.live == live
            assert 4 * live >= len(pool.ids) or len(pool.ids) < rec.COMPACT_MIN_ROWS
            compacted += live < len(pool.ids) // 2
    events += rec.drain()
    assert compacted  # the idle streams' pools did empty out
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]  # no batch fell back
    for i, sid in enumerate(sids):
        if sid in closed:
            continue
        mine = [e for e in events if e.stream == sid]
        alone = run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), audios[i], 0, **specs[i])
        assert final_tokens(mine) == final_tokens(alone), specs[i]
        assert [e.keyword for e in mine if type(e).__name__ == "WakeWord"] == \
            [e.keyword for e in alone if type(e).__name__ == "WakeWord"], specs[i]
        assert isinstance(mine[-1], Done)
    assert rec.num_streams == 0
