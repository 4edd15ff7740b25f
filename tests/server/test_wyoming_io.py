"""streamd.server.wyoming_io: the Wyoming listener on loopback with the real ``wyoming`` client classes and the
shipped model (describe, ASR, wake word, stereo / other rates, bad events, limits, drain, idle timeout).
The sans-I/O session is tested in test_wyoming.py."""

from __future__ import annotations

import asyncio
import json
import wave

import numpy as np
import pytest

pytest.importorskip("wyoming", reason="the wyoming package is not installed (pip install -e '.[server]')")

from wyoming.asr import Transcribe, Transcript, TranscriptChunk  # noqa: E402
from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.error import Error as WyError  # noqa: E402
from wyoming.event import Event as WyEvent  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.ping import Ping  # noqa: E402
from wyoming.wake import Detect, Detection  # noqa: E402

import streamd  # noqa: E402
from tests.server.wire import run  # noqa: E402
from streamd.audio.pcm import load_audio  # noqa: E402
from streamd.audio.resample import resample  # noqa: E402
from streamd.config import AppConfig, from_dict  # noqa: E402
from streamd.engine import Recognizer  # noqa: E402
from streamd.events import Final  # noqa: E402
from streamd.feed import transcribe_files  # noqa: E402
from streamd.paths import default_model_path  # noqa: E402
from streamd.server.app import App  # noqa: E402

SAMPLES = default_model_path().parent / "samples"

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


@pytest.fixture(scope="module")
def rec():
    """The shipped model (it knows the wake word and speaks the sample files)."""
    return Recognizer.from_checkpoint(str(default_model_path()), from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)


def make_app(recognizer, **sections) -> App:
    data = {k: dict(v) for k, v in sections.items()}
    data.setdefault("server", {}).update(port=0, wyoming_port=0, warmup_seconds=0)
    data.setdefault("engine", {}).setdefault("device", "cpu")
    return App(from_dict(AppConfig, data), recognizer=recognizer)


def reference(recognizer, path) -> str:
    """What `streamd transcribe` prints for the file: its finals' texts, joined."""
    return " ".join(e.text for e in transcribe_files(recognizer, [str(path)])[str(path)] if isinstance(e, Final) and e.text)


def chunks_of(data: bytes, rate: int, channels: int = 1, seconds: float = 0.1):
    n = int(rate * seconds) * 2 * channels
    for i in range(0, len(data), n):
        yield AudioChunk(rate=rate, width=2, channels=channels, audio=data[i:i + n],
                         timestamp=round(i / (2 * channels) / rate * 1000))


async def read_until(client, last: tuple[str, ...], timeout: float = 20) -> list[WyEvent]:
    out = []
    while True:
        e = await asyncio.wait_for(client.read_event(), timeout)
        assert e is not None, f"connection closed after {[x.type for x in out]}"
        out.append(e)
        if e.type in last:
            return out


async def transcribe(port, data: bytes, rate: int, channels: int = 1, language="en") -> list[WyEvent]:
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Transcribe(language=language).event())
        await c.write_event(AudioStart(rate=rate, width=2, channels=channels).event())
        for ch in chunks_of(data, rate, channels):
            await c.write_event(ch.event())
        await c.write_event(AudioStop().event())
        return await read_until(c, ("transcript-stop", "error"))


def wav_bytes(path) -> tuple[bytes, int]:
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        return w.readframes(w.getnframes()), w.getframerate()


