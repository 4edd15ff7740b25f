"""Wyoming protocol (Home Assistant): the sans-I/O session, and the server on loopback with the real
``wyoming`` client classes (describe, ASR, wake word, stereo / other rates, bad events, limits, drain)."""

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
from streamd.audio.pcm import load_audio  # noqa: E402
from streamd.audio.resample import resample  # noqa: E402
from streamd.feed import transcribe_files  # noqa: E402
from streamd.paths import default_model_path
from streamd.config import AppConfig, ConfigError, LimitsConfig, ServerConfig, from_dict  # noqa: E402
from streamd.engine import Recognizer  # noqa: E402
from streamd.events import Done, Error, Final, Partial, WakeWord  # noqa: E402
from streamd.server.app import App, resolve_config  # noqa: E402
from streamd.server.protocol import Audio, Finish, Open, Send  # noqa: E402
from streamd.server.wyoming import Discard, WyomingSession, info_event, normalize_name, wake_words  # noqa: E402
from streamd.server.wyoming_io import check_wyoming_auth  # noqa: E402

TIMEOUT = 60
SAMPLES = default_model_path().parent / "samples"
MODEL_INFO = {"name": "tiny", "keywords": ["hey stream"]}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# =========================================================================== sans-I/O session

def ev(kind, data=None, payload=None) -> WyEvent:
    return WyEvent(type=kind, data={} if data is None else data, payload=payload)


def sent(actions) -> list[tuple[str, dict]]:
    return [(a.message["type"], a.message.get("data", {})) for a in actions if isinstance(a, Send)]


def kinds(actions) -> list[str]:
    return [a.message["type"] if isinstance(a, Send) else type(a).__name__ for a in actions]


def session(method="greedy", **limits) -> WyomingSession:
    return WyomingSession(LimitsConfig(**limits), MODEL_INFO, "9.9", method)


def pcm(n: int, channels: int = 1, value: int = 1000) -> bytes:
    return np.full(n * channels, value, "<i2").tobytes()


def start(s: WyomingSession, rate=16000, channels=1, request=None, now=0.0):
    if request is not None:
        assert s.receive(request, now) == []
    out = s.receive(AudioStart(rate=rate, width=2, channels=channels, timestamp=None).event(), now)
    assert isinstance(out[-1], Open)
    return out[-1]


def test_describe_lists_the_model_and_its_wake_words():
    s = session()
    info = Info.from_event(WyEvent(**s.receive(Describe().event(), 0)[0].message))
    (asr,) = info.asr
    assert asr.name == "streamd" and asr.installed and asr.version == "9.9" and asr.supports_transcript_streaming
    assert [(m.name, m.languages, m.installed, m.version) for m in asr.models] == [("tiny", ["en"], True, "9.9")]
    assert asr.attribution.name
    (wake,) = info.wake
    assert [(m.name, m.phrase, m.languages) for m in wake.models] == [("hey stream", "hey stream", ["en"])]
    # data-driven: wake words the engine reports later appear; a model without any has no wake program
    more = {"name": "m", "keywords": ["hey stream"], "wake_words": ["ok house", {"phrase": "computer"}]}
    assert wake_words(more) == ["hey stream", "ok house", "computer"]
    assert [m.name for m in Info.from_event(info_event(more, "1")).wake[0].models] == ["hey stream", "ok house",
                                                                                       "computer"]
    assert Info.from_event(info_event({"name": "m", "keywords": []}, "1")).wake == []


def test_asr_event_sequence_and_append_only_chunks():
    s = session()
    op = start(s, rate=22050, request=Transcribe(language="en-US").event())
    assert op.options == {"sample_rate": 22050, "partials": True, "keywords": False}
    a = s.receive(AudioChunk(rate=22050, width=2, channels=1, audio=pcm(2205)).event(), 0.1)
    assert a == [Audio(pcm(2205), "s16le")]
    assert sent(s.opened()) == [("transcript-start", {"language": "en"})]
    out = []
    for text in ("tu", "turn", "turn on", "turn on th", "turn on the"):
        out += s.event(Partial(1, 0, text))
    out += s.event(Final(1, 0, "turn on the light", reason="endpoint:rule2"))
    out += s.event(Partial(1, 1, "and"))
    assert s.receive(AudioStop().event(), 0.2) == [Finish()]
    assert s.state == "ending" and not s.expects_input
    out += s.event(Final(1, 1, "and the fan"))
    out += s.event(Done(1))
    chunks = [d["text"] for k, d in sent(out) if k == "transcript-chunk"]
    assert chunks == ["turn", " on", " the light", " and the fan"]
    tail = sent(out)[-2:]
    assert tail == [("transcript", {"text": "turn on the light and the fan", "language": "en"}),
                    ("transcript-stop", {})]
    assert "".join(chunks) == tail[0][1]["text"]
    assert s.state == "idle" and not s.stream_live  # the connection may run another request


