"""Flow control (streamd.server.flow): a client that sends a long file faster than the engine decodes it is slowed
down by not being read, not cut off; one that never reads its results still is (``rate_limited``).

Files of ``LONG`` seconds, well beyond the 30 s burst at the default ``limits.max_realtime`` (4x), sent as fast
as the client can: their finals are what the engine decodes from the whole file.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from websockets.asyncio.client import connect

from helpers import random_audio, write_wav
from tests.server.wire import app_config, drain, make_app, pcm16, run, vosk_lockstep
from streamd.client import transcribe_file
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.feed import transcribe_files
from streamd.server.app import Conn
from streamd.server.commands import FeedPcm
from streamd.server.flow import FLOW_MIN_SECONDS, FLOW_SECONDS, FlowControl
from streamd.server.protocol import V1Session

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores

LONG = 100.0  # seconds of audio per file: 25 s beyond what 4x real time after a 30 s burst lets through at once
FRAME = 3200  # bytes: 0.1 s of 16 kHz s16le


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory) -> str:
    x = np.concatenate([random_audio(10.0, seed=s) for s in range(int(LONG // 10))])
    return write_wav(tmp_path_factory.mktemp("long") / "long.wav", x, 16000)


@pytest.fixture(scope="module")
def offline(ckpt, long_wav) -> list[tuple[str, float, float]]:
    """The engine's finals for the whole file (text, start, end)."""
    rec = Recognizer.from_checkpoint(ckpt, app_config().engine)
    finals = [(e.text, e.start, e.end) for e in transcribe_files(rec, [long_wav])[long_wav] if isinstance(e, Final)]
    assert len([f for f in finals if f[0]]) >= 3  # a file with segments to compare
    return finals


def pcm_of(path: str) -> bytes:
    import wave

    with wave.open(path, "rb") as w:
        return w.readframes(w.getnframes())


def test_the_bound():
    from streamd.config import LimitsConfig

    assert FlowControl.from_limits(LimitsConfig()).bound == FLOW_SECONDS
    assert FlowControl.from_limits(LimitsConfig(burst_seconds=4, max_backlog_seconds=60)).bound == 2.0
    assert FlowControl.from_limits(LimitsConfig(burst_seconds=0.5, max_backlog_seconds=1)).bound == FLOW_MIN_SECONDS
    f = FlowControl(5.0)
    assert not f.hold(5.0) and f.hold(5.01)


def test_session_backlog_and_credit():
    """A session's backlog is its audio not decoded yet; decoded audio whose results reached the socket refills
    its token bucket (and only that: decoded but undelivered audio does not)."""
    from streamd.config import LimitsConfig

    def session():
        s = V1Session("x", LimitsConfig(max_realtime=1.0, burst_seconds=2.01), {"methods": ["greedy"]})
        s.receive('{"type": "start"}', 0.0)
        for _ in range(20):  # 2 s at one instant: the whole burst
            assert type(s.receive(FRAME * b"\0", 0.0)[0]).__name__ == "Audio"
        return s

    s = session()
    assert s.backlog == pytest.approx(2.0)
    s.progress(1.5)
    s.progress(1.0)  # never backwards
    assert s.backlog == pytest.approx(0.5)
    assert s.receive(FRAME * b"\0", 0.0)[0].message["code"] == "rate_limited"  # decoded, not delivered
    s = session()
    s.progress(1.0)
    s.delivered()  # 1 s back
    s.delivered()  # once
    for _ in range(10):
        assert type(s.receive(FRAME * b"\0", 0.0)[0]).__name__ == "Audio"
    assert s.receive(FRAME * b"\0", 0.0)[0].message["code"] == "rate_limited"


