"""streamd.client against a live daemon (``App`` on port 0 with a tiny model, as tests/server do).

What a client gets equals what the engine decodes from the same audio (``transcribe_files``), for
every source (files at any rate, raw PCM as bytes / chunks / async chunks / a file object, the
microphone path with a file played as the microphone); events are the engine's own dataclasses;
the blocking wrapper; retries; a drain; and clear errors.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import threading
import wave

import numpy as np
import pytest

from helpers import random_audio, write_wav
from tests.server.wire import LocalWsServer, make_app
from streamd import events as E
from streamd.feed import transcribe_files
from streamd.client import (
    Client,
    ConnectError,
    ConnectionLost,
    FileSource,
    MicSource,
    PcmSource,
    StreamError,
    final_text,
    transcribe,
    transcribe_file,
)
from streamd.config import AppConfig, from_dict
from streamd.engine import Recognizer

TIMEOUT = 60

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def url(app) -> str:
    return f"ws://127.0.0.1:{app.port}/v1/stream"


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("wav")
    stereo = np.stack([random_audio(1.2, 22050, seed=12), random_audio(1.2, 22050, seed=13)], axis=1).ravel()
    return [write_wav(d / "a16k.wav", random_audio(1.6, 16000, seed=11), 16000),
            write_wav(d / "b22k_stereo.wav", stereo, 22050, channels=2),
            write_wav(d / "c8k.wav", random_audio(1.0, 8000, seed=14), 8000)]


@pytest.fixture(scope="module")
def engine_events(ckpt, wavs):
    """path -> the engine's own events for the file (the reference)."""
    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    return transcribe_files(rec, wavs)


def results(events) -> list[dict]:
    """Finals and wake events as wire dicts (what both sides must agree on)."""
    return [e.to_wire() for e in events if isinstance(e, (E.Final, E.WakeWord))]


def test_import_loads_neither_torch_nor_the_server():
    code = ("import sys, streamd.client; print([m for m in ('torch', 'streamd.engine', 'streamd.server.app', "
            "'websockets') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_files_give_the_engines_results_as_its_own_events(ckpt, wavs, engine_events):
    async def body():
        async with make_app(ckpt) as app, Client(url(app)) as c:
            streams = [c.stream(p) for p in wavs]

            async def collect(s):
                return [ev async for ev in s]

            return streams, await asyncio.gather(*(collect(s) for s in streams))

    streams, got = run(body())
    any_text = False
    for path, s, evs in zip(wavs, streams, got):
        assert {type(e) for e in evs} <= {E.Partial, E.Final, E.WakeWord, E.Done}  # the engine's classes
        assert results(evs) == results(engine_events[path]) and results(evs)
        any_text |= bool(final_text(evs))
        assert any(isinstance(e, E.Partial) for e in evs)
        assert isinstance(evs[-1], E.Done) and evs[-1] == E.Done(0, engine_events[path][-1].audio_seconds)
        with wave.open(path) as w:
            assert s.ready.sample_rate == w.getframerate() and s.ready.format == "s16le"
        assert s.ready.model["name"] == "tiny-random" and s.ready.chunk_seconds > 0 and s.ready.session
        assert s.close_code == 1000 and s.attempts == 1 and s.sent_seconds == pytest.approx(evs[-1].audio_seconds)
    assert any_text


def test_raw_pcm_sources(ckpt, wavs, engine_events):
    path = wavs[0]
    with wave.open(path) as w:
        pcm = w.readframes(w.getnframes())
    f32 = (np.frombuffer(pcm, "<i2").astype(np.float32) / 32768).astype("<f4").tobytes()
    want = results(engine_events[path])

    async def achunks():
        for i in range(0, len(pcm), 5000):
            await asyncio.sleep(0)
            yield pcm[i:i + 5000]

    sources = {
        "bytes": dict(source=pcm, sample_rate=16000),
        "f32le": dict(source=f32, sample_rate=16000, format="f32le"),
        "ragged chunks": dict(source=[pcm[i:i + 333] for i in range(0, len(pcm), 333)]),  # regrouped to samples
        "async chunks": dict(source=achunks()),
        "file object": dict(source=io.BytesIO(pcm)),
        "PcmSource": dict(source=PcmSource(pcm, 16000, chunk_seconds=0.05)),
    }

    async def body():
        async with make_app(ckpt) as app, Client(url(app)) as c:
            out = {}
            for name, kw in sources.items():
                s = c.stream(kw.pop("source"), **kw)
                out[name] = ([ev async for ev in s], s)
            return out

    for name, (evs, s) in run(body()).items():
        assert results(evs) == want, name
        assert isinstance(evs[-1], E.Done) and evs[-1].audio_seconds == pytest.approx(len(pcm) / 2 / 16000), name
        assert s.ready.format == ("f32le" if name == "f32le" else "s16le")


def test_options_reach_the_server(ckpt, wavs):
    async def body():
        async with make_app(ckpt) as app:
            async with Client(url(app), partials=False) as c:  # a default of every stream of this client
                s = c.stream(wavs[0], method="modified_beam", beam=3, keywords=False, endpointing=False,
                             wake_words=["hey there", {"phrase": "computer", "threshold": 0.5}])
                evs = [ev async for ev in s]
                with pytest.raises(StreamError) as bad:  # values are the server's to check
                    await c.transcribe(wavs[0], beam=0)
                unchecked = await c.transcribe(wavs[0], beam=0, check=False)
            return s, evs, bad.value, unchecked

    s, evs, bad, unchecked = run(body())
    r = s.ready
    assert (r.method, r.beam, r.partials, r.keywords, r.endpointing) == ("modified_beam", 3, False, False, False)
    assert r.wake_words == ("hey there", {"phrase": "computer", "threshold": 0.5})
    assert not any(isinstance(e, (E.Partial, E.WakeWord)) for e in evs)
    assert [e.reason for e in evs if isinstance(e, E.Final)] == ["eos"]  # endpointing off: one segment
    assert bad.code == "bad_message" and "beam" in bad.message and isinstance(bad.events[-1], E.Error)
    assert unchecked == [E.Error(0, "bad_message", bad.message)]
    c = Client("ws://127.0.0.1:9/v1/stream")
    with pytest.raises(TypeError, match="unknown stream option 'beam_size'"):
        c.stream(wavs[0], beam_size=4)
    with pytest.raises(ValueError, match="sample_rate 8000 given for a source at 16000"):
        c.stream(wavs[0], sample_rate=8000)
    with pytest.raises(ValueError, match="url must start with ws:// or wss://"):
        Client("http://127.0.0.1:8765/v1/stream")
    with pytest.raises(ValueError, match="not a whole number of 2-byte s16le samples"):
        PcmSource(b"\0" * 3)


class ServerThread:
    """The daemon on its own event loop in a thread, for the blocking helpers (which run their own loop)."""

    def __init__(self, ckpt, **sections):
        self.app = make_app(ckpt, **sections)
        self.started = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self):
        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        async with self.app:
            self.started.set()
            await self.stop.wait()

    def __enter__(self):
        self.thread.start()
        assert self.started.wait(TIMEOUT)
        return url(self.app)

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(TIMEOUT)


