"""Batched, incremental transducer greedy search, in two equivalent formulations.

**Frame looping** (default, ``sync_free=False``).  For each frame, every
stream takes the joiner's argmax; a stream that emits a non-blank token stays
on the frame for another symbol (up to ``max_symbols_per_frame``), a stream
that takes blank moves on.  Decoder outputs are cached per stream and
recomputed only for the streams that emitted (``emit.nonzero()``), and a
frame's symbol loop ends as soon as no stream emitted (``bool(emit.any())``).
Both are host synchronizations, per frame and per symbol: free on CPU, where
they save decoder work, but each one stalls a GPU's launch queue.

**Label looping** (``sync_free=True``, NeMo's label-looping greedy decoder).
Each stream keeps its own cursor (frame index ``t_b`` within the chunk and
symbols emitted on that frame).  Every iteration evaluates
``joiner(enc_p[b, t_b], dec_p[b])`` for all B streams at once; emitting
streams append their token and take the decoder output, which is computed
for all B rows and kept with ``torch.where`` only where a token was emitted;
a stream that took blank, or reached ``max_symbols_per_frame``, advances
``t_b``.  Streams past their length are masked and change nothing.  A
stream needs at least ``lengths_b`` and at most ``lengths_b * max_symbols``
iterations, so the loop runs in at most :attr:`GreedySearch.MAX_ROUNDS`
rounds of iterations with no host synchronization inside a round: the first
round runs ``max(lengths)`` iterations, each later round the remaining
frames of the slowest stream (a lower bound, so nothing is wasted), and the
last round the remaining upper bound, which guarantees completion.  Between
rounds one small tensor crosses to the host; per chunk that is at most
``MAX_ROUNDS`` transfers whatever the number of frames.  Every stream sees
exactly the same sequence of joiner evaluations as with frame looping, so
both modes give the same tokens, frames, scores and confidences.  (The loop
body is plain tensor code; capturing it in a CUDA graph would cut kernel
launch costs further but is not done here.)

The state carries over between chunks, so decoding chunk by chunk equals
decoding the whole utterance at once.  The search never looks at devices:
the engine chooses ``sync_free`` (True on CUDA).

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
from .common import BlankConfAcc, Measure, check_step_inputs, initial_decoder, refuse_hotwords
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


@dataclass
class _Cursor:
    """Label-looping position of B streams within one chunk.

    t: (B,) int64 current frame (chunk-relative); equals the stream's length once it is done.
    sym: (B,) int64 symbols emitted on the current frame.
    emitted: (B,) bool whether the current frame emitted a token.
    """

    t: Tensor
    sym: Tensor
    emitted: Tensor


class GreedySearch:
    """Greedy search over a :class:`Transducer`'s decoder and joiner.

    measure: frame confidence function (log-probs (..., V) -> (...)); None stores 1.0.
    exclude_blank: if False, blank frames since the previous token are folded
    into a token's confidence with ``aggregation``.
    sync_free: use label looping (no host synchronization per frame or symbol;
    see the module docstring); results are the same as with frame looping.
    """

    reads = "enc_p"
    several = False
    ranks_final = False
    append_only = True

    MAX_ROUNDS = 3
    """Label looping: most rounds of iterations per chunk, and so most host transfers per chunk
    (one before the first round, one between rounds).  Must be >= 1."""

    def __init__(self, model: Transducer, max_symbols_per_frame: int = 3, measure: Measure | None = None,
                 exclude_blank: bool = True, aggregation: str = "min", sync_free: bool = False):
        if max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {max_symbols_per_frame}")
        self.model = model
        self.blank = model.blank_id
        self.max_symbols = max_symbols_per_frame
        self.measure = measure
        self.exclude_blank = exclude_blank
        self.aggregation = aggregation
        self.sync_free = sync_free

    def new_state(self, beam: int, device: torch.device | str = "cpu", graph=None):
        """Fresh state of one stream (the :class:`~streamd.decode.common.Search` interface)."""
        refuse_hotwords(graph)
        return self.init_state(1, device)

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

        enc_p: (B, T, J) projected encoder frames; lengths: (B,) valid frames
        (values above T count as T); frame_offset: (B,) int64 absolute index of
        each stream's first frame in this chunk.  Returns the new state; the
        given one is left unchanged.
        """
        check_step_inputs(enc_p, lengths, frame_offset, state.dec_p.shape[0])
        state = dataclasses.replace(state, hyps=state.hyps.copy())  # the caller's state stays untouched
        if enc_p.shape[0] == 0 or enc_p.shape[1] == 0:
            return state
        if self.sync_free:
            return self._label_looping(state, enc_p, lengths, frame_offset)
        return self._frame_looping(state, enc_p, lengths, frame_offset)

    def _joint(self, state: GreedyState, e: Tensor, active: Tensor, sync: bool = False
               ) -> tuple[Tensor, Tensor, Tensor | None]:
        """One joiner evaluation of every stream: best token, its score and confidence.

        e: (B, J) projected encoder frame of each stream; active: (B,) bool streams still on a frame.
        Adds active streams' best log-prob to ``state.score`` and, with blank frames
        folded in, their blank confidences to ``state.acc``.
        Returns tok (B,) int64, emit (B,) bool (active and not blank), conf (B,) float.
        sync: the caller may wait for the device; then conf is None when no stream emits (and with
        blank frames excluded it is not computed: most frames of most streams are blank).
        """
        logp = self.model.joiner.log_probs(e, state.dec_p)  # (B, V)
        best_lp, tok = logp.max(dim=-1)  # (B,)
        emit = active & (tok != self.blank)
        state.score = state.score + torch.where(active, best_lp, torch.zeros_like(best_lp))
        emitted = bool(emit.any()) if sync else True
        if self.exclude_blank and not emitted:
            return tok, emit, None
        conf = self._conf(logp)  # (B,)
        if not self.exclude_blank:
            state.acc.add((active & ~emit)[:, None], conf[:, None])
            conf = state.acc.fold(conf[:, None], self.aggregation)[:, 0]
        return tok, emit, conf if emitted else None

    def _frame_looping(self, state: GreedyState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> GreedyState:
        b, t_max, _ = enc_p.shape
        model = self.model
        state.hyps.reserve(int(state.hyps.lengths.max()) + t_max * self.max_symbols)
        for t in range(t_max):
            active = t < lengths  # (B,)
            e = enc_p[:, t]  # (B, J)
            frame = frame_offset + t  # (B,)
            emitted_here = torch.zeros_like(active)
            for _ in range(self.max_symbols):
                tok, emit, conf = self._joint(state, e, active, sync=True)
                if conf is None:  # no stream emitted
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

    def _label_looping(self, state: GreedyState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> GreedyState:
        b, t_max, _ = enc_p.shape
        dev = enc_p.device
        lengths = lengths.to(device=dev, dtype=torch.long).clamp(0, t_max)
        frame_offset = frame_offset.to(device=dev, dtype=torch.long)
        zero = torch.zeros(b, dtype=torch.long, device=dev)
        rows = torch.arange(b, device=dev)
        cur = _Cursor(zero, zero, torch.zeros(b, dtype=torch.bool, device=dev))
        # one host transfer: buffer capacity bound and the first round's length
        hyp_len, n = torch.stack([state.hyps.lengths.max(), lengths.max()]).tolist()
        state.hyps.reserve(hyp_len + t_max * self.max_symbols)
        m = self.max_symbols
        if self.MAX_ROUNDS == 1:
            n *= m
        for rnd in range(1, self.MAX_ROUNDS + 1):
            for _ in range(n):
                self._iteration(state, cur, enc_p, rows, lengths, frame_offset)
            if rnd == self.MAX_ROUNDS:
                break
            left = lengths - cur.t  # (B,) frames each stream still has to finish
            upper = (left * m - cur.sym).clamp_min(0)  # most iterations they can still take
            lo, hi = torch.stack([left.max(), upper.max()]).tolist()
            if lo == 0:
                break
            n = hi if rnd + 1 == self.MAX_ROUNDS else lo
        return state

    def _iteration(self, state: GreedyState, cur: _Cursor, enc_p: Tensor, rows: Tensor, lengths: Tensor,
                   frame_offset: Tensor) -> None:
        """One label-looping step of all B streams (tensor ops only; updates state and cur in place).

        enc_p: (B, T, J); rows: (B,) int64 arange(B); lengths: (B,) int64 clamped to T;
        frame_offset: (B,) int64.
        """
        model, t_max = self.model, enc_p.shape[1]
        active = cur.t < lengths  # (B,)
        e = enc_p[rows, cur.t.clamp(max=t_max - 1)]  # (B, J)
        tok, emit, conf = self._joint(state, e, active)
        took_blank = active & ~emit
        state.hyps.append(emit[:, None], tok[:, None], (frame_offset + cur.t)[:, None], conf[:, None])
        state.acc.clear(emit[:, None])
        # decoder for every row; non-emitting rows keep their cached context
        out, new_st = model.decoder.step(state.dec_state, tok)
        state.dec_state = state.dec_state.where(emit, new_st)
        state.dec_p = torch.where(emit[:, None], model.decoder_proj(out), state.dec_p)
        sym = cur.sym + emit.long()
        emitted = cur.emitted | emit
        advance = took_blank | (emit & (sym >= self.max_symbols))  # (B,) frame finished
        state.trailing = torch.where(advance, torch.where(emitted, torch.zeros_like(state.trailing),
                                                          state.trailing + 1), state.trailing)
        cur.t = cur.t + advance.long()
        cur.sym = sym.masked_fill(advance, 0)
        cur.emitted = emitted & ~advance

    def best(self, state: GreedyState, final: bool = False) -> list[HypOut]:
        """Each stream's hypothesis (one host transfer for the batch);
        final: see :class:`~streamd.decode.common.Search` (no end-of-segment term here)."""
        return state.hyps.to_lists(self.best_slots(state), state.score[:, None])

    def best_slots(self, state: GreedyState) -> Tensor:
        """(B,) zeros: one hypothesis per stream."""
        return torch.zeros(state.score.shape[0], dtype=torch.long, device=state.score.device)

    def nbest(self, state: GreedyState, n: int = 1, final: bool = False) -> list[list[HypOut]]:
        return [[h] for h in self.best(state)]

    def trailing_blanks(self, state: GreedyState) -> Tensor:
        """(B,) frames since the last emitted token."""
        return state.trailing
