"""Sans-I/O Vosk-server compatible protocol (path ``/vosk`` and every path of ``vosk_port``).

What vosk-server's ``websocket/asr_server.py`` speaks, so its clients (e.g.
``websocket/test.py``) work unmodified:

* optional ``{"config": {"sample_rate": 8000, ...}}`` before the audio (no
  reply); without it the stream runs at ``vosk_sample_rate``.  ``words``
  (default true) false drops the per-word ``result`` list, as Vosk's
  ``SetWords(False)``; ``max_alternatives`` N > 0 decodes with modified beam
  search (beam max(N, the configured or default modified beam: 8)) and replies ``{"alternatives": [{"text",
  "confidence", "result"}...]}`` with up to N distinct texts, best first
  (``confidence`` is the total log-score; only the best has word entries:
  the n-best has no word timings); ``phrase_list`` is refused
  (``bad_message``, close 1008) until runtime vocabularies exist (a client that sends one
  expects restricted output, so ignoring it would be a silent wrong answer);
  other keys are ignored;
* binary frames of s16le mono PCM; **exactly one reply per frame**, in order:
  ``{"partial": "..."}``, or ``{"result": [{"conf", "start", "end", "word"}...],
  "text": "..."}`` when an endpoint closed a segment; for a client that sends
  faster than it reads, waiting partial replies coalesce once half the outbox
  is queued (``Send.when_behind``), results never do, and the final result is
  queued even into a full outbox (``Send.last``);
* ``{"eof" : 1}`` (parsed leniently: any JSON object with an ``eof`` key, or
  text that looks like one) -> one final result, then close 1000.

Lock-step: the I/O layer sends each frame to the engine with ``ack=True`` and
calls :meth:`VoskSession.applied` after the batch cycle that applied it (and
stepped every ready chunk), so the reply reflects that frame whenever the
frame completed a chunk, and is the current partial otherwise.  Results from
endpoints wait in a FIFO and go out as the next replies; at eof every result
not yet delivered is merged into the single final result.  Errors use the v1
error message and close codes (:mod:`streamd.server.protocol`).
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from ..config import LimitsConfig
from ..options import MAX_BEAM, default_beam
from ..events import Done, Error, Event, Final, Partial, Word
from .protocol import (Action, Audio, Close, Finish, Open, ProtocolError, Send, SessionBase, TokenBucket,
                       check_sample_rate_field, rate_limited_message)
from .states import SessionState, Transitions

__all__ = ["VoskSession", "VoskState", "VOSK_TRANSITIONS", "Segment", "classify_text", "vosk_result"]

_EOF_RE = re.compile(r"""^\s*\{\s*['"]?eof['"]?\s*:""")
VOSK_WORD_KEYS = ("conf", "start", "end", "word")  # Vosk's word entry: the v1 word's other fields stay out


def classify_text(text: str) -> tuple[str, dict | None]:
    """A Vosk text frame -> ("config", options) or ("eof", None); ProtocolError otherwise."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        obj = None
        if _EOF_RE.search(text):
            return "eof", None
        raise ProtocolError("bad_json", f"text message is not valid JSON (expected {{\"config\": {{...}}}} "
                                        f"or {{\"eof\": 1}}): {text[:60]!r}") from None
    if isinstance(obj, dict):
        if "eof" in obj:
            return "eof", None
        if "config" in obj:
            cfg = obj["config"]
            if not isinstance(cfg, dict):
                raise ProtocolError("bad_message", f"config must be a JSON object, got {type(cfg).__name__}")
            return "config", cfg
    raise ProtocolError("bad_message", "expected {\"config\": {...}} or {\"eof\": 1}")


@dataclass(frozen=True)
class Segment:
    """One closed segment as Vosk reports it: the best words and text, the other n-best texts and the
    total log-scores (``scores[0]`` the best's, then one per alternative: :class:`~streamd.events.Final`)."""

    words: tuple[Word, ...]
    text: str
    alternatives: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()


def vosk_result(segments: Sequence[Segment], words: bool = True, max_alternatives: int = 0) -> dict:
    """Vosk's result object for one segment or several merged ones (word entries: conf, end, start, word).

    ``max_alternatives`` > 0: ``{"alternatives": [...]}``, the merged best text first, then the earlier
    segments' best texts followed by each n-best text of the last segment, scores summed likewise."""
    text = " ".join(sg.text for sg in segments if sg.text)
    wire = [{k: d[k] for k in VOSK_WORD_KEYS} for d in (w.to_wire() for sg in segments for w in sg.words)]
    if max_alternatives <= 0:
        return {"result": wire, "text": text} if words else {"text": text}
    head = [sg.text for sg in segments[:-1] if sg.text]
    base = sum(sg.scores[0] for sg in segments[:-1] if sg.scores)
    last = segments[-1] if segments else Segment((), "")
    best: dict = {"confidence": round(base + (last.scores[0] if last.scores else 0.0), 4), "text": text}
    if words:
        best["result"] = wire
    alts = [best] + [{"confidence": round(base + sc, 4), "text": " ".join(head + [t])}
                     for t, sc in zip(last.alternatives, last.scores[1:])]
    return {"alternatives": alts[:max_alternatives]}


class VoskState(SessionState):
    """States of a Vosk session."""

    CONFIG = "config"  # connected, no audio yet: a config message may come
    STREAMING = "streaming"  # the engine stream is open (first audio frame, or eof)
    ENDING = "ending"  # eof received or server draining: input closed, the final result owed
    CLOSED = "closed"  # Close emitted: everything else is ignored


VOSK_TRANSITIONS: Transitions[VoskState] = Transitions("VoskSession", VoskState.CONFIG, {
    VoskState.CONFIG: {VoskState.STREAMING,  # the first audio frame, or eof (which then ends it)
                       VoskState.CLOSED},  # a protocol error, idle timeout, refusal, drain
    VoskState.STREAMING: {VoskState.ENDING,  # eof, drain
                          VoskState.CLOSED},  # a protocol error, a fatal engine error, abort
    VoskState.ENDING: {VoskState.CLOSED},  # the final result sent, a fatal engine error, the grace period over
    VoskState.CLOSED: set(),
})


class VoskSession(SessionBase):
    """One Vosk connection.  States (:class:`VoskState`, allowed transitions :data:`VOSK_TRANSITIONS`):
    config -> streaming -> ending -> closed."""

    State = VoskState
    INITIAL_STATE = VoskState.CONFIG
    state = VOSK_TRANSITIONS

    def __init__(self, limits: LimitsConfig, default_sample_rate: int = 8000, beam: int | None = None):
        self.limits = limits
        self.beam = beam  # engine.decoding.beam (None: each method's own)
        self.sample_rate = default_sample_rate
        self.bucket = TokenBucket(limits.max_realtime, limits.burst_seconds)
        self.audio_seconds = 0.0
        self.owed = 0  # frames sent to the engine whose reply is still due
        self.partial = ""
        self.results: deque[Segment] = deque()  # endpoint results not yet delivered
        self.last: Segment | None = None  # the end-of-stream segment
        self.words = True  # config "words"
        self.max_alternatives = 0  # config "max_alternatives"
        self.done = False
        self._shutdown = False

    def _open(self) -> list[Action]:
        if self.state != self.INITIAL_STATE:
            return []
        self.state = VoskState.STREAMING
        options = {"sample_rate": self.sample_rate, "partials": True, "keywords": False}
        if self.max_alternatives > 0:
            beam = max(self.max_alternatives, default_beam("modified_beam", self.beam))
            options.update(method="modified_beam", beam=beam)
        return [Open(options)]

    # ----------------------------------------------------------------- client -> server

    def _text(self, text: str) -> list[Action]:
        kind, cfg = classify_text(text)
        if kind == "eof":
            actions = self._open()
            self.state = VoskState.ENDING
            return actions + [Finish()]
        if self.state != self.INITIAL_STATE:  # a config after audio is ignored, as in Vosk
            return []
        if "phrase_list" in cfg:
            raise ProtocolError("bad_message", "config.phrase_list: restricting the vocabulary to a phrase list "
                                               "is not supported by this server (yet); send no phrase_list")
        if "sample_rate" in cfg:
            self.sample_rate = check_sample_rate_field(cfg["sample_rate"], "config.sample_rate")
        if "words" in cfg:
            if not isinstance(cfg["words"], (bool, int)) or isinstance(cfg["words"], float):
                raise ProtocolError("bad_message", f"config.words must be true or false, got {cfg['words']!r}")
            self.words = bool(cfg["words"])
        if "max_alternatives" in cfg:
            n = cfg["max_alternatives"]
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_BEAM:  # n-best of at most a beam
                raise ProtocolError("bad_message", f"config.max_alternatives must be an integer 0..{MAX_BEAM}, "
                                                   f"got {n!r}")
            self.max_alternatives = n
        return []

    def _binary(self, data: bytes, now: float) -> list[Action]:
        n = len(data)
        if n > self.limits.max_message_bytes:
            raise ProtocolError("too_large", f"binary message of {n} bytes exceeds max_message_bytes "
                                             f"({self.limits.max_message_bytes})")
        if n % 2:
            raise ProtocolError("bad_audio", f"binary message of {n} bytes is not a whole number of "
                                             "2-byte s16le samples")
        seconds = n / 2 / self.sample_rate
        if not self.bucket.take(seconds, now, oversize=True):
            raise ProtocolError("rate_limited", rate_limited_message(self.limits))
        self.audio_seconds += seconds
        actions = self._open()
        self.owed += 1
        return actions + [Audio(bytes(data), "s16le", ack=True)]

    # ----------------------------------------------------------------- engine -> client

    def opened(self, error: str | None = None) -> list[Action]:
        if error is not None:
            return self.fail("bad_message", f"config: {error}")
        return []

    def applied(self, n: int) -> list[Action]:
        """``n`` of this session's frames went through a batch cycle: one reply each, in order."""
        if self.state == VoskState.CLOSED:
            return []
        out: list[Action] = []
        for _ in range(min(n, self.owed)):
            self.owed -= 1
            if self.results:
                out.append(Send(self._result([self.results.popleft()])))
            else:  # coalesces with a waiting partial reply once the client reads slower than it sends
                out.append(Send({"partial": self.partial}, droppable=True, when_behind=True))
        if self.done and self.owed == 0:
            out += self._final()
        return out

    def event(self, ev: Event) -> list[Action]:
        if self.state == VoskState.CLOSED:
            return []
        if isinstance(ev, Partial):
            self.partial = ev.text
        elif isinstance(ev, Final):
            self.partial = ""
            seg = Segment(tuple(ev.words), ev.text, tuple(ev.alternatives), tuple(ev.scores))
            if ev.reason == "eos":
                self.last = seg
            else:
                self.results.append(seg)
        elif isinstance(ev, Error) and ev.fatal:
            return self.fail(ev.code, ev.message)
        elif isinstance(ev, Done):
            self.done = True
            if self.owed == 0:
                return self._final()
        return []

    def _result(self, segments: Sequence[Segment]) -> dict:
        return vosk_result(segments, self.words, self.max_alternatives)

    def _final(self) -> list[Action]:
        """Every undelivered result merged with the last segment: Vosk's single FinalResult."""
        segments = list(self.results) + ([self.last] if self.last is not None else [])
        self.results.clear()
        self.state = VoskState.CLOSED
        final = self._result(segments)
        return [Send(final, last=True), Close(1001, "shutting_down") if self._shutdown else Close(1000, "done")]