def check_transcript(events: list[WyEvent]) -> str:
    """transcript-start, transcript-chunk..., transcript, transcript-stop; the chunks join into the text."""
    types = [e.type for e in events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"], types
    assert set(types[1:-2]) <= {"transcript-chunk"}, types
    text = Transcript.from_event(events[-2]).text
    assert "".join(TranscriptChunk.from_event(e).text for e in events[1:-2]) == text
    return text


def test_describe_over_tcp(rec):
    async def body():
        async with make_app(rec) as app:
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as c:
                await c.write_event(Describe().event())
                info = Info.from_event(await asyncio.wait_for(c.read_event(), 10))
                await c.write_event(Ping(text="p").event())  # and the connection goes on
                pong = await asyncio.wait_for(c.read_event(), 10)
            return info, pong, app.port

    info, pong, port = run(body())
    assert pong.type == "pong" and pong.data["text"] == "p"
    (asr,) = info.asr
    assert asr.attribution.url == f"http://127.0.0.1:{port}/"  # the daemon's own page, GET /
    assert asr.version == streamd.__version__ and asr.supports_transcript_streaming
    assert asr.models[0].name == rec.model_info["name"] and asr.models[0].languages == ["en"]
    assert [m.phrase for m in info.wake[0].models] == ["hey stream"]


@pytest.mark.parametrize("name", ["lights.wav", "wake.wav", "digits.wav"])
def test_transcript_equals_streamd_transcribe(rec, name):
    data, rate = wav_bytes(SAMPLES / name)
    want = reference(rec, SAMPLES / name)

    async def body():
        async with make_app(rec) as app:
            return await transcribe(app.wyoming_port, data, rate)

    assert check_transcript(run(body())) == want and want


def test_stereo_and_other_rates(rec, tmp_path):
    """A 22.05 kHz stereo stream (both channels the same) decodes as the same audio in mono, which
    `streamd transcribe` decodes from a 22.05 kHz file; 8 kHz mono too."""
    x, rate = load_audio(SAMPLES / "timer.wav")
    results = {}
    for new_rate in (22050, 8000):
        y = np.clip(np.round(resample(x, rate, new_rate) * 32767), -32768, 32767).astype("<i2")
        path = tmp_path / f"timer{new_rate}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(new_rate)
            w.writeframes(y.tobytes())
        results[new_rate] = (y, reference(rec, path))

    async def body():
        async with make_app(rec) as app:
            y, _ = results[22050]
            stereo = await transcribe(app.wyoming_port, np.repeat(y, 2).tobytes(), 22050, channels=2)
            mono8k = await transcribe(app.wyoming_port, results[8000][0].tobytes(), 8000)
            return stereo, mono8k

    stereo, mono8k = run(body())
    assert check_transcript(stereo) == results[22050][1] and results[22050][1]
    assert check_transcript(mono8k) == results[8000][1] and results[8000][1]


async def detect(port, data: bytes, rate: int, stop_first: bool) -> WyEvent:
    """Detect on the whole file; the first event back, read before (stop_first False) or after audio-stop."""
    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Detect(names=["hey_stream"]).event())
        await c.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        for ch in chunks_of(data, rate):
            await c.write_event(ch.event())
        if stop_first:  # a detection would come before not-detected (which only comes without one)
            await c.write_event(AudioStop().event())
        return await asyncio.wait_for(c.read_event(), 20)


def test_wake_word_detection(rec):
    wake, rate = wav_bytes(SAMPLES / "wake.wav")
    other, _ = wav_bytes(SAMPLES / "lights.wav")

    async def body():
        async with make_app(rec) as app:
            return (await detect(app.wyoming_port, wake, rate, stop_first=False),
                    await detect(app.wyoming_port, other, rate, stop_first=True))

    hit, miss = run(body())
    assert hit.type == "detection", hit  # before any audio-stop: as soon as the wake word fired
    d = Detection.from_event(hit)
    assert d.name == "hey stream" and 500 <= d.timestamp <= 2000  # the phrase ends about 1 s in
    assert miss.type == "not-detected"