def test_blocking_helpers(ckpt, wavs, engine_events, tmp_path):
    slow = write_wav(tmp_path / "6k.wav", random_audio(0.3, 6000, seed=3), 6000)
    with ServerThread(ckpt) as u:
        evs = transcribe_file(u, wavs[2])
        same = transcribe(u, FileSource(wavs[2]), partials=False)
        with pytest.raises(StreamError) as err:
            transcribe_file(u, slow)
        refused = transcribe_file(u, slow, check=False)
    assert results(evs) == results(engine_events[wavs[2]]) == results(same)
    assert final_text(evs) == final_text(engine_events[wavs[2]])
    assert isinstance(evs[-1], E.Done) and not any(isinstance(e, E.Partial) for e in same)
    assert err.value.code == "bad_sample_rate" and "6000" in err.value.message and str(err.value).startswith(
        "bad_sample_rate: ")
    assert len(refused) == 1 and refused[0].code == "bad_sample_rate"


def _errors(app, code) -> float:
    return app.metrics.errors.labels(code)._value.get()


def test_retries_until_the_server_has_room(ckpt, wavs, engine_events):
    async def body():
        async with make_app(ckpt, limits={"max_streams": 1}) as app:
            from websockets.asyncio.client import connect

            holder = await connect(url(app))  # takes the only slot
            await holder.send('{"type": "start"}')
            assert json.loads(await holder.recv())["type"] == "ready"
            async with Client(url(app)) as c:
                refused = await c.transcribe(wavs[0], check=False)
            async with Client(url(app), retries=100, retry_delay=0.02, retry_max_delay=0.1) as c:
                s = c.stream(wavs[0])
                task = asyncio.ensure_future(_collect(s))
                while _errors(app, "too_many_streams") < 3:  # refused (at least) twice more, retrying
                    await asyncio.sleep(0.01)
                await holder.send('{"type": "eof"}')  # the slot frees
                async for _ in holder:
                    pass
                return refused, await task, s

    refused, evs, s = run(body())
    assert refused == [E.Error(0, "too_many_streams", refused[0].message)] and "limit of 1" in refused[0].message
    assert results(evs) == results(engine_events[wavs[0]]) and s.attempts >= 3 and s.close_code == 1000


async def _collect(s):
    return [ev async for ev in s]


