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
over that batch.  Per-stream state (encoder cache, search and KWS state) is
kept batched between steps when the next batch is the same set of streams;
otherwise each stream's state is taken from the batch it was last stepped in
(its pool) with one ``select`` per pool and state and joined with one ``cat``
(new streams' initial states are one state repeated), and pools that are
mostly dead rows are compacted: the tensor ops per step do not grow with the
streams.

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

Rooms: :mod:`.state` (a stream's and a batch's state), :mod:`.batching` (the kept batch), :mod:`.wake`
(trained wake models), :mod:`.results` (partials, keyword events, best hypotheses), :mod:`.finals`
(segments closed into Finals), :mod:`.lm` (the fusion LM); the :class:`Recognizer` here holds the streams'
lifecycle and the step, and takes the other parts' methods.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, Callable, Collection

import numpy as np
import torch
from torch import Tensor

from ..audio.fbank import Fbank, FbankStream, num_frames
from ..audio.pcm import AudioError, decode_pcm
from ..audio.resample import StreamingResampler
from ..config import ConfidenceConfig, EngineConfig
from ..decode.beam import BeamSearch
from ..decode.calibration import Calibration, resolve_calibration
from ..decode.common import Search
from ..decode.confidence import make_measure
from ..decode.context_graph import ContextGraph, phrase_graph, shared_boost
from ..decode.ctc import CtcGreedySearch, CtcPrefixBeamSearch
from ..decode.ctc_keyword_search import CtcKeywordSearch
from ..decode.endpoint import Endpointer, seconds_to_frames
from ..decode.greedy import GreedySearch
from ..decode.keyword_search import KeywordSearch, KeywordSet, check_runtime_wake_words, keyword_set
from ..decode.kws import KwsDetector
from ..decode.modified_beam import ModifiedBeamSearch
from ..decode.words import WordBuilder
from ..device import resolve_device
from ..events import Error, Event
from ..model.checkpoint import LoadedModel, load_checkpoint
from ..model.traced import TracedChunkEncoder
from ..options import PhraseSpec, StreamOptions
from ..tokens import TokenTable
from .batching import Batching
from .finals import Finals
from .lm import lm_path_for, resolve_lm
from .results import Results, distinct_alternatives
from .state import BatchView, _Batch, _Stream
from .wake import WakeModels

__all__ = ["Recognizer", "StreamOptions", "BatchView", "resolve_device", "resolve_lm", "lm_path_for",
           "distinct_alternatives"]

log = logging.getLogger("streamd.engine")


TAIL_PADDING_SECONDS = 0.32
"""Seconds of quiet audio decoded after the last sample of a finished stream (the end-of-stream flush,
:meth:`Recognizer.finish`); chosen on validation data (docs/model_history.md, "End of stream")."""


def tail_padding(seconds: float) -> np.ndarray:
    """The end-of-stream flush: ``(round(seconds * 16000),)`` float32 samples at 16 kHz of digital silence."""
    return np.zeros(max(0, round(seconds * 16000)), dtype=np.float32)


class Recognizer(WakeModels, Batching, Results, Finals):
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
        # 16 kHz samples of one chunk's fbank frames (its window: the last frame's overlap included)
        self.window_samples = mcfg.fbank.frame_length + (self.chunk_fbank - 1) * mcfg.fbank.frame_shift
        self._wav = np.empty((0, self.window_samples), dtype=np.float32)  # the step's windows, see _take_windows
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
        self._ready_ids: set[int] = set()  # the ready streams (Batching.ready_streams)
        self._ready_recheck: list[int] = []  # streams stepped since: their readiness is checked again
        self._ids = itertools.count(1)
        self._batch: _Batch | None = None
        self._rr = 0  # round-robin start for fairness when more streams than max_batch

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
            st.wake_kept = [] if self.wake_verify else None
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
        if self._ready(st):
            self._ready_ids.add(sid)
        return []

    def _take_in(self, st: _Stream, x: np.ndarray) -> None:
        """16 kHz samples ``x`` of the stream's own audio (not the flush) to every consumer: the fbank cursor,
        the second pass's segment audio, the trained wake models' pending audio."""
        self._keep_audio(st, x)
        st.fbank.accept(x)
        if st.wake_emb is not None and x.size:
            st.wake_audio.append(x)
            if st.wake_kept is not None:  # kws.verify: the audio around a detection
                st.wake_kept.append(np.asarray(x, dtype=np.float32))
                st.wake_in += x.size

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
        self._ready_ids.add(sid)

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
            from ..model.wake import TAIL_SAMPLES
            st.wake_audio.append(np.zeros(TAIL_SAMPLES, dtype=np.float32))
        if st.fbank.accepted:
            fc = self.model.cfg.fbank
            n = num_frames(max(st.fbank.accepted, fc.frame_length) + fc.frame_shift - 1, fc.frame_length,
                           fc.frame_shift)  # fbank frames of the audio, its last one zero-padded
            st.end_frame = -(-n // 4)
            st.fbank.accept(self.tail_padding)
        st.fbank.finish()
        st.finished = True
        self._ready_ids.add(sid)

    def close(self, sid: int) -> None:
        """Forget a stream at once (client gone); no more events for it."""
        st = self._streams.pop(sid, None)
        if st is None:
            return
        self._ready_ids.discard(sid)
        if self._batch is not None and sid in self._batch.ids:
            self._drop_batch()
        self._maybe_compact(self._leave_pool(st))

    def _fail(self, sid: int, code: str, message: str) -> list[Event]:
        self.close(sid)
        return [Error(sid, code, message, fatal=True)]

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
        self._ready_recheck += ready  # the step takes their audio (or closes their segment): ready no longer?
        events: list[Event] = []
        decode_l: list[int] = []
        idle_l: list[int] = []  # only a segment or the stream to close
        streams, decodable = self._streams, self._decodable
        for sid in ready:
            (decode_l if decodable(streams[sid]) else idle_l).append(sid)
        decode, idle = tuple(decode_l), tuple(idle_l)
        if decode:
            wav, takes = self._take_windows(decode)
            try:
                events += self._run(decode, wav, takes)
            except Exception:  # noqa: BLE001 - isolate the failing stream(s)
                log.exception("batch step failed for %d streams; retrying one by one", len(decode))
                self._drop_batch()  # the batch still holds the state from before the step
                for i, sid in enumerate(decode):
                    try:
                        events += self._run((sid,), wav[i:i + 1], takes[i:i + 1])
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

    def _take_windows(self, ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Each stream's next chunk of samples as one batch: ``(B, S)`` float32 windows (zero after a short
        one) and ``(B,)`` int64 fbank frames taken; the streams' cursors advance."""
        c4 = self.chunk_fbank
        if self._wav.shape[0] < len(ids):  # kept between steps: a fresh array's pages cost more than the copy
            self._wav = np.empty((max(len(ids), 2 * self._wav.shape[0]), self.window_samples), dtype=np.float32)
        wav = self._wav[:len(ids)]
        streams = self._streams
        takes = np.fromiter((streams[sid].fbank.take_into(c4, row) for sid, row in zip(ids, wav)), np.int64,
                            len(ids))
        return wav, takes

    def _run(self, ids: tuple[int, ...], wav: np.ndarray, takes: np.ndarray) -> list[Event]:
        """One batched chunk for streams ``ids`` whose sample windows ``wav`` (B, S) of ``takes`` (B,) fbank
        frames were already taken (:meth:`_take_windows`).

        Nothing in the kept batch changes until every stage has succeeded, so a
        failure leaves the state as before the step (and the caller retries the
        streams one by one with the same windows).
        """
        streams = [self._streams[i] for i in ids]
        # 1. features: one fbank call over the batch's sample windows
        feats = self.fbank(torch.from_numpy(wav).to(self.device))  # (B, 4C, F)
        lengths = torch.from_numpy(takes).to(self.device)
        batch = self._gather(ids)
        # 2. encoder with caches, then every head on the same output
        enc, enc_len, new_enc = self.encoder.forward_chunk(feats, lengths, batch.enc)
        bad = ~torch.isfinite(enc).flatten(1).all(dim=1)  # (B,)
        heads = self.model.heads(enc)
        offsets = torch.from_numpy(np.fromiter((st.frames_done for st in streams), np.int64, len(streams))
                                   ).to(self.device)
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
        if bool(bad.any()):
            for row in bad.nonzero().flatten().tolist():
                events += self._fail(streams[row].id, "internal", "non-finite encoder output (NaN/inf) for this stream")
        if not all(map(self._streams.__contains__, ids)):
            return events  # a failed stream was closed and the batch dropped
        # 5. results, endpoints, ends of streams
        return events + self._results(batch)