def test_bad_events_keep_the_connection_and_the_server(rec):
    data, rate = wav_bytes(SAMPLES / "lights.wav")

    async def body():
        async with make_app(rec) as app:
            got = []
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as c:
                c._writer.write(b"this is not json\n")
                got.append(await asyncio.wait_for(c.read_event(), 10))
                c._writer.write(b'{"data": {}}\n')  # no type
                got.append(await asyncio.wait_for(c.read_event(), 10))
                await c.write_event(WyEvent(type="no-such-event", data={"x": 1}))
                got.append(await asyncio.wait_for(c.read_event(), 10))
                big = app.config.limits.max_message_bytes + 2
                c._writer.write(json.dumps({"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1},
                                            "payload_length": big}).encode() + b"\n" + bytes(big))
                got.append(await asyncio.wait_for(c.read_event(), 10))
                await c.write_event(Describe().event())  # the same connection goes on
                got.append(await asyncio.wait_for(c.read_event(), 10))
                events = await transcribe(app.wyoming_port, data, rate)  # and the server
            metrics = app.metrics.render().decode()
            return got, events, metrics

    got, events, metrics = run(body())
    codes = [WyError.from_event(e).code if e.type == "error" else e.type for e in got]
    assert codes == ["bad_event", "bad_event", "unknown_event", "too_large", "info"]
    assert check_transcript(events) == "turn on the kitchen lights"
    assert 'streamd_connections_total{route="wyoming"} 2.0' in metrics
    assert 'streamd_errors_total{code="unknown_event"} 1.0' in metrics
    assert 'stream_class="wyoming"' in metrics


def test_max_streams_counts_wyoming_streams_and_drain_delivers_results(rec):
    from websockets.asyncio.client import connect

    data, rate = wav_bytes(SAMPLES / "lights.wav")

    async def body():
        app = make_app(rec, limits={"max_streams": 1})
        async with app:
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as a, \
                    AsyncTcpClient("127.0.0.1", app.wyoming_port) as b:
                await a.write_event(Transcribe().event())
                await a.write_event(AudioStart(rate=rate, width=2, channels=1).event())
                first = await asyncio.wait_for(a.read_event(), 10)
                assert first.type == "transcript-start"
                await b.write_event(AudioStart(rate=rate, width=2, channels=1).event())
                refused = await asyncio.wait_for(b.read_event(), 10)
                await b.write_event(Describe().event())  # describe needs no stream
                described = await asyncio.wait_for(b.read_event(), 10)
                async with connect(f"ws://127.0.0.1:{app.port}/v1/stream") as ws:
                    v1 = json.loads(await asyncio.wait_for(ws.recv(), 10))
                for ch in chunks_of(data, rate):
                    await a.write_event(ch.event())
                await asyncio.sleep(0.5)
                drain = asyncio.ensure_future(app.shutdown())  # SIGTERM mid-stream: the stream is finished
                result = [first] + await read_until(a, ("transcript-stop", "error"))
                closed = await asyncio.wait_for(a.read_event(), 10)
                await drain
            return refused, described, v1, result, closed

    refused, described, v1, result, closed = run(body())
    assert refused.type == "error" and WyError.from_event(refused).code == "too_many_streams"
    assert described.type == "info"
    assert v1["type"] == "error" and v1["code"] == "too_many_streams"  # one limit for every protocol
    assert check_transcript(result) == "turn on the kitchen lights"
    assert closed is None  # then the connection closes


def test_idle_timeout_over_tcp(rec):
    """A client that stops sending mid-stream gets idle_timeout and the connection closes; an idle one
    (no request) is closed quietly; the server goes on."""
    async def body():
        async with make_app(rec, limits={"idle_timeout": 0.3}) as app:
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as a, \
                    AsyncTcpClient("127.0.0.1", app.wyoming_port) as b:
                await a.write_event(Transcribe().event())
                await a.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                got = [await asyncio.wait_for(a.read_event(), 10) for _ in range(3)]
                quiet = await asyncio.wait_for(b.read_event(), 10)
            async with AsyncTcpClient("127.0.0.1", app.wyoming_port) as c:
                await c.write_event(Describe().event())
                info = await asyncio.wait_for(c.read_event(), 10)
            return got, quiet, info, app.stream_count()

    got, quiet, info, live = run(body())
    assert [e.type if e is not None else None for e in got] == ["transcript-start", "error", None]
    assert WyError.from_event(got[1]).code == "idle_timeout"
    assert quiet is None and info.type == "info" and live == 0