def test_drain_ends_the_stream_with_its_finals_and_1001(ckpt, wavs, engine_events, tmp_path):
    """A draining server finishes the audio it has: Final + Done, close 1001; new streams are refused."""
    path = wavs[0]
    with wave.open(path) as w:
        pcm = w.readframes(w.getnframes())
    half = len(pcm) // 4 * 2
    gate = asyncio.Event()

    async def first_half_then_wait():
        yield pcm[:half]
        await gate.wait()  # never set: the drain must end the stream
        yield pcm[half:]

    async def body():
        async with make_app(ckpt, server={"grace_seconds": 10}) as app, Client(url(app)) as c:
            s = c.stream(first_half_then_wait())
            evs = []
            async for ev in s:
                evs.append(ev)
                if len(evs) == 1:  # a partial: the first half is being decoded
                    drain = asyncio.ensure_future(app.shutdown())
            await drain
            return s, evs

    s, evs = run(body())
    assert s.close_code == 1001 and isinstance(evs[-1], E.Done)
    assert evs[-1].audio_seconds == pytest.approx(half / 2 / 16000) and s.sent_seconds == evs[-1].audio_seconds
    prefix = write_wav(tmp_path / "prefix.wav", pcm[:half], 16000)  # the audio the server had
    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    want = transcribe_files(rec, [prefix])[prefix]
    assert results(evs) == results(want) and any(isinstance(e, E.Final) for e in evs)


class StandIn(LocalWsServer):
    """A misbehaving server: HTTP 503 for the first ``refuse`` handshakes, then ready and a close 1011."""

    def __init__(self, refuse=0):
        self.refuse, self.handshakes = refuse, 0

    def http(self, conn, request):
        self.handshakes += 1
        return conn.respond(503, "no backend\n") if self.handshakes <= self.refuse else None

    async def handler(self, ws):
        start = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "ready", "session": "x", "sample_rate": start["sample_rate"],
                                  "format": start["format"], "model": {}}))
        await ws.recv()
        await ws.close(1011, "boom")


def test_connection_errors_are_clear(wavs):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def body():
        out = {}
        dead = f"ws://127.0.0.1:{port}/v1/stream"
        with pytest.raises(ConnectError) as e:
            await Client(dead).transcribe(wavs[0])
        out["refused"] = e.value
        async with StandIn(refuse=2) as srv:
            c = Client(srv.url, retries=1, retry_delay=0.01)
            with pytest.raises(ConnectError) as e:
                await c.transcribe(wavs[0])
            out["503"] = (e.value, srv.handshakes)
            s = Client(srv.url, retries=5, retry_delay=0.01).stream(wavs[0])  # the third handshake passes
            with pytest.raises(ConnectionLost) as e:
                async for _ in s:
                    pass
            out["lost"] = (e.value, s)
        return out, dead

    out, dead = run(body())
    assert str(out["refused"]).startswith(f"cannot talk to {dead}: ") and out["refused"].status is None
    err, handshakes = out["503"]
    assert str(err) == "server refused the connection: HTTP 503" and err.status == 503 and handshakes == 2
    lost, s = out["lost"]
    assert (lost.code, lost.reason, str(lost)) == (1011, "boom", "connection closed with code 1011 boom")
    assert s.attempts == 1 and s.ready.session == "x"


def test_source_failure_and_stop_end_the_stream_with_what_was_sent(ckpt, wavs):
    with wave.open(wavs[0]) as w:
        pcm = w.readframes(w.getnframes())

    def failing():
        yield pcm[:6400]
        yield pcm[6400:12800]
        raise RuntimeError("the capture broke")

    async def body():
        async with make_app(ckpt) as app, Client(url(app)) as c:
            s = c.stream(failing())
            evs = []
            with pytest.raises(RuntimeError, match="the capture broke"):
                async for ev in s:
                    evs.append(ev)
            paced = c.stream(FileSource(wavs[0], speed=1.0))  # real time: stop after the first partial
            evs2 = []
            async for ev in paced:
                evs2.append(ev)
                if isinstance(ev, E.Partial) and len(evs2) == 1:
                    paced.stop()

            async def half_then_nothing():
                yield pcm[:9600]
                await asyncio.Event().wait()  # a source with nothing more to say (and no stop())

            waiting = c.stream(half_then_nothing())
            evs3 = []
            async for ev in waiting:
                evs3.append(ev)
                if isinstance(ev, E.Partial) and len(evs3) == 1:
                    waiting.stop()
            return evs, evs2, paced, evs3, waiting

    evs, evs2, paced, evs3, waiting = run(body())
    assert isinstance(evs[-1], E.Done) and evs[-1].audio_seconds == pytest.approx(0.4)
    assert isinstance(evs[-2], E.Final) and evs[-2].reason == "eos"
    assert isinstance(evs2[-1], E.Done) and evs2[-1].audio_seconds == pytest.approx(paced.sent_seconds)
    assert evs2[-1].audio_seconds < 1.6 and paced.close_code == 1000
    assert isinstance(evs3[-1], E.Done) and evs3[-1].audio_seconds == pytest.approx(0.3)
    assert waiting.close_code == 1000 and waiting.source_error is None


def test_mic_source_plays_a_file_as_the_microphone(ckpt, wavs, engine_events):
    async def body():
        async with make_app(ckpt) as app, Client(url(app)) as c:
            src = MicSource(file=wavs[2])  # through streamd.capture's path, in real time
            s = c.stream(src)
            return [ev async for ev in s], s, src

    evs, s, src = run(body())
    assert results(evs) == results(engine_events[wavs[2]]) and s.ready.sample_rate == 8000 and src.dropped == 0
