"""Endpoint detection with sherpa-onnx / k2 rules.

A segment ends when the first of three rules fires (checked in this order):

* ``rule1``: trailing silence >= ``rule1_trailing_silence``, even if nothing
  was decoded in the segment;
* ``rule2``: something was decoded and trailing silence >=
  ``rule2_trailing_silence``;
* ``rule3``: the segment is >= ``rule3_max_utterance`` long.

"Trailing silence" is the number of trailing blank frames of the best
hypothesis times ``frame_shift_s``.  To avoid float traps such as
``1.2 / 0.04 = 29.999...``, every duration is converted once to whole frames
with :func:`seconds_to_frames` (the smallest frame count whose duration
reaches it) and the rules compare integers.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from streamd.config import EndpointConfig

__all__ = ["Endpointer", "seconds_to_frames", "RULES"]

RULES = ("rule1", "rule2", "rule3")

# Relative slack when converting seconds to frames: 1.2 s / 0.04 s must be 30 frames, not 31.
_EPS = 1e-9


def seconds_to_frames(seconds: float, frame_shift_s: float) -> int:
    """Smallest whole number of frames n with ``n * frame_shift_s >= seconds``.

    The division is done with a tiny tolerance so that durations that are an
    exact multiple of the frame shift in decimal (2.4 s at 0.04 s = 60 frames)
    are not rounded up by binary floating point error.
    """
    _check_shift(frame_shift_s)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"duration must be a finite number >= 0 seconds, got {seconds!r}")
    return max(0, math.ceil(seconds / frame_shift_s - _EPS))


def _check_shift(frame_shift_s: float) -> None:
    if isinstance(frame_shift_s, bool) or not isinstance(frame_shift_s, (int, float)) \
            or not (math.isfinite(frame_shift_s) and frame_shift_s > 0):
        raise ValueError(f"frame_shift_s must be a finite number > 0 seconds, got {frame_shift_s!r}")


def _as_int_list(name: str, x: Sequence[int] | Tensor) -> list[int]:
    """Host list of non-negative ints from a (B,) integer tensor or a sequence."""
    if isinstance(x, Tensor):
        if x.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D tensor of shape (B,), got shape {tuple(x.shape)}")
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise ValueError(f"{name}: expected an integer tensor, got dtype {x.dtype}")
        vals = x.tolist()
    else:
        vals = list(x)
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name}[{i}]: expected an integer, got {v!r}")
        if v < 0:
            raise ValueError(f"{name}[{i}]: must be >= 0, got {v}")
    return vals


class Endpointer:
    """Per-stream endpoint rules for a batch of B streams.

    cfg: the endpoint rules in seconds; frame_shift_s: duration of one encoder
    frame (0.04 s for the default model).  Stateless: the caller tracks the
    segment's frame count, its best hypothesis' trailing blanks and tokens.
    """

    def __init__(self, cfg: EndpointConfig, frame_shift_s: float) -> None:
        if not isinstance(cfg, EndpointConfig):
            raise TypeError(f"cfg: expected an EndpointConfig, got {type(cfg).__name__}")
        _check_shift(frame_shift_s)
        self.cfg = cfg
        self.frame_shift_s = float(frame_shift_s)
        self.rule1_frames = seconds_to_frames(cfg.rule1_trailing_silence, frame_shift_s)
        self.rule2_frames = seconds_to_frames(cfg.rule2_trailing_silence, frame_shift_s)
        self.rule3_frames = seconds_to_frames(cfg.rule3_max_utterance, frame_shift_s)

    def check(self, trailing_blank_frames: Sequence[int] | Tensor, segment_frames: Sequence[int] | Tensor,
              decoded_tokens: Sequence[int] | Tensor) -> list[str | None]:
        """Name of the first rule that fired per stream (``rule1``/``rule2``/``rule3``) or None.

        trailing_blank_frames: (B,) int, trailing blank frames of each stream's
            best hypothesis in the current segment (<= segment_frames).
        segment_frames: (B,) int, encoder frames in the current segment so far.
        decoded_tokens: (B,) int, tokens the best hypothesis emitted in the segment.
        Tensors may live on any device; they are copied to the host once.
        """
        tensors = [x for x in (trailing_blank_frames, segment_frames, decoded_tokens) if isinstance(x, Tensor)]
        if len(tensors) == 3 and all(t.dim() == 1 and t.shape == tensors[0].shape and t.device == tensors[0].device
                                     and not t.is_floating_point() and t.dtype != torch.bool for t in tensors):
            # single device-to-host transfer for the common all-tensor case
            trailing, seg, dec = (list(r) for r in torch.stack([t.long() for t in tensors]).tolist())
            names = ("trailing_blank_frames", "segment_frames", "decoded_tokens")
            for name, vals in zip(names, (trailing, seg, dec)):
                _as_int_list(name, vals)
        else:
            trailing = _as_int_list("trailing_blank_frames", trailing_blank_frames)
            seg = _as_int_list("segment_frames", segment_frames)
            dec = _as_int_list("decoded_tokens", decoded_tokens)
        if not (len(trailing) == len(seg) == len(dec)):
            raise ValueError("trailing_blank_frames, segment_frames and decoded_tokens must have the same length B, "
                             f"got {len(trailing)}, {len(seg)}, {len(dec)}")
        for i, (tb, sf) in enumerate(zip(trailing, seg)):
            if tb > sf:
                raise ValueError(f"trailing_blank_frames[{i}] = {tb} exceeds segment_frames[{i}] = {sf}")
        if not self.cfg.enabled:
            return [None] * len(trailing)
        return [self._rule(tb, sf, nd) for tb, sf, nd in zip(trailing, seg, dec)]

    def check_arrays(self, trailing_blank_frames: np.ndarray, segment_frames: np.ndarray,
                     decoded_tokens: np.ndarray) -> list[str | None]:
        """:meth:`check` of (B,) integer numpy arrays, evaluated as arrays (no Python per stream but the
        result list): the same rules, order and errors."""
        arrays = (trailing_blank_frames, segment_frames, decoded_tokens)
        names = ("trailing_blank_frames", "segment_frames", "decoded_tokens")
        for name, x in zip(names, arrays):
            if not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype.kind not in "iu":
                raise ValueError(f"{name}: expected a 1-D integer numpy array")
            if x.size and x.min() < 0:
                i = int(np.argmax(x < 0))
                raise ValueError(f"{name}[{i}]: must be >= 0, got {int(x[i])}")
        tb, seg, dec = arrays
        if not (tb.shape == seg.shape == dec.shape):
            raise ValueError("trailing_blank_frames, segment_frames and decoded_tokens must have the same length B, "
                             f"got {tb.size}, {seg.size}, {dec.size}")
        if (tb > seg).any():
            i = int(np.argmax(tb > seg))
            raise ValueError(f"trailing_blank_frames[{i}] = {int(tb[i])} exceeds segment_frames[{i}] = {int(seg[i])}")
        if not self.cfg.enabled:
            return [None] * tb.size
        code = np.where(tb >= self.rule1_frames, 1,
                        np.where((dec > 0) & (tb >= self.rule2_frames), 2, np.where(seg >= self.rule3_frames, 3, 0)))
        return [(None, *RULES)[c] for c in code.tolist()]

    def _rule(self, trailing: int, segment: int, decoded: int) -> str | None:
        if trailing >= self.rule1_frames:
            return "rule1"
        if decoded > 0 and trailing >= self.rule2_frames:
            return "rule2"
        if segment >= self.rule3_frames:
            return "rule3"
        return None
