"""Pieces shared by the transducer searches.

* :class:`BlankConfAcc`: running aggregate of blank-frame confidences since a
  hypothesis' last token, folded into the next token's confidence when a
  search is asked to include blank frames (``exclude_blank=False``).
* :func:`hash_extend`: rolling int64 hash of token sequences, used to find
  and merge identical hypotheses with tensor ops.
* :class:`Search`: what the engine calls on every search (transducer and CTC).

Shape legend: B streams, K hypotheses per stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import torch
from torch import Tensor

if TYPE_CHECKING:
    from ..model.decoder import DecoderState
    from .hyps import HypOut

__all__ = ["Search", "Measure", "BlankConfAcc", "hash_extend", "HASH_START", "initial_decoder", "check_step_inputs",
           "refuse_hotwords"]

Measure = Callable[[Tensor], Tensor]
"""Maps log-probs (..., V) to a confidence (...) in [0, 1]."""


class Search(Protocol):
    """The calls the engine makes on every search; states are each search's own dataclass.

    ``final`` ranks hypotheses as complete segments (the engine passes True when a
    segment ends): a search with an end-of-segment term (the LM's end of sentence
    or hotword take-back in ``modified_beam``) adds it and says so with ``ranks_final``;
    every other search ranks the same either way.

    reads: the head output the search consumes (a :class:`~streamd.model.transducer.HeadOutputs`
    field: ``enc_p`` for transducer searches, ``ctc_log_probs`` for CTC ones).
    several: the search keeps several hypotheses, so ``nbest`` can give alternatives.
    append_only: within a segment the best hypothesis only grows (tokens are appended, never changed), so a
    caller that holds it needs only the tokens past the ones it has.
    """

    reads: str
    several: bool
    ranks_final: bool
    append_only: bool

    def new_state(self, beam: int, device: Any, graph: Any = None) -> Any:
        """Fresh state of one stream: ``beam`` hypotheses where the search keeps several (ignored
        otherwise); ``graph``: a hotword context graph (only searches of ``HOTWORD_METHODS``)."""

    def step(self, state: Any, x: Tensor, lengths: Tensor, frame_offset: Tensor) -> Any:
        """Consume one chunk: x (B, T, ...) per-frame inputs, lengths (B,), frame_offset (B,) int64."""

    def reset(self, state: Any, rows: Tensor) -> Any:
        """Start a new segment for the streams where rows (B,) bool is set."""

    def best(self, state: Any, final: bool = False) -> list["HypOut"]:
        """Best hypothesis of each stream (one host transfer for the batch)."""

    def trailing_blanks(self, state: Any) -> Tensor:
        """(B,) int64 frames since the last token of each stream's best hypothesis."""

    def best_slots(self, state: Any) -> Tensor | None:
        """(B,) int64 index into ``state.hyps`` (a :class:`~streamd.decode.hyps.HypBuffer`) of each stream's
        best hypothesis, the one :meth:`best` returns (``final`` False); None for a search that keeps its
        hypotheses otherwise (then only :meth:`best` gives them)."""

HASH_START = 0x5EED
_HASH_MUL = 0x100000001B3  # FNV-64 prime; int64 products wrap, which is fine for hashing


def initial_decoder(model, n: int, device) -> tuple["DecoderState", Tensor]:
    """Decoder state and projected output (n, J) of n empty hypotheses (blank is the start symbol).

    model: a :class:`~streamd.model.transducer.Transducer`.
    """
    dec = model.decoder
    out, st = dec.step(dec.init_state(n, device), torch.full((n,), model.blank_id, dtype=torch.long, device=device))
    return st, model.decoder_proj(out)


def hash_extend(h: Tensor, tokens: Tensor) -> Tensor:
    """Hash of a sequence extended by one token: h, tokens (...) int64 -> (...) int64."""
    return h * _HASH_MUL + (tokens + 1)


