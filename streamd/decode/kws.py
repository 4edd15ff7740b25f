"""Wake-word detection on the KWS head's per-frame sigmoid scores.

Per stream and keyword, frame by frame (absolute frame index ``f``):

* smoothed score ``s[f]`` = mean of the raw scores of the last
  ``smoothing_frames`` frames of the stream (fewer at stream start: the mean
  of the frames seen so far); the window is carried across chunks;
* the keyword fires at ``f`` when ``s[f] >= threshold_for(keyword)`` and it did
  not fire in the last ``R`` frames, ``R = seconds_to_frames(refractory_s)``
  (i.e. ``(f - last_fire) * frame_shift_s >= refractory_s``);
* a detection's head span runs from ``start = max(run_start, f + 1 - W) *
  frame_shift_s`` to ``end = (f + 1) * frame_shift_s``, where ``run_start`` is
  the first frame of the contiguous run of frames with raw score ``>=
  threshold / 2`` containing ``f`` (possibly begun in an earlier chunk) and
  ``W = seconds_to_frames(MAX_KEYWORD_S)``: the head's rise up to the firing
  frame, at most ``MAX_KEYWORD_S`` long.  With smoothing the firing frame
  itself can be below half the threshold; the run is then the most recent
  one before ``f``.  Its ``score`` is ``s[f]``.

A head trained with a max-pooling loss (the shipped model's) jumps from
about 0 to about 1 within one frame near the keyword's end, so its span is a
frame or two, not the phrase.  The engine therefore dates a detection by
the recognizer's own alignment when its hypothesis holds the keyword
(:func:`aligned_span`) and keeps the head span otherwise.

Conventions: B streams, T frames per chunk, K keywords.  Scores are handled
in float64 so that thresholds compare exactly.  :meth:`KwsDetector.step`
is functional (the input state is not modified), vectorized over (B, K)
with one loop over the T frames of the chunk, and does a single
device-to-host transfer at the end (detections and input checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from streamd.config import ConfigError, KwsConfig
from streamd.decode.endpoint import seconds_to_frames
from streamd.events import Word

__all__ = ["MAX_KEYWORD_S", "Detection", "KwsState", "KwsDetector", "aligned_span"]

_NEVER = -(2 ** 62)  # "never fired" sentinel for last_fire (frame differences stay far from overflow)

MAX_KEYWORD_S = 2.0
"""Longest a spoken keyword is taken to last: how far before its firing frame a detection's span may start."""


@dataclass(frozen=True)
class Detection:
    """One keyword firing: stream row in the batch, keyword, smoothed score, head span in seconds
    (``start`` to ``end``), and ``frame``, the absolute encoder frame it fired at (``end`` is that frame's end)."""

    row: int
    keyword: str
    score: float
    start: float
    end: float
    frame: int


