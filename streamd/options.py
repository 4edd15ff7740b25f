"""Per-stream options and the search methods' table: the one home of the rules a stream's options follow.

Torch-free and numpy-free, at the bottom of the package (it imports nothing of streamd): the configuration
(:mod:`streamd.config`, whose ``decoding`` section holds the defaults), the audio front end (the sample-rate
range), the engine, the v1 / Vosk / Wyoming protocols, admission and the benchmarks read it.

* :data:`METHODS` the table: one :class:`SearchMethod` per search (does a beam apply, its default beam,
  does it take hotwords, fuse the LM, read the CTC head, its cost); :data:`SEARCH_METHODS`,
  :data:`BEAM_METHODS`, :data:`HOTWORD_METHODS`, :data:`APPEND_ONLY_METHODS` are read off it.  A new search
  is a row here and its implementation in :mod:`streamd.decode` (registered by the engine).
* The ranges: a beam is :data:`MIN_BEAM`..:data:`MAX_BEAM`, a sample rate
  :data:`MIN_SAMPLE_RATE`..:data:`MAX_SAMPLE_RATE` Hz, for every method and every front end.
* :class:`StreamOptions` what one stream carries (the v1 start message's fields, what Vosk's config and
  Wyoming's transcribe / detect map to), validated at construction; :class:`StreamDefaults` resolves a
  request's missing options from the engine's configuration (:meth:`StreamDefaults.resolve`) once, when the
  stream opens.
* :class:`PhraseSpec`, :func:`parse_phrases`: a hotword or wake-word list, a stream's or the config's.
* :class:`OptionError` the one error for an invalid option, whichever front end it came through (a YAML
  config: :class:`streamd.config.ConfigError` is this class; a flag; a start message: its ``code`` is the
  wire error code the protocol sends).

Shaped after faster-whisper's ``TranscriptionOptions`` and sherpa-onnx's recognizer config: one frozen
record per stream, the defaults in one place.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields
from typing import Any, Collection, Mapping

__all__ = [
    "OptionError",
    "SearchMethod",
    "METHODS",
    "SEARCH_METHODS",
    "BEAM_METHODS",
    "HOTWORD_METHODS",
    "APPEND_ONLY_METHODS",
    "MIN_BEAM",
    "MAX_BEAM",
    "BEAM_RANGE",
    "MIN_SAMPLE_RATE",
    "MAX_SAMPLE_RATE",
    "SAMPLE_RATE_RANGE",
    "SECOND_PASS_COST",
    "MAX_PHRASES",
    "MAX_PHRASE_CHARS",
    "PhraseSpec",
    "parse_phrases",
    "beam_ok",
    "sample_rate_ok",
    "default_beam",
    "stream_cost",
    "check_method",
    "check_beam",
    "check_flag",
    "check_sample_rate",
    "check_stream_rate",
    "check_hotword_method",
    "StreamOptions",
    "StreamDefaults",
    "STREAM_FIELDS",
]


class OptionError(ValueError):
    """An option is invalid: a config file's, a command-line flag's or a stream's.

    The message names the option: ``decoding.beam: must be 1..64, got 0`` (a config's key path) or
    ``beam must be an integer 1..64, got 0`` (a stream's field).  ``code``: the wire error code a client is
    sent (``bad_message``; ``bad_sample_rate`` for a sample rate).
    """

    def __init__(self, message: str, code: str = "bad_message"):
        super().__init__(message)
        self.code = code

    def __reduce__(self):  # keeps the code across a process boundary (the engine lanes)
        return type(self), (str(self), self.code)


def _fail(path: str, msg: str) -> None:
    raise OptionError(f"{path}: {msg}" if path else msg)


def _check(cond: bool, path: str, msg: str) -> None:
    if not cond:
        _fail(path, msg)


# --------------------------------------------------------------------------- ranges

MIN_BEAM, MAX_BEAM = 1, 64
BEAM_RANGE = f"{MIN_BEAM}..{MAX_BEAM}"
"""A beam: hypotheses a beam search keeps per stream, the same range for every method."""

MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8000, 48000
SAMPLE_RATE_RANGE = f"{MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE}"
"""Sample rates (Hz) a stream, a microphone or a Vosk client may declare; the engine resamples to 16 kHz."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def beam_ok(value: Any) -> bool:
    """An integer beam in :data:`BEAM_RANGE`."""
    return _is_int(value) and MIN_BEAM <= value <= MAX_BEAM


def _is_integral(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def sample_rate_ok(value: Any) -> bool:
    """An integer sample rate (numpy's too) in :data:`SAMPLE_RATE_RANGE`."""
    return _is_integral(value) and MIN_SAMPLE_RATE <= value <= MAX_SAMPLE_RATE


# --------------------------------------------------------------------------- the methods' table


@dataclass(frozen=True)
class SearchMethod:
    """One search method's row.

    ``beam``: it keeps several hypotheses, so a beam applies (and it gives n-best lists); a search without one
    keeps a single hypothesis, which only ever grows (its words are final once sent: append-only).
    ``default_beam``: the beam of a stream that names none when ``decoding.beam`` is null (a search without
    a beam reports it in ``ready`` all the same).  ``hotwords``: it takes a hotword context graph (the boost is
    a beam-search score).  ``lm``: it fuses ``decoding.lm``.  ``ctc``: it reads the CTC head (a model without
    one has no such search).  ``cost``: ``(a, b, c)``: a stream costs ``a + b x beam + c x beam^2`` greedy
    streams of a batch step (:meth:`stream_cost`).
    """

    name: str
    beam: bool
    default_beam: int
    hotwords: bool = False
    lm: bool = False
    ctc: bool = False
    cost: tuple[float, float, float] = (1.0, 0.0, 0.0)

    def stream_cost(self, beam: int | None = None) -> float:
        """Cost of one stream in units of a greedy stream (its share of a batch step), ``beam`` None: the
        method's default; a beam below one counts as one hypothesis."""
        a, b, c = self.cost
        k = max(1, int(self.default_beam if beam is None else beam))
        return a + b * k + c * k * k


# Costs in greedy streams, a + b x beam + c x beam^2: modified beam search with the fused LM 1 + 0.15 x beam,
# the plain beam search 1 + 0.1 x beam + 0.055 x beam^2, CTC prefix beam 1 + 0.015 x beam (docs/benchmarks.md,
# "Cost of a stream by search").  Default beams: modified beam 8 (chosen on the validation sets:
# docs/model_history.md, "Language model"), 4 elsewhere.
METHODS: Mapping[str, SearchMethod] = {m.name: m for m in (
    SearchMethod("greedy", beam=False, default_beam=4),
    SearchMethod("modified_beam", beam=True, default_beam=8, hotwords=True, lm=True, cost=(1.0, 0.15, 0.0)),
    SearchMethod("beam", beam=True, default_beam=4, cost=(1.0, 0.1, 0.055)),
    SearchMethod("ctc_greedy", beam=False, default_beam=4, ctc=True),
    SearchMethod("ctc_prefix_beam", beam=True, default_beam=4, ctc=True, cost=(1.0, 0.015, 0.0)),
)}

SEARCH_METHODS = tuple(METHODS)
BEAM_METHODS = tuple(m for m, s in METHODS.items() if s.beam)
"""The searches that keep several hypotheses: the ones a beam applies to."""
HOTWORD_METHODS = tuple(m for m, s in METHODS.items() if s.hotwords)
"""The searches that take hotwords (a context graph's boosts are beam-search scores)."""
APPEND_ONLY_METHODS = tuple(m for m, s in METHODS.items() if not s.beam)
"""The searches whose hypothesis only grows: a word sent is never taken back."""

SECOND_PASS_COST = 5.0
"""Added to a stream's cost when its finals get a second pass (:mod:`streamd.second_pass`): the second model
takes several times the first pass's time per second of audio (docs/benchmarks.md, "Second pass") and runs
beside the engine (its own process or thread, ``engine.second_pass.worker``), on the same cores."""


def default_beam(method: str, beam: int | None = None) -> int:
    """``beam`` where one is given, else the method's default (:data:`METHODS`; greedy's for an unknown name)."""
    return beam if beam is not None else METHODS.get(method, METHODS["greedy"]).default_beam


def stream_cost(method: str, beam: int | None = None) -> float:
    """Cost of one stream of ``method`` in units of a greedy stream (:meth:`SearchMethod.stream_cost`; an
    unknown method: 1)."""
    spec = METHODS.get(method)
    return spec.stream_cost(beam) if spec is not None else 1.0


# --------------------------------------------------------------------------- checks (a stream's wording)


def check_method(method: Any, methods: Collection[str] = SEARCH_METHODS) -> str:
    """``method`` when it is one of ``methods`` (those the model has), else OptionError."""
    if method not in methods:
        raise OptionError(f"method must be one of {list(methods)}, got {method!r}")
    return method


def check_beam(beam: Any) -> int:
    if not beam_ok(beam):
        raise OptionError(f"beam must be an integer {BEAM_RANGE}, got {beam!r}")
    return beam


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"{name} must be true or false, got {value!r}")
    return value


def check_sample_rate(value: Any, name: str = "sample_rate") -> int:
    """An integer sample rate in :data:`SAMPLE_RATE_RANGE` as a Python int, else OptionError
    ``bad_sample_rate`` (a start message's, a microphone's wording)."""
    if not sample_rate_ok(value):
        raise OptionError(f"{name} must be an integer {SAMPLE_RATE_RANGE}, got {value!r}", "bad_sample_rate")
    return int(value)


def check_stream_rate(value: Any) -> int:
    """:func:`check_sample_rate` in the engine's wording, which tells a wrong type from a rate out of range
    (:func:`streamd.audio.pcm.check_sample_rate`, :class:`StreamOptions`)."""
    if not _is_integral(value):
        raise OptionError(f"sample_rate must be an integer {SAMPLE_RATE_RANGE}, got {value!r} "
                          f"({type(value).__name__})", "bad_sample_rate")
    if not sample_rate_ok(value):
        raise OptionError(f"sample_rate must be {SAMPLE_RATE_RANGE}, got {int(value)}", "bad_sample_rate")
    return int(value)


def check_hotword_method(hotwords: Any, method: str, path: str = "hotwords") -> None:
    """OptionError unless ``method`` takes hotwords (when there are any)."""
    _check(not hotwords or method in HOTWORD_METHODS, path,
           f"need method {' or '.join(HOTWORD_METHODS)} (the boost is a beam-search score), got method {method!r}")


# --------------------------------------------------------------------------- phrases (hotwords, wake words)

MAX_PHRASES = 256
"""Most runtime wake words / hotwords one list may hold (each adds states to the stream's context graph)."""
MAX_PHRASE_CHARS = 100


@dataclass(frozen=True)
class PhraseSpec:
    """One runtime wake word or hotword: the phrase as words, an optional per-token ``boost`` and, for wake
    words, an optional detection ``threshold`` (None: the list's default).  In YAML and JSON an entry is a
    string (the phrase) or a mapping with these keys."""

    phrase: str
    boost: float | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.phrase, str) and bool(self.phrase.split()), "phrase",
               f"must be a non-empty string of words, got {self.phrase!r}")
        _check(len(self.phrase) <= MAX_PHRASE_CHARS, "phrase",
               f"must be at most {MAX_PHRASE_CHARS} characters, got {len(self.phrase)}")
        object.__setattr__(self, "phrase", " ".join(self.phrase.split()))
        if self.boost is not None:
            _check(0.0 <= self.boost <= 20.0, "boost", f"must be in [0, 20], got {self.boost}")
        if self.threshold is not None:
            _check(0.0 < self.threshold < 1.0, "threshold", f"must be in (0, 1), got {self.threshold}")


