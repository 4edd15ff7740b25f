"""Batched, incremental transducer greedy search.

For each frame, every stream takes the joiner's argmax; a stream that emits
a non-blank token stays on the frame for another symbol (up to
``max_symbols_per_frame``), a stream that takes blank moves on.  Decoder
outputs are cached per stream and recomputed only for the streams that
emitted, in one batched decoder call per symbol step.  The state carries
over between chunks, so decoding chunk by chunk equals decoding the whole
utterance at once.

The only host synchronization is the "did anyone emit?" test that ends a
frame's symbol loop early; on CPU it is free.  (A GPU label-looping variant
without it belongs to the benchmarks work.)

Shape legend: B streams, T encoder frames in the chunk, J joiner dim,
V vocabulary, L token capacity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.decoder import DecoderState
from ..model.transducer import Transducer
from .common import BlankConfAcc, Measure, initial_decoder
from .hyps import HypBuffer, HypOut

__all__ = ["GreedyState", "GreedySearch"]


@dataclass
class GreedyState:
    """Greedy search state for B streams.

    dec_state: decoder state of each stream's hypothesis (N = B).
    dec_p: (B, J) projected decoder output for the current context.
    hyps: (B, 1, L) emitted tokens of the current segment.
    score: (B,) total log-prob of the chosen symbols (blanks included).
    trailing: (B,) int64 frames since the last emitted token (or segment start).
    acc: (B, 1) pending blank-frame confidences.
    """

    dec_state: DecoderState
    dec_p: Tensor
    hyps: HypBuffer
    score: Tensor
    trailing: Tensor
    acc: BlankConfAcc

    @staticmethod
    def cat(states: list["GreedyState"]) -> "GreedyState":
        return GreedyState(DecoderState.cat([s.dec_state for s in states]), torch.cat([s.dec_p for s in states]),
                           HypBuffer.cat([s.hyps for s in states]), torch.cat([s.score for s in states]),
                           torch.cat([s.trailing for s in states]), BlankConfAcc.cat([s.acc for s in states]))

    def select(self, rows: Tensor) -> "GreedyState":
        """Sub-batch: rows (B',) int64."""
        return GreedyState(self.dec_state.select(rows), self.dec_p[rows], self.hyps.select_streams(rows),
                           self.score[rows], self.trailing[rows], self.acc.select(rows))


class GreedySearch:
    """Greedy search over a :class:`Transducer`'s decoder and joiner.

    measure: frame confidence function (log-probs (..., V) -> (...)); None stores 1.0.
    exclude_blank: if False, blank frames since the previous token are folded
    into a token's confidence with ``aggregation``.
    """

    def __init__(self, model: Transducer, max_symbols_per_frame: int = 3, measure: Measure | None = None,
                 exclude_blank: bool = True, aggregation: str = "min"):
        self.model = model
        self.blank = model.blank_id
        self.max_symbols = max_symbols_per_frame
        self.measure = measure
        self.exclude_blank = exclude_blank
        self.aggregation = aggregation

    def init_state(self, batch: int, device: torch.device | str = "cpu") -> GreedyState:
        st, dp = initial_decoder(self.model, batch, device)
        return GreedyState(st, dp, HypBuffer.empty(batch, 1, device), torch.zeros(batch, device=device),
                           torch.zeros(batch, dtype=torch.long, device=device), BlankConfAcc.zeros(batch, 1, device))

    def reset(self, state: GreedyState, rows: Tensor) -> GreedyState:
        """Start a new segment for streams where rows (B,) bool: empty hypothesis, fresh decoder context."""
        st, dp = initial_decoder(self.model, state.dec_p.shape[0], state.dec_p.device)
        state.dec_state = state.dec_state.where(rows, st)
        state.dec_p = torch.where(rows[:, None], dp, state.dec_p)
        state.hyps.clear(rows)
        state.score = state.score.masked_fill(rows, 0.0)
        state.trailing = state.trailing.masked_fill(rows, 0)
        state.acc.clear(rows[:, None])
        return state

    def _conf(self, logp: Tensor) -> Tensor:
        if self.measure is None:
            return torch.ones(logp.shape[:-1], device=logp.device)
        return self.measure(logp)

    @torch.no_grad()
    def step(self, state: GreedyState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> GreedyState:
        """Decode one chunk.

        enc_p: (B, T, J) projected encoder frames; lengths: (B,) valid frames;
        frame_offset: (B,) int64 absolute index of each stream's first frame in this chunk.
        """
        b, t_max, _ = enc_p.shape
        state = dataclasses.replace(state, hyps=state.hyps.copy())  # the caller's state stays untouched
        model, blank = self.model, self.blank
        state.hyps.reserve(int(state.hyps.lengths.max()) + t_max * self.max_symbols)
        for t in range(t_max):
            active = t < lengths  # (B,)
            e = enc_p[:, t]  # (B, J)
            frame = frame_offset + t  # (B,)
            emitted_here = torch.zeros_like(active)
            for _ in range(self.max_symbols):
                logp = model.joiner.log_probs(e, state.dec_p)  # (B, V)
                best_lp, tok = logp.max(dim=-1)  # (B,)
                conf = self._conf(logp)  # (B,)
                emit = active & (tok != blank)
                took_blank = active & ~emit
                state.score = state.score + torch.where(active, best_lp, torch.zeros_like(best_lp))
                if not self.exclude_blank:
                    state.acc.add(took_blank[:, None], conf[:, None])
                    conf = state.acc.fold(conf[:, None], self.aggregation)[:, 0]
                if not bool(emit.any()):
                    break
                state.hyps.append(emit[:, None], tok[:, None], frame[:, None], conf[:, None])
                state.acc.clear(emit[:, None])
                idx = emit.nonzero()[:, 0]  # (M,)
                out, new_st = model.decoder.step(state.dec_state.select(idx), tok[idx])
                state.dec_state = state.dec_state.scatter(idx, new_st)
                state.dec_p = state.dec_p.index_copy(0, idx, model.decoder_proj(out))
                emitted_here = emitted_here | emit
                active = emit
            # a stream that reached max symbols moves on without a blank
            valid = t < lengths
            state.trailing = torch.where(emitted_here, torch.zeros_like(state.trailing),
                                         state.trailing + valid.long())
        return state

    def best(self, state: GreedyState) -> list[HypOut]:
        """Each stream's hypothesis (one host transfer for the batch)."""
        which = torch.zeros(state.score.shape[0], dtype=torch.long, device=state.score.device)
        return state.hyps.to_lists(which, state.score[:, None])

    def nbest(self, state: GreedyState, n: int = 1) -> list[list[HypOut]]:
        return [[h] for h in self.best(state)]

    def trailing_blanks(self, state: GreedyState) -> Tensor:
        """(B,) frames since the last emitted token."""
        return state.trailing
