"""Events the engine emits: plain frozen dataclasses, no tensors.

Times are seconds from the stream's first accepted sample.  ``to_wire()``
gives the v1 wire-protocol JSON object (docs/protocol.md); the CLI's
``--json`` output and the websocket server both use it.  ``from_wire()`` (a
classmethod of each event, and :func:`from_wire` for any message) is its
inverse, used by :mod:`streamd.client`: the fields that are not on the wire
(``stream`` unless given, tokens, frames, scores) take their defaults, and
fields a newer server adds are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Word", "Partial", "Final", "WakeWord", "WakeCheck", "WAKE_DROPPED", "Error", "Done", "Event", "from_wire"]


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


def _get(msg: Mapping[str, Any], name: str, kind: str, default: Any = ...) -> Any:
    """``msg[name]``, or ``default``; a missing required field is a ValueError naming it."""
    if name in msg:
        return msg[name]
    if default is ...:
        raise ValueError(f"{kind} message has no {name!r} field: {dict(msg)!r:.200}")
    return default


def _check_type(msg: Mapping[str, Any], kind: str) -> None:
    if not isinstance(msg, Mapping):
        raise ValueError(f"a {kind} message must be a JSON object, got {type(msg).__name__}")
    if msg.get("type") != kind:
        raise ValueError(f"expected a {kind!r} message, got type {msg.get('type')!r}")


@dataclass(frozen=True)
class Word:
    """One recognized word with its time span and confidence in [0, 1].

    ``conf``: the probability that the word is right when the model carries a
    calibration for the engine's measure (:mod:`streamd.decode.calibration`),
    else the raw measure; ``conf_raw``: the raw measure (NeMo's, aggregated
    over the word's tokens), which defaults to ``conf``.
    """

    word: str
    start: float
    end: float
    conf: float
    conf_raw: float | None = None

    def __post_init__(self) -> None:
        if self.conf_raw is None:
            object.__setattr__(self, "conf_raw", self.conf)

    def to_wire(self) -> dict:
        return {"word": self.word, "start": _r(self.start, 2), "end": _r(self.end, 2), "conf": _r(self.conf, 3),
                "conf_raw": _r(self.conf_raw, 3)}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Word":
        """The inverse of :meth:`to_wire` (``conf_raw`` defaults to ``conf``, as before servers sent it)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a word must be a JSON object, got {type(d).__name__}")
        return cls(_get(d, "word", "word"), _get(d, "start", "word"), _get(d, "end", "word"),
                   _get(d, "conf", "word"), d.get("conf_raw"))


@dataclass(frozen=True)
class Partial:
    """Current best hypothesis of the open segment (after every chunk).

    ``start``: where the segment began; ``end``: how much of the stream has
    been decoded (seconds from the stream's first sample) — a client knows
    which audio this partial covers.  ``backlog``: seconds of audio the
    engine had accepted but not decoded yet when it made this partial (the
    next chunk's worth plus the feature window when it keeps up; growing
    when the server falls behind).
    """

    stream: int
    segment: int
    text: str
    words: tuple[Word, ...] = ()
    tokens: tuple[int, ...] = ()
    token_frames: tuple[int, ...] = ()
    token_confs: tuple[float, ...] = ()
    start: float = 0.0
    end: float = 0.0
    backlog: float = 0.0

    def to_wire(self) -> dict:
        return {"type": "partial", "segment": self.segment, "text": self.text,
                "words": [w.to_wire() for w in self.words], "start": _r(self.start, 2), "end": _r(self.end, 2),
                "backlog": _r(self.backlog, 2)}

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any], stream: int = 0) -> "Partial":
        _check_type(msg, "partial")
        return cls(stream, _get(msg, "segment", "partial"), _get(msg, "text", "partial"),
                   words=tuple(Word.from_wire(w) for w in msg.get("words", ())), start=msg.get("start", 0.0),
                   end=msg.get("end", 0.0), backlog=msg.get("backlog", 0.0))