def _phrase_spec(value: Mapping[str, Any], path: str) -> PhraseSpec:
    """A PhraseSpec from its mapping form, errors named by key path (as :func:`streamd.config.from_dict`)."""
    names = [f.name for f in fields(PhraseSpec)]
    unknown = sorted(set(value) - set(names))
    if unknown:
        _fail(f"{path}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = {}
    for k, v in value.items():
        if k == "phrase":
            _check(isinstance(v, str), f"{path}.{k}", f"expected a string, got {v!r}")
        elif v is not None:
            _check(not isinstance(v, bool) and isinstance(v, (int, float)), f"{path}.{k}", f"bad value {v!r}")
            v = float(v)
        kwargs[k] = v
    try:
        return PhraseSpec(**kwargs)
    except OptionError as e:
        raise OptionError(f"{path}.{e}") from None


def parse_phrases(value: Any, path: str) -> tuple[PhraseSpec, ...]:
    """A phrase list from config, CLI or a start message: a comma-separated string, or a list of
    strings / mappings (``phrase``, ``boost``, ``threshold``).  OptionError names the bad entry
    (``path[i]``); duplicates and more than :data:`MAX_PHRASES` entries are errors."""
    if isinstance(value, str):
        value = [p for p in (x.strip() for x in value.split(",")) if p]
    if not isinstance(value, (list, tuple)):
        _fail(path, f"expected a list of phrases, got {type(value).__name__}")
    _check(len(value) <= MAX_PHRASES, path, f"at most {MAX_PHRASES} phrases, got {len(value)}")
    out: list[PhraseSpec] = []
    for i, v in enumerate(value):
        where = f"{path}[{i}]"
        if isinstance(v, PhraseSpec):
            spec = v
        elif isinstance(v, str):
            spec = _phrase_spec({"phrase": v}, where)
        elif isinstance(v, Mapping):
            spec = _phrase_spec(v, where)
        else:
            _fail(where, f"expected a phrase string or a mapping, got {type(v).__name__}")
        if any(spec.phrase.casefold() == o.phrase.casefold() for o in out):
            _fail(where, f"duplicate phrase {spec.phrase!r}")
        out.append(spec)
    return tuple(out)


# --------------------------------------------------------------------------- one stream's options


@dataclass(frozen=True)
class StreamOptions:
    """What one stream carries, validated at construction (OptionError names the field).

    ``sample_rate`` of the audio the client sends (Hz); ``method`` and ``beam`` of the search (a beam applies
    to :data:`BEAM_METHODS` only); ``partials``, ``keywords`` (wake words), ``endpointing``: the stream's
    switches; ``wake_words`` / ``hotwords``: the stream's own lists (None: the engine config's);
    ``second_pass``: keep the open segment's audio, its Final carries it (second_pass "pending");
    ``wake_models``: keywords of loaded wake models to score (None: all).
    """

    sample_rate: int = 16000
    method: str = "greedy"
    beam: int = 4
    partials: bool = True
    keywords: bool = True
    endpointing: bool = True
    wake_words: tuple[PhraseSpec, ...] | None = None
    hotwords: tuple[PhraseSpec, ...] | None = None
    second_pass: bool = False
    wake_models: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_stream_rate(self.sample_rate)
        check_method(self.method)
        check_beam(self.beam)
        for name in ("partials", "keywords", "endpointing", "second_pass"):
            check_flag(name, getattr(self, name))
        for name in ("wake_words", "hotwords"):  # None: the config's list
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parse_phrases(getattr(self, name), name))
        check_hotword_method(self.hotwords, self.method)
        if self.wake_models is not None:
            wm = self.wake_models
            if isinstance(wm, str) or not isinstance(wm, (list, tuple)) or \
                    not all(isinstance(k, str) and k.strip() for k in wm):
                raise OptionError(f"wake_models must be a list of keywords of loaded wake models, got {wm!r}")
            object.__setattr__(self, "wake_models", tuple(" ".join(k.split()) for k in wm))

    @property
    def search(self) -> SearchMethod:
        """The method's row of :data:`METHODS`."""
        return METHODS[self.method]

    @property
    def step_cost(self) -> float:
        """The stream's share of a batch step, in greedy streams (:meth:`SearchMethod.stream_cost`)."""
        return self.search.stream_cost(self.beam)

    @property
    def cost(self) -> float:
        """What admitting the stream costs: its step cost, plus :data:`SECOND_PASS_COST` with a second pass."""
        return self.step_cost + (SECOND_PASS_COST if self.second_pass else 0.0)