def test_beam_search_streams_whole_segments():
    """A search that may revise its best hypothesis sends a segment's words only once it is closed."""
    s = session("modified_beam")
    assert start(s).options["partials"] is False
    s.opened()
    assert s.event(Partial(1, 0, "turn on the")) == []
    out = s.event(Final(1, 0, "turn off the light")) + s.event(Done(1))
    assert [d["text"] for k, d in sent(out) if k in ("transcript-chunk", "transcript")] == ["turn off the light",
                                                                             "turn off the light"]


def test_stereo_is_averaged_and_ragged_audio_fails_the_request():
    s = session()
    start(s, channels=2)
    frames = np.array([[1000, 3000], [-2000, 0]], "<i2").tobytes()
    (a,) = s.receive(AudioChunk(rate=16000, width=2, channels=2, audio=frames).event(), 0)
    assert a.fmt == "f32le" and np.allclose(np.frombuffer(a.data, "<f4"), [2000 / 32768, -1000 / 32768])
    out = s.receive(AudioChunk(rate=16000, width=2, channels=2, audio=frames[:6]).event(), 0)
    assert kinds(out) == ["error", "Discard"] and sent(out)[0][1]["code"] == "bad_audio"
    assert s.state == "failed"
    assert s.receive(AudioChunk(rate=16000, width=2, channels=2, audio=frames).event(), 0) == []  # told once
    assert s.receive(AudioStop().event(), 0) == [] and s.state == "idle"
    # a chunk whose format differs from the stream's also ends the request with an error
    start(s)
    out = s.receive(AudioChunk(rate=8000, width=2, channels=1, audio=pcm(80)).event(), 0)
    assert sent(out)[0][1]["code"] == "bad_format" and Discard() in out


def test_wake_detection_names_timestamps_and_not_detected():
    s = session()
    assert sent(s.receive(Detect(names=["ok_nabu"]).event(), 0))[0][1]["code"] == "unknown_wake_word"
    assert s.state == "idle"
    op = start(s, request=Detect(names=["Hey_Stream"]).event())
    assert op.options == {"sample_rate": 16000, "partials": False, "keywords": True}
    assert s.opened() == []
    out = s.event(WakeWord(1, "hey stream", 0.97, 0.64, 1.2)) + s.event(WakeWord(1, "other", 0.9, 2.0, 2.5))
    assert sent(out) == [("detection", {"name": "hey stream", "timestamp": 1200, "speaker": None})]
    s.receive(AudioStop().event(), 0)
    assert s.event(Done(1)) == []  # a detection happened: no not-detected
    # no audio-start (a satellite): the first chunk starts the stream; its timestamp offsets detections
    s.receive(Detect(names=None).event(), 0)
    out = s.receive(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(160), timestamp=5000).event(), 0)
    assert kinds(out) == ["Open", "Audio"]
    assert sent(s.event(WakeWord(2, "hey stream", 0.9, 0.5, 1.0)))[0][1]["timestamp"] == 6000
    s.receive(AudioStop().event(), 0)
    assert sent(s.event(Done(2))) == []
    start(s, request=Detect().event())
    s.receive(AudioStop().event(), 0)
    assert sent(s.event(Done(3))) == [("not-detected", {})]
    assert normalize_name(" Hey-STREAM ") == "hey stream"