@dataclass(frozen=True)
class Final:
    """Closed segment: at an endpoint, a reset, or the end of the stream.

    ``alternatives`` holds the other n-best texts of beam searches: distinct,
    non-empty, never ``text`` itself, best first; ``scores`` has the total
    log-score of ``text`` first, then one per alternative
    (:func:`streamd.engine.distinct_alternatives`).
    ``tokens``, ``token_frames`` (encoder frame since stream start) and
    ``token_confs`` describe the best hypothesis token by token (not on the wire).

    The second pass (:mod:`streamd.second_pass`): ``pass_no`` is the pass whose text this is (wire
    ``"pass"``, 1 or 2); for a stream that asked for a second pass, ``first_pass_text`` is the streaming
    model's text and ``second_pass`` what became of the second pass: ``pending`` (the engine's Final, with
    the segment's 16 kHz samples in ``audio``, not on the wire), ``done``, ``skipped_overload``,
    ``skipped_too_long``, ``skipped_no_speech``, ``failed`` or ``first_pass_preferred`` (all but ``done``
    keep the first pass; the last one, chosen by confidence, carries the second pass's text in
    ``second_pass_text``).  The tokens,
    alternatives and scores are always the first pass's (a second-pass Final has no alternatives).
    ``sample_rate`` (not on the wire): the stream's input rate in Hz as its client declared it, on the
    engine's Finals that go to the second pass (None where not known); the second pass's confidence
    tells telephone-band streams by it (:mod:`streamd.second_pass.confidence`).  ``rival_gap`` (not on the
    wire): on a second-pass Final whose model scores texts (Moonshine), log P(the first pass's words) - log P(its
    own) under the second model, in nats (the segment choice's ``rescore``; :mod:`streamd.second_pass.choice`).
    """

    stream: int
    segment: int
    text: str
    words: tuple[Word, ...] = ()
    start: float = 0.0
    end: float = 0.0
    tokens: tuple[int, ...] = ()
    token_frames: tuple[int, ...] = ()
    token_confs: tuple[float, ...] = ()
    reason: str = "eos"  # "endpoint:rule1|rule2|rule3", "reset", "eos"
    alternatives: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()
    pass_no: int = 1
    first_pass_text: str | None = None
    second_pass: str | None = None
    second_pass_text: str | None = None
    sample_rate: int | None = None
    rival_gap: float | None = None
    audio: Any = field(default=None, compare=False, repr=False)  # (N,) int16 16 kHz samples from ``start``

    def to_wire(self) -> dict:
        d = {"type": "final", "segment": self.segment, "text": self.text,
             "words": [w.to_wire() for w in self.words], "start": _r(self.start, 2), "end": _r(self.end, 2),
             "reason": self.reason, "pass": self.pass_no}
        if self.alternatives:
            d["alternatives"] = list(self.alternatives)
        if self.second_pass is not None:
            d["second_pass"] = self.second_pass
            d["first_pass_text"] = self.first_pass_text if self.first_pass_text is not None else self.text
        if self.second_pass_text is not None:
            d["second_pass_text"] = self.second_pass_text
        return d

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any], stream: int = 0) -> "Final":
        _check_type(msg, "final")
        return cls(stream, _get(msg, "segment", "final"), _get(msg, "text", "final"),
                   words=tuple(Word.from_wire(w) for w in msg.get("words", ())), start=msg.get("start", 0.0),
                   end=msg.get("end", 0.0), reason=msg.get("reason", "eos"),
                   alternatives=tuple(msg.get("alternatives", ())), pass_no=msg.get("pass", 1),
                   first_pass_text=msg.get("first_pass_text"), second_pass=msg.get("second_pass"),
                   second_pass_text=msg.get("second_pass_text"))


