"""Sans-I/O core of the v1 streaming protocol (``/v1/stream``) and shared limits.

No sockets, no asyncio, no clock: the I/O layer (:mod:`streamd.server.conn`)
feeds each connection's :class:`V1Session` with what it received (text or
bytes, plus ``now`` from its monotonic clock) and with engine events, and
executes the *actions* the session returns, in order:

* :class:`Send`   a JSON text frame to the client (``droppable`` partials may
  be coalesced by a slow client's outbox);
* :class:`Open`   create the engine stream with these options;
* :class:`Audio`  PCM bytes for the engine stream;
* :class:`Reset` / :class:`Finish`  close the segment / end the stream;
* :class:`Close`  close the websocket with this code (after the sends before it).

Every protocol error becomes ``[Send(error), Close(code)]`` where the close
code comes from :data:`CLOSE_CODES`; the session is then closed and ignores
further input.  Limits are enforced here (message sizes, the audio rate token
bucket, the minimum audio rate); time only enters through the ``now`` arguments
(and :meth:`SessionBase.tick` / :meth:`SessionBase.deadline` for the transport's timer).  The session's
states are :class:`V1State`, its allowed transitions the table :data:`V1_TRANSITIONS` (:mod:`.states`).
docs/protocol.md is the user-facing description of every message, field and code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Mapping

from ..audio.pcm import SUPPORTED_FORMATS
from ..config import LimitsConfig
from ..options import (OptionError, PhraseSpec, StreamDefaults, check_beam, check_flag, check_hotword_method,
                       check_method, check_sample_rate, parse_phrases)
from ..events import Done, Error, Event, Final, Partial, WakeWord
from ..wire import CLOSE_CODES, SAMPLE_WIDTH, START_FIELDS
from .auth import bearer_token, origin_ok, token_ok  # noqa: F401 - their home until auth.py; still importable here
from .states import SessionState, Transitions

__all__ = [
    "CLOSE_CODES", "SAMPLE_WIDTH", "Send", "Open", "Audio", "Reset", "Finish", "Close", "Action",
    "ProtocolError", "FlowFigures", "SessionBase", "TokenBucket", "V1Session", "V1State", "V1_TRANSITIONS",
    "error_actions",
    "parse_json_object",
    "check_sample_rate_field",
    "bearer_token", "token_ok", "origin_ok",
    "MinAudioRate", "public_model_info", "rate_limited_message",
]






@dataclass(frozen=True)
class Send:
    """Send ``message`` as one JSON text frame.

    ``droppable``: a newer droppable message may replace it while it waits in the client's outbox
    (partials); with ``when_behind`` only once the client has fallen behind (half the outbox waiting:
    Vosk's partial replies, one per frame for a client that reads them).  ``last``: the stream's last
    message (Vosk's final result), queued even when the outbox is full: never dropped.
    """

    message: dict
    droppable: bool = False
    when_behind: bool = False
    last: bool = False


@dataclass(frozen=True)
class Open:
    """Create the engine stream (``options``: StreamOptions fields)."""

    options: dict


@dataclass(frozen=True)
class Audio:
    """PCM bytes (``fmt``) for the engine stream; ``ack``: the session wants :meth:`applied` called."""

    data: bytes
    fmt: str
    ack: bool = False


@dataclass(frozen=True)
class Reset:
    """Close the open segment (a Final follows)."""


@dataclass(frozen=True)
class Finish:
    """No more audio: decode the tail, Final, Done."""


@dataclass(frozen=True)
class Close:
    """Close the websocket with ``code`` / ``reason`` once earlier sends are out."""

    code: int
    reason: str


Action = Send | Open | Audio | Reset | Finish | Close


class ProtocolError(Exception):
    """A client mistake: ``code`` (see :data:`CLOSE_CODES`) and a message saying exactly what was wrong."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def error_actions(code: str, message: str, extra: Mapping[str, Any] | None = None) -> list[Action]:
    """The error event (plus ``extra`` fields, e.g. ``retry_after``) then the close that fits ``code`` (the
    reason is the code itself)."""
    return [Send({"type": "error", "code": code, "message": message, **(extra or {})}),
            Close(CLOSE_CODES.get(code, 1011), code)]


def parse_json_object(text: str) -> dict:
    """A text frame as a JSON object, or ProtocolError(bad_json / bad_message)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ProtocolError("bad_json", f"text message is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_message", f"text message must be a JSON object, got {type(obj).__name__}")
    return obj


def check_sample_rate_field(value: Any, name: str = "sample_rate") -> int:
    """A sample rate field (integral floats such as 16000.0 accepted, as JSON may send them):
    :func:`streamd.options.check_sample_rate`, its error a ``bad_sample_rate`` ProtocolError."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    try:
        return check_sample_rate(value, name)
    except OptionError as e:
        raise ProtocolError(e.code, str(e)) from None


# --------------------------------------------------------------------------- limits


@dataclass
class TokenBucket:
    """Audio-rate limit: ``rate`` seconds of audio per second of wall time, ``capacity`` seconds of burst.

    ``rate`` 0 means unlimited.  The bucket starts full.
    """

    rate: float
    capacity: float
    tokens: float = math.nan
    last: float | None = None

    def __post_init__(self) -> None:
        if math.isnan(self.tokens):
            self.tokens = self.capacity

    def take(self, amount: float, now: float, oversize: bool = False) -> bool:
        """Spend ``amount`` seconds of audio at time ``now``; False (nothing spent) if over the limit.

        ``oversize``: an amount larger than the whole burst is admitted when the bucket is full, and the
        bucket goes into debt (refilled at ``rate`` as usual), so one frame of the largest size the
        server accepts always passes and the average rate stays bounded.
        """
        if self.rate <= 0:
            return True
        if self.last is not None:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if amount > self.tokens and not (oversize and amount > self.capacity and self.tokens >= self.capacity):
            return False
        self.tokens -= amount
        return True

    def credit(self, amount: float) -> None:
        """Give back ``amount`` seconds (audio the client's results have covered: :mod:`.flow`), up to the
        burst."""
        if self.rate > 0 and amount > 0:
            self.tokens = min(self.capacity, self.tokens + amount)


@dataclass
class MinAudioRate:
    """``limits.min_audio_rate``: at least ``rate`` seconds of audio per second of wall time over each
    window of ``window`` seconds (0 = no minimum).

    Sans-I/O: :meth:`check` gets the stream's audio total and ``now``.  The first call starts the first
    window; a check at or after its end compares the audio received in it with ``rate`` x its length
    (the time actually elapsed, should the check come late), then starts the next window at ``now``.
    """

    rate: float
    window: float
    start: float | None = None
    audio_at_start: float = 0.0

    def pause(self, seconds: float) -> None:
        """The transport did not read the client for ``seconds`` (flow control: the server's wait, not the
        client's): the current window is extended by as much."""
        if self.start is not None and seconds > 0:
            self.start += seconds

    def due(self) -> float | None:
        """When the current window ends (None: not started or no minimum)."""
        if self.rate <= 0 or self.start is None:
            return None
        return self.start + self.window

    def check(self, audio_seconds: float, now: float) -> str | None:
        """None when fine; else what was too slow (the stream fails with ``audio_too_slow``)."""
        if self.rate <= 0:
            return None
        if self.start is None:
            self.start, self.audio_at_start = now, audio_seconds
            return None
        elapsed = now - self.start
        if elapsed < self.window:
            return None
        got = audio_seconds - self.audio_at_start
        if got < self.rate * elapsed:
            return (f"{got:.2f} s of audio in the last {elapsed:.1f} s: a stream must send at least "
                    f"{self.rate:g} s of audio per second (limits.min_audio_rate, over {self.window:g} s) "
                    f"or end with eof")
        self.start, self.audio_at_start = now, audio_seconds
        return None


def rate_limited_message(limits: LimitsConfig) -> str:
    """The ``rate_limited`` error's message (every protocol's)."""
    return (f"audio arrives faster than {limits.max_realtime:g}x real time and its results are not being read "
            f"(burst of {limits.burst_seconds:g} s used up): read the server's messages as they come, or send "
            f"at real time")


def public_model_info(info: Mapping[str, Any], show_paths: bool = False) -> dict:
    """``ready.model`` as sent to clients: ``path`` and ``lm.path`` reduced to file names unless
    ``server.show_model_paths`` (the fields stay: the v1 protocol only adds fields)."""
    out = dict(info)
    if show_paths:
        return out
    if isinstance(out.get("path"), str) and out["path"]:
        out["path"] = PurePath(out["path"]).name
    lm = out.get("lm")
    if isinstance(lm, Mapping) and isinstance(lm.get("path"), str) and lm["path"]:
        out["lm"] = {**lm, "path": PurePath(lm["path"]).name}
    return out


# --------------------------------------------------------------------------- sessions

class FlowFigures:
    """What flow control (:mod:`.flow`) needs of a session: its audio accepted, decoded and delivered, and its
    token bucket.  The session adds to ``audio_seconds``; the transport reports the engine's progress
    (:meth:`progress`) and when the results up to it are in the client's socket (:meth:`delivered`)."""

    audio_seconds: float = 0.0  # audio accepted so far (the session adds to it)
    decoded_seconds: float = 0.0  # of which the engine has decoded (:meth:`progress`)
    credited_seconds: float = 0.0  # of which the results have been handed to the client (:meth:`delivered`)
    bucket: TokenBucket | None = None  # the audio-rate limit (the session sets it)

    @property
    def backlog(self) -> float:
        """Seconds of accepted audio the engine has not decoded yet (flow control, :mod:`.flow`)."""
        return max(0.0, self.audio_seconds - self.decoded_seconds)

    def progress(self, decoded: float) -> None:
        """The engine has decoded this stream up to ``decoded`` seconds of its audio."""
        self.decoded_seconds = max(self.decoded_seconds, min(decoded, self.audio_seconds))

    def delivered(self) -> None:
        """Every result up to :attr:`decoded_seconds` has been handed to the client's socket: the token bucket
        gets those seconds back, so a client that reads its results is paced by flow control (:mod:`.flow`),
        never cut off by the rate limit, while one that never reads them runs out of its burst."""
        if self.decoded_seconds > self.credited_seconds:
            if self.bucket is not None:
                self.bucket.credit(self.decoded_seconds - self.credited_seconds)
            self.credited_seconds = self.decoded_seconds

    def _flow_reset(self) -> None:
        """A new stream on the same connection (Wyoming): its figures start at 0."""
        self.audio_seconds = self.decoded_seconds = self.credited_seconds = 0.0


class SessionBase(FlowFigures):
    """What every websocket protocol's session shares: the end of its state machine and the
    decisions the I/O layer asks of it (a failure, an idle timeout, a server drain).

    States (each subclass's enum and its :class:`~.states.Transitions` table, ``state``):
    ``INITIAL_STATE`` (before the stream is configured) -> ``streaming`` -> ``ending`` (input closed:
    eof received or server draining) -> ``closed`` (Close emitted); any state but ``closed`` may go to
    ``closed`` (a failure).  Subclasses set ``self.limits`` and ``self._shutdown`` in ``__init__``, and
    add the seconds of audio they accept to ``self.audio_seconds``.

    Timers: the I/O layer calls :meth:`tick` once when the connection opens (it starts the clock of
    the minimum audio rate, ``limits.min_audio_rate``) and again at :meth:`deadline`; :meth:`receive`
    checks the same rule first.  A stream that falls short fails with ``audio_too_slow``.
    """

    State: type[SessionState]  # the protocol's enum: INITIAL_STATE, STREAMING, ENDING, CLOSED
    INITIAL_STATE: SessionState  # each protocol's name for "connected, stream not configured yet"
    state: Any  # a Transitions descriptor on each subclass: reads as a State member
    limits: LimitsConfig
    _shutdown: bool
    def pause(self, seconds: float) -> None:
        """The transport did not read this client for ``seconds`` while its audio was being decoded (flow
        control): the minimum audio rate does not count that time against it."""
        self._min_rate().pause(seconds)

    @property
    def input_closed(self) -> bool:
        """No more client input is expected (eof, server draining, or closed)."""
        return self.state in (self.State.ENDING, self.State.CLOSED)

    @property
    def closed(self) -> bool:
        return self.state == self.State.CLOSED

    def receive(self, message: str | bytes, now: float) -> list[Action]:
        """One websocket message from the client at time ``now`` (seconds, any monotonic origin).

        Input after eof or once the server is draining is ignored (documented); a
        :class:`ProtocolError` from the subclass's handlers fails the session with its code.
        """
        if self.input_closed:
            return []
        late = self.tick(now)  # a window that ended before this message is judged without it
        if late:
            return late
        try:
            if isinstance(message, str):
                size = len(message.encode("utf-8", "surrogatepass"))
                if size > self.limits.max_text_bytes:
                    raise ProtocolError("too_large", f"text message of {size} bytes exceeds max_text_bytes "
                                                     f"({self.limits.max_text_bytes})")
                return self._text(message)
            return self._binary(message, now)
        except ProtocolError as e:
            return self.fail(e.code, e.message)

    def _text(self, text: str) -> list[Action]:
        """A text message within ``max_text_bytes``; may raise ProtocolError."""
        raise NotImplementedError

    def _binary(self, data: bytes, now: float) -> list[Action]:
        """A binary (audio) message; may raise ProtocolError."""
        raise NotImplementedError

    def fail(self, code: str, message: str, extra: Mapping[str, Any] | None = None) -> list[Action]:
        """Error event (with ``extra`` fields) then close (idempotent)."""
        if self.state == self.State.CLOSED:
            return []
        self.state = self.State.CLOSED
        return error_actions(code, message, extra)

    def timeout(self) -> list[Action]:
        """No message for ``idle_timeout`` seconds (only counts while input is expected)."""
        if self.input_closed:
            return []
        return self.fail("idle_timeout", f"no message for {self.limits.idle_timeout:g} s (idle_timeout)")

    def _min_rate(self) -> MinAudioRate:
        rule = self.__dict__.get("_min_audio_rate")
        if rule is None:
            rule = self._min_audio_rate = MinAudioRate(self.limits.min_audio_rate, self.limits.min_audio_window)
        return rule

    def tick(self, now: float) -> list[Action]:
        """Timer at ``now``: the minimum audio rate while input is expected (the first call starts it)."""
        if self.input_closed:
            return []
        problem = self._min_rate().check(self.audio_seconds, now)
        return self.fail("audio_too_slow", problem) if problem else []

    def deadline(self) -> float | None:
        """When the I/O layer must call :meth:`tick` next (None: no timer needed)."""
        if self.input_closed:
            return None
        return self._min_rate().due()

    def shutdown(self) -> list[Action]:
        """The server is draining: finish the stream with what was received, then close 1001."""
        if self.state == self.INITIAL_STATE:
            return self.fail("shutting_down", "server is shutting down; no new streams")
        if self.state == self.State.STREAMING:
            self._shutdown = True
            self.state = self.State.ENDING
            return [Finish()]
        return []





def _phrase_wire(spec: PhraseSpec) -> str | dict:
    """A phrase as the client may have sent it: the bare phrase, or a mapping when it has settings."""
    extra = {k: v for k, v in (("boost", spec.boost), ("threshold", spec.threshold)) if v is not None}
    return {"phrase": spec.phrase, **extra} if extra else spec.phrase


class V1State(SessionState):
    """States of a ``/v1/stream`` session."""

    AWAIT_START = "await_start"  # connected, no start message yet
    STREAMING = "streaming"  # after a valid start: audio, reset, eof expected
    ENDING = "ending"  # eof received or server draining: input closed, the last final and done owed
    CLOSED = "closed"  # Close emitted: everything else is ignored


V1_TRANSITIONS: Transitions[V1State] = Transitions("V1Session", V1State.AWAIT_START, {
    V1State.AWAIT_START: {V1State.STREAMING,  # start
                          V1State.CLOSED},  # a protocol error, idle timeout, refusal, drain
    V1State.STREAMING: {V1State.ENDING,  # eof, drain
                        V1State.CLOSED},  # a protocol error, a fatal engine error, done, abort
    V1State.ENDING: {V1State.CLOSED},  # done, a fatal engine error, the grace period over
    V1State.CLOSED: set(),
})


class V1Session(SessionBase):
    """One ``/v1/stream`` connection: start -> ready, audio, reset, eof -> final, done, close 1000.

    States (:class:`V1State`, allowed transitions :data:`V1_TRANSITIONS`): ``await_start`` ->
    ``streaming`` (after a valid start) -> ``ending`` (eof received or server draining: input closed)
    -> ``closed`` (Close emitted).
    """

    State = V1State
    INITIAL_STATE = V1State.AWAIT_START
    state = V1_TRANSITIONS

    def __init__(self, session_id: str, limits: LimitsConfig, model_info: Mapping[str, Any],
                 default_method: str = "greedy", default_beam: int | None = None):
        self.session_id = session_id
        self.limits = limits
        self.model_info = dict(model_info)
        self.methods = tuple(model_info.get("methods", ()))
        self.second_pass = model_info.get("second_pass")  # the server's second-pass model, or None
        self.defaults = StreamDefaults(default_method, default_beam)  # the engine config's (no second pass: the
        # engine resolves it, and ready names second_pass only when the client did)
        self.options: dict[str, Any] = {}
        self.format = "s16le"
        self.sample_rate = 16000
        self.bucket = TokenBucket(limits.max_realtime, limits.burst_seconds)
        self.audio_seconds = 0.0
        self._shutdown = False

    # ----------------------------------------------------------------- client -> server

    def _text(self, text: str) -> list[Action]:
        obj = parse_json_object(text)
        kind = obj.get("type")
        if kind is None:
            raise ProtocolError("bad_message", "message has no 'type' field (expected start, reset or eof)")
        if kind == "start":
            if self.state != self.INITIAL_STATE:
                raise ProtocolError("bad_message", "start sent twice: the stream has already started")
            return self._start(obj)
        if kind in ("reset", "eof"):
            if self.state == self.INITIAL_STATE:
                raise ProtocolError("bad_message", f"{kind} before start: send a start message first")
            extra = sorted(set(obj) - {"type"})
            if extra:
                raise ProtocolError("bad_message", f"{kind}: unknown field {extra[0]!r}")
            if kind == "reset":
                return [Reset()]
            self.state = V1State.ENDING
            return [Finish()]
        raise ProtocolError("bad_message", f"unknown message type {kind!r} (expected start, reset or eof)")

    def _start(self, obj: dict) -> list[Action]:
        unknown = sorted(set(obj) - set(START_FIELDS))
        if unknown:
            raise ProtocolError("bad_message", f"start: unknown field {unknown[0]!r} (known: "
                                               f"{', '.join(START_FIELDS[1:])})")
        rate = check_sample_rate_field(obj.get("sample_rate", 16000))
        fmt = obj.get("format", "s16le")
        if fmt not in SUPPORTED_FORMATS:
            raise ProtocolError("bad_format", f"format must be one of {list(SUPPORTED_FORMATS)}, got {fmt!r}")
        try:
            method = check_method(obj.get("method", self.defaults.method), self.methods)
            beam = check_beam(obj.get("beam", self.defaults.beam_for(method)))
            flags = {name: check_flag(name, obj.get(name, True)) for name in ("partials", "keywords", "endpointing")}
        except OptionError as e:
            raise ProtocolError(e.code, str(e)) from None
        phrases = {}
        try:
            for name in ("wake_words", "hotwords"):  # absent: the server's configured lists
                if name in obj:
                    phrases[name] = parse_phrases(obj[name], name)
            check_hotword_method(phrases.get("hotwords"), method)
        except OptionError as e:
            raise ProtocolError(e.code, f"start: {e}") from None
        second = {}  # absent: on where the server has a second pass (ready's model.second_pass names it)
        if "second_pass" in obj:
            try:
                check_flag("second_pass", obj["second_pass"])
            except OptionError as e:
                raise ProtocolError(e.code, str(e)) from None
            if obj["second_pass"] and self.second_pass is None:
                raise ProtocolError("bad_message", "start: second_pass: this server has no second-pass model "
                                                   "(engine.second_pass.model)")
            second = {"second_pass": obj["second_pass"]}
        if "wake_models" in obj:  # absent: every loaded wake model; the engine checks the names
            wm = obj["wake_models"]
            if not isinstance(wm, list) or not all(isinstance(k, str) and k.strip() for k in wm):
                raise ProtocolError("bad_message", f"start: wake_models must be a list of the server's trained "
                                                   f"wake model keywords, got {wm!r}")
            phrases["wake_models"] = tuple(wm)
        self.sample_rate, self.format = rate, fmt
        self.options = {"sample_rate": rate, "method": method, "beam": beam, **flags, **phrases, **second}
        self.state = V1State.STREAMING
        return [Open(dict(self.options))]

    def _binary(self, data: bytes, now: float) -> list[Action]:
        if self.state == self.INITIAL_STATE:
            raise ProtocolError("binary_before_start",
                                "binary audio before the start message: send {\"type\": \"start\", ...} first")
        n = len(data)
        if n > self.limits.max_message_bytes:
            raise ProtocolError("too_large", f"binary message of {n} bytes exceeds max_message_bytes "
                                             f"({self.limits.max_message_bytes})")
        width = SAMPLE_WIDTH[self.format]
        if n % width:
            raise ProtocolError("bad_audio", f"binary message of {n} bytes is not a whole number of "
                                             f"{width}-byte {self.format} samples")
        if n == 0:
            return []
        seconds = n / width / self.sample_rate
        if not self.bucket.take(seconds, now, oversize=True):
            raise ProtocolError("rate_limited", rate_limited_message(self.limits))
        self.audio_seconds += seconds
        return [Audio(bytes(data), self.format)]

    # ----------------------------------------------------------------- engine -> client

    def opened(self, error: str | None = None) -> list[Action]:
        """The engine created the stream (``error``: why it could not)."""
        if self.state == V1State.CLOSED:
            return []
        if error is not None:
            return self.fail("bad_message", f"start: {error}")
        options = {k: [_phrase_wire(p) for p in v] if k in ("wake_words", "hotwords") else v
                   for k, v in self.options.items()}
        return [Send({"type": "ready", "session": self.session_id, **options, "format": self.format,
                      "model": self.model_info})]

    def event(self, ev: Event) -> list[Action]:
        """An engine event for this stream -> messages (and the close after Done or a fatal Error)."""
        if self.state == V1State.CLOSED:
            return []
        if isinstance(ev, Partial):
            return [Send(ev.to_wire(), droppable=True)]
        if isinstance(ev, (Final, WakeWord)):
            return [Send(ev.to_wire())]
        if isinstance(ev, Error):
            if ev.fatal:
                return self.fail(ev.code, ev.message)
            return [Send(ev.to_wire())]
        if isinstance(ev, Done):
            self.state = V1State.CLOSED
            if self._shutdown:
                return [Send(ev.to_wire()), Close(1001, "shutting_down")]
            return [Send(ev.to_wire()), Close(1000, "done")]
        return []
