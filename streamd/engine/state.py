"""The engine's state as data: one stream's (:class:`_Stream`), a batch's kept between steps
(:class:`_Batch`), and what a committed step computed, for observers (:class:`BatchView`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import Tensor

from ..audio.fbank import FbankStream
from ..audio.resample import StreamingResampler
from ..decode.context_graph import ContextGraph
from ..decode.hyps import HypOut
from ..decode.keyword_search import KeywordSet, KeywordState
from ..decode.words import WordBuilder
from ..events import Word
from ..model.encoder import EncoderCache
from ..model.transducer import HeadOutputs
from ..options import StreamOptions


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
    # where the stream's batched state (encoder cache, search, KWS, keyword search) lives while no kept batch
    # holds it: the batch it was last stepped in and its row there (None: a new stream, or in the kept batch)
    pool: tuple["_Batch", int] | None = None
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
    # kws.verify: the stream's 16 kHz float32 samples from sample ``wake_kept_from`` on (``wake_in`` accepted),
    # kept while a detection may still need them; detections waiting for their audio after the keyword
    wake_kept: list[np.ndarray] | None = None
    wake_kept_from: int = 0
    wake_in: int = 0
    wake_held: list[Any] = field(default_factory=list)


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


@dataclass(eq=False)
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
    live: int = 0  # once dropped (a pool): streams whose state still lives here
    _positions: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False)

    def state(self, kind: str, method: str = "") -> Any:
        """The batched state of ``kind``: "enc", "search" (of ``method``), "kws" or "wake"."""
        if kind == "enc":
            return self.enc
        if kind == "search":
            return self.groups[method][1]
        return self.kws if kind == "kws" else self.wake

    def positions(self, kind: str, method: str = "") -> np.ndarray:
        """(len(ids),) int64: each row's place in the state of ``kind`` (-1: the row has none)."""
        key = (kind, method)
        if key not in self._positions:
            n = len(self.ids)
            rows = (None if kind == "enc" else self.groups[method][0] if kind == "search"
                    else self.kws_rows if kind == "kws" else self.wake_rows)
            pos = np.arange(n, dtype=np.int64) if rows is None else np.full(n, -1, dtype=np.int64)
            if rows is not None:
                pos[rows.cpu().numpy()] = np.arange(rows.shape[0])
            self._positions[key] = pos
        return self._positions[key]