@dataclass(frozen=True)
class WakeWord:
    """A wake word fired: the model's KWS head (``start``/``end`` span the spoken keyword: its words in the
    stream's best hypothesis, else the head's rise, :func:`streamd.decode.kws.aligned_span`), a runtime wake
    word's keyword search (its tokens' frames, :mod:`streamd.decode.keyword_search`) or a trained wake model
    (:mod:`streamd.engine.wake`); docs/protocol.md.

    ``verification`` (trained wake models with ``kws.verify``; None otherwise): ``pending`` as the engine
    emits it, with the audio around the keyword in ``check`` (not on the wire); then, from the second pass
    (:meth:`streamd.second_pass.rescore.SecondPass.verify`), ``verified`` (``verifier_gap`` = log P(the
    keyword, alone or in place of a span of the second model's reading) - log P(its own reading) on that audio,
    nats, :func:`streamd.second_pass.models.keyword_gap`, reached ``check.min_gap``) or ``rejected``; when
    the second pass could not hear it, ``skipped_overload`` or ``failed`` if the model's score reaches its
    own threshold, else ``unverified``.  Clients get ``verified``, ``skipped_overload`` and ``failed``
    (:attr:`stands`); the others are counted, not delivered."""

    stream: int
    keyword: str
    score: float
    start: float
    end: float
    verification: str | None = None
    verifier_gap: float | None = None
    check: "WakeCheck | None" = field(default=None, compare=False, repr=False)

    @property
    def stands(self) -> bool:
        """Delivered to clients: no verifier, or the verifier (or the fallback rule) let it stand."""
        return self.verification not in WAKE_DROPPED

    def to_wire(self) -> dict:
        out = {"type": "wake", "keyword": self.keyword, "score": _r(self.score, 3),
               "start": _r(self.start, 2), "end": _r(self.end, 2)}
        if self.verification is not None:
            out["verification"] = self.verification
        if self.verifier_gap is not None:
            out["verifier_gap"] = _r(self.verifier_gap, 2) + 0.0  # no "-0.0" on the wire
        return out

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any], stream: int = 0) -> "WakeWord":
        _check_type(msg, "wake")
        return cls(stream, _get(msg, "keyword", "wake"), _get(msg, "score", "wake"), _get(msg, "start", "wake"),
                   _get(msg, "end", "wake"), msg.get("verification"), msg.get("verifier_gap"))


WAKE_DROPPED = frozenset({"pending", "rejected", "unverified"})
"""The :attr:`WakeWord.verification` values of detections no client gets."""


@dataclass(frozen=True)
class WakeCheck:
    """What a second pass needs to verify a pending wake detection: ``audio`` (N,) float32 16 kHz samples
    around the keyword (:attr:`streamd.config.KwsConfig.verify_before_s` before the detection's end to
    ``verify_after_s`` after, within the stream), the verifier threshold ``min_gap`` (nats) and
    ``standalone``: the model's score reaches the model's own threshold (the detection stands when it cannot
    be verified)."""

    audio: Any = field(compare=False, repr=False)
    min_gap: float
    standalone: bool


@dataclass(frozen=True)
class Error:
    """Something went wrong for one stream; other streams are unaffected.

    ``fatal`` means the stream was closed by the engine.
    """

    stream: int
    code: str
    message: str
    fatal: bool = True

    def to_wire(self) -> dict:
        return {"type": "error", "code": self.code, "message": self.message}

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any], stream: int = 0) -> "Error":
        """An error message (on ``/v1/stream`` every one ends the stream: ``fatal``)."""
        _check_type(msg, "error")
        return cls(stream, _get(msg, "code", "error"), msg.get("message", ""))


@dataclass(frozen=True)
class Done:
    """The stream is finished: every accepted sample has been decoded."""

    stream: int
    audio_seconds: float = 0.0

    def to_wire(self) -> dict:
        return {"type": "done", "audio_seconds": _r(self.audio_seconds, 3)}

    @classmethod
    def from_wire(cls, msg: Mapping[str, Any], stream: int = 0) -> "Done":
        _check_type(msg, "done")
        return cls(stream, msg.get("audio_seconds", 0.0))


Event = Partial | Final | WakeWord | Error | Done

WIRE_TYPES: dict[str, type] = {"partial": Partial, "final": Final, "wake": WakeWord, "error": Error, "done": Done}
"""The ``type`` field of each event's wire message."""


def from_wire(msg: Mapping[str, Any], stream: int = 0) -> Event:
    """The event a v1 wire message describes (the inverse of ``to_wire()``); ``stream`` is set as given.

    ValueError for a message that is not an event (``ready``, an unknown type) or lacks a required field.
    """
    kind = msg.get("type") if isinstance(msg, Mapping) else None
    cls = WIRE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"not an event message: type {kind!r} (events: {', '.join(WIRE_TYPES)})")
    return cls.from_wire(msg, stream)
