"""streamd.server.wyoming: the sans-I/O Wyoming session (Home Assistant: describe, transcribe, detect; the event
sequence, stereo and other rates, bad events, limits, timers, drain).  The TCP listener with the real
``wyoming`` client classes is tested in test_wyoming_io.py."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("wyoming", reason="the wyoming package is not installed (pip install -e '.[server]')")

from wyoming.asr import Transcribe  # noqa: E402
from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.event import Event as WyEvent  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.ping import Ping  # noqa: E402
from wyoming.wake import Detect  # noqa: E402

from streamd.config import LimitsConfig  # noqa: E402
from streamd.events import Done, Error, Final, Partial, WakeWord  # noqa: E402
from streamd.server.protocol import Audio, Finish, Open, Send  # noqa: E402
from streamd.server.wyoming import Discard, WyomingSession, info_event, normalize_name, wake_words  # noqa: E402

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
    assert asr.attribution.name and asr.attribution.url == ""  # a session given no page
    page = WyomingSession(LimitsConfig(), MODEL_INFO, "9.9", url="http://host:8765/")
    linked = Info.from_event(WyEvent(**page.receive(Describe().event(), 0)[0].message))
    assert {linked.asr[0].attribution.url, linked.wake[0].attribution.url} == {"http://host:8765/"}
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