@dataclass
class KwsState:
    """Per-stream detector state for B streams and K keywords.

    hist: (B, W-1, K) float64 raw scores of the stream's last W-1 frames
        (W = smoothing_frames), oldest first; zeros before the stream start.
    frames_seen: (B,) int64 frames consumed so far (bounds the smoothing window).
    next_frame: (B,) int64 absolute index expected for the next chunk's first
        frame, -1 before the first non-empty chunk.
    last_fire: (B, K) int64 absolute frame of the last firing (very negative if never).
    run_start: (B, K) int64 first frame of the current / most recent run of
        raw scores >= threshold / 2, -1 if none yet.
    above: (B, K) bool whether the stream's last frame was >= threshold / 2.
    """

    hist: Tensor
    frames_seen: Tensor
    next_frame: Tensor
    last_fire: Tensor
    run_start: Tensor
    above: Tensor

    @property
    def batch(self) -> int:
        return self.frames_seen.shape[0]

    @staticmethod
    def cat(states: list["KwsState"]) -> "KwsState":
        """Concatenate states along B (same detector, hence same W and K)."""
        if not states:
            raise ValueError("KwsState.cat: need at least one state")
        return KwsState(*(torch.cat([getattr(s, f) for s in states]) for f in KwsState.__dataclass_fields__))

    def select(self, rows: Tensor | Sequence[int]) -> "KwsState":
        """Sub-batch of streams: rows (B',) int64 indices into the B axis."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.frames_seen.device)
        if idx.dim() != 1:
            raise ValueError(f"KwsState.select: rows must be 1-D, got shape {tuple(idx.shape)}")
        return KwsState(*(getattr(self, f)[idx] for f in KwsState.__dataclass_fields__))


class KwsDetector:
    """Batched streaming wake-word detector (see module docstring for the semantics).

    keywords: the K keyword names, in the order of the KWS head's outputs.
    cfg: thresholds, smoothing window, refractory period.
    frame_shift_s: duration of one encoder frame in seconds.
    """

    def __init__(self, keywords: tuple[str, ...], cfg: KwsConfig, frame_shift_s: float) -> None:
        if not isinstance(cfg, KwsConfig):
            raise TypeError(f"cfg: expected a KwsConfig, got {type(cfg).__name__}")
        keywords = tuple(keywords)
        for i, k in enumerate(keywords):
            if not isinstance(k, str) or not k:
                raise ValueError(f"keywords[{i}]: expected a non-empty string, got {k!r}")
        if len(set(keywords)) != len(keywords):
            raise ValueError(f"keywords: duplicate keyword in {list(keywords)}")
        for k in cfg.thresholds:
            if k not in keywords:
                raise ConfigError(f"kws.thresholds.{k}: unknown keyword (model keywords: {list(keywords)})")
        self.keywords = keywords
        self.cfg = cfg
        self.refractory_frames = seconds_to_frames(cfg.refractory_s, frame_shift_s)  # also checks frame_shift_s
        self.max_span_frames = max(1, seconds_to_frames(MAX_KEYWORD_S, frame_shift_s))
        self.frame_shift_s = float(frame_shift_s)
        self.window = cfg.smoothing_frames
        self._thresholds = [cfg.threshold_for(k) for k in keywords]
        self._thr_cache: dict[torch.device, Tensor] = {}

    @property
    def num_keywords(self) -> int:
        return len(self.keywords)

    def init_state(self, batch: int, device: torch.device | str = "cpu") -> KwsState:
        """Fresh state for ``batch`` streams that start at their first frame."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise ValueError(f"batch must be an integer >= 0, got {batch!r}")
        k = self.num_keywords
        z = torch.zeros(batch, k, dtype=torch.long, device=device)
        return KwsState(
            hist=torch.zeros(batch, self.window - 1, k, dtype=torch.float64, device=device),
            frames_seen=torch.zeros(batch, dtype=torch.long, device=device),
            next_frame=torch.full((batch,), -1, dtype=torch.long, device=device),
            last_fire=z + _NEVER,
            run_start=z - 1,
            above=torch.zeros(batch, k, dtype=torch.bool, device=device),
        )

    # ------------------------------------------------------------------ step

    def step(self, state: KwsState, scores: Tensor, lengths: Tensor, frame_offset: Tensor
             ) -> tuple[KwsState, list[Detection]]:
        """Consume one chunk of KWS scores; return the new state and the detections.

        state: from :meth:`init_state` (or a previous step), B streams.
        scores: (B, T, K) float sigmoid scores in [0, 1]; frames >= lengths are padding (ignored).
        lengths: (B,) int valid frames per stream in this chunk (0..T).
        frame_offset: (B,) int64 absolute frame index of each stream's chunk
            start; must continue where the stream's previous non-empty chunk ended.
        Detections are ordered by row, then frame, then keyword index.
        """
        scores, lengths, frame_offset = self._check_shapes(state, scores, lengths, frame_offset)
        if not self.cfg.enabled:
            return state, []
        dev = scores.device
        b, t_len, k = scores.shape
        if t_len == 0:
            if bool((lengths != 0).any()):
                raise ValueError(f"lengths: must be 0 for a chunk of T=0 frames, got {lengths.tolist()}")
            return state, []
        w = self.window

        frame_idx = torch.arange(t_len, device=dev)
        valid = frame_idx < lengths.unsqueeze(1)                                   # (B, T)
        raw = torch.where(valid.unsqueeze(-1), scores.to(torch.float64), 0.0)     # (B, T, K)

        # deferred input checks, transferred with the results
        bad_score = (valid.unsqueeze(-1) & ~((raw >= 0) & (raw <= 1))).flatten(1).any(1)
        bad_len = (lengths < 0) | (lengths > t_len)
        bad_off = (lengths > 0) & (((state.next_frame >= 0) & (frame_offset != state.next_frame)) | (frame_offset < 0))
        raw = torch.nan_to_num(raw)  # keep NaNs out of the state if the input is rejected below

        # moving average over the last W frames of the stream (history + chunk)
        x = torch.cat([state.hist, raw], dim=1)                                    # (B, W-1+T, K)
        sums = x.unfold(1, w, 1).sum(-1)                                           # (B, T, K)
        avail = (state.frames_seen.unsqueeze(1) + frame_idx + 1).clamp(max=w)      # (B, T)
        smoothed = sums / avail.unsqueeze(-1).to(torch.float64)

        thr = self._threshold_tensor(dev)                                          # (K,)
        half = thr / 2
        hi = raw >= half                                                           # (B, T, K)
        hit = smoothed >= thr                                                      # (B, T, K)
        abs_frame = frame_offset.unsqueeze(1) + frame_idx                          # (B, T)

        last_fire, run_start, above, fired_t, start_t = self._fire(state, valid, hi, hit, abs_frame)

        gather = (lengths.clamp(0, t_len).unsqueeze(1) + torch.arange(w - 1, device=dev)).unsqueeze(-1)
        new_state = KwsState(
            hist=x.gather(1, gather.expand(-1, -1, k)),
            frames_seen=state.frames_seen + lengths.clamp(0, t_len),
            next_frame=torch.where(lengths > 0, frame_offset + lengths, state.next_frame),
            last_fire=last_fire, run_start=run_start, above=above,
        )

        # one host transfer: per-frame score (-1 where not fired), run start, offsets and error flags
        packed = torch.cat([
            torch.where(fired_t, smoothed, -1.0).flatten(), start_t.to(torch.float64).flatten(),
            frame_offset.to(torch.float64), bad_score.double(), bad_len.double(), bad_off.double(),
        ]).cpu().numpy()
        return new_state, self._detections(packed, state, b, t_len, k)

    def _fire(self, state: KwsState, valid: Tensor, hi: Tensor, hit: Tensor, abs_frame: Tensor
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Frame by frame through the chunk: which keywords fire (over the threshold, out of the refractory
        period) and where their run above half the threshold started.

        valid, abs_frame: (B, T); hi, hit: (B, T, K) bool (raw >= half the threshold, smoothed >= threshold).
        Returns the state's new last_fire, run_start, above (B, K), fired (B, T, K) bool and the detections'
        start frames (B, T, K), no earlier than :meth:`earliest_start_frame`.
        """
        t_len = valid.shape[1]
        last_fire, run_start, above = state.last_fire, state.run_start, state.above
        fired, starts = [], []
        for t in range(t_len):
            v = valid[:, t].unsqueeze(1)                                           # (B, 1)
            f = abs_frame[:, t].unsqueeze(1)                                       # (B, 1)
            run_start = torch.where(v & hi[:, t] & ~above, f, run_start)
            above = torch.where(v, hi[:, t], above)
            fire = v & hit[:, t] & (f - last_fire >= self.refractory_frames)
            last_fire = torch.where(fire, f, last_fire)
            fired.append(fire)
            starts.append(torch.where(run_start >= 0, run_start, f))
        fired_t = torch.stack(fired, 1)                                            # (B, T, K)
        earliest = self.earliest_start_frame(abs_frame)                            # (B, T)
        start_t = torch.maximum(torch.stack(starts, 1), earliest.unsqueeze(-1))    # (B, T, K)
        return last_fire, run_start, above, fired_t, start_t

    def _detections(self, packed: np.ndarray, state: KwsState, b: int, t_len: int, k: int) -> list[Detection]:
        """The chunk's detections from its one host transfer (``packed``: per-frame scores, -1 where not fired,
        run starts, frame offsets, then the deferred input checks, which raise here)."""
        n = b * t_len * k
        score_h = packed[:n].reshape(b, t_len, k)
        start_h = packed[n:2 * n].reshape(b, t_len, k)
        off_h, bad_s, bad_l, bad_o = (packed[2 * n + i * b: 2 * n + (i + 1) * b] for i in range(4))
        self._raise_deferred(bad_s, bad_l, bad_o, off_h, state, t_len)
        dets = []
        for r, t, j in zip(*(score_h >= 0).nonzero()):
            f = int(off_h[r]) + int(t)
            dets.append(Detection(row=int(r), keyword=self.keywords[j], score=float(score_h[r, t, j]),
                                  start=int(start_h[r, t, j]) * self.frame_shift_s,
                                  end=(f + 1) * self.frame_shift_s, frame=f))
        return dets

    def earliest_start_frame(self, frame):
        """First frame a detection firing at ``frame`` (int or int tensor) may span back to:
        ``frame + 1 - W``, ``W`` the :data:`MAX_KEYWORD_S` window in frames."""
        return frame + 1 - self.max_span_frames

    def _threshold_tensor(self, device: torch.device) -> Tensor:
        """(K,) float64 per-keyword thresholds on ``device`` (cached: no copy per chunk)."""
        thr = self._thr_cache.get(device)
        if thr is None:
            thr = self._thr_cache[device] = torch.tensor(self._thresholds, dtype=torch.float64, device=device)
        return thr

    # ------------------------------------------------------------------ checks

    def _check_shapes(self, state: KwsState, scores: Tensor, lengths: Tensor | Sequence[int],
                      frame_offset: Tensor | Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        if not isinstance(state, KwsState):
            raise TypeError(f"state: expected a KwsState, got {type(state).__name__}")
        if not isinstance(scores, Tensor) or scores.dim() != 3 or not scores.is_floating_point():
            got = f"shape {tuple(scores.shape)} dtype {scores.dtype}" if isinstance(scores, Tensor) \
                else type(scores).__name__
            raise ValueError(f"scores: expected a float tensor of shape (B, T, K), got {got}")
        b, _, k = scores.shape
        if k != self.num_keywords:
            raise ValueError(f"scores: expected K = {self.num_keywords} keywords {list(self.keywords)} "
                             f"in the last dimension, got {k}")
        if b != state.batch:
            raise ValueError(f"scores: batch size {b} does not match the state's batch size {state.batch}")
        if state.hist.shape[1:] != (self.window - 1, k):
            raise ValueError(f"state: made for smoothing window {state.hist.shape[1] + 1} and "
                             f"{state.hist.shape[2]} keywords, detector has {self.window} and {k}")
        if state.frames_seen.device != scores.device:
            raise ValueError(f"state is on {state.frames_seen.device} but scores are on {scores.device}")
        out = []
        for name, x in (("lengths", lengths), ("frame_offset", frame_offset)):
            x = torch.as_tensor(x, device=scores.device)
            if x.shape != (b,) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                raise ValueError(f"{name}: expected an integer tensor of shape ({b},), "
                                 f"got shape {tuple(x.shape)} dtype {x.dtype}")
            out.append(x.long())
        return scores, out[0], out[1]

    @staticmethod
    def _raise_deferred(bad_score, bad_len, bad_off, offsets, state: KwsState, t_len: int) -> None:
        if bad_len.any():
            rows = bad_len.nonzero()[0].tolist()
            raise ValueError(f"lengths: must be in [0, T={t_len}], invalid for rows {rows}")
        if bad_score.any():
            rows = bad_score.nonzero()[0].tolist()
            raise ValueError(f"scores: valid frames must be in [0, 1] (not NaN), violated in rows {rows}")
        if bad_off.any():
            r = int(bad_off.nonzero()[0][0])
            expected = int(state.next_frame[r])  # error path only: a host read is fine here
            raise ValueError(f"frame_offset[{r}] = {int(offsets[r])}: expected {expected if expected >= 0 else '>= 0'}"
                             " (the frame after the stream's previous chunk)")


# ---------------------------------------------------------------------- spans


def aligned_span(keyword: str, words: Sequence[Word], earliest_s: float, fire_end_s: float
                 ) -> tuple[float, float] | None:
    """Where the recognizer's hypothesis says a fired keyword was spoken, or None.

    keyword: the phrase, words separated by spaces (compared case-insensitively).
    words: (N,) the stream's best hypothesis of the open segment in time order,
        as decoded up to the end of the chunk the keyword fired in.
    earliest_s: an occurrence must start at or after this time (the firing frame's
        end minus :data:`MAX_KEYWORD_S`, on the frame grid).
    fire_end_s: end of the firing frame.

    The occurrence is the latest word position ``i`` with ``words[i].start >=
    earliest_s`` where either

    * the keyword's n words follow one another: ``words[i:i+n]`` equal them; the
      span is ``(words[i].start, words[i+n-1].end)``;
    * the hypothesis stops inside the keyword (the recognizer emits later
      than the head fires): ``words[i:]`` are m <= n words, the first m - 1
      equal the keyword's, the last is a prefix of the keyword's m-th word;
      the span is ``(words[i].start, max(words[-1].end, fire_end_s))``.
    """
    kw = keyword.casefold().split()
    if not kw:
        return None
    texts = [w.word.casefold() for w in words]
    for i in range(len(words) - 1, -1, -1):
        if words[i].start < earliest_s:
            break
        tail = texts[i:i + len(kw)]
        if tail == kw:
            return words[i].start, words[i + len(kw) - 1].end
        m = len(tail)
        if i + m == len(words) and tail[:-1] == kw[:m - 1] and kw[m - 1].startswith(tail[-1]):
            return words[i].start, max(words[-1].end, fire_end_s)
    return None
