"""Sans-I/O Wyoming protocol session (Home Assistant's voice services), on ``server.wyoming_port``.

The framing (a JSON header line, optional data and payload bytes) is the
``wyoming`` package's own (:func:`wyoming.event.async_read_event` /
``async_write_event`` in :mod:`streamd.server.wyoming_io`); this module sees
parsed :class:`wyoming.event.Event` s and returns the same *actions* as the
websocket sessions (:mod:`streamd.server.protocol`): :class:`Send` (here an
event as ``{"type", "data"}``), :class:`Open`, :class:`Audio`, :class:`Finish`,
:class:`Close` (the TCP connection), plus :class:`Discard` (forget the engine
stream now, the connection stays).  No sockets, no clock: time enters as
``now``, timers live in the transport.

One listener serves both roles Home Assistant asks for (docs/protocol.md, "Wyoming"):

* ``describe`` -> ``info``: an ASR program (the model, languages, version) and a wake
  program whose models are the wake words the model detects (:func:`wake_words`,
  read from the engine's ``model_info`` at every describe);
* ASR: [``transcribe``] ``audio-start`` ``audio-chunk``... ``audio-stop`` ->
  ``transcript-start``, ``transcript-chunk``... (append-only text as it becomes
  stable), ``transcript``, ``transcript-stop``.  Wyoming signals transcript
  streaming by ``supports_transcript_streaming`` in ``info``; clients that do not
  know the events read on to ``transcript``, which is always sent;
* wake: ``detect`` ``audio-start`` ``audio-chunk``... -> ``detection`` each time a
  requested wake word fires, ``not-detected`` at ``audio-stop`` if none did.
  ``audio-start`` may be left out: the first chunk's format starts the stream.

A connection carries one audio stream at a time (it counts as one of
``limits.max_streams`` while that stream is live) and may run more requests
after each result.  Mistakes never close the connection: a bad or unknown event
gets an ``error`` event and is otherwise ignored; a problem that loses audio of a
live stream (bad audio, rate limit, a frame that could not be read) also ends
that request (``error``, the stream is forgotten, chunks are dropped until the
next ``audio-stop`` or request).  Only the idle timeout, a slow reader and the
server draining close a connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart
from wyoming.error import Error as WyomingError
from wyoming.event import Event as WyomingEvent
from wyoming.info import AsrModel, AsrProgram, Attribution, Info, WakeModel, WakeProgram
from wyoming.ping import Ping, Pong
from wyoming.wake import Detect, Detection, NotDetected

from ..audio.pcm import AudioError, decode_pcm
from ..config import LimitsConfig
from ..events import Done, Error, Event, Final, Partial, WakeWord
from ..options import APPEND_ONLY_METHODS  # their partials' complete words are final: transcript-chunk carries them
from .protocol import (Action, Audio, Close, Finish, FlowFigures, MinAudioRate, Open, ProtocolError, Send,
                       TokenBucket, check_sample_rate_field, rate_limited_message)
from .states import SessionState, Transitions

__all__ = ["WyomingSession", "WyomingState", "WYOMING_TRANSITIONS", "Discard", "PROGRAM", "LANGUAGES",
           "APPEND_ONLY_METHODS", "wake_words", "info_event", "normalize_name"]

PROGRAM = "streamd"  # name of both programs in ``info`` (select-program, transcribe.name)
LANGUAGES = ("en",)  # what the models speak; a transcribe language must have one of these as primary subtag
ATTRIBUTION_NAME = "streamd"
SAMPLE_WIDTH = 2  # bytes: Wyoming audio is 16-bit PCM (s16le)
MAX_CHANNELS = 2
HANDLED = ("describe", "ping", "select-program", "transcribe", "detect", "audio-start", "audio-chunk", "audio-stop")


@dataclass(frozen=True)
class Discard:
    """Forget the engine stream now (no more events for it); the connection stays open."""


def normalize_name(name: str) -> str:
    """Wake word / model names compared as openWakeWord does: case, ``_``, ``-`` and spacing do not matter."""
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def wake_words(model_info: Mapping[str, Any]) -> list[str]:
    """The wake words a stream can detect, in order, once each: the model's keywords (its KWS head), then
    any the engine reports under ``wake_words`` (phrases, or objects with a ``phrase``) such as runtime ones,
    then the keywords of its trained wake models (``wake_models``: objects with a ``keyword``)."""
    out: list[str] = []
    for item in (list(model_info.get("keywords") or ()) + list(model_info.get("wake_words") or ())
                 + list(model_info.get("wake_models") or ())):
        phrase = (item.get("phrase") or item.get("keyword")) if isinstance(item, Mapping) else item
        if isinstance(phrase, str) and phrase.strip() and phrase not in out:
            out.append(phrase)
    return out


def info_event(model_info: Mapping[str, Any], version: str, url: str = "") -> WyomingEvent:
    """``info`` for ``describe``: the ASR program with the loaded model, the wake program with its wake words
    (filled as the wyoming package's own servers fill theirs: attribution, installed, version, languages).
    ``url``: the attribution's link, the daemon's own page (``GET /``; the project has no public home)."""
    attribution = Attribution(name=ATTRIBUTION_NAME, url=url)
    name = str(model_info.get("name") or "streamd")
    asr = AsrProgram(name=PROGRAM, description="streamd streaming speech recognizer (chunked transducer)",
                     attribution=attribution, installed=True, version=version,
                     models=[AsrModel(name=name, description=f"{name} (streamd model)", attribution=attribution,
                                      installed=True, version=version, languages=list(LANGUAGES))],
                     supports_transcript_streaming=True)
    words = wake_words(model_info)
    wake = [WakeProgram(name=PROGRAM, description="streamd wake words (spotted on the recognizer's encoder)",
                        attribution=attribution, installed=True, version=version,
                        models=[WakeModel(name=w, description=w, phrase=w, attribution=attribution, installed=True,
                                          version=version, languages=list(LANGUAGES)) for w in words])] if words else []
    return Info(asr=[asr], wake=wake).event()


def _send(event: WyomingEvent) -> Send:
    return Send(event.to_dict())


def _error(code: str, message: str) -> Send:
    return _send(WyomingError(text=message, code=code).event())


class WyomingState(SessionState):
    """States of a Wyoming connection."""

    IDLE = "idle"  # no request: describe, transcribe, detect or audio may come
    ARMED = "armed"  # transcribe / detect received: the next audio starts that request's stream
    STREAMING = "streaming"  # the engine stream is open, audio expected
    ENDING = "ending"  # audio-stop received (or the server draining): the result is owed
    FAILED = "failed"  # the request failed: chunks are dropped until audio-stop or the next request
    CLOSED = "closed"  # Close emitted: everything else is ignored


_W = WyomingState
WYOMING_TRANSITIONS: Transitions[WyomingState] = Transitions("WyomingSession", _W.IDLE, {
    _W.IDLE: {_W.ARMED,  # transcribe, detect
              _W.STREAMING,  # audio-start / a first audio-chunk (an ASR request)
              _W.FAILED,  # that audio's format refused
              _W.CLOSED},  # idle timeout, client gone, drain, the grace period over
    _W.ARMED: {_W.ARMED,  # transcribe / detect again
               _W.STREAMING, _W.FAILED, _W.CLOSED},
    _W.STREAMING: {_W.ARMED,  # audio-start again during a wake stream: it starts over
                   _W.ENDING,  # audio-stop, drain
                   _W.IDLE,  # the engine ended the stream (done): its result sent
                   _W.FAILED,  # bad audio, rate limit, refused stream, a fatal engine error
                   _W.CLOSED},
    _W.ENDING: {_W.IDLE,  # the result sent (or the request failed meanwhile): the next request may come
                _W.CLOSED},  # the result sent while draining / after the client left; the grace period over
    _W.FAILED: {_W.IDLE,  # audio-stop
                _W.ARMED,  # the next request
                _W.STREAMING,  # the next audio-start
                _W.FAILED,  # that one refused too
                _W.CLOSED},
    _W.CLOSED: set(),
})


class WyomingSession(FlowFigures):
    """One Wyoming TCP connection.

    States (:class:`WyomingState`, allowed transitions :data:`WYOMING_TRANSITIONS`): ``idle`` ->
    ``armed`` (transcribe / detect received) -> ``streaming`` (engine stream open, audio expected) ->
    ``ending`` (audio-stop received: the result is owed) -> ``idle`` again; ``failed`` (a request
    failed: chunks are dropped until audio-stop or the next request); ``closed`` (Close emitted).
    ``model_info`` is read at each describe and detect, so wake words the engine adds later are offered
    and detected.
    """

    state = WYOMING_TRANSITIONS

    def __init__(self, limits: LimitsConfig, model_info: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
                 version: str, default_method: str = "greedy", url: str = ""):
        self.limits = limits
        self.url = url  # the attribution link of describe's info
        self._model_info = model_info
        self.version = version
        self.streaming_words = default_method in APPEND_ONLY_METHODS
        self.mode = "asr"  # asr | wake
        self.names: tuple[str, ...] = ()  # wake words asked for (empty: every one)
        self.rate = 16000
        self.channels = 1
        self.bucket = TokenBucket(limits.max_realtime, limits.burst_seconds)
        self.min_rate = MinAudioRate(limits.min_audio_rate, limits.min_audio_window)
        self.t0_ms = 0  # client timestamp of the stream's first sample (detection timestamps)
        self.audio_seconds = 0.0
        self.detected = False
        self.finals: list[str] = []  # closed segments' texts (asr)
        self.sent: list[str] = []  # words of the open segment already sent as transcript-chunk
        self.segment: int | None = None
        self.chunked = False  # some transcript-chunk text was sent for this request
        self._shutdown = False
        self._close_after_result = False

    @property
    def model_info(self) -> Mapping[str, Any]:
        return self._model_info() if callable(self._model_info) else self._model_info

    @property
    def closed(self) -> bool:
        return self.state == WyomingState.CLOSED

    @property
    def stream_live(self) -> bool:
        """An engine stream is open for this connection (it counts toward max_streams)."""
        return self.state in (WyomingState.STREAMING, WyomingState.ENDING)

    @property
    def expects_input(self) -> bool:
        """The idle timer runs: the server owes nothing (``ending`` waits for the engine, not the client)."""
        return self.state not in (WyomingState.ENDING, WyomingState.CLOSED)

    # ----------------------------------------------------------------- client -> server

    def receive(self, event: WyomingEvent, now: float) -> list[Action]:
        """One event from the client at time ``now`` (seconds, any monotonic origin)."""
        if self.closed:
            return []
        if event.type not in HANDLED:
            return [_error("unknown_event", f"unknown event type {event.type!r}; this server handles "
                                            f"{', '.join(HANDLED)}")]
        if event.data is None:  # wyoming < 1.8 reads an event without data as data None
            event = WyomingEvent(type=event.type, data={}, payload=event.payload)
        if not isinstance(event.data, dict):
            return [_error("bad_event", f"{event.type}: data must be a JSON object, got {type(event.data).__name__}")]
        handler = getattr(self, "_on_" + event.type.replace("-", "_"))
        try:
            return handler(event, now)
        except ProtocolError as e:
            return [_error(e.code, e.message)]  # the event is refused; the state is unchanged

    def frame_error(self, code: str, message: str) -> list[Action]:
        """The transport could not read an event (malformed or over a size limit): error; if a stream is
        being fed, the frame may have been audio, so that request fails rather than go on with a gap."""
        if self.state == WyomingState.STREAMING:
            return self._fail(code, message)
        return [] if self.closed else [_error(code, message)]

    def open_refused(self, code: str, message: str) -> list[Action]:
        """The transport refused the stream (``too_many_streams``, ``shutting_down``) before the engine saw it."""
        if self.state != WyomingState.STREAMING:
            return []
        self.state = WyomingState.FAILED
        return [_error(code, message)] + self._maybe_close()

    def client_eof(self) -> list[Action]:
        """The client closed its side: a result still owed is sent before closing, anything else ends now."""
        if self.closed:
            return []
        if self.state == WyomingState.ENDING:
            self._close_after_result = True
            return []
        return self._close([Discard()] if self.stream_live else [])

    def timeout(self) -> list[Action]:
        """No event for ``idle_timeout`` seconds while the client owed one: close (an idle connection quietly)."""
        if not self.expects_input:
            return []
        if self.state == WyomingState.IDLE:
            return self._close([])
        out: list[Action] = [_error("idle_timeout", f"no event for {self.limits.idle_timeout:g} s (idle_timeout)")]
        return self._close(out + ([Discard()] if self.stream_live else []))

    def tick(self, now: float) -> list[Action]:
        """Timer at ``now``: a stream being fed must keep ``limits.min_audio_rate`` (window from its start)."""
        if self.state != WyomingState.STREAMING:
            return []
        problem = self.min_rate.check(self.audio_seconds, now)
        return self._fail("audio_too_slow", problem.replace("with eof", "with audio-stop")) if problem else []

    def deadline(self) -> float | None:
        """When the transport must call :meth:`tick` next (None: no timer needed)."""
        return self.min_rate.due() if self.state == WyomingState.STREAMING else None

    def pause(self, seconds: float) -> None:
        """The transport did not read this client for ``seconds`` while its audio was being decoded (flow
        control): the minimum audio rate does not count that time against it."""
        self.min_rate.pause(seconds)

    def fail(self, code: str, message: str) -> list[Action]:
        """End the connection now with an error (e.g. the server's grace period is over); a live stream is
        forgotten."""
        if self.closed:
            return []
        return self._close([_error(code, message)] + ([Discard()] if self.stream_live else []))

    def connection_lost(self) -> None:
        """The transport has ended the connection (the client is gone or was cut off): closed, nothing to
        send; the transport forgets the engine stream itself."""
        if not self.closed:
            self.state = WyomingState.CLOSED

    def shutdown(self) -> list[Action]:
        """The server is draining: a stream being fed is finished as if audio-stop came (its result is sent),
        then the connection closes; an idle one closes now."""
        if self.closed:
            return []
        self._shutdown = True
        if self.state == WyomingState.STREAMING:
            self.state = WyomingState.ENDING
            return [Finish()]
        if self.state == WyomingState.ENDING:
            return []
        return self._close([])

    def _on_describe(self, event: WyomingEvent, now: float) -> list[Action]:
        return [_send(info_event(self.model_info, self.version, self.url))]

    def _on_ping(self, event: WyomingEvent, now: float) -> list[Action]:
        return [_send(Pong(text=Ping.from_event(event).text).event())]

    def _on_select_program(self, event: WyomingEvent, now: float) -> list[Action]:
        name = event.data.get("name")
        if name != PROGRAM:
            raise ProtocolError("unknown_program", f"select-program: no program {name!r}; this server has {PROGRAM!r}")
        return []

    def _on_transcribe(self, event: WyomingEvent, now: float) -> list[Action]:
        self._check_no_stream("transcribe")
        t = _parse(Transcribe, event)
        model = str(self.model_info.get("name") or PROGRAM)
        if t.name is not None and t.name not in (PROGRAM, model):
            raise ProtocolError("unknown_model", f"transcribe: no model {t.name!r}; this server has {model!r}")
        if t.language is not None and (not isinstance(t.language, str) or
                                       t.language.replace("_", "-").split("-")[0].lower() not in LANGUAGES):
            raise ProtocolError("unsupported_language", f"transcribe: language {t.language!r} is not supported; "
                                                        f"this server speaks {', '.join(LANGUAGES)}")
        self.mode, self.names, self.state = "asr", (), WyomingState.ARMED
        return []

    def _on_detect(self, event: WyomingEvent, now: float) -> list[Action]:
        if self.stream_live and self.mode != "wake":
            raise ProtocolError("bad_event", "detect during a transcription stream: send audio-stop first")
        names = _parse(Detect, event).names
        known = {normalize_name(w): w for w in wake_words(self.model_info)}
        if not known:
            raise ProtocolError("unknown_wake_word", "detect: this model has no wake words")
        if names is None:
            names = []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ProtocolError("bad_event", f"detect: names must be a list of strings, got {names!r}")
        unknown = [n for n in names if normalize_name(n) not in known]
        if unknown:
            raise ProtocolError("unknown_wake_word", f"detect: unknown wake word {unknown[0]!r}; this server "
                                                     f"detects {', '.join(map(repr, known.values()))}")
        self.names = tuple(dict.fromkeys(known[normalize_name(n)] for n in names))
        if self.stream_live:  # re-armed during a wake stream (a satellite after a detection): it goes on
            return []
        self.mode, self.state = "wake", WyomingState.ARMED
        return []

    def _on_audio_start(self, event: WyomingEvent, now: float) -> list[Action]:
        start = _parse(AudioStart, event)
        out: list[Action] = []
        if self.stream_live:
            if self.mode != "wake" or self.state != WyomingState.STREAMING:
                raise ProtocolError("bad_event", "audio-start while an audio stream is open: send audio-stop "
                                                 "first and wait for its result")
            out.append(Discard())  # wake: a new audio-start starts over, as openWakeWord does
            self.state = WyomingState.ARMED
        return out + self._start(start.rate, start.width, start.channels, start.timestamp, now)

    def _on_audio_chunk(self, event: WyomingEvent, now: float) -> list[Action]:
        chunk = _parse(AudioChunk, event)
        out: list[Action] = []
        if self.state == WyomingState.FAILED:
            return []  # the request already failed with an error; its audio goes nowhere
        if self.state == WyomingState.ENDING:
            raise ProtocolError("bad_event", "audio-chunk after audio-stop: start a new stream with audio-start")
        if self.state in (WyomingState.IDLE, WyomingState.ARMED):  # no audio-start: the chunk starts the stream
            out += self._start(chunk.rate, chunk.width, chunk.channels, chunk.timestamp, now)
            if self.state != WyomingState.STREAMING:
                return out
        late = self.tick(now)  # a window that ended before this chunk is judged without it
        if late:
            return out + late
        fmt = (chunk.rate, chunk.width, chunk.channels)
        if fmt != (self.rate, SAMPLE_WIDTH, self.channels):
            return out + self._fail("bad_format", f"audio-chunk format {_fmt(*fmt)} differs from the stream's "
                                                  f"{_fmt(self.rate, SAMPLE_WIDTH, self.channels)}")
        data = chunk.audio
        if not data:
            return out
        try:
            samples = decode_pcm(data, "s16le", self.channels)  # (frames,) mono float32
        except AudioError as e:
            return out + self._fail(e.code, f"audio-chunk: {e}")
        seconds = samples.size / self.rate
        if not self.bucket.take(seconds, now, oversize=True):
            return out + self._fail("rate_limited", rate_limited_message(self.limits))
        self.audio_seconds += seconds
        if self.channels == 1:
            return out + [Audio(bytes(data), "s16le")]
        return out + [Audio(samples.astype("<f4").tobytes(), "f32le")]  # downmixed stereo

    def _on_audio_stop(self, event: WyomingEvent, now: float) -> list[Action]:
        if self.state == WyomingState.FAILED:
            self.state = WyomingState.IDLE
            return self._maybe_close()
        if self.state != WyomingState.STREAMING:
            if self.state == WyomingState.ENDING:
                raise ProtocolError("bad_event", "audio-stop sent twice")
            raise ProtocolError("bad_event", "audio-stop without audio-start")
        self.state = WyomingState.ENDING
        return [Finish()]

    def _check_no_stream(self, what: str) -> None:
        if self.stream_live:
            raise ProtocolError("bad_event", f"{what} during an audio stream: send audio-stop first")

    def _start(self, rate: Any, width: Any, channels: Any, timestamp: Any, now: float) -> list[Action]:
        """Open the engine stream for the armed request (ASR when nothing was asked)."""
        if self.state == WyomingState.IDLE:
            self.mode, self.names = "asr", ()
        try:
            rate = check_sample_rate_field(rate, "rate")
            if width != SAMPLE_WIDTH or isinstance(width, bool):
                raise ProtocolError("bad_format", f"width must be {SAMPLE_WIDTH} (16-bit PCM), got {width!r}")
            if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
                raise ProtocolError("bad_format", f"channels must be 1 or {MAX_CHANNELS}, got {channels!r}")
        except ProtocolError as e:
            self.state = WyomingState.FAILED
            return [_error(e.code, e.message)]
        self.rate, self.channels = rate, channels
        self.t0_ms = timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) else 0
        self.bucket = TokenBucket(self.limits.max_realtime, self.limits.burst_seconds)
        self.min_rate = MinAudioRate(self.limits.min_audio_rate, self.limits.min_audio_window)
        self._flow_reset()
        self.detected = False
        self.finals, self.sent, self.segment, self.chunked = [], [], None, False
        self.state = WyomingState.STREAMING
        self.min_rate.check(0.0, now)  # starts its first window
        if self.mode == "wake":
            options = {"sample_rate": rate, "partials": False, "keywords": True}
        else:
            options = {"sample_rate": rate, "partials": self.streaming_words, "keywords": False}
        return [Open(options)]

    def _fail(self, code: str, message: str) -> list[Action]:
        """The request cannot go on: error, forget its stream; chunks are dropped until audio-stop."""
        out: list[Action] = [_error(code, message)] + ([Discard()] if self.stream_live else [])
        self.state = WyomingState.IDLE if self.state == WyomingState.ENDING else WyomingState.FAILED
        return out + self._maybe_close()

    def _maybe_close(self) -> list[Action]:
        if self._shutdown or self._close_after_result:
            return self._close([])
        return []

    def _close(self, out: list[Action]) -> list[Action]:
        self.state = WyomingState.CLOSED
        return out + [Close(1001 if self._shutdown else 1000, "shutting_down" if self._shutdown else "done")]

    # ----------------------------------------------------------------- engine -> client

    def opened(self, error: str | None = None) -> list[Action]:
        """The engine created the stream (``error``: why it could not)."""
        if not self.stream_live:
            return []
        if error is not None:
            return self._fail("bad_request", f"audio-start: {error}")
        if self.mode == "asr":
            return [_send(TranscriptStart(language=LANGUAGES[0]).event())]
        return []

    def event(self, ev: Event) -> list[Action]:
        """An engine event for this connection's stream."""
        if not self.stream_live:
            return []
        if isinstance(ev, Error):
            if ev.fatal:
                return self._fail(ev.code, ev.message)
            return [_error(ev.code, ev.message)]
        if isinstance(ev, Done):
            return self._result()
        if self.mode == "wake":
            if isinstance(ev, WakeWord) and (not self.names or ev.keyword in self.names):
                self.detected = True
                return [_send(Detection(name=ev.keyword, timestamp=self.t0_ms + round(ev.end * 1000)).event())]
            return []
        if isinstance(ev, Partial) and self.streaming_words:
            if ev.segment != self.segment:
                self.segment, self.sent = ev.segment, []
            return self._chunk(ev.text.split()[:-1])  # the last word may still grow
        if isinstance(ev, Final):
            if ev.segment != self.segment:
                self.segment, self.sent = ev.segment, []
            words = ev.text.split()
            out = self._chunk(words)
            if words:
                self.finals.append(" ".join(words))
            self.segment, self.sent = None, []
            return out
        return []

    def _chunk(self, words: Sequence[str]) -> list[Action]:
        """transcript-chunk with the words of the open segment not sent yet.  Chunks are appended by the
        client, so only words that extend what was sent go out (always so for APPEND_ONLY_METHODS)."""
        if list(words[:len(self.sent)]) != self.sent or len(words) <= len(self.sent):
            return []
        new = list(words[len(self.sent):])
        self.sent = list(words)
        text = (" " if self.chunked else "") + " ".join(new)
        self.chunked = True
        return [_send(TranscriptChunk(text=text).event())]

    def _result(self) -> list[Action]:
        """Done: the request's answer, then back to idle (or closed when draining / the client left)."""
        if self.mode == "asr":
            out = [_send(Transcript(text=" ".join(self.finals), language=LANGUAGES[0]).event()),
                   _send(TranscriptStop().event())]
        else:
            out = [] if self.detected else [_send(NotDetected().event())]
        self.state = WyomingState.IDLE
        return out + self._maybe_close()


def _parse(kind: Any, event: WyomingEvent) -> Any:
    """The wyoming package's own parser for ``event``; a missing field is a ``bad_event`` error."""
    try:
        return kind.from_event(event)
    except KeyError as e:
        raise ProtocolError("bad_event", f"{event.type}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise ProtocolError("bad_event", f"{event.type}: {e}") from None


def _fmt(rate: Any, width: Any, channels: Any) -> str:
    return f"{rate} Hz x {width} bytes x {channels} channels"

