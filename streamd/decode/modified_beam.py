"""Batched, incremental modified beam search (icefall ``modified_beam_search``).

With ``max_symbols_per_frame=1`` (icefall's algorithm) at most one symbol
per frame: for every frame, each stream's K live hypotheses are scored with
the joiner in one call over all streams (B, K, V); the top ``beam`` of the
K x V extensions of a stream survive (blank keeps the hypothesis, a token
extends it and ends its frame too); survivors with the same token sequence
are merged by adding their probabilities (log-sum-exp), the best-scoring one
keeping its timing and confidences.

With ``max_symbols_per_frame=S > 1`` a frame is expanded in up to S such
rounds, as time-synchronous decoding does (Saon et al., ICASSP 2020): a
token no longer ends the frame, so its hypothesis must still pay for the
blank that leaves the frame (the transducer's own path probability) or
emit again; hypotheses that took blank compete unchanged in the later
rounds; tokens of round S end the frame (the cap).  Merging needs the same
sequence and the same frame status.  A fine-grained vocabulary (characters,
40 ms frames) often needs two symbols on one frame; one-symbol search must
then drop or delay them, which makes it worse than greedy search.  On CPU
the rounds stop once every hypothesis has consumed the frame, and in a
large batch a later round runs only on the streams that still have a
hypothesis in the frame (``COMPACT_BELOW``, ``COMPACT_MIN_STREAMS``).

Streams may have different beams:
hypotheses are laid out on a (B, K = max beam) grid whose unused slots score
-inf.  Identical sequences are found through a rolling int64 hash.

Decoder outputs are cached per hypothesis.  Frame loop and merge are tensor
ops; how the decoder is advanced after each frame depends on ``sync_free``:

* ``sync_free=False`` (CPU default): only the hypotheses that emitted a token
  run the decoder (``emit.nonzero()``, one batched call), and the call is
  skipped when nobody emitted (``bool(emit.any())``).  Two host
  synchronizations per frame, free on CPU, and they save decoder work.
* ``sync_free=True`` (the engine's choice on CUDA): the decoder runs on all
  B x K hypotheses with their candidate tokens (a blank row feeds blank, whose
  output is discarded) and ``torch.where`` keeps the parent's cached state and
  output for rows that did not emit.  No host synchronization inside the
  chunk; the only one per chunk is the buffer-capacity bound before the loop.

Both give the same hypotheses, scores and confidences (``sync_free`` always
runs the S rounds of a frame).

Language-model shallow fusion (``lm``, an :class:`~streamd.decode.lm.NgramLM`
over the same tokens, ``lm_weight`` lambda and ``lm_bonus`` beta): every
token extension is scored ``log p_rnnt + min(0, lambda * log p_lm(token |
hypothesis) + beta)``; blank adds nothing.  The per-token bonus beta offsets
the LM's preference for short hypotheses (without it, deletions grow with
lambda); capped at 0, so fusion can lower a token's score but never raise it
above the acoustic model's own: a bonus larger than the LM's cost made the
LM write words into silence (e.g. "on" after every endpoint on digital
silence, where the model alone writes nothing).  Each hypothesis carries its LM automaton state (two gathers per
round, no host synchronization).  Hypotheses with the same tokens have the
same LM state, so merging is unchanged.  ``best(final=True)`` also adds
``lambda * log p_lm(</s> | hypothesis)`` to every non-empty hypothesis, so a
segment that ends mid-word ("call sar") loses to one that ends a sentence
("call sarah"); the empty one has no sentence to end and gets no such term.

Shape legend: B streams, K = max beam, V vocabulary, J joiner dim,
T frames in the chunk, L token capacity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..model.decoder import DecoderState
from ..model.transducer import Transducer
from .context_graph import ContextGraph, GraphSet
from .common import HASH_START, BlankConfAcc, Measure, check_step_inputs, hash_extend, initial_decoder
from .hyps import HypBuffer, HypOut, HypTrail, HypTrailRows
from .lm import NgramLM

__all__ = ["BeamState", "ModifiedBeamSearch"]

NEG_INF = float("-inf")


@dataclass
class BeamState:
    """Hypotheses of B streams on a (B, K) grid.

    beams: (B,) int64 beam size per stream (<= K).
    scores: (B, K) log-probability, -inf for unused slots.
    hashes: (B, K) int64 hash of each token sequence.
    dec_state: decoder state of the B * K hypotheses (row b * K + k).
    dec_p: (B, K, J) projected decoder outputs.
    hyps: (B, K, L) emitted tokens, frames and confidences.
    trailing: (B, K) int64 frames since each hypothesis' last token.
    acc: (B, K) pending blank-frame confidences.
    lm_state: (B, K) int64 LM automaton state of each hypothesis (0 without an LM).
    ctx: the context graphs (hotwords) of the batch's streams, None when no stream has any.
    ctx_part: (B,) int64 each stream's graph in ``ctx``; ctx_state: (B, K) int64 global graph state
    of each hypothesis (both None with ``ctx``).
    matches: (B, K, 3) int64, the last phrase each hypothesis completed in its segment: phrase index
    within its stream's graph (-1: none), the hypothesis' length and the frame at that token; only kept
    by a search made with ``track_matches`` (None otherwise).
    """

    beams: Tensor
    scores: Tensor
    hashes: Tensor
    dec_state: DecoderState
    dec_p: Tensor
    hyps: HypBuffer
    trailing: Tensor
    acc: BlankConfAcc
    lm_state: Tensor
    ctx: GraphSet | None = None
    ctx_part: Tensor | None = None
    ctx_state: Tensor | None = None
    matches: Tensor | None = None

    @property
    def k(self) -> int:
        return self.scores.shape[1]

    def _slots(self, rows: Tensor) -> Tensor:
        """(B' K,) int64 flat indices of the hypotheses of the streams rows (B',) (the decoder state's rows)."""
        return (rows[:, None] * self.k + torch.arange(self.k, device=rows.device)).reshape(-1)

    def _sub(self, rows: Tensor, hyps: HypBuffer) -> "BeamState":
        """Sub-batch of the streams rows (B',) int64 holding the token buffer ``hyps``."""
        ctx = (self.ctx, self.ctx_part[rows], self.ctx_state[rows]) if self.ctx is not None else (None, None, None)
        return BeamState(self.beams[rows], self.scores[rows], self.hashes[rows],
                         self.dec_state.select(self._slots(rows)), self.dec_p[rows], hyps, self.trailing[rows],
                         self.acc.select(rows), self.lm_state[rows], *ctx,
                         self.matches[rows] if self.matches is not None else None)

    def select(self, rows: Tensor) -> "BeamState":
        """Sub-batch: rows (B',) int64."""
        return self._sub(rows, self.hyps.select_streams(rows))

    def round_rows(self, rows: Tensor) -> "BeamState":
        """Sub-batch of what an expansion round reads and writes, for the streams rows (B',) int64: as
        :meth:`select` but sharing the token buffer (a round records its tokens on a
        :class:`~streamd.decode.hyps.HypTrail`, not in ``hyps``); :meth:`put_rows` writes it back."""
        return self._sub(rows, self.hyps)

    def put_rows(self, rows: Tensor, sub: "BeamState") -> None:
        """The per-hypothesis parts of the streams rows (B',) int64 replaced by sub's (from :meth:`round_rows`
        after a round); new tensors, so a caller's state sharing the old ones stays untouched."""
        self.scores = self.scores.index_copy(0, rows, sub.scores)
        self.hashes = self.hashes.index_copy(0, rows, sub.hashes)
        self.dec_state = self.dec_state.scatter(self._slots(rows), sub.dec_state)
        self.dec_p = self.dec_p.index_copy(0, rows, sub.dec_p)
        self.trailing = self.trailing.index_copy(0, rows, sub.trailing)
        self.acc = self.acc.put(rows, sub.acc)
        self.lm_state = self.lm_state.index_copy(0, rows, sub.lm_state)
        if self.ctx is not None:
            self.ctx_state = self.ctx_state.index_copy(0, rows, sub.ctx_state)
        if self.matches is not None:
            self.matches = self.matches.index_copy(0, rows, sub.matches)

    def widen(self, k: int) -> "BeamState":
        """Same hypotheses on a wider grid of k >= K slots (new slots unused, scored -inf)."""
        extra = k - self.k
        if extra < 0:
            raise ValueError(f"cannot narrow a beam grid from {self.k} to {k} slots")
        if extra == 0:
            return self
        b = self.scores.shape[0]
        pad = torch.nn.functional.pad
        # new slots copy hypothesis 0's decoder state; they are never selected (-inf)
        idx = pad(torch.arange(b * self.k, device=self.scores.device).view(b, self.k), (0, extra)).reshape(-1)
        h = self.hyps
        hb = HypBuffer(pad(h.tokens, (0, 0, 0, extra)), pad(h.frames, (0, 0, 0, extra)),
                       pad(h.confs, (0, 0, 0, extra)), pad(h.lengths, (0, extra)))
        return BeamState(self.beams, pad(self.scores, (0, extra), value=NEG_INF), pad(self.hashes, (0, extra)),
                         self.dec_state.select(idx), pad(self.dec_p, (0, 0, 0, extra)), hb,
                         pad(self.trailing, (0, extra)), self.acc.widen(k),
                         pad(self.lm_state, (0, extra)), self.ctx, self.ctx_part,
                         pad(self.ctx_state, (0, extra)) if self.ctx is not None else None,
                         pad(self.matches, (0, 0, 0, extra), value=-1) if self.matches is not None else None)

    @staticmethod
    def cat(states: list["BeamState"]) -> "BeamState":
        k = max(s.k for s in states)
        states = [s.widen(k) for s in states]
        ctx = (None, None, None)
        if any(s.ctx is not None for s in states):
            dev = states[0].scores.device
            parts = [s.ctx_part if s.ctx is not None else torch.zeros(s.scores.shape[0], dtype=torch.long, device=dev)
                     for s in states]
            cst = [s.ctx_state if s.ctx is not None else torch.zeros_like(s.lm_state) for s in states]
            gs, part, cst = GraphSet.merge([s.ctx for s in states], parts, cst)
            ctx = (gs, part, torch.cat(cst))
        return BeamState(torch.cat([s.beams for s in states]), torch.cat([s.scores for s in states]),
                         torch.cat([s.hashes for s in states]), DecoderState.cat([s.dec_state for s in states]),
                         torch.cat([s.dec_p for s in states]), HypBuffer.cat([s.hyps for s in states]),
                         torch.cat([s.trailing for s in states]), BlankConfAcc.cat([s.acc for s in states]),
                         torch.cat([s.lm_state for s in states]), *ctx,
                         torch.cat([s.matches for s in states]) if states[0].matches is not None else None)


class _Choice(NamedTuple):
    """One round's chosen candidates, each (B, K): ``top_i`` their flat (parent, token) index, ``parent`` and
    ``tok``, ``emit`` (a real token, the group's representative), ``rep`` (the representative of its merge
    group), ``took_blank`` (blank consumed the frame in this round), ``new_done``, ``new_hash`` and ``merged``
    (the group's log-sum-exp score)."""

    top_i: Tensor
    parent: Tensor
    tok: Tensor
    emit: Tensor
    rep: Tensor
    took_blank: Tensor
    new_done: Tensor
    new_hash: Tensor
    merged: Tensor



class ModifiedBeamSearch:
    """Modified beam search over a :class:`Transducer` (see module docstring).

    measure: frame confidence function (log-probs (..., V) -> (...)); None stores 1.0.
    exclude_blank: if False, blank frames since a hypothesis' previous token are
    folded into its next token's confidence with ``aggregation``.
    sync_free: advance the decoder for every hypothesis and select with
    ``torch.where`` instead of ``nonzero`` (no host sync per frame).
    max_symbols_per_frame: expansion rounds per frame (1: icefall's search).
    lm, lm_weight, lm_bonus: shallow fusion with a token n-gram (same vocabulary as the model), its
    weight and a per-token bonus.
    """

    COMPACT_BELOW = 0.6
    COMPACT_MIN_STREAMS = 256
    """A round after a frame's first runs on the streams that still have a hypothesis in the frame only (the
    others index-selected out and their results scattered back) when they are at most ``COMPACT_BELOW`` of a
    batch of at least ``COMPACT_MIN_STREAMS`` (CPU path; ``sync_free`` runs every round on the whole batch).
    Measured with the shipped model (docs/benchmarks.md): 64 streams gain nothing (the selects cost what the
    round saves), 1024 streams a few percent of the search."""

    reads = "enc_p"
    several = True
    append_only = False
    ranks_final = True  # the LM's end-of-sentence term and the take-back of unfinished hotwords

    def __init__(self, model: Transducer, measure: Measure | None = None, exclude_blank: bool = True,
                 aggregation: str = "min", sync_free: bool = False, max_symbols_per_frame: int = 1,
                 lm: NgramLM | None = None, lm_weight: float = 0.0, lm_bonus: float = 0.0,
                 token_probs: bool = False, track_matches: bool = False):
        if max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {max_symbols_per_frame}")
        if lm is not None and lm.vocab_size != model.cfg.vocab_size:
            raise ValueError(f"the LM has {lm.vocab_size} tokens but the model {model.cfg.vocab_size}")
        if lm is not None and lm.blank_id != model.blank_id:
            raise ValueError(f"the LM's blank id {lm.blank_id} differs from the model's {model.blank_id}")
        if lm_weight < 0:
            raise ValueError(f"lm_weight must be >= 0, got {lm_weight}")
        self.lm = lm if lm is not None and lm_weight > 0 else None
        self.lm_weight = float(lm_weight)
        self.lm_bonus = float(lm_bonus)
        self._lm_table = None  # (S, V) lambda * log p_lm + beta per token, 0 for blank
        if self.lm is not None:
            table = (self.lm_weight * self.lm.logp + self.lm_bonus).clamp(max=0.0)  # fusion never rewards
            table[:, model.blank_id] = 0.0
            self._lm_table = table
        self.max_symbols = max_symbols_per_frame
        self.model = model
        self.blank = model.blank_id
        self.measure = measure
        self.exclude_blank = exclude_blank
        self.aggregation = aggregation
        self.sync_free = sync_free
        self.token_probs = token_probs
        self.track_matches = track_matches

    def new_state(self, beam: int, device: torch.device | str = "cpu", graph=None):
        """Fresh state of one stream (the :class:`~streamd.decode.common.Search` interface)."""
        return self.init_state(torch.tensor([beam], device=device), device, graph=graph)

    def init_state(self, beams: Tensor, device: torch.device | str = "cpu",
                   graph: ContextGraph | None = None) -> BeamState:
        """Fresh state; beams: (B,) int64 beam size per stream; graph: the streams' hotwords (None: none)."""
        beams = beams.to(device)
        b = beams.shape[0]
        k = int(beams.max()) if b else 1
        st, dp = initial_decoder(self.model, b * k, device)
        scores = torch.full((b, k), NEG_INF, device=device)
        scores[:, 0] = 0.0
        ctx = (None, None, None)
        if graph is not None:
            gs = GraphSet.build((graph,), self.blank, self.model.cfg.vocab_size, device)
            part = torch.zeros(b, dtype=torch.long, device=device)
            ctx = (gs, part, gs.starts(part)[:, None].expand(b, k).clone())
        return BeamState(beams, scores, torch.full((b, k), HASH_START, dtype=torch.long, device=device), st,
                         dp.view(b, k, -1), HypBuffer.empty(b, k, device),
                         torch.zeros(b, k, dtype=torch.long, device=device), BlankConfAcc.zeros(b, k, device),
                         self._lm_start((b, k), device), *ctx,
                         torch.full((b, k, 3), -1, dtype=torch.long, device=device) if self.track_matches else None)

    def _lm_start(self, shape: tuple[int, ...], device) -> Tensor:
        if self.lm is None:
            return torch.zeros(shape, dtype=torch.long, device=device)
        return self.lm.initial(shape, device)

    def reset(self, state: BeamState, rows: Tensor) -> BeamState:
        """New segment for streams where rows (B,) bool: a single empty hypothesis."""
        b, k = state.scores.shape
        st, dp = initial_decoder(self.model, b * k, state.scores.device)
        flat = rows[:, None].expand(b, k).reshape(-1)
        state.dec_state = state.dec_state.where(flat, st)
        state.dec_p = torch.where(rows[:, None, None], dp.view(b, k, -1), state.dec_p)
        fresh = torch.full_like(state.scores, NEG_INF)
        fresh[:, 0] = 0.0
        state.scores = torch.where(rows[:, None], fresh, state.scores)
        state.hashes = state.hashes.masked_fill(rows[:, None], HASH_START)
        state.hyps.clear(rows)
        state.trailing = state.trailing.masked_fill(rows[:, None], 0)
        state.acc.clear(rows[:, None].expand(b, k))
        state.lm_state = torch.where(rows[:, None], self._lm_start((b, k), state.scores.device), state.lm_state)
        if state.ctx is not None:
            state.ctx_state = torch.where(rows[:, None], state.ctx.starts(state.ctx_part)[:, None], state.ctx_state)
        if state.matches is not None:
            state.matches = state.matches.masked_fill(rows[:, None, None], -1)
        return state

    @torch.no_grad()
    def step(self, state: BeamState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> BeamState:
        """Decode one chunk.

        enc_p: (B, T, J) projected encoder frames; lengths: (B,) valid frames;
        frame_offset: (B,) int64 absolute index of each stream's first frame in this chunk.
        Returns the new state; the given one is left unchanged.
        """
        check_step_inputs(enc_p, lengths, frame_offset, state.scores.shape[0])
        b, t_max, _ = enc_p.shape
        state = dataclasses.replace(state, hyps=state.hyps.copy())  # the caller's state stays untouched
        if b == 0 or t_max == 0:
            return state
        k = state.k
        state.hyps.reserve(int(state.hyps.lengths.max()) + t_max * self.max_symbols)
        ar_k = torch.arange(k, device=enc_p.device)  # (K,)
        rank_ok = ar_k[None, :] < state.beams[:, None]  # (B, K)
        trail = HypTrail(state.hyps)  # the rounds' reorders and tokens, written into the buffer once below
        for t in range(t_max):
            # streams past their length start the frame done: their hypotheses are only carried
            done = (t >= lengths)[:, None].expand(b, k)  # (B, K)
            for r in range(self.max_symbols):
                last = r == self.max_symbols - 1
                rows = None  # (B',) the streams the round runs on (None: all)
                if r > 0 and not self.sync_free:
                    live = (~done & (state.scores > NEG_INF)).any(dim=1)  # (B,) streams still in the frame
                    n_live = int(live.sum())
                    if n_live == 0:
                        break  # every hypothesis has consumed the frame
                    if b >= self.COMPACT_MIN_STREAMS and n_live <= b * self.COMPACT_BELOW:
                        rows = live.nonzero()[:, 0]
                if rows is None:
                    done = self._round(state, trail, enc_p[:, t], frame_offset + t, done, rank_ok, ar_k, last)
                    continue
                # for a stream whose hypotheses all consumed the frame the round would only sort them by score:
                # the same hypotheses, so it runs on the others only
                sub = state.round_rows(rows)
                sub_done = self._round(sub, trail.rows(rows), enc_p[rows, t], frame_offset[rows] + t, done[rows],
                                       rank_ok[rows], ar_k, last)
                state.put_rows(rows, sub)
                done = done.index_copy(0, rows, sub_done)
        state.hyps = trail.materialize()
        return state

    def _round(self, state: BeamState, trail: HypTrail | HypTrailRows, enc_t: Tensor, frame: Tensor, done: Tensor,
               rank_ok: Tensor, ar_k: Tensor, last: bool) -> Tensor:
        """One expansion round of one frame, in place on ``state`` (its hypotheses' tokens on ``trail``);
        returns the new ``done``.

        enc_t: (B, J) this frame's projected encoder output; frame: (B,) its
        absolute index; done: (B, K) bool, hypotheses that consumed the frame
        already (they compete with one candidate, themselves, unchanged);
        rank_ok: (B, K) slots within each stream's beam; ar_k: (K,) arange(K); last: tokens emitted
        in this round end the frame (the symbol cap).

        The steps: :meth:`_choose` the K best candidates (merged), their confidence (:meth:`_confidence`), the
        hypotheses follow their parents (:meth:`_follow_parents`), emitted tokens are appended
        (:meth:`_append`) and run through the decoder (:meth:`_advance_decoder`).
        """
        logp = self.model.joiner.log_probs(enc_t[:, None, :], state.dec_p)  # (B, K, V)
        c = self._choose(state, logp, done, rank_ok, ar_k, last)
        # one host sync per round (the decoder update below needs it anyway): a round where no hypothesis
        # emits needs no confidence when blank frames are excluded from it
        any_emit = True if self.sync_free else bool(c.emit.any())
        pconf = self._confidence(logp, c, any_emit)
        dec_state, dec_p = self._follow_parents(state, trail, c, frame)
        self._append(state, trail, c, pconf, frame)
        self._advance_decoder(state, c, dec_state, dec_p, any_emit)
        state.scores = torch.where(c.rep, c.merged, torch.full_like(c.merged, NEG_INF))
        state.hashes = c.new_hash
        return c.new_done

    def _choose(self, state: BeamState, logp: Tensor, done: Tensor, rank_ok: Tensor, ar_k: Tensor,
                last: bool) -> _Choice:
        """The K best candidates of each stream (logp: (B, K, V) the joiner's log-probabilities), with the LM
        and hotword gains; hypotheses that consumed the frame compete unchanged; identical sequences at the
        same point of the frame merged."""
        b, k = state.scores.shape
        blank = self.blank
        v = logp.shape[-1]
        cand = state.scores[:, :, None] + logp  # (B, K, V)
        if self._lm_table is not None:  # shallow fusion; the blank column is 0
            cand = cand + self._lm_table[state.lm_state]
        if state.ctx is not None:  # hotword boosts; the blank column is 0
            cand = cand + state.ctx.gain[state.ctx_state]
        carry = torch.full_like(cand, NEG_INF)
        carry[:, :, blank] = state.scores
        cand = torch.where(done[:, :, None], carry, cand).view(b, k * v)
        top_s, top_i = cand.topk(k, dim=1)  # (B, K) sorted best first
        parent = torch.div(top_i, v, rounding_mode="floor")
        tok = top_i % v
        valid = rank_ok & (top_s > NEG_INF)
        is_blank = tok == blank
        parent_done = done.gather(1, parent)
        new_done = is_blank | parent_done | last
        took_blank = is_blank & ~parent_done  # (B, K) blank consumed the frame in this round
        emit = valid & ~is_blank
        ph = state.hashes.gather(1, parent)
        new_hash = torch.where(is_blank, ph, hash_extend(ph, tok))
        # merge identical sequences at the same point of the frame: group by (hash, done), the first
        # (best) member represents the group
        same = ((new_hash[:, :, None] == new_hash[:, None, :]) & (new_done[:, :, None] == new_done[:, None, :])
                & valid[:, :, None] & valid[:, None, :])  # (B, K, K)
        first = same.int().argmax(dim=2)  # (B, K) index of the first equal candidate
        rep = valid & (first == ar_k[None, :])
        merged = torch.where(same, top_s[:, None, :], torch.full_like(same, NEG_INF, dtype=top_s.dtype))
        merged = merged.logsumexp(dim=2)  # (B, K)
        return _Choice(top_i, parent, tok, emit & rep, rep, took_blank, new_done, new_hash, merged)

    def _confidence(self, logp: Tensor, c: _Choice, any_emit: bool) -> Tensor | None:
        """(B, K) each chosen candidate's confidence (None: nothing to append)."""
        b, k, v = logp.shape
        if self.exclude_blank and not any_emit:
            return None
        if self.token_probs:  # the emitted token's own probability
            return logp.view(b, k * v).gather(1, c.top_i).exp()
        conf = self.measure(logp) if self.measure is not None else torch.ones(b, k, device=logp.device)  # (B, K)
        return conf.gather(1, c.parent)

    def _follow_parents(self, state: BeamState, trail: HypTrail | HypTrailRows, c: _Choice, frame: Tensor
                        ) -> tuple[DecoderState, Tensor]:
        """Every per-hypothesis part of ``state`` taken from the chosen candidates' parents (the LM, hotword
        and match states advanced by their tokens); returns the parents' decoder state and projection."""
        b, k = c.parent.shape
        parent, tok = c.parent, c.tok
        trail.follow(parent)
        state.acc = state.acc.gather(parent)
        state.trailing = state.trailing.gather(1, parent)
        if self.lm is not None:
            state.lm_state = self.lm.advance(state.lm_state.gather(1, parent), tok)  # blank keeps the state
        if state.ctx is not None:
            state.ctx_state = state.ctx.next[state.ctx_state.gather(1, parent), tok]  # blank keeps the state
        if state.matches is not None:
            m = state.matches.gather(1, parent[:, :, None].expand(-1, -1, 3))
            phrase = state.ctx.match[state.ctx_state] if state.ctx is not None else torch.full_like(tok, -1)
            hit = c.emit & (phrase >= 0)
            now = torch.stack([phrase, trail.lengths + 1, frame[:, None].expand(b, k)], -1)  # lengths: parents'
            state.matches = torch.where(hit[:, :, None], now, m)
        flat_parent = (torch.arange(b, device=parent.device)[:, None] * k + parent).reshape(-1)
        dec_state = state.dec_state.select(flat_parent)
        dec_p = state.dec_p.gather(1, parent[:, :, None].expand(-1, -1, state.dec_p.shape[-1]))
        return dec_state, dec_p

    def _append(self, state: BeamState, trail: HypTrail | HypTrailRows, c: _Choice, pconf: Tensor | None,
                frame: Tensor) -> None:
        """The emitted tokens onto their hypotheses, with their confidence (blank frames folded in unless
        excluded); the trailing-blank counts."""
        b, k = c.parent.shape
        if not self.exclude_blank:
            state.acc.add(c.rep & c.took_blank, pconf)
            pconf = state.acc.fold(pconf, self.aggregation)
        if pconf is not None:  # (None: nothing to append)
            trail.append(c.emit, c.tok, frame[:, None].expand(b, k), pconf)
        state.acc.clear(c.emit)
        state.trailing = torch.where(c.emit, torch.zeros_like(state.trailing), state.trailing + c.took_blank.long())

    def _advance_decoder(self, state: BeamState, c: _Choice, dec_state: DecoderState, dec_p: Tensor,
                         any_emit: bool) -> None:
        """The decoder run on the emitted tokens (from the parents' ``dec_state`` / ``dec_p``)."""
        b, k = c.parent.shape
        model, emit, tok = self.model, c.emit, c.tok
        if self.sync_free:  # every row runs the decoder; non-emitters keep the parent's cache
            flat_emit = emit.view(-1)
            out, new_st = model.decoder.step(dec_state, tok.view(-1))
            dec_state = dec_state.where(flat_emit, new_st)
            dec_p = torch.where(emit[:, :, None], model.decoder_proj(out).view(b, k, -1), dec_p)
        elif any_emit:
            idx = emit.view(-1).nonzero()[:, 0]  # (M,)
            out, new_st = model.decoder.step(dec_state.select(idx), tok.view(-1)[idx])
            dec_state = dec_state.scatter(idx, new_st)
            dec_p = dec_p.view(b * k, -1).index_copy(0, idx, model.decoder_proj(out)).view(b, k, -1)
        state.dec_state, state.dec_p = dec_state, dec_p

    def final_scores(self, state: BeamState) -> Tensor:
        """(B, K) scores of the hypotheses as complete segments (the LM's end-of-sentence term added).

        An empty hypothesis gets no end term: it writes nothing, so there is no sentence to end.  The LM never
        saw an empty sentence (log p(</s> | <s>) is about -70 for the shipped one), and charging it to the empty
        hypothesis made a short word ("on") win every endpoint in background noise.
        """
        scores = state.scores
        if state.ctx is not None:  # an unfinished hotword's boost is taken back
            scores = scores + state.ctx.back[state.ctx_state]
        if self.lm is None:
            return scores
        end = self.lm.end_score(state.lm_state).masked_fill(state.hyps.lengths == 0, 0.0)
        return scores + self.lm_weight * end

    def best(self, state: BeamState, final: bool = False) -> list[HypOut]:
        """Best hypothesis per stream (one host transfer); final: rank as complete segments."""
        scores = self.final_scores(state) if final else state.scores
        return state.hyps.to_lists(scores.argmax(dim=1) if final else self.best_slots(state), scores)

    def nbest(self, state: BeamState, n: int, final: bool = False) -> list[list[HypOut]]:
        """Up to n hypotheses per stream, best first (unused slots left out)."""
        scores = self.final_scores(state) if final else state.scores
        order = scores.argsort(dim=1, descending=True)
        outs = [state.hyps.to_lists(order[:, j], scores) for j in range(min(n, state.k))]
        res = []
        for i in range(state.scores.shape[0]):
            res.append([o[i] for o in outs if o[i].score > NEG_INF])
        return res

    def trailing_blanks(self, state: BeamState) -> Tensor:
        """(B,) trailing blank frames of each stream's best hypothesis."""
        return state.trailing.gather(1, self.best_slots(state)[:, None])[:, 0]

    def best_slots(self, state: BeamState) -> Tensor:
        """(B,) slot of each stream's best hypothesis (highest score, not ranked as final)."""
        return state.scores.argmax(dim=1)
