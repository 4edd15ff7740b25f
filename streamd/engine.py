"""The Recognizer: a synchronous, sans-I/O streaming speech recognition engine.

Audio in, events out.  The engine knows nothing of sockets, clocks or
asyncio; a transport (websocket server, microphone, file) calls it::

    rec = Recognizer.from_checkpoint("model.pt", EngineConfig(device="auto"))
    sid = rec.create_stream(sample_rate=8000, method="modified_beam", beam=4)
    rec.accept_pcm(sid, data, "s16le")      # any amount, any time
    events = rec.step()                     # one batch over every ready stream
    rec.finish(sid)                         # no more audio: tail is decoded
    events = rec.drain()                    # step until nothing is left

One :meth:`Recognizer.step` takes every stream that has a full chunk of
features (or a finished stream with a tail), up to ``max_batch``, and runs
fbank, encoder, every search method present and the KWS detector once each
over that batch.  Per-stream state (fbank cursor, encoder cache, search and
KWS state) is kept batched between steps when the next batch is the same set
of streams, and re-gathered otherwise (new streams' initial states are one
state repeated, not built stream by stream).

Partials cost Python only for the streams whose best hypothesis changed:
each stream with partials keeps a host copy of it with its text and words
(:class:`~streamd.decode.words.WordBuilder`, which reads only what changed);
per step and search method one host transfer carries every row's token
count and trailing blanks (and, for a beam search, whether its best
hypothesis changed, compared on the device) and one more only the changed
tokens; endpoint rules are evaluated as arrays.

Events: :class:`~streamd.events.Partial` after every chunk (if the stream
asked for partials), :class:`~streamd.events.Final` at endpoints, resets and
the end of stream, :class:`~streamd.events.WakeWord`, :class:`~streamd.events.Error`
(that stream only) and :class:`~streamd.events.Done` when every accepted
sample has been decoded.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

import numpy as np
import torch
from torch import Tensor

from .audio.fbank import Fbank, FbankStream, num_frames
from .audio.pcm import AudioError, decode_pcm
from .audio.resample import StreamingResampler
from .config import ConfidenceConfig, EngineConfig
from .options import PhraseSpec, StreamOptions
from .decode.beam import BeamSearch
from .decode.calibration import Calibration, resolve_calibration
from .decode.common import Search
from .decode.confidence import make_measure
from .decode.ctc import CtcGreedySearch, CtcPrefixBeamSearch
from .decode.endpoint import Endpointer
from .decode.greedy import GreedySearch
from .decode.hyps import HypBuffer, HypOut
from .decode.context_graph import ContextGraph, phrase_graph, shared_boost
from .decode.endpoint import seconds_to_frames
from .decode.ctc_keyword_search import CtcKeywordSearch
from .decode.keyword_search import (KeywordHit, KeywordSearch, KeywordSet, KeywordState, check_runtime_wake_words,
                                    keyword_set)
from .decode.kws import Detection, KwsDetector, KwsState, aligned_span
from .decode.lm import NgramLM, load_lm
from .decode.modified_beam import ModifiedBeamSearch
from .tokens import TokenTable
from .decode.words import WordBuilder, tokens_to_words
from .events import Done, Error, Event, Final, Partial, WakeWord, Word
from .model.checkpoint import LoadedModel, load_checkpoint
from .device import resolve_device
from .model.encoder import EncoderCache
from .model.traced import TracedChunkEncoder
from .model.transducer import HeadOutputs

__all__ = ["Recognizer", "StreamOptions", "BatchView", "resolve_device", "resolve_lm", "lm_path_for",
           "distinct_alternatives"]

log = logging.getLogger("streamd.engine")


def distinct_alternatives(best: str, nbest: Sequence[tuple[str, float]]
                          ) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """A Final's n-best: the non-empty texts other than ``best``, each once at its highest score, in score order.

    ``nbest``: (text, total log-score) of the search's hypotheses; several may spell the same text
    (token sequences that decode alike, or the best text again).  Returns (alternatives, scores) with
    ``scores[0]`` the score of ``best`` (the highest score its text has, or the top score when the
    search's n-best does not hold it) and ``scores[k + 1]`` that of ``alternatives[k]``."""
    top: dict[str, float] = {}
    for text, score in nbest:
        if text not in top or score > top[text]:
            top[text] = score
    best_score = top.pop(best, max(top.values(), default=0.0))
    order = sorted(((t, sc) for t, sc in top.items() if t), key=lambda kv: -kv[1])
    return tuple(t for t, _ in order), (best_score, *(sc for _, sc in order))


TAIL_PADDING_SECONDS = 0.32
"""Seconds of quiet audio decoded after the last sample of a finished stream (the end-of-stream flush,
:meth:`Recognizer.finish`); chosen on validation data (docs/model_history.md, "End of stream")."""


def tail_padding(seconds: float) -> np.ndarray:
    """The end-of-stream flush: ``(round(seconds * 16000),)`` float32 samples at 16 kHz of digital silence."""
    return np.zeros(max(0, round(seconds * 16000)), dtype=np.float32)


def lm_path_for(model_path: str | Path) -> Path:
    """Where a checkpoint's own language model lives: ``model.pt`` -> ``model.lm.pt``."""
    p = Path(model_path)
    return p.with_name(p.stem + ".lm.pt")


def resolve_lm(setting: str, loaded: LoadedModel) -> tuple[NgramLM | None, str]:
    """The fusion LM named by ``decoding.lm`` (``auto``, ``none`` or a path) and its path ("" for none).

    Raises ValueError when a named file is missing, unreadable or built for other tokens.
    """
    if setting == "none":
        return None, ""
    if setting == "auto":
        path = lm_path_for(loaded.path) if loaded.path else None
        if path is None or not path.is_file():
            return None, ""
    else:
        path = Path(setting)
    try:
        lm, _ = load_lm(path)
    except ValueError as e:
        raise ValueError(f"decoding.lm: {e}") from None
    if tuple(lm.tokens) != tuple(loaded.tokens.to_lines()):
        raise ValueError(f"decoding.lm: {path} was built for another token table than the model's")
    return lm, str(path)


@dataclass
class _Stream:
    """Engine-side state of one stream (host objects; tensors live in batches)."""

    id: int
    opts: StreamOptions
    fbank: FbankStream
    resampler: StreamingResampler | None
    samples_in: int = 0  # accepted samples at the input rate
    frames_done: int = 0  # encoder frames decoded
    segment: int = 0
    segment_start: int = 0  # encoder frame where the open segment began
    search_start: int = 0  # encoder frame where the search last started afresh (segment start or a pause)
    carry: HypOut | None = None  # with endpointing off: the open segment's text before its last pause
    finished: bool = False
    reset_at: int | None = None  # close the segment once this many fbank frames are decoded
    end_frame: int | None = None  # after finish(): encoder frames of the accepted audio (the flush comes after)
    hot: ContextGraph | None = None  # hotwords (modified_beam only)
    wake: KeywordSet | None = None  # runtime wake words
    # per-stream slices of batched state (None until first gathered)
    enc: EncoderCache | None = None
    search: Any = None
    kws: Any = None
    kwsearch: KeywordState | None = None
    # streams with partials: the search's best hypothesis as last copied to the host, its text and words
    # (updated incrementally from the tokens that changed), its words calibrated (the first ``cal_valid``
    # are up to date), and the last Partial's (text, words, tokens, frames, confs), ``stale`` once the
    # hypothesis may have changed (a hypothesis that did not change, most chunks of most streams, reuses it)
    shown: WordBuilder | None = None
    cal: list[Word] = field(default_factory=list)
    cal_valid: int = 0
    partial: tuple[str, tuple[Word, ...], tuple[int, ...], tuple[int, ...], tuple[float, ...]] | None = None
    stale: bool = True
    # second pass: the 16 kHz samples (int16 pieces) from sample ``audio_from`` on, kept while a segment may
    # need them (at most max_segment_s before the decoded point); ``audio_in``: 16 kHz samples accepted
    audio: list[np.ndarray] | None = None
    audio_from: int = 0
    audio_in: int = 0
    # trained wake models (speech embedding): 16 kHz audio not yet scored, scoring and detector state,
    # the models this stream scores (K,) bool, whether each model's last score was >= its threshold
    wake_audio: list[np.ndarray] = field(default_factory=list)
    wake_emb: Any = None
    wake_det: Any = None
    wake_on: Tensor | None = None
    wake_above: np.ndarray | None = None


@dataclass(frozen=True)
class BatchView:
    """What one committed batch step computed, for observers (evaluation, recording).

    stream_ids: the batch's streams, row order of every tensor.
    heads: per-frame head outputs (enc_p (B, T', J), ctc_log_probs (B, T', V) or None,
    kws_probs (B, T', K) or None), on the engine's device.
    lengths: (B,) valid encoder frames; frame_offsets: (B,) index of each row's first frame in its stream.
    """

    stream_ids: tuple[int, ...]
    heads: HeadOutputs
    lengths: Tensor
    frame_offsets: Tensor


@dataclass
class _Batch:
    """Batched state of an ordered set of streams, kept between steps."""

    ids: tuple[int, ...]
    enc: EncoderCache
    groups: dict[str, tuple[Tensor, Any]] = field(default_factory=dict)  # method -> (rows, search state)
    kws_rows: Tensor | None = None
    kws: Any = None
    wake_rows: Tensor | None = None
    wake: KeywordState | None = None
    # method (not append_only) -> each row's best hypothesis as last shown: lengths (R,), tokens, frames,
    # confs (R, L) zero past the length; gone when it may differ from the streams' shown copies
    shown: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]] = field(default_factory=dict)