def test_bad_events_get_an_error_and_change_nothing():
    s = session()

    def code(e):
        out = s.receive(e, 0)
        assert len(out) == 1 and isinstance(out[0], Send) and out[0].message["type"] == "error", out
        return out[0].message["data"]["code"]

    assert code(ev("synthesize", {"text": "hi"})) == "unknown_event"
    assert code(ev("audio-start", {"width": 2, "channels": 1})) == "bad_event"  # missing rate
    assert code(ev("detect", {"names": "hey stream"})) == "bad_event"
    assert code(Transcribe(language="de").event()) == "unsupported_language"
    assert code(Transcribe(name="whisper").event()) == "unknown_model"
    assert code(ev("select-program", {"name": "other"})) == "unknown_program"
    assert code(AudioStop().event()) == "bad_event"
    assert s.state == "idle"
    assert s.receive(ev("select-program", {"name": "streamd"}), 0) == []
    assert sent(s.receive(WyEvent(type="describe", data=None), 0))[0][0] == "info"  # wyoming < 1.8 reads so
    assert sent(s.receive(Ping(text="x").event(), 0)) == [("pong", {"text": "x"})]
    assert code(AudioStart(rate=16000, width=4, channels=1).event()) == "bad_format" and s.state == "failed"
    assert code(AudioStart(rate=5, width=2, channels=1).event()) == "bad_sample_rate"
    assert code(AudioStart(rate=16000, width=2, channels=3).event()) == "bad_format"
    start(s, request=Transcribe().event())
    assert code(AudioStart(rate=16000, width=2, channels=1).event()) == "bad_event"  # one stream at a time
    assert code(Transcribe().event()) == "bad_event"
    assert code(Detect().event()) == "bad_event"
    assert s.state == "streaming"  # the stream goes on
    # an unreadable frame may have been audio: the request fails rather than go on with a gap
    assert kinds(s.frame_error("bad_event", "not JSON")) == ["error", "Discard"] and s.state == "failed"
    assert kinds(s.frame_error("bad_event", "not JSON")) == ["error"]


def test_limits_timers_drain_and_client_eof():
    s = session(max_realtime=1.0, burst_seconds=1.0)
    start(s)
    assert kinds(s.receive(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(16000)).event(), 0)) == ["Audio"]
    out = s.receive(AudioChunk(rate=16000, width=2, channels=1, audio=pcm(8000)).event(), 0.1)
    assert sent(out)[0][1]["code"] == "rate_limited" and Discard() in out

    s = session(min_audio_rate=0.5, min_audio_window=10)
    start(s, now=100.0)
    assert s.deadline() == 110.0
    out = s.tick(110.0)
    assert sent(out)[0][1]["code"] == "audio_too_slow" and "audio-stop" in sent(out)[0][1]["text"]

    s = session()
    assert kinds(s.timeout()) == ["Close"]  # idle: quietly
    s = session()
    start(s)
    assert kinds(s.timeout()) == ["error", "Discard", "Close"]

    s = session()
    start(s)
    assert s.shutdown() == [Finish()]
    assert [k for k in kinds(s.event(Done(1)))] == ["transcript", "transcript-stop", "Close"]
    assert kinds(session().shutdown()) == ["Close"]

    s = session()
    start(s)
    s.receive(AudioStop().event(), 0)
    assert s.client_eof() == []  # the result is still owed: it goes out, then the connection closes
    assert kinds(s.event(Done(1))) == ["transcript", "transcript-stop", "Close"]

    s = session()
    start(s)
    assert kinds(s.open_refused("too_many_streams", "full")) == ["error"] and s.state == "failed"
    s = session()
    start(s)
    assert kinds(s.event(Error(1, "internal", "boom"))) == ["error", "Discard"] and s.state == "failed"


def test_config_flag_and_auth_rule():
    cfg = resolve_config(None, {"wyoming_port": 10300}, {})
    assert cfg.server.wyoming_port == 10300 and AppConfig().server.wyoming_port is None
    with pytest.raises(ConfigError, match="wyoming_port"):
        ServerConfig(wyoming_port=70000)
    check_wyoming_auth(ServerConfig(wyoming_port=10300), ["a-token-123"])  # loopback: fine
    check_wyoming_auth(ServerConfig(host="0.0.0.0", wyoming_port=10300), [])  # no auth configured: fine
    with pytest.raises(ConfigError, match="no authentication"):
        check_wyoming_auth(ServerConfig(host="0.0.0.0", wyoming_port=10300), ["a-token-123"])


# =========================================================================== loopback, real wyoming client


@pytest.fixture(scope="module")
def rec():
    """The shipped model (it knows the wake word and speaks the sample files)."""
    return Recognizer.from_checkpoint(str(default_model_path()), from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)


def make_app(recognizer, **sections) -> App:
    data = {k: dict(v) for k, v in sections.items()}
    data.setdefault("server", {}).update(port=0, wyoming_port=0, warmup_seconds=0)
    data.setdefault("engine", {}).setdefault("device", "cpu")
    return App(from_dict(AppConfig, data), recognizer=recognizer)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


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
            return info, pong

    info, pong = run(body())
    assert pong.type == "pong" and pong.data["text"] == "p"
    (asr,) = info.asr
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
