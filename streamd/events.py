"""Events the engine emits: plain frozen dataclasses, no tensors.

Times are seconds from the stream's first accepted sample.  ``to_wire()``
gives the v1 wire-protocol JSON object (docs/protocol.md); the CLI's
``--json`` output and the websocket server both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Word", "Partial", "Final", "WakeWord", "Error", "Done", "Event"]


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd)


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


@dataclass(frozen=True)
class Final:
    """Closed segment: at an endpoint, a reset, or the end of the stream.

    ``alternatives`` holds the other n-best texts of beam searches: distinct,
    non-empty, never ``text`` itself, best first; ``scores`` has the total
    log-score of ``text`` first, then one per alternative
    (:func:`streamd.engine.distinct_alternatives`).
    ``tokens``, ``token_frames`` (encoder frame since stream start) and
    ``token_confs`` describe the best hypothesis token by token (not on the wire).
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

    def to_wire(self) -> dict:
        d = {"type": "final", "segment": self.segment, "text": self.text,
             "words": [w.to_wire() for w in self.words], "start": _r(self.start, 2), "end": _r(self.end, 2),
             "reason": self.reason}
        if self.alternatives:
            d["alternatives"] = list(self.alternatives)
        return d


@dataclass(frozen=True)
class WakeWord:
    """A keyword fired on the KWS head; ``start``/``end`` span the spoken keyword: its words in the
    stream's best hypothesis, else the head's rise (:func:`streamd.decode.kws.aligned_span`, docs/protocol.md)."""

    stream: int
    keyword: str
    score: float
    start: float
    end: float

    def to_wire(self) -> dict:
        return {"type": "wake", "keyword": self.keyword, "score": _r(self.score, 3),
                "start": _r(self.start, 2), "end": _r(self.end, 2)}


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


@dataclass(frozen=True)
class Done:
    """The stream is finished: every accepted sample has been decoded."""

    stream: int
    audio_seconds: float = 0.0

    def to_wire(self) -> dict:
        return {"type": "done", "audio_seconds": _r(self.audio_seconds, 3)}


Event = Partial | Final | WakeWord | Error | Done