class Recognizer:
    """Loads a model once on a device and decodes many streams in batches."""

    EAGER_STEPS = 64
    """With ``trace_encoder``: batch steps run with the eager encoder before its graph is recorded (the
    recording costs 0.2-0.3 s and saves about 1.5 ms a step: a job shorter than this, e.g. one file of under
    20 s, is faster without it); :meth:`warm_up` records at once."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None, *,
                 measure: Callable[[Tensor], Tensor] | None = None,
                 on_batch: Callable[[BatchView], None] | None = None):
        """loaded: model from :func:`~streamd.model.checkpoint.load_checkpoint`.

        measure: replaces the confidence measure built from ``config.confidence``
        (a function of log-probs (..., V) -> (...); evaluation tools use it); words
        then carry its raw values (the checkpoint's calibration is for the configured measure).
        on_batch: called after every committed batch step with a :class:`BatchView`
        (synchronously, in the caller's thread; it must not call the Recognizer).
        """
        self.config = config or EngineConfig()
        self.on_batch = on_batch
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        self.device = resolve_device(self.config.device)
        self.loaded = loaded
        self.model = loaded.model.to(self.device).eval()
        self.tokens: TokenTable = loaded.tokens
        mcfg = self.model.cfg
        self.frame_shift_s = mcfg.frame_shift_s
        self.chunk_frames = mcfg.encoder.chunk_size  # encoder frames per chunk
        self.chunk_fbank = 4 * self.chunk_frames
        self.samples_per_frame = 4 * mcfg.fbank.frame_shift  # 16 kHz samples per encoder frame
        self.fbank = Fbank(mcfg.fbank).to(self.device)
        # on CUDA the recorded graph would meet TorchScript's GPU fusers, unmeasured (no GPU lent): eager there
        self.encoder = (TracedChunkEncoder(self.model.encoder, eager_calls=self.EAGER_STEPS)
                        if self.config.trace_encoder and self.device.type == "cpu" else self.model.encoder)
        ccfg = self.config.confidence
        self.measure = measure if measure is not None else make_measure(ccfg)
        self.calibration = self._calibration(ccfg) if measure is None else None
        dcfg = self.config.decoding
        self.lm, self.lm_path = resolve_lm(dcfg.lm, loaded)
        agg, exb = ccfg.aggregation, ccfg.exclude_blank
        # label looping (no host sync per frame) where a sync stalls the device's launch queue
        sync_free = self.device.type == "cuda"
        self.searches: dict[str, Search] = {
            "greedy": GreedySearch(self.model, dcfg.max_symbols_per_frame, self.measure, exb, agg, sync_free=sync_free),
            "modified_beam": ModifiedBeamSearch(self.model, self.measure, exb, agg, sync_free=sync_free,
                                                max_symbols_per_frame=dcfg.max_symbols_per_frame,
                                                lm=self.lm.to(self.device) if self.lm else None,
                                                lm_weight=dcfg.lm_weight, lm_bonus=dcfg.lm_bonus),
            "beam": BeamSearch(self.model, max_symbols_per_frame=dcfg.max_symbols_per_frame, measure=self.measure,
                               exclude_blank=exb, aggregation=agg),
        }
        if self.model.ctc is not None:
            self.searches["ctc_greedy"] = CtcGreedySearch(mcfg.blank_id, self.measure)
            self.searches["ctc_prefix_beam"] = CtcPrefixBeamSearch(mcfg.blank_id, self.measure,
                                                                    dcfg.ctc_insertion_penalty)
        self.keywords = tuple(mcfg.keywords)
        kcfg = self.config.kws
        self.kws = KwsDetector(self.keywords, kcfg, self.frame_shift_s) if self.keywords else None
        sep = self.tokens.separator if self.tokens.kind == "char" else None
        sep_id = self.tokens.id(sep) if sep is not None else None
        refractory = seconds_to_frames(kcfg.refractory_s, self.frame_shift_s)
        if kcfg.wake_score == "ctc":
            self.keyword_search: KeywordSearch = CtcKeywordSearch(self.model, sep_id, kcfg.trailing_blanks,
                                                                  refractory, kcfg.wake_settle_frames)
        else:
            self.keyword_search = KeywordSearch(self.model, dcfg.max_symbols_per_frame, sep_id, kcfg.trailing_blanks,
                                                refractory, kcfg.wake_score, kcfg.wake_settle_frames)
        self._phrase_cache: dict[tuple, Any] = {}
        self._init_wake_models(kcfg)
        # the config's lists, checked against the token table now (ValueError names the entry)
        self._default_wake = self.wake_word_set(kcfg.wake_words, "kws.wake_words")
        self._default_hot = self._hotword_graph(dcfg.hotwords, "decoding.hotwords")
        self.endpointer = Endpointer(self.config.endpoint, self.frame_shift_s)
        self.tail_padding = tail_padding(TAIL_PADDING_SECONDS)
        self._streams: dict[int, _Stream] = {}
        self._ids = itertools.count(1)
        self._batch: _Batch | None = None
        self._rr = 0  # round-robin start for fairness when more streams than max_batch

    # ------------------------------------------------------------------ trained wake models

    def _init_wake_models(self, kcfg) -> None:
        """Load ``kws.wake_models`` (:mod:`streamd.model.wake`): one speech embedding per stream, every model
        on it, and a detector over their scores (each model's threshold, ``refractory_s``, no smoothing)."""
        self.wake_scorer = None
        self.wake_detector: KwsDetector | None = None
        self.wake_stats: dict[str, dict[str, int]] = {}
        if not kcfg.wake_models:
            return
        from .model.wake import WakeScorer, load_wake_model
        models = []
        for i, path in enumerate(kcfg.wake_models):
            try:
                models.append(load_wake_model(path))
            except (OSError, ValueError) as e:
                raise ValueError(f"kws.wake_models[{i}]: {e}") from None
        head = {k.casefold() for k in self.keywords}
        for m in models:
            if m.keyword.casefold() in head:
                raise ValueError(f"kws.wake_models: {m.path} spots {m.keyword!r}, the model's own KWS keyword "
                                 "(its events would come twice)")
        self.wake_scorer = WakeScorer(models, device=self.device)
        wcfg = dataclasses.replace(kcfg, thresholds={m.keyword: m.threshold for m in models}, smoothing_frames=1,
                                   wake_words=(), wake_models=())
        self.wake_detector = KwsDetector(self.wake_scorer.keywords, wcfg, self.wake_scorer.frame_shift_s)
        self._wake_thr = np.array([m.threshold for m in models])
        self.wake_stats = {m.keyword: {"detections": 0, "suppressed": 0} for m in models}

    def _wake_mask(self, opts: StreamOptions) -> Tensor | None:
        """(K,) bool: the loaded wake models a stream scores (None: none)."""
        if self.wake_scorer is None or not opts.keywords or not self.config.kws.enabled:
            return None
        names = self.wake_scorer.keywords
        if opts.wake_models is None:
            return torch.ones(len(names), dtype=torch.bool, device=self.device)
        known = {n.casefold(): i for i, n in enumerate(names)}
        on = torch.zeros(len(names), dtype=torch.bool)
        for i, k in enumerate(opts.wake_models):
            j = known.get(k.casefold())
            if j is None:
                raise ValueError(f"wake_models[{i}] {k!r}: no such wake model loaded (loaded: {list(names)})")
            on[j] = True
        return on.to(self.device) if bool(on.any()) else None

    def _wake_step(self, ids: Collection[int]) -> list[Event]:
        """Score the pending audio of streams ``ids`` with every wake model (one embedding and one head call
        for the whole batch) and run the detector; WakeWord events with the model's score.  Firings the
        refractory period holds back are counted in :attr:`wake_stats` (``suppressed``)."""
        streams = [self._streams[i] for i in ids if i in self._streams]
        streams = [st for st in streams if st.wake_emb is not None and st.wake_audio]
        if not streams:
            return []
        chunks = [torch.from_numpy(np.concatenate(st.wake_audio)).to(self.device) for st in streams]
        for st in streams:
            st.wake_audio = []
        scores = self.wake_scorer.stream([st.wake_emb for st in streams], chunks)       # B x (T_b, K)
        lens = [s.shape[0] for s in scores]
        if not max(lens):
            return []
        k = self.wake_scorer.num_models
        padded = torch.zeros(len(streams), max(lens), k, device=self.device)
        for j, (st, sc) in enumerate(zip(streams, scores)):
            padded[j, :sc.shape[0]] = sc * st.wake_on
        state = KwsState.cat([st.wake_det for st in streams])
        offsets = [st.wake_emb.scored - n for st, n in zip(streams, lens)]   # each stream's first new score
        new, dets = self.wake_detector.step(state, padded, torch.tensor(lens, device=self.device),
                                            torch.tensor(offsets, device=self.device))
        host = padded.cpu().numpy()
        fired = {(d.row, d.frame, d.keyword) for d in dets}
        names = self.wake_scorer.keywords
        for j, st in enumerate(streams):
            st.wake_det = new.select([j])
            above = host[j, :lens[j]] >= self._wake_thr                                  # (T, K)
            prev = np.concatenate([st.wake_above[None], above[:-1]]) if lens[j] else above
            st.wake_above = above[-1] if lens[j] else st.wake_above
            for t, m in zip(*np.nonzero(above & ~prev)):
                if (j, offsets[j] + int(t), names[m]) not in fired:
                    self.wake_stats[names[m]]["suppressed"] += 1
        events: list[Event] = []
        for d in dets:
            self.wake_stats[d.keyword]["detections"] += 1
            events.append(WakeWord(streams[d.row].id, d.keyword, d.score, d.start, d.end))
        return events

    # ------------------------------------------------------------------ phrases

    _PHRASE_CACHE = 64  # distinct phrase lists kept built (streams often share one)

    def _cached(self, key: tuple, build: Callable[[], Any]) -> Any:
        hit = self._phrase_cache.pop(key, None)
        if hit is None:
            hit = build()
            if len(self._phrase_cache) >= self._PHRASE_CACHE:
                self._phrase_cache.pop(next(iter(self._phrase_cache)))
        self._phrase_cache[key] = hit  # most recently used last
        return hit

    def wake_word_set(self, specs: tuple[PhraseSpec, ...], path: str) -> KeywordSet | None:
        """Runtime wake words as the keyword set streams use (None for no words), built once per list:
        ValueError names an entry the token table cannot spell or that repeats the model's own wake word."""
        if not specs:
            return None
        check_runtime_wake_words(self.keywords, specs, path)
        k = self.config.kws
        return self._cached(("wake", specs), lambda: self.keyword_search.prepare(
            keyword_set(self.tokens, specs, k.wake_threshold, path)))

    def _hotword_graph(self, specs: tuple[PhraseSpec, ...], path: str) -> ContextGraph | None:
        if not specs:
            return None
        boost = shared_boost(self.config.decoding.hotword_boost, len(specs))  # phrases without their own boost
        return self._cached(("hot", specs), lambda: phrase_graph(self.tokens, specs, boost, path, whole_words=True))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_checkpoint(cls, path: str | Path, config: EngineConfig | None = None) -> "Recognizer":
        config = config or EngineConfig()
        return cls(load_checkpoint(path, "cpu"), config)

    def _calibration(self, ccfg: ConfidenceConfig) -> Calibration | None:
        """The checkpoint's word-confidence calibration when it was fitted for the configured measure.

        A calibration for another measure is not applied (raw ``conf``); that is logged once, here.
        """
        stored, problem = resolve_calibration(self.loaded.meta, ccfg)
        if stored is None:
            return None
        if problem is not None:
            level = logging.INFO if not ccfg.calibrated else logging.WARNING
            log.log(level, "%s: word-confidence calibration not applied (word conf is the raw measure): %s",
                    self.loaded.path or "model", problem)
            return None
        return stored

    @property
    def model_info(self) -> dict:
        """Plain facts about the loaded model (for ``ready`` messages and ``model-info``)."""
        cfg = self.model.cfg
        return {"path": self.loaded.path, "name": self.loaded.meta.get("name", Path(self.loaded.path).stem),
                "vocab_size": cfg.vocab_size, "token_kind": self.tokens.kind, "keywords": list(cfg.keywords),
                "wake_words": list(self._default_wake.names) if self._default_wake is not None else [],
                "wake_models": [{"keyword": m.keyword, "threshold": m.threshold, "path": m.path}
                                for m in self.wake_scorer.models] if self.wake_scorer is not None else [],
                "chunk_seconds": self.chunk_frames * self.frame_shift_s, "frame_shift_seconds": self.frame_shift_s,
                "methods": sorted(self.searches), "device": str(self.device),
                "parameters": self.model.num_params(), "calibrated": self.calibration is not None,
                "lm": {"path": self.lm_path, "order": self.lm.order, "states": self.lm.num_states,
                       "weight": self.config.decoding.lm_weight, "bonus": self.config.decoding.lm_bonus} if self.lm is not None else None}

    def warm_up(self, seconds: float = 1.0) -> None:
        """Decode ``seconds`` of quiet noise once with every search method, then forget it.

        The first batch through a fresh process pays one-off costs (torch's
        kernel selection and allocator growth, lazily built search tables, the
        encoder's graph recording with ``trace_encoder``); a
        server calls this before it reports ready so that its first client does
        not pay them.  One throwaway stream per method, decoded together in one
        batch, finished and closed; nothing is emitted and ``on_batch`` is not
        called.  Only on an idle recognizer (its events would be swallowed
        otherwise): raises RuntimeError while streams are open.
        """
        if self._streams:
            raise RuntimeError(f"warm_up needs an idle recognizer ({len(self._streams)} streams open)")
        if isinstance(self.encoder, TracedChunkEncoder):
            self.encoder.record_soon()
        n = max(1, round(seconds * 16000))
        audio = (0.01 * np.random.default_rng(0).standard_normal(n)).astype(np.float32)  # (n,) at 16 kHz
        on_batch, self.on_batch = self.on_batch, None
        try:
            ids = [self.create_stream(method=m) for m in self.searches]
            for sid in ids:
                self.accept_audio(sid, audio)
                self.finish(sid)
            self.drain()
        finally:
            self.on_batch = on_batch
            for sid in list(self._streams):
                self.close(sid)

    # ------------------------------------------------------------------ stream lifecycle

    def create_stream(self, **options: Any) -> int:
        """New stream; options are :class:`~streamd.options.StreamOptions` fields (None or left out: the
        config's, :attr:`~streamd.config.EngineConfig.stream_defaults`).

        Raises OptionError (a ValueError) naming a bad option.
        """
        opts = self.config.stream_defaults.resolve(options)
        if opts.method not in self.searches:
            raise ValueError(f"method {opts.method!r} needs a CTC head, which this model does not have")
        wake = self._default_wake if opts.wake_words is None else self.wake_word_set(opts.wake_words, "wake_words")
        hot = None
        if opts.search.hotwords:
            hot = self._default_hot if opts.hotwords is None else self._hotword_graph(opts.hotwords, "hotwords")
        sid = next(self._ids)
        rs = StreamingResampler(opts.sample_rate, 16000) if opts.sample_rate != 16000 else None
        on = self._wake_mask(opts)
        st = self._streams[sid] = _Stream(sid, opts, FbankStream(self.model.cfg.fbank), rs, hot=hot,
                                          wake=wake if opts.keywords and self.config.kws.enabled else None,
                                          audio=[] if opts.second_pass else None)
        if opts.partials:
            st.shown = WordBuilder(self.tokens, self.frame_shift_s, self.config.confidence.aggregation)
        if on is not None:
            st.wake_on = on
            st.wake_emb = self.wake_scorer.init_stream()
            st.wake_det = self.wake_detector.init_state(1, self.device)
            st.wake_above = np.zeros(self.wake_scorer.num_models, dtype=bool)
        return sid

    def has_stream(self, sid: int) -> bool:
        return sid in self._streams

    @property
    def num_streams(self) -> int:
        return len(self._streams)

    def stream_options(self, sid: int) -> StreamOptions:
        return self._get(sid).opts

    def backlog(self, sid: int) -> float:
        """Seconds of accepted audio not yet decoded (a Partial's ``backlog`` at this moment)."""
        return self._backlog(self._get(sid))

    def _backlog(self, st: _Stream) -> float:
        return max(0.0, st.samples_in / st.opts.sample_rate - st.frames_done * self.frame_shift_s)

    def _get(self, sid: int) -> _Stream:
        try:
            return self._streams[sid]
        except KeyError:
            raise KeyError(f"no such stream {sid}") from None

    def accept_pcm(self, sid: int, data: bytes | bytearray | memoryview, fmt: str = "s16le") -> list[Event]:
        """Decode PCM bytes in ``fmt`` and accept them (see :meth:`accept_audio`)."""
        try:
            samples = decode_pcm(data, fmt)
        except AudioError as e:
            return self._fail(sid, e.code, str(e))
        return self.accept_audio(sid, samples)

    def accept_audio(self, sid: int, samples: np.ndarray) -> list[Event]:
        """Accept float samples (N,) in [-1, 1] at the stream's sample rate.

        Returns [] normally; bad audio (NaN/inf, wrong shape) closes the
        stream and returns its Error event.  Accepting after finish is an error.
        """
        st = self._get(sid)
        if st.finished:
            return self._fail(sid, "bad_request", "audio after end of stream")
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            return self._fail(sid, "bad_audio", f"audio must be mono 1-D samples, got shape {x.shape}")
        if x.size and not np.isfinite(x).all():
            return self._fail(sid, "bad_audio", f"{int((~np.isfinite(x)).sum())} non-finite samples (NaN/inf)")
        st.samples_in += x.size
        self._take_in(st, st.resampler.process(x) if st.resampler is not None else x)
        return []

    def _take_in(self, st: _Stream, x: np.ndarray) -> None:
        """16 kHz samples ``x`` of the stream's own audio (not the flush) to every consumer: the fbank cursor,
        the second pass's segment audio, the trained wake models' pending audio."""
        self._keep_audio(st, x)
        st.fbank.accept(x)
        if st.wake_emb is not None and x.size:
            st.wake_audio.append(x)

    def _keep_audio(self, st: _Stream, x: np.ndarray) -> None:
        """Keep 16 kHz samples ``x`` for the second pass (streams that asked for one), as int16; drop what lies
        more than ``second_pass.max_segment_s`` before the decoded point."""
        if st.audio is None:
            return
        if x.size:
            st.audio.append(np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16))
            st.audio_in += x.size
        limit = st.frames_done * self.samples_per_frame - int(self.config.second_pass.max_segment_s * 16000)
        while st.audio and st.audio_from + st.audio[0].size <= limit:
            st.audio_from += st.audio.pop(0).size

    def _segment_audio(self, st: _Stream) -> np.ndarray | None:
        """The closing segment's samples (int16, 16 kHz, from its start to the decoded point), or None when
        its beginning is no longer kept (longer than ``max_segment_s``); then drops what lies before the end."""
        a, b = st.segment_start * self.samples_per_frame, st.frames_done * self.samples_per_frame
        kept = np.concatenate(st.audio) if st.audio else np.zeros(0, np.int16)
        out = kept[a - st.audio_from:max(a, min(b, st.audio_in)) - st.audio_from].copy() if a >= st.audio_from else None
        cut = min(max(b - st.audio_from, 0), kept.size)
        st.audio, st.audio_from = ([kept[cut:]] if cut < kept.size else []), st.audio_from + cut
        return out

    def reset(self, sid: int) -> None:
        """Close the open segment after every full chunk accepted so far (Final with reason 'reset', its last
        word finished by the end-of-stream flush, decoded from copies of the stream's states).

        Samples short of a full chunk stay in the stream and open the next
        segment: the encoder only ever sees whole chunks until the end of stream.
        """
        st = self._get(sid)
        if st.finished:
            return
        full = st.fbank.frames_ready() // self.chunk_fbank * self.chunk_fbank
        st.reset_at = st.fbank.frames_taken + full

    def finish(self, sid: int) -> None:
        """No more audio: the next steps decode the tail and the end-of-stream flush, then emit Final and Done.

        The flush (:attr:`tail_padding`) is quiet audio after the last sample, decoded like the stream's
        own: a word that ends right at the end of the stream is still being emitted a few frames later
        (the encoder is causal and the transducer emits late), and without it would be cut ("five" ->
        "fi").  Times stay those of the stream: the Final and its words end at the last encoder frame of
        the accepted audio at the latest.  A stream that received no audio gets no flush."""
        st = self._get(sid)
        if st.finished:
            return
        if st.resampler is not None:
            self._take_in(st, st.resampler.flush())
        if st.wake_emb is not None:  # a keyword said at the very end still gets its scores
            from .model.wake import TAIL_SAMPLES
            st.wake_audio.append(np.zeros(TAIL_SAMPLES, dtype=np.float32))
        if st.fbank.accepted:
            fc = self.model.cfg.fbank
            n = num_frames(max(st.fbank.accepted, fc.frame_length) + fc.frame_shift - 1, fc.frame_length,
                           fc.frame_shift)  # fbank frames of the audio, its last one zero-padded
            st.end_frame = -(-n // 4)
            st.fbank.accept(self.tail_padding)
        st.fbank.finish()
        st.finished = True

    def close(self, sid: int) -> None:
        """Forget a stream at once (client gone); no more events for it."""
        if self._streams.pop(sid, None) is not None:
            self._drop_batch()

    def _fail(self, sid: int, code: str, message: str) -> list[Event]:
        self.close(sid)
        return [Error(sid, code, message, fatal=True)]

    # ------------------------------------------------------------------ batching

    def _decodable(self, st: _Stream) -> bool:
        """A full chunk is ready, or the (padded) tail of a finished stream."""
        n = st.fbank.frames_ready()
        return n >= self.chunk_fbank or (st.finished and n > 0)

    def _ready(self, st: _Stream) -> bool:
        return st.finished or st.reset_at is not None or self._decodable(st)

    def ready_streams(self) -> list[int]:
        """Streams that the next step would process (in order)."""
        return [sid for sid, st in self._streams.items() if self._ready(st)]

    def pending(self) -> bool:
        """True while some stream has work for :meth:`step`."""
        return any(self._ready(st) for st in self._streams.values())

    def _drop_batch(self) -> None:
        """Scatter the kept batch back into per-stream slices."""
        b = self._batch
        if b is None:
            return
        self._batch = None
        for row, sid in enumerate(b.ids):
            st = self._streams.get(sid)
            if st is None:
                continue
            r = torch.tensor([row], device=self.device)
            st.enc = b.enc.select(r)
        for rows, state in b.groups.values():
            self._scatter(b.ids, rows, state, "search")
        if b.kws_rows is not None:
            self._scatter(b.ids, b.kws_rows, b.kws, "kws")
        if b.wake_rows is not None:
            self._scatter(b.ids, b.wake_rows, b.wake, "kwsearch")

    def _scatter(self, ids: tuple[int, ...], rows: Tensor, state: Any, attr: str) -> None:
        """Give each still-open stream of ``rows`` (R,) its one-row slice of the batched ``state`` as ``attr``."""
        for j, row in enumerate(rows.tolist()):
            st = self._streams.get(ids[row])
            if st is not None:
                setattr(st, attr, state.select(torch.tensor([j], device=self.device)))

    def _stack(self, states: list[Any], rows: list[int]) -> tuple[Tensor, Any]:
        """(R,) row indices and the states of ``rows`` (one per row) as one batched state.

        Runs of rows that share one state object (the fresh state of new streams, see :meth:`_gather`) are
        repeated with one ``select`` each, not concatenated stream by stream."""
        parts: list[Any] = []
        k = 0
        while k < len(states):
            j = k + 1
            while j < len(states) and states[j] is states[k]:
                j += 1
            parts.append(states[k].select(torch.zeros(j - k, dtype=torch.long, device=self.device))
                         if j - k > 1 else states[k])
            k = j
        return torch.tensor(rows, device=self.device), type(parts[0]).cat(parts)

    def _gather(self, ids: tuple[int, ...]) -> _Batch:
        if self._batch is not None and self._batch.ids == ids:
            return self._batch
        self._drop_batch()
        streams = [self._streams[i] for i in ids]
        fresh: dict[Any, Any] = {}  # new streams' initial states, one object per kind (and search options)

        def new(key: tuple, make: Callable[[], Any]) -> Any:
            if key not in fresh:
                fresh[key] = make()
            return fresh[key]

        dev = self.device
        enc, search, kws, kwsearch = [], [], [], []  # per row: the stream's state, or a fresh one (None: none)
        for st in streams:
            if st.enc is not None:
                enc.append(st.enc), search.append(st.search), kws.append(st.kws), kwsearch.append(st.kwsearch)
                continue
            o = st.opts
            enc.append(new(("enc",), lambda: self.model.encoder.init_cache(1, dev)))
            search.append(new(("search", o.method, o.beam, id(st.hot)), lambda: self.searches[o.method].new_state(
                o.beam, dev, graph=st.hot)))
            kws.append(new(("kws",), lambda: self.kws.init_state(1, dev))
                       if self.kws is not None and o.keywords else None)
            kwsearch.append(new(("wake", id(st.wake)), lambda: self.keyword_search.init_state(st.wake, dev))
                            if st.wake is not None else None)
        batch = _Batch(ids, self._stack(enc, list(range(len(ids))))[1])
        by_method: dict[str, list[int]] = {}
        for row, st in enumerate(streams):
            by_method.setdefault(st.opts.method, []).append(row)
        for method, rows in by_method.items():
            batch.groups[method] = self._stack([search[r] for r in rows], rows)
        kws_rows = [row for row, x in enumerate(kws) if x is not None]
        if kws_rows:
            batch.kws_rows, batch.kws = self._stack([kws[r] for r in kws_rows], kws_rows)
        wake_rows = [row for row, x in enumerate(kwsearch) if x is not None]
        if wake_rows:
            batch.wake_rows, batch.wake = self._stack([kwsearch[r] for r in wake_rows], wake_rows)
        for st in streams:  # the batch owns the state now
            st.enc = st.search = st.kws = st.kwsearch = None
        self._batch = batch
        return batch

    # ------------------------------------------------------------------ the step

    @torch.inference_mode()  # no autograd bookkeeping at all: 14 % less compute for one stream than no_grad
    def step(self, only: Collection[int] | None = None) -> list[Event]:
        """Process one chunk for every ready stream (up to max_batch) in one batch.

        only: restrict this step to these stream ids (a caller's scheduling policy, e.g. a server's fair
        share under overload); the others stay ready for the next step."""
        ready = self.ready_streams()
        if only is not None:
            chosen = set(only)
            ready = [sid for sid in ready if sid in chosen]
        if not ready:
            return []
        if len(ready) > self.config.max_batch:
            k = self._rr % len(ready)
            ready = (ready[k:] + ready[:k])[: self.config.max_batch]
            self._rr += self.config.max_batch
        events: list[Event] = []
        decodable = [self._decodable(self._streams[sid]) for sid in ready]
        decode = tuple(sid for sid, d in zip(ready, decodable) if d)
        idle = tuple(sid for sid, d in zip(ready, decodable) if not d)  # only a segment/stream to close
        if decode:
            takes = {sid: min(self._streams[sid].fbank.frames_ready(), self.chunk_fbank) for sid in decode}
            windows = {sid: self._streams[sid].fbank.take(takes[sid]) for sid in decode}
            try:
                events += self._run(decode, windows)
            except Exception:  # noqa: BLE001 - isolate the failing stream(s)
                log.exception("batch step failed for %d streams; retrying one by one", len(decode))
                self._drop_batch()  # the batch still holds the state from before the step
                for sid in decode:
                    try:
                        events += self._run((sid,), windows)
                    except Exception as e:  # noqa: BLE001
                        log.exception("stream %d failed", sid)
                        self._drop_batch()
                        events += self._fail(sid, "internal", f"decoding failed: {type(e).__name__}: {e}")
        if self.wake_scorer is not None:  # trained wake models: every stream of the step, one batch
            try:
                events += self._wake_step(decode + idle)
            except Exception as e:  # noqa: BLE001 - wake scoring failed: those streams fail, the others go on
                log.exception("wake-model step failed")
                for sid in decode + idle:
                    if sid in self._streams and self._streams[sid].wake_emb is not None:
                        events += self._fail(sid, "internal", f"wake models failed: {type(e).__name__}: {e}")
                idle = tuple(sid for sid in idle if sid in self._streams)
        if idle:
            events += self._close_segments(idle)
        return events

    def drain(self, max_steps: int | None = None) -> list[Event]:
        """Step until no stream has work left (e.g. after finish())."""
        out: list[Event] = []
        n = 0
        while self.pending() and (max_steps is None or n < max_steps):
            out += self.step()
            n += 1
        return out

    def _run(self, ids: tuple[int, ...], windows: dict[int, np.ndarray]) -> list[Event]:
        """One batched chunk for streams ``ids`` whose sample windows were already taken.

        Nothing in the kept batch changes until every stage has succeeded, so a
        failure leaves the state as before the step (and the caller retries the
        streams one by one with the same windows).
        """
        streams = [self._streams[i] for i in ids]
        c4 = self.chunk_fbank
        fcfg = self.model.cfg.fbank
        # 1. features: one fbank call over the batch's sample windows
        wav = np.zeros((len(ids), fcfg.frame_length + (c4 - 1) * fcfg.frame_shift), dtype=np.float32)
        takes = []
        for i, sid in enumerate(ids):
            w = windows[sid]
            wav[i, : w.size] = w
            takes.append(0 if w.size == 0 else 1 + (w.size - fcfg.frame_length) // fcfg.frame_shift)
        feats = self.fbank(torch.from_numpy(wav).to(self.device))  # (B, 4C, F)
        lengths = torch.tensor(takes, device=self.device)
        batch = self._gather(ids)
        # 2. encoder with caches, then every head on the same output
        enc, enc_len, new_enc = self.encoder.forward_chunk(feats, lengths, batch.enc)
        bad = ~torch.isfinite(enc).flatten(1).all(dim=1)  # (B,)
        heads = self.model.heads(enc)
        offsets = torch.tensor([st.frames_done for st in streams], device=self.device)
        # 3. searches, one call per method over its rows
        new_groups = {}
        for method, (rows, state) in batch.groups.items():
            search = self.searches[method]
            x = getattr(heads, search.reads)[rows]
            new_groups[method] = (rows, search.step(state, x, enc_len[rows], offsets[rows]))
        # 4. wake words: the model's KWS head, and the keyword search for runtime wake words
        dets, new_kws = [], batch.kws
        if batch.kws_rows is not None:
            rows = batch.kws_rows
            new_kws, dets = self.kws.step(batch.kws, heads.kws_probs[rows], enc_len[rows], offsets[rows])
        hits, new_wake = [], batch.wake
        if batch.wake_rows is not None:
            rows = batch.wake_rows
            x = getattr(heads, self.keyword_search.reads)[rows]
            new_wake = self.keyword_search.step(batch.wake, x, enc_len[rows], offsets[rows])
            ended = torch.tensor([streams[r].finished and streams[r].fbank.frames_ready() == 0 for r in rows.tolist()],
                                 device=self.device)  # a candidate still settling is reported at the end
            new_wake, hits = self.keyword_search.detect(new_wake, flush=ended)
        # commit
        batch.enc, batch.groups, batch.kws, batch.wake = new_enc, new_groups, new_kws, new_wake
        events: list[Event] = self._wake_events(batch, dets) + self._keyword_events(batch, hits)
        if self.on_batch is not None:
            self.on_batch(BatchView(ids, heads, enc_len, offsets))
        for st, n in zip(streams, enc_len.tolist()):
            st.frames_done += n
        for st, b in zip(streams, bad.tolist()):
            if b:
                events += self._fail(st.id, "internal", "non-finite encoder output (NaN/inf) for this stream")
        if any(i not in self._streams for i in ids):
            return events  # a failed stream was closed and the batch dropped
        # 5. results, endpoints, ends of streams
        return events + self._results(batch)

    def _wake_events(self, batch: _Batch, dets: list[Detection]) -> list[Event]:
        """One WakeWord per detection, spanning the keyword as the stream's best hypothesis aligned it
        (:func:`~streamd.decode.kws.aligned_span`), else the head's span."""
        if not dets:
            return []
        kws_ids = [batch.ids[row] for row in batch.kws_rows.tolist()]
        best = self._best_of(batch, sorted({kws_ids[d.row] for d in dets}))
        events: list[Event] = []
        for d in dets:
            sid = kws_ids[d.row]
            earliest = self.kws.earliest_start_frame(d.frame) * self.frame_shift_s
            span = aligned_span(d.keyword, self._words(best[sid]), earliest, d.end)
            start, end = span if span is not None else (d.start, d.end)
            events.append(WakeWord(sid, d.keyword, d.score, start, end))
        return events

    def _keyword_events(self, batch: _Batch, hits: list[KeywordHit]) -> list[Event]:
        """One WakeWord per runtime-keyword detection, spanning the keyword's tokens' frames."""
        if not hits:
            return []
        ids = [batch.ids[row] for row in batch.wake_rows.tolist()]
        fs = self.frame_shift_s
        return [WakeWord(ids[h.row], h.keyword, h.score, h.first_frame * fs, (h.frame + 1) * fs) for h in hits]

    def _best_of(self, batch: _Batch, sids: Sequence[int], final: bool = False) -> dict[int, HypOut]:
        """Best hypothesis of streams ``sids`` of the batch (one host transfer per method among them).

        final: rank hypotheses as complete segments (the LM's end-of-sentence term, where fused)."""
        if not sids:
            return {}
        want = {batch.ids.index(sid) for sid in sids}
        best: dict[int, HypOut] = {}
        for method, (rows, state) in batch.groups.items():
            pairs = [(j, row) for j, row in enumerate(rows.tolist()) if row in want]
            if not pairs:
                continue
            sub = state.select(torch.tensor([j for j, _ in pairs], device=self.device))
            for (_, row), hyp in zip(pairs, self.searches[method].best(sub, final=final)):
                best[batch.ids[row]] = hyp
        return best

    def _words(self, hyp: HypOut) -> tuple[Word, ...]:
        """The hypothesis' words; with a calibration, ``conf`` calibrated and ``conf_raw`` the measure."""
        return tuple(self._calibrated(tokens_to_words(self.tokens, hyp.tokens, hyp.frames, hyp.confs,
                                                      self.frame_shift_s, self.config.confidence.aggregation)))

    def _calibrated(self, words: list[Word]) -> list[Word]:
        """Words with ``conf`` calibrated and ``conf_raw`` the measure (as they are without a calibration)."""
        if self.calibration is None or not words:
            return words
        probs = self.calibration.apply([w.conf for w in words]).tolist()
        return [dataclasses.replace(w, conf=p, conf_raw=w.conf) for w, p in zip(words, probs)]

    def _refresh(self, batch: _Batch, streams: list[_Stream]) -> tuple[np.ndarray, np.ndarray]:
        """Tokens (B,) and trailing blank frames (B,) of every row's best hypothesis, as int64 host arrays;
        brings the host copy of the best hypothesis (:attr:`_Stream.shown`) of streams with partials up to date.

        Per method: one host transfer of the lengths and trailing blanks, then one of only the tokens the
        shown copies lack (an ``append_only`` search: those past the copy's length; otherwise the whole best
        hypothesis, compared with the copy on the host); a stream whose hypothesis did not change costs no
        Python beyond its row of these arrays."""
        b = len(streams)
        n_all = np.zeros(b, np.int64)
        tb_all = np.zeros(b, np.int64)
        for method, (rows, state) in batch.groups.items():
            search = self.searches[method]
            rl = rows.tolist()
            slots = search.best_slots(state)
            if slots is None:  # host-side hypotheses: every one at once
                outs = search.best(state)
                n_all[rl] = [len(h.tokens) for h in outs]
                tb_all[rl] = search.trailing_blanks(state).tolist()
                for row, hyp in zip(rl, outs):
                    if streams[row].shown is not None:
                        self._show(streams[row], hyp.tokens, hyp.frames, hyp.confs, 0)
                continue
            buf = state.hyps
            lengths = buf.lengths.gather(1, slots[:, None])[:, 0]
            shown = [(j, streams[row]) for j, row in enumerate(rl) if streams[row].shown is not None]
            summary = [lengths, search.trailing_blanks(state).to(lengths.dtype)]
            if shown and not search.append_only:  # which best hypotheses differ from the last shown
                summary.append(self._best_changed(batch, method, buf, slots, lengths).to(lengths.dtype))
            host = torch.stack(summary).cpu().numpy()
            n, tb = host[0], host[1]
            n_all[rl], tb_all[rl] = n, tb
            if not shown:
                continue
            js = np.fromiter((j for j, _ in shown), np.int64, len(shown))
            if search.append_only:
                known = np.fromiter((len(st.shown.tokens) for _, st in shown), np.int64, len(shown))
                new = n[js]
                moved = np.flatnonzero(new != known)
                keep = np.where(new[moved] > known[moved], known[moved], 0)  # shorter: a new segment
            else:
                moved = np.flatnonzero(host[2][js])
                keep = np.zeros(len(moved), np.int64)
            if not moved.size:
                continue
            width = int((n[js[moved]] - keep).max())
            sel = torch.from_numpy(js[moved]).to(self.device)
            toks, frames, confs = buf.windows_to_host(sel, slots[sel], torch.from_numpy(keep).to(self.device), width)
            for k, m in enumerate(moved.tolist()):
                j, st = shown[m]
                d = int(n[j]) - int(keep[k])
                self._show(st, toks[k, :d].tolist(), frames[k, :d].tolist(), confs[k, :d].tolist(), int(keep[k]))
        return n_all, tb_all

    @staticmethod
    def _best_changed(batch: _Batch, method: str, buf: HypBuffer, slots: Tensor, lengths: Tensor) -> Tensor:
        """(R,) bool: rows whose best hypothesis (tokens, frames or confs) differs from the one recorded in
        ``batch.shown`` at the last call (all rows without a record); records the current ones."""
        rows = torch.arange(slots.shape[0], device=slots.device)
        live = torch.arange(buf.capacity, device=slots.device) < lengths[:, None]  # (R, L)
        now = (lengths, *(x[rows, slots].masked_fill(~live, 0) for x in (buf.tokens, buf.frames, buf.confs)))
        before = batch.shown.get(method)
        batch.shown[method] = now
        if before is None or before[0].shape != lengths.shape:
            return torch.ones_like(lengths, dtype=torch.bool)
        width = max(before[1].shape[1], now[1].shape[1])
        pad = [torch.nn.functional.pad(x, (0, width - x.shape[1])) for x in (*before[1:], *now[1:])]
        return (before[0] != lengths) | (pad[0] != pad[3]).any(1) | (pad[1] != pad[4]).any(1) \
            | (pad[2] != pad[5]).any(1)

    @staticmethod
    def _show(st: _Stream, tokens: Sequence[int], frames: Sequence[int], confs: Sequence[float], keep: int) -> None:
        """Make the stream's shown hypothesis ``shown[:keep] + (tokens, frames, confs)``; only the part past
        what it already holds is re-read (``keep`` grows to the common prefix)."""
        sh = st.shown
        tokens, frames, confs = list(tokens), list(frames), list(confs)
        n = len(sh.tokens)
        if keep + len(tokens) == n and sh.tokens[keep:] == tokens and sh.frames[keep:] == frames \
                and sh.confs[keep:] == confs:
            return  # unchanged
        # the longest common prefix past ``keep`` (slice comparisons, a binary search: no Python per token)
        lo, hi = 0, min(len(tokens), n - keep)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sh.tokens[keep:keep + mid] == tokens[:mid] and sh.frames[keep:keep + mid] == frames[:mid] \
                    and sh.confs[keep:keep + mid] == confs[:mid]:
                lo = mid
            else:
                hi = mid - 1
        p = lo
        st.cal_valid = min(st.cal_valid, sh.update(tokens[p:], frames[p:], confs[p:], keep + p))
        st.stale = True

    def _partial_of(self, st: _Stream) -> tuple[str, tuple[Word, ...], tuple[int, ...], tuple[int, ...],
                                                   tuple[float, ...]]:
        """(text, words, tokens, frames, confs) of the stream's next Partial: its shown hypothesis, after what
        was carried over its pauses (:meth:`_joined`)."""
        if st.stale:
            st.stale = False
            sh = st.shown
            hyp = self._joined(st, HypOut(tuple(sh.tokens), tuple(sh.frames), tuple(sh.confs)))
            if st.partial is not None and st.partial[2:] == (hyp.tokens, hyp.frames, hyp.confs):
                return st.partial  # the same hypothesis again (e.g. over a pause): the same text and words
            if st.carry is not None and st.carry.tokens:
                # endpointing off, after a pause: the joined hypothesis, read whole
                st.partial = (self.tokens.decode(hyp.tokens), self._words(hyp), hyp.tokens, hyp.frames, hyp.confs)
            else:
                st.cal[st.cal_valid:] = self._calibrated(sh.words[st.cal_valid:])
                st.cal_valid = len(st.cal)
                st.partial = (sh.text, tuple(st.cal), hyp.tokens, hyp.frames, hyp.confs)
        return st.partial

    def _results(self, batch: _Batch) -> list[Event]:
        """Partials, endpoints and ends of streams after a decoded chunk."""
        events: list[Event] = []
        streams = [self._streams[i] for i in batch.ids]
        n, trailing = self._refresh(batch, streams)
        seg_frames = np.fromiter((st.frames_done - st.search_start for st in streams), np.int64, len(streams))
        rules = self.endpointer.check_arrays(trailing, seg_frames, n)
        close: list[tuple[int, str]] = []
        fs = self.frame_shift_s
        for st, rule in zip(streams, rules):
            done = st.finished and st.fbank.frames_ready() == 0
            if st.shown is not None and not done:
                text, words, tokens, frames, confs = self._partial_of(st)
                events.append(Partial(st.id, st.segment, text, words, tokens, frames, confs, st.segment_start * fs,
                                      st.frames_done * fs, self._backlog(st)))
            if done:
                close.append((st.id, "eos"))
            elif st.reset_at is not None and st.fbank.frames_taken >= st.reset_at:
                close.append((st.id, "reset"))
            elif rule is not None:
                close.append((st.id, f"endpoint:{rule}" if st.opts.endpointing else "pause"))
        if close:
            events += self._finalize(batch, close, self._best_of(batch, [sid for sid, _ in close], final=True))
        return events

    def _close_segments(self, ids: tuple[int, ...]) -> list[Event]:
        """Streams with no chunk to decode: end them (eos) or close a requested segment (reset)."""
        ids = tuple(sid for sid in ids if self._streams[sid].finished
                    or self._streams[sid].fbank.frames_taken >= self._streams[sid].reset_at)
        if not ids:
            return []
        batch = self._gather(ids)
        best = self._best_of(batch, ids, final=True)
        close = [(sid, "eos" if self._streams[sid].finished else "reset") for sid in ids]
        return self._finalize(batch, close, best)

    def _reset_flush(self, batch: _Batch, sids: list[int]) -> dict[int, HypOut]:
        """Best final hypothesis of each stream in ``sids`` (closing at a ``reset``) after the end-of-stream
        flush, decoded from copies of its encoder and search states: the last word is finished as at the end
        of a stream, while the stream itself goes on from its own state (it never sees the flush).

        The flush frames are those :meth:`finish` adds after audio that ends with a full frame: the last
        frame's overlap (``frame_length - frame_shift`` samples, silent here) then :attr:`tail_padding`."""
        rows = torch.tensor([batch.ids.index(sid) for sid in sids], device=self.device)
        fc = self.model.cfg.fbank
        sig = np.concatenate([np.zeros(fc.frame_length - fc.frame_shift, np.float32), self.tail_padding])
        total = num_frames(sig.size, fc.frame_length, fc.frame_shift)
        width = fc.frame_length + (self.chunk_fbank - 1) * fc.frame_shift
        enc_cache = batch.enc.select(rows)
        states = {}
        for method, (mrows, state) in batch.groups.items():
            ml = mrows.tolist()
            pairs = [(k, ml.index(row)) for k, row in enumerate(rows.tolist()) if row in ml]
            if pairs:  # (row among sids, row of the method's state)
                states[method] = (torch.tensor([k for k, _ in pairs], device=self.device),
                                  state.select(torch.tensor([j for _, j in pairs], device=self.device)))
        offsets = torch.tensor([self._streams[sid].frames_done for sid in sids], device=self.device)
        for first in range(0, total, self.chunk_fbank):
            piece = sig[first * fc.frame_shift: first * fc.frame_shift + width]
            wav = torch.zeros(len(sids), width, device=self.device)
            wav[:, : piece.size] = torch.from_numpy(piece).to(self.device)
            lengths = torch.full((len(sids),), min(self.chunk_fbank, total - first), device=self.device)
            enc, enc_len, enc_cache = self.model.encoder.forward_chunk(self.fbank(wav), lengths, enc_cache)
            heads = self.model.heads(enc)
            for method, (ks, state) in states.items():
                search = self.searches[method]
                states[method] = (ks, search.step(state, getattr(heads, search.reads)[ks], enc_len[ks], offsets[ks]))
            offsets = offsets + enc_len
        out: dict[int, HypOut] = {}
        for method, (ks, state) in states.items():
            for k, hyp in zip(ks.tolist(), self.searches[method].best(state, final=True)):
                out[sids[k]] = hyp
        return out

    def _finalize(self, batch: _Batch, close: list[tuple[int, str]], best: dict[int, HypOut]) -> list[Event]:
        resets = [sid for sid, reason in close if reason == "reset"]
        if resets and self.tail_padding.size:
            best = {**best, **self._reset_flush(batch, resets)}
        events: list[Event] = []
        reset_rows: list[int] = []
        ended: list[int] = []
        for sid, reason in close:
            st = self._streams[sid]
            st.search_start = st.frames_done
            if st.shown is not None:  # the search starts afresh (or the stream ends)
                st.shown.clear()
                st.cal, st.cal_valid, st.stale = [], 0, True
            if reason == "pause":  # endpointing off: the search starts afresh, the segment goes on
                st.carry = self._joined(st, best[sid])
                reset_rows.append(batch.ids.index(sid))
                continue
            sub_text = self.tokens.decode(best[sid].tokens)
            hyp = self._joined(st, best[sid])
            text = self.tokens.decode(hyp.tokens)
            st.reset_at = None
            if text or reason in ("eos", "reset"):
                alts, scores = self._alternatives(batch, sid, sub_text)
                if st.carry is not None and st.carry.tokens:  # n-best of the part after the last pause
                    head = self.tokens.decode(st.carry.tokens)
                    alts = tuple(t for t in (f"{head} {a}".strip() for a in alts) if t != text)
                    scores = tuple(sc + st.carry.score for sc in scores[:1 + len(alts)])
                end = st.frames_done
                if st.end_frame is not None or reason == "reset":  # the flush is not the stream's time:
                    end = max(st.segment_start, min(end, st.end_frame or end))  # what it emits ends the audio
                    hyp = dataclasses.replace(hyp, frames=tuple(min(f, end - 1) for f in hyp.frames))
                second: dict[str, Any] = {}
                if st.audio is not None:
                    audio = self._segment_audio(st)
                    second = {"first_pass_text": text, "audio": audio,
                              "second_pass": "pending" if audio is not None else "skipped_too_long"}
                events.append(Final(sid, st.segment, text, self._words(hyp), st.segment_start * self.frame_shift_s,
                                    end * self.frame_shift_s, hyp.tokens, hyp.frames, hyp.confs, reason, alts, scores,
                                    **second))
                st.segment += 1
            elif st.audio is not None:  # an endpoint with nothing decoded: its audio is not needed
                st.segment_start = st.frames_done
                self._segment_audio(st)
            st.carry = None
            st.segment_start = st.frames_done
            if reason == "eos":
                ended.append(sid)
            else:
                reset_rows.append(batch.ids.index(sid))
        batch.shown.clear()  # the shown copies of closed segments were cleared
        if reset_rows:
            for method, (rows, state) in batch.groups.items():
                mask = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
                rl = rows.tolist()
                for r in reset_rows:
                    if r in rl:
                        mask[rl.index(r)] = True
                if bool(mask.any()):
                    batch.groups[method] = (rows, self.searches[method].reset(state, mask))
            if batch.wake_rows is not None:  # a recognizer endpoint also starts a new keyword segment
                rl = batch.wake_rows.tolist()
                mask = torch.tensor([r in reset_rows for r in rl], dtype=torch.bool, device=self.device)
                if bool(mask.any()):
                    batch.wake = self.keyword_search.reset(batch.wake, mask)
        for sid in ended:
            st = self._streams[sid]
            events.append(Done(sid, st.samples_in / st.opts.sample_rate))
            self.close(sid)
        return events

    def _joined(self, st: _Stream, hyp: HypOut) -> HypOut:
        """The open segment's hypothesis: what was carried over its pauses (endpointing off), then ``hyp``.

        A character table's word separator joins the two (the search starts a new word after a pause);
        it takes the frame of the first token after it and confidence 1."""
        c = st.carry
        if c is None or not c.tokens:
            return hyp
        if not hyp.tokens:
            return HypOut(c.tokens, c.frames, c.confs, c.score + hyp.score)
        sep = self.tokens.separator if self.tokens.kind == "char" else None
        mid = (self.tokens.id(sep),) if sep is not None else ()
        return HypOut(c.tokens + mid + hyp.tokens, c.frames + hyp.frames[:len(mid)] + hyp.frames,
                      c.confs + (1.0,) * len(mid) + hyp.confs, c.score + hyp.score)

    def _alternatives(self, batch: _Batch, sid: int, text: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
        method = self._streams[sid].opts.method
        if not self.searches[method].several:
            return (), ()
        rows, state = batch.groups[method]
        j = rows.tolist().index(batch.ids.index(sid))
        nb = self.searches[method].nbest(state.select(torch.tensor([j], device=self.device)),
                                        self._streams[sid].opts.beam, final=True)[0]
        return distinct_alternatives(text, [(self.tokens.decode(h.tokens), float(h.score)) for h in nb])