@dataclass
class BlankConfAcc:
    """Aggregates of blank-frame confidences since each hypothesis' last token.

    sum, logsum, min, max: (B, K) float32; count: (B, K) float32.
    """

    sum: Tensor
    logsum: Tensor
    min: Tensor
    max: Tensor
    count: Tensor

    @classmethod
    def zeros(cls, b: int, k: int, device) -> "BlankConfAcc":
        z = torch.zeros(b, k, device=device)
        return cls(z, z.clone(), torch.ones(b, k, device=device), z.clone(), z.clone())

    def add(self, mask: Tensor, conf: Tensor) -> None:
        """Add conf (B, K) where mask (B, K) (a blank was taken) — in place."""
        m = mask.float()
        self.sum = self.sum + m * conf
        self.logsum = self.logsum + m * conf.clamp_min(1e-10).log()
        self.min = torch.where(mask, torch.minimum(self.min, conf), self.min)
        self.max = torch.where(mask, torch.maximum(self.max, conf), self.max)
        self.count = self.count + m

    def fold(self, conf: Tensor, how: str) -> Tensor:
        """Token confidence including the pending blank frames: conf (B, K) -> (B, K)."""
        if how == "min":
            return torch.minimum(self.min, conf)
        if how == "max":
            return torch.maximum(self.max, conf)
        if how == "mean":
            return (self.sum + conf) / (self.count + 1)
        if how == "prod":
            return (self.logsum + conf.clamp_min(1e-10).log()).exp()
        raise ValueError(f"unknown aggregation {how!r}")

    def clear(self, mask: Tensor) -> None:
        """Forget the pending blank frames where mask (B, K) (a token was emitted)."""
        keep = (~mask).float()
        self.sum = self.sum * keep
        self.logsum = self.logsum * keep
        self.min = torch.where(mask, torch.ones_like(self.min), self.min)
        self.max = torch.where(mask, torch.zeros_like(self.max), self.max)
        self.count = self.count * keep

    def gather(self, parent: Tensor) -> "BlankConfAcc":
        """Follow hypotheses to their parents: parent (B, K') int64."""
        return BlankConfAcc(*(x.gather(1, parent) for x in (self.sum, self.logsum, self.min, self.max, self.count)))

    def select(self, rows: Tensor) -> "BlankConfAcc":
        return BlankConfAcc(*(x[rows] for x in (self.sum, self.logsum, self.min, self.max, self.count)))

    def put(self, rows: Tensor, other: "BlankConfAcc") -> "BlankConfAcc":
        """Copy with the streams rows (B',) int64 replaced by other's B' streams."""
        return BlankConfAcc(*(x.index_copy(0, rows, y) for x, y in
                              zip((self.sum, self.logsum, self.min, self.max, self.count),
                                  (other.sum, other.logsum, other.min, other.max, other.count))))

    def widen(self, k: int) -> "BlankConfAcc":
        """Pad the K axis to k slots with empty accumulators."""
        def pad(x: Tensor, v: float) -> Tensor:
            return torch.nn.functional.pad(x, (0, k - x.shape[1]), value=v)

        return BlankConfAcc(pad(self.sum, 0), pad(self.logsum, 0), pad(self.min, 1), pad(self.max, 0),
                            pad(self.count, 0))

    @staticmethod
    def cat(accs: list["BlankConfAcc"]) -> "BlankConfAcc":
        """Concatenate along B, padding K to the largest."""
        k = max(a.sum.shape[1] for a in accs)
        accs = [a.widen(k) for a in accs]
        return BlankConfAcc(*(torch.cat([getattr(a, f) for a in accs]) for f in ("sum", "logsum", "min", "max", "count")))


def refuse_hotwords(graph: Any) -> None:
    """ValueError for a hotword context graph given to a search that does not take one (``new_state``)."""
    if graph is not None:
        raise ValueError("this search takes no hotwords")


def check_step_inputs(enc_p: Tensor, lengths: Tensor, frame_offset: Tensor, batch: int) -> None:
    """Check a transducer search step's inputs (shapes and dtypes only: no device sync).

    enc_p: (B, T, J); lengths, frame_offset: (B,) integer; batch: B of the search state.
    """
    if enc_p.dim() != 3:
        raise ValueError(f"enc_p must be (B, T, J), got shape {tuple(enc_p.shape)}")
    b = enc_p.shape[0]
    if b != batch:
        raise ValueError(f"enc_p has {b} streams but the search state has {batch}")
    for name, x in (("lengths", lengths), ("frame_offset", frame_offset)):
        if x.shape != (b,):
            raise ValueError(f"{name} must have shape ({b},) (one per stream), got {tuple(x.shape)}")
        if x.dtype.is_floating_point or x.dtype == torch.bool:
            raise ValueError(f"{name} must be an integer tensor, got {x.dtype}")