class FloodWs:
    """A client that sends 0.1 s frames of audio without end, one per turn of the event loop while the server
    reads it (as :class:`~streamd.server.wsconn.DirectConnection` hands messages to the connection's sink, and
    stops reading the socket on ``hold``); ``reads``: whether it reads what it is sent."""

    def __init__(self, reads: bool):
        self.reads = reads
        self.sent: list[str] = []
        self.closed_with = None
        self.frames = 0
        self._reading = asyncio.Event()
        self._reading.set()
        self._closed = asyncio.Event()
        self._flood: asyncio.Task | None = None

    def set_sink(self, sink) -> None:
        self._flood = asyncio.ensure_future(self._push(sink))

    async def _push(self, sink) -> None:
        while self.closed_with is None:
            await self._reading.wait()
            self.frames += 1
            sink(pcm16(random_audio(0.1, seed=self.frames % 50)))
            await asyncio.sleep(0)

    def hold(self) -> None:
        self._reading.clear()

    def release(self) -> None:
        self._reading.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def send(self, text):
        if not self.reads:
            await asyncio.sleep(3600)  # never drains: a client that does not read
        self.sent.append(text)

    async def close(self, code=1000, reason=""):
        self.closed_with = (code, reason)
        self._closed.set()


def test_input_is_not_read_while_the_backlog_is_over_the_bound(ckpt):
    """No engine progress: the connection reads up to the bound and one frame more, and waits (its idle and
    minimum-rate clocks stopped meanwhile); progress lets it read again."""
    async def body():
        async with make_app(ckpt, limits={"idle_timeout": 0.2, "min_audio_rate": 1.0,
                                          "min_audio_window": 1.0}) as app:
            proto = V1Session("x", app.config.limits, app.model_info)
            ws = FloodWs(reads=True)
            conn = Conn(app, ws, 99, proto)
            fed = []
            app.submit = lambda cmd: fed.append(cmd)  # an engine that never decodes
            conn.start()
            conn.perform(proto.receive('{"type": "start"}', time.monotonic()))
            loop = asyncio.ensure_future(conn.read_loop())
            await asyncio.sleep(1.5)  # beyond the idle timeout and a minimum-rate window
            bound = conn.flow.bound
            assert not proto.closed and not loop.done(), (ws.sent, list(conn.outbox._items))
            assert bound < proto.audio_seconds <= bound + 0.1 + 1e-9
            assert sum(isinstance(c, FeedPcm) for c in fed) == round(proto.audio_seconds / 0.1)
            read = ws.frames
            conn.on_progress(proto.audio_seconds)  # decoded: it reads on, up to the bound again
            await asyncio.sleep(0.3)
            assert ws.frames > read and bound < proto.backlog <= bound + 0.1 + 1e-9
            assert conn.held_seconds > 1.0 and not proto.closed
            held = [line for line in app.metrics.render().decode().splitlines()
                    if line.startswith('streamd_flow_held_seconds_total{stream_class="v1"}')]
            assert held and float(held[0].split()[-1]) > 1.0
            conn.abort("shutting_down", "test over")
            await loop

    run(body())


def test_a_held_connection_only_polls_and_its_deadlines_move_on(ckpt):
    """Held past its idle timeout (no engine progress), a connection's one timer only makes the flow poll (it
    does not fire again and again for the deadline that passed meanwhile); released, its idle timeout counts
    from its last message plus the time held, and ends it once the client is silent."""
    async def body():
        async with make_app(ckpt, limits={"idle_timeout": 0.3}) as app:
            proto = V1Session("x", app.config.limits, app.model_info)
            ws = FloodWs(reads=True)
            conn = Conn(app, ws, 99, proto)
            app.submit = lambda cmd: None  # an engine that never decodes
            fired = []
            on_timer = conn._on_timer
            conn._on_timer = lambda: (fired.append(proto.backlog), on_timer())
            conn.start()
            conn.perform(proto.receive('{"type": "start"}', time.monotonic()))
            loop = asyncio.ensure_future(conn.read_loop())
            await asyncio.sleep(1.5)  # held for five idle timeouts
            assert not proto.closed and len(fired) <= 3, len(fired)
            ws.closed_with = ("stopped", "")  # the client goes silent
            conn.on_progress(proto.audio_seconds)  # decoded: read again, its clocks moved on by the time held
            assert not proto.closed and conn.held_seconds > 1.0
            await asyncio.wait_for(loop, 5)  # the idle timeout ends the input
            await asyncio.sleep(0.05)
            told = [json.loads(m) for m in ws.sent + list(conn.outbox._items)]
            assert told[-1]["code"] == "idle_timeout"

    run(body())


