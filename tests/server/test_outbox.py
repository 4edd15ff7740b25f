"""streamd.server.outbox: a client's bounded queue of outgoing messages (partials coalesce, finals are bounded),
against "a list where a droppable item replaces a droppable tail"."""

from __future__ import annotations

import asyncio

import numpy as np

from streamd.server.outbox import Flusher, Outbox
from streamd.server.protocol import Close


def test_outbox_coalesces_partials_and_bounds_finals():
    async def body():
        box = Outbox(4)
        assert box.put("p1", True) and box.put("p2", True)  # p2 replaces p1
        assert box.put("f1") and box.put("p3", True) and box.put("p4", True)
        assert len(box) == 3 and box.dropped == 2
        assert await box.get() == "p2" and await box.get() == "f1" and await box.get() == "p4"
        for i in range(4):
            assert box.put(f"f{i}")
        assert not box.put("one too many")
        box.close(1000, "done")
        assert box.put("late")  # ignored once closing
        got = [await box.get() for _ in range(5)]
        assert got[:4] == ["f0", "f1", "f2", "f3"] and got[4] == Close(1000, "done")

    asyncio.run(asyncio.wait_for(body(), 5))


def test_outbox_reference_random():
    """Oracle: the outbox equals "a list where a droppable item replaces a droppable tail"."""
    async def body(seed):
        rng = np.random.default_rng(seed)
        box, ref = Outbox(1000), []
        for i in range(300):
            if rng.random() < 0.3 and ref:
                assert await box.get() == ref.pop(0)[0]
            else:
                d = bool(rng.random() < 0.6)
                if d and ref and ref[-1][1]:
                    ref[-1] = (str(i), True)
                else:
                    ref.append((str(i), d))
                box.put(str(i), d)
        assert [await box.get() for _ in ref] == [r[0] for r in ref]

    for seed in range(3):
        asyncio.run(asyncio.wait_for(body(seed), 5))


def test_outbox_flush_writes_a_turns_messages_at_the_next_turn():
    """With a flusher and ``write_now``: what is put during a turn of the event loop coalesces as it did while
    waiting for the sender, and is written at the next turn, in order, with ``written()`` after each; what the
    transport refuses waits for the sender (``pump``), behind nothing and before everything put later."""
    async def body():
        written, sent, accept = [], [], [True]

        def write_now(text):
            if accept[0]:
                written.append(text)
            return accept[0]

        box = Outbox(4, write_now, lambda: written.append("|"), Flusher())
        assert box.put("p1", True) and box.put("f1") and box.put("p2", True) and box.put("p3", True)
        assert written == [] and len(box) == 3 and box.dropped == 1 and not box.drained  # p3 replaced p2
        await asyncio.sleep(0)
        assert written == ["p1", "|", "f1", "|", "p3", "|"] and box.drained
        accept[0] = False  # the transport's buffer is full: the sender writes them once it can
        assert box.put("f2") and box.put("f3")
        await asyncio.sleep(0)
        assert written == ["p1", "|", "f1", "|", "p3", "|"] and len(box) == 2

        async def write(text):
            sent.append(text)

        pump = asyncio.ensure_future(box.pump(write))
        await asyncio.sleep(0.01)
        assert sent == ["f2", "f3"] and box.drained
        accept[0] = True
        box.writing = True  # the sender is handing a message to the transport: the flush leaves the rest to it
        assert box.put("f4")
        await asyncio.sleep(0)
        assert len(box) == 1 and written[-1] == "|"
        box.writing = False
        box.close(1000, "done")
        assert box.put("late")  # ignored once closing
        assert await pump == Close(1000, "done") and sent == ["f2", "f3", "f4"]

    asyncio.run(asyncio.wait_for(body(), 5))