STREAM_FIELDS = tuple(f.name for f in fields(StreamOptions))


@dataclass(frozen=True)
class StreamDefaults:
    """What a stream gets for an option it leaves out (or sets to None): the engine config's
    ``decoding.method``, ``decoding.beam`` (None: each method's own, :func:`default_beam`) and
    ``second_pass.enabled`` (:attr:`streamd.config.EngineConfig.stream_defaults`); the other fields take
    :class:`StreamOptions`'s own defaults."""

    method: str = "greedy"
    beam: int | None = None
    second_pass: bool = False

    def beam_for(self, method: str) -> int:
        """The beam a stream of ``method`` gets when it names none."""
        return default_beam(method, self.beam)

    def _given(self, options: Mapping[str, Any]) -> dict[str, Any]:
        given = {k: v for k, v in options.items() if v is not None}
        given.setdefault("method", self.method)
        given.setdefault("beam", self.beam_for(given["method"]))
        given.setdefault("second_pass", self.second_pass)
        return given

    def resolve(self, options: Mapping[str, Any]) -> StreamOptions:
        """The stream's options: ``options`` (StreamOptions fields) with these defaults for what they leave out;
        OptionError names an unknown or invalid option."""
        unknown = set(options) - set(STREAM_FIELDS)
        if unknown:
            raise OptionError(f"unknown stream option {sorted(unknown)[0]!r}")
        return StreamOptions(**self._given(options))

    def cost(self, options: Mapping[str, Any] | None) -> float:
        """Admission cost of a stream asking for ``options`` before the engine has checked them (an invalid
        request is priced by what it names: it is refused when it opens)."""
        given = self._given(options or {})
        return (stream_cost(given["method"], given["beam"] or None)
                + (SECOND_PASS_COST if given["second_pass"] else 0.0))

