"""Sans-I/O Vosk-server compatible protocol (path ``/vosk`` and every path of ``vosk_port``).

What vosk-server's ``websocket/asr_server.py`` speaks, so its clients (e.g.
``websocket/test.py``) work unmodified:

* optional ``{"config": {"sample_rate": 8000, ...}}`` before the audio (other
  keys such as ``words``, ``max_alternatives``, ``phrase_list`` are accepted
  and ignored; no reply); without it the stream runs at ``vosk_sample_rate``;
* binary frames of s16le mono PCM; **exactly one reply per frame**, in order:
  ``{"partial": "..."}``, or ``{"result": [{"conf", "start", "end", "word"}...],
  "text": "..."}`` when an endpoint closed a segment;
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

from ..config import LimitsConfig
from ..events import Done, Error, Event, Final, Partial, Word
from .protocol import (Action, Audio, Close, Finish, Open, ProtocolError, Send, SessionBase, TokenBucket,
                       check_sample_rate_field)

__all__ = ["VoskSession", "classify_text", "vosk_result"]

_EOF_RE = re.compile(r"""^\s*\{\s*['"]?eof['"]?\s*:""")


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


def vosk_result(words: list[Word], texts: list[str]) -> dict:
    """Vosk's result object (word entries: conf, end, start, word)."""
    return {"result": [w.to_wire() for w in words], "text": " ".join(t for t in texts if t)}


class VoskSession(SessionBase):
    """One Vosk connection.  States: config -> streaming -> ending -> closed."""

    INITIAL_STATE = "config"

    def __init__(self, limits: LimitsConfig, default_sample_rate: int = 8000):
        self.limits = limits
        self.sample_rate = default_sample_rate
        self.state = self.INITIAL_STATE
        self.bucket = TokenBucket(limits.max_realtime, limits.burst_seconds)
        self.owed = 0  # frames sent to the engine whose reply is still due
        self.partial = ""
        self.results: deque[dict] = deque()  # endpoint results not yet delivered
        self.final_words: list[Word] = []
        self.final_texts: list[str] = []
        self.done = False
        self._shutdown = False

    def _open(self) -> list[Action]:
        if self.state != self.INITIAL_STATE:
            return []
        self.state = "streaming"
        return [Open({"sample_rate": self.sample_rate, "partials": True, "keywords": False})]

    # ----------------------------------------------------------------- client -> server

    def _text(self, text: str) -> list[Action]:
        kind, cfg = classify_text(text)
        if kind == "eof":
            actions = self._open()
            self.state = "ending"
            return actions + [Finish()]
        if self.state == self.INITIAL_STATE and "sample_rate" in cfg:  # a config after audio is ignored, as in Vosk
            self.sample_rate = check_sample_rate_field(cfg["sample_rate"], "config.sample_rate")
        return []

    def _binary(self, data: bytes, now: float) -> list[Action]:
        n = len(data)
        if n > self.limits.max_message_bytes:
            raise ProtocolError("too_large", f"binary message of {n} bytes exceeds max_message_bytes "
                                             f"({self.limits.max_message_bytes})")
        if n % 2:
            raise ProtocolError("bad_audio", f"binary message of {n} bytes is not a whole number of "
                                             "2-byte s16le samples")
        if not self.bucket.take(n / 2 / self.sample_rate, now):
            raise ProtocolError("rate_limited",
                                f"audio arrives faster than {self.limits.max_realtime:g}x real time "
                                f"(burst of {self.limits.burst_seconds:g} s used up)")
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
        if self.state == "closed":
            return []
        out: list[Action] = []
        for _ in range(min(n, self.owed)):
            self.owed -= 1
            out.append(Send(self.results.popleft() if self.results else {"partial": self.partial}))
        if self.done and self.owed == 0:
            out += self._final()
        return out

    def event(self, ev: Event) -> list[Action]:
        if self.state == "closed":
            return []
        if isinstance(ev, Partial):
            self.partial = ev.text
        elif isinstance(ev, Final):
            self.partial = ""
            if ev.reason == "eos":
                self.final_words += ev.words
                self.final_texts.append(ev.text)
            else:
                self.results.append(vosk_result(list(ev.words), [ev.text]))
        elif isinstance(ev, Error) and ev.fatal:
            return self.fail(ev.code, ev.message)
        elif isinstance(ev, Done):
            self.done = True
            if self.owed == 0:
                return self._final()
        return []

    def _final(self) -> list[Action]:
        """Every undelivered result merged with the last segment: Vosk's single FinalResult."""
        words: list[Word] = []
        texts: list[str] = []
        for r in self.results:
            words += [Word(w["word"], w["start"], w["end"], w["conf"]) for w in r["result"]]
            texts.append(r["text"])
        self.results.clear()
        self.state = "closed"
        final = vosk_result(words + self.final_words, texts + self.final_texts)
        return [Send(final), Close(1001, "shutting_down") if self._shutdown else Close(1000, "done")]