def test_a_flood_that_never_reads_its_results_is_rate_limited(ckpt):
    """Decoded (the engine runs), but nothing reaches the client: the burst runs out and the existing rule
    ends the stream; meanwhile at most the bound (and a frame) waits to be decoded."""
    async def body():
        async with make_app(ckpt, limits={"burst_seconds": 10.0, "max_realtime": 1.0}) as app:
            proto = V1Session("x", app.config.limits, app.model_info)
            ws = FloodWs(reads=False)
            conn = Conn(app, ws, 99, proto)
            app.conns[99] = conn
            most = []
            submit = app.submit

            def watch(cmd):
                if isinstance(cmd, FeedPcm):
                    most.append(proto.backlog)
                submit(cmd)

            app.submit = watch
            conn.start()
            conn.perform(proto.receive('{"type": "start"}', time.monotonic()))
            await conn.read_loop()
            assert proto.closed and max(most) <= conn.flow.bound + 0.1 + 1e-9
            queued = [json.loads(m) for m in conn.outbox._items]
            assert queued[-1]["type"] == "error" and queued[-1]["code"] == "rate_limited"
            assert proto.audio_seconds < 40  # 10 s burst at 1x: cut off within seconds of the flood
            del app.conns[99]
            conn.abort("shutting_down", "test over")

    run(body())


def test_v1_long_file_as_fast_as_it_can(ckpt, long_wav, offline):
    """A v1 client that sends a long file at full speed while it reads: paced, every final, close 1000."""
    pcm = pcm_of(long_wav)

    async def body():
        async with make_app(ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as ws:
                await ws.send('{"type": "start"}')

                async def send():
                    for i in range(0, len(pcm), FRAME):
                        await ws.send(pcm[i:i + FRAME])
                    await ws.send('{"type": "eof"}')

                sender = asyncio.ensure_future(send())
                msgs = await drain(ws)
                await sender
            return msgs, ws.close_code

    msgs, code = run(body())
    assert [m for m in msgs if m["type"] == "error"] == [] and code == 1000 and msgs[-1]["type"] == "done"
    assert [(m["text"], m["start"], m["end"]) for m in msgs if m["type"] == "final"] == offline


def test_vosk_lockstep_long_file(ckpt, long_wav, offline):
    """vosk-server's test.py way (8000-byte frames, each waiting for its reply) on a long file: one reply per
    frame, every segment, close 1000."""
    pcm = pcm_of(long_wav)

    async def body():
        async with make_app(ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                replies = await vosk_lockstep(ws, '{ "config" : { "sample_rate" : 16000 } }', pcm, 8000)
                rest = await drain(ws)
            return replies, rest, ws.close_code

    replies, rest, code = run(body())
    assert rest == [] and code == 1000 and len(replies) == -(-len(pcm) // 8000) + 1
    texts = [r["text"] for r in replies if r.get("text")]
    assert " ".join(texts).split() == [w for t, _, _ in offline for w in t.split()]


def test_client_library_long_file(ckpt, long_wav, offline):
    """streamd.client.transcribe_file (as fast as it can send) on a long file: every final."""
    async def body():
        async with make_app(ckpt) as app:
            return await asyncio.to_thread(transcribe_file, f"ws://127.0.0.1:{app.port}/v1/stream", long_wav)

    events = run(body())
    assert [(e.text, e.start, e.end) for e in events if isinstance(e, Final)] == offline


def test_wyoming_long_file(ckpt, long_wav, offline):
    """A Wyoming client that writes a long file's audio-chunk events at full speed: the transcript of every
    segment."""
    pytest.importorskip("wyoming", reason="the Wyoming listener needs the wyoming package (extra 'wyoming')")
    from wyoming.asr import Transcribe, Transcript
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    pcm = pcm_of(long_wav)

    async def body():
        async with make_app(ckpt, server={"wyoming_port": 0}) as app:
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as c:
                await c.write_event(Transcribe(language="en").event())
                await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                for i in range(0, len(pcm), FRAME):
                    await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + FRAME]).event())
                await c.write_event(AudioStop().event())
                while True:
                    e = await c.read_event()
                    assert e is not None and e.type != "error", e
                    if e.type == "transcript":
                        return Transcript.from_event(e).text

    assert run(body()) == " ".join(t for t, _, _ in offline if t)
