"""Standard transducer beam search (Graves 2012, Algorithm 1; icefall ``beam_search``).

Unlike modified beam search, a hypothesis may emit several symbols per frame.
For every frame ``t`` of a stream with beam ``k``::

    A = B; B = {}
    loop:
        y* = most probable hypothesis of A; remove it from A
        logp = joiner(frame t, decoder(y*))                        # (V,)
        add y* to B with score + logp[blank]                       # y* ends the frame
        for each of the top (k + 1) tokens v of logp, v != blank:
            add y* + v to A with score + logp[v], token frame t    # y* stays on the frame
        if B holds >= k hypotheses more probable than the best of A:
            B = best k of B; next frame

"add" merges a sequence that is already in the set by log-adding its score;
the more probable of the two keeps its frames, confidences and blank
bookkeeping (the entry that was there first on a tie), so a hypothesis is
timed by its best path, as in modified beam search.  (icefall's
``HypothesisList.add`` keeps the first entry's: a token that an improbable
path emitted earlier, carried in the beam e.g. through leading silence,
then dates the token when the likely path emits it, so words came out early,
by up to the whole silence; on the shipped model most words one frame early.)  "Most
probable" and "best k" break score ties by insertion order.  A token's frame
is the ``t`` of the expansion that added it, its confidence the ``measure``
of that expansion's log-prob vector (with ``exclude_blank=False``, folded
with the measures of the hypothesis' blank expansions since its previous
token).

Two safety caps bound the work per frame (icefall has only a per-utterance
symbol cap):

* ``max_symbols_per_frame``: a popped hypothesis whose recorded frames already
  hold that many tokens at frame ``t`` is only moved to B (no token
  extensions), like greedy search's per-frame symbol limit.
* ``max_expansions_per_frame``: a stream pops at most that many hypotheses per
  frame (default ``10 * beam``).

When a cap stops the loop, or A runs empty, B becomes its best ``k`` entries
(the same "best k of B" as the regular exit).

Batching: the control flow differs per stream, so streams run in lockstep.
In each inner iteration every stream still expanding frame ``t`` pops its
``y*``; the decoder runs once for all popped hypotheses whose output is not
cached yet (a hypothesis ``y' + v`` is decoded from its parent's cached state
the first time it is popped), the joiner runs once for the batch, and the
(B_active, V) log-probs plus confidences come to the host in one transfer for
the set bookkeeping (Python dicts keyed by token tuples).  Decoder outputs
live in a pool of rows shared by the batch; each stream maps token tuples to
pool rows, and the pool is compacted to the rows of the B sets after every
frame.  The B sets carry over between chunks, so decoding chunk by chunk
equals decoding the whole utterance.

This is the "for completeness" search: per-hypothesis Python bookkeeping
and a host transfer per inner iteration, but no per-stream network calls.

Shape legend: B streams, T encoder frames in the chunk, J joiner dim,
V vocabulary, N pooled decoder rows, M hypotheses popped in one iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import torch
from torch import Tensor

from ..model.decoder import DecoderState
from ..model.transducer import Transducer
from .common import Measure, initial_decoder, refuse_hotwords
from .hyps import HypOut

__all__ = ["BeamHyp", "BeamSearchState", "BeamSearch"]

NEG_INF = float("-inf")
AGGREGATIONS = ("min", "max", "mean", "prod")
Tokens = tuple[int, ...]


def logaddexp(a: float, b: float) -> float:
    """log(exp(a) + exp(b)) for Python floats."""
    m = max(a, b)
    if m == NEG_INF:
        return m
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass(frozen=True)
class BlankAcc:
    """Aggregates of blank-expansion confidences since a hypothesis' last token
    (mirrors :class:`~streamd.decode.common.BlankConfAcc` for one hypothesis)."""

    count: int = 0
    sum: float = 0.0
    logsum: float = 0.0
    min: float = 1.0
    max: float = 0.0

    def add(self, conf: float) -> "BlankAcc":
        return BlankAcc(self.count + 1, self.sum + conf, self.logsum + math.log(max(conf, 1e-10)),
                        min(self.min, conf), max(self.max, conf))

    def fold(self, conf: float, how: str) -> float:
        """Confidence of a token whose own measure is ``conf``, including the pending blanks."""
        if how == "min":
            return min(self.min, conf)
        if how == "max":
            return max(self.max, conf)
        if how == "mean":
            return (self.sum + conf) / (self.count + 1)
        return math.exp(self.logsum + math.log(max(conf, 1e-10)))


_EMPTY_ACC = BlankAcc()


@dataclass(frozen=True)
class BeamHyp:
    """One hypothesis of one stream (its token tuple is the key it is stored under).

    score: total log-probability (float64 on the host).
    frames: absolute encoder frame of each token; confs: each token's confidence.
    trailing: frames since the last token (or the segment start).
    acc: pending blank-expansion confidences (used with ``exclude_blank=False``).
    """

    score: float
    frames: tuple[int, ...] = ()
    confs: tuple[float, ...] = ()
    trailing: int = 0
    acc: BlankAcc = _EMPTY_ACC


def _add(hyps: dict[Tokens, BeamHyp], key: Tokens, hyp: BeamHyp) -> None:
    """Insert hyp, or log-add its score into the entry already stored under key; the more
    probable of the two keeps its frames, confidences and blank bookkeeping (the stored one
    on a tie), and the entry keeps its place in the dict's order."""
    old = hyps.get(key)
    if old is None:
        hyps[key] = hyp
        return
    timing = hyp if hyp.score > old.score else old
    hyps[key] = replace(timing, score=logaddexp(old.score, hyp.score))


def _topk(hyps: dict[Tokens, BeamHyp], k: int) -> dict[Tokens, BeamHyp]:
    """The k best hypotheses, best first (stable: ties keep insertion order)."""
    return dict(sorted(hyps.items(), key=lambda kv: -kv[1].score)[:k])


def _ranked(hyps: dict[Tokens, BeamHyp]) -> list[tuple[Tokens, BeamHyp]]:
    return sorted(hyps.items(), key=lambda kv: -kv[1].score)


def _symbols_at(frames: tuple[int, ...], frame: int) -> int:
    """Number of tokens recorded at ``frame`` (frames are non-decreasing)."""
    n = 0
    for f in reversed(frames):
        if f != frame:
            break
        n += 1
    return n


@dataclass
class BeamSearchState:
    """Beam search state for B streams.

    beams: beam size of each stream (B ints).
    hyps: per stream, the B set: token tuple -> hypothesis, best first, at most beam entries.
    rows: per stream, token tuple -> row of the pool holding that sequence's decoder output;
      between frames it covers exactly the keys of ``hyps``.
    dec_state: decoder state of the N pooled rows.
    dec_p: (N, J) projected decoder outputs of the pooled rows.
    """

    beams: list[int]
    hyps: list[dict[Tokens, BeamHyp]]
    rows: list[dict[Tokens, int]]
    dec_state: DecoderState
    dec_p: Tensor

    @property
    def batch(self) -> int:
        return len(self.beams)

    def _compact(self) -> None:
        """Keep only the pool rows some stream's B set refers to (renumbered in place)."""
        used = sorted({r for rows in self.rows for r in rows.values()})
        if len(used) == self.dec_p.shape[0]:
            return
        new = {r: j for j, r in enumerate(used)}
        idx = torch.tensor(used, dtype=torch.long, device=self.dec_p.device)
        self.dec_state, self.dec_p = self.dec_state.select(idx), self.dec_p[idx]
        self.rows = [{k: new[r] for k, r in rows.items()} for rows in self.rows]

    def select(self, rows: Tensor) -> "BeamSearchState":
        """Sub-batch: rows (B',) int64 stream indices (one host transfer)."""
        if rows.dim() != 1 or rows.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"rows must be a 1-D int64 tensor of stream indices, got {tuple(rows.shape)} {rows.dtype}")
        sel = rows.tolist()
        for i in sel:
            if not -self.batch <= i < self.batch:
                raise IndexError(f"stream index {i} out of range for a batch of {self.batch}")
        st = BeamSearchState([self.beams[i] for i in sel], [dict(self.hyps[i]) for i in sel],
                             [dict(self.rows[i]) for i in sel], self.dec_state, self.dec_p)
        st._compact()
        return st

    @staticmethod
    def cat(states: list["BeamSearchState"]) -> "BeamSearchState":
        """Concatenate along B."""
        if not states:
            raise ValueError("cannot concatenate an empty list of beam search states")
        rows, off = [], 0
        for s in states:
            rows += [{k: r + off for k, r in m.items()} for m in s.rows]
            off += s.dec_p.shape[0]
        return BeamSearchState([b for s in states for b in s.beams], [dict(h) for s in states for h in s.hyps],
                               rows, DecoderState.cat([s.dec_state for s in states]),
                               torch.cat([s.dec_p for s in states]))


class BeamSearch:
    """Standard transducer beam search over a :class:`Transducer` (see module docstring).

    max_symbols_per_frame: most tokens one hypothesis emits at one frame.
    max_expansions_per_frame: most hypotheses a stream pops at one frame; None: 10 x its beam.
    measure: frame confidence function (log-probs (..., V) -> (...)); None stores 1.0.
    exclude_blank: if False, the measures of a hypothesis' blank expansions since its
      previous token are folded into the next token's confidence with ``aggregation``.
    """

    reads = "enc_p"
    several = True
    ranks_final = False
    append_only = False

    def __init__(self, model: Transducer, max_symbols_per_frame: int = 3, max_expansions_per_frame: int | None = None,
                 measure: Measure | None = None, exclude_blank: bool = True, aggregation: str = "min"):
        if max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {max_symbols_per_frame}")
        if max_expansions_per_frame is not None and max_expansions_per_frame < 1:
            raise ValueError(f"max_expansions_per_frame must be >= 1 or None, got {max_expansions_per_frame}")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {list(AGGREGATIONS)}")
        self.model = model
        self.blank = model.blank_id
        self.max_symbols = max_symbols_per_frame
        self.max_expansions = max_expansions_per_frame
        self.measure = measure
        self.exclude_blank = exclude_blank
        self.aggregation = aggregation

    # ------------------------------------------------------------------ state

    @torch.no_grad()
    def new_state(self, beam: int, device: torch.device | str = "cpu", graph=None):
        """Fresh state of one stream (the :class:`~streamd.decode.common.Search` interface)."""
        refuse_hotwords(graph)
        return self.init_state(torch.tensor([beam], device=device), device)

    def init_state(self, beams: Tensor | Sequence[int], device: torch.device | str = "cpu") -> BeamSearchState:
        """Fresh state; beams: (B,) int64 beam size per stream (>= 1)."""
        beams = beams.tolist() if isinstance(beams, Tensor) else [int(b) for b in beams]
        bad = [b for b in beams if b < 1]
        if bad:
            raise ValueError(f"beam sizes must be >= 1, got {bad[0]} in {beams}")
        st, dp = initial_decoder(self.model, 1, device)  # one pooled row shared by every stream
        return BeamSearchState(list(beams), [{(): BeamHyp(0.0)} for _ in beams], [{(): 0} for _ in beams], st, dp)

    @torch.no_grad()
    def reset(self, state: BeamSearchState, rows: Tensor) -> BeamSearchState:
        """New segment for streams where rows (B,) bool: a single empty hypothesis."""
        if rows.shape != (state.batch,) or rows.dtype != torch.bool:
            raise ValueError(f"rows must be a ({state.batch},) bool tensor, got {tuple(rows.shape)} {rows.dtype}")
        which = rows.tolist()
        if not any(which):
            return state
        st, dp = initial_decoder(self.model, 1, state.dec_p.device)
        r0 = state.dec_p.shape[0]
        state.dec_state = DecoderState.cat([state.dec_state, st])
        state.dec_p = torch.cat([state.dec_p, dp])
        for i, w in enumerate(which):
            if w:
                state.hyps[i] = {(): BeamHyp(0.0)}
                state.rows[i] = {(): r0}
        state._compact()
        return state

    # ------------------------------------------------------------------ search

    def _check_inputs(self, state: BeamSearchState, enc_p: Tensor, lengths: Tensor,
                      frame_offset: Tensor) -> tuple[list[int], list[int]]:
        if enc_p.dim() != 3:
            raise ValueError(f"enc_p must be (B, T, J), got shape {tuple(enc_p.shape)}")
        b, t_max, j = enc_p.shape
        if b != state.batch:
            raise ValueError(f"enc_p has {b} streams but the state holds {state.batch}")
        if j != state.dec_p.shape[1]:
            raise ValueError(f"enc_p has joiner dim {j}, the decoder outputs {state.dec_p.shape[1]}")
        if enc_p.device != state.dec_p.device:
            raise ValueError(f"enc_p is on {enc_p.device} but the state is on {state.dec_p.device}")
        for name, x in (("lengths", lengths), ("frame_offset", frame_offset)):
            if x.shape != (b,):
                raise ValueError(f"{name} must have shape ({b},), got {tuple(x.shape)}")
        lens, offs = lengths.tolist(), frame_offset.tolist()  # one host transfer per chunk
        for i, n in enumerate(lens):
            if not 0 <= n <= t_max:
                raise ValueError(f"lengths[{i}] = {n} is outside [0, {t_max}] (T of enc_p)")
        for i, o in enumerate(offs):
            if o < 0:
                raise ValueError(f"frame_offset[{i}] = {o} is negative")
        return lens, offs

    @torch.no_grad()
    def step(self, state: BeamSearchState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> BeamSearchState:
        """Decode one chunk.

        enc_p: (B, T, J) projected encoder frames; lengths: (B,) valid frames
        (frames >= length are ignored); frame_offset: (B,) int64 absolute index of
        each stream's first frame in this chunk.
        """
        lens, offs = self._check_inputs(state, enc_p, lengths, frame_offset)
        for t in range(enc_p.shape[1]):
            live = [i for i, n in enumerate(lens) if t < n]
            if not live:
                break
            self._frame(state, enc_p[:, t], live, {i: offs[i] + t for i in live})
        return state

    def _frame(self, state: BeamSearchState, enc_t: Tensor, live: list[int], frame: dict[int, int]) -> None:
        """Run one frame for the streams in ``live``; enc_t: (B, J) this frame of every stream."""
        model, blank, dev = self.model, self.blank, enc_t.device
        a_set = {i: dict(state.hyps[i]) for i in live}
        b_set: dict[int, dict[Tokens, BeamHyp]] = {i: {} for i in live}
        pops = dict.fromkeys(live, 0)
        running = live
        while running:
            # pop y* of every running stream
            popped = []
            for i in running:
                key = max(a_set[i], key=lambda k, a=a_set[i]: a[k].score)  # first of equal scores
                popped.append((i, key, a_set[i].pop(key)))
            # decoder outputs of the popped hypotheses seen for the first time (one batched call)
            need = [(i, key) for i, key, _ in popped if key not in state.rows[i]]
            if need:
                parent = torch.tensor([state.rows[i][key[:-1]] for i, key in need], dtype=torch.long, device=dev)
                toks = torch.tensor([key[-1] for _, key in need], dtype=torch.long, device=dev)
                out, new_st = model.decoder.step(state.dec_state.select(parent), toks)
                base = state.dec_p.shape[0]
                state.dec_state = DecoderState.cat([state.dec_state, new_st])
                state.dec_p = torch.cat([state.dec_p, model.decoder_proj(out)])
                for m, (i, key) in enumerate(need):
                    state.rows[i][key] = base + m
            # joiner once for the batch, one host transfer
            streams = torch.tensor([i for i, _, _ in popped], dtype=torch.long, device=dev)
            prow = torch.tensor([state.rows[i][key] for i, key, _ in popped], dtype=torch.long, device=dev)
            logp = model.joiner.log_probs(enc_t[streams], state.dec_p[prow])  # (M, V)
            v = logp.shape[-1]
            conf = self.measure(logp) if self.measure is not None else torch.ones(logp.shape[0], device=dev)  # (M,)
            host = torch.cat([logp, conf[:, None].to(logp.dtype)], dim=1).cpu()  # (M, V + 1)
            k_top = min(v, max(state.beams[i] for i in running) + 1)
            top_v, top_i = host[:, :v].topk(k_top, dim=1)
            lp_blank, confs = host[:, blank].tolist(), host[:, v].tolist()
            top_v, top_i = top_v.tolist(), top_i.tolist()
            # set bookkeeping
            still = []
            for n, (i, key, h) in enumerate(popped):
                f, beam = frame[i], state.beams[i]
                emitted_here = bool(h.frames) and h.frames[-1] == f
                acc = h.acc if self.exclude_blank else h.acc.add(confs[n])
                _add(b_set[i], key, BeamHyp(h.score + lp_blank[n], h.frames, h.confs,
                                            0 if emitted_here else h.trailing + 1, acc))
                if _symbols_at(h.frames, f) < self.max_symbols:
                    c = confs[n] if self.exclude_blank else h.acc.fold(confs[n], self.aggregation)
                    for lp, tok in zip(top_v[n][:beam + 1], top_i[n][:beam + 1]):
                        if tok != blank:
                            _add(a_set[i], key + (tok,), BeamHyp(h.score + lp, h.frames + (f,), h.confs + (c,)))
                pops[i] += 1
                cap = self.max_expansions if self.max_expansions is not None else 10 * beam
                a = a_set[i]
                best_a = max(x.score for x in a.values()) if a else NEG_INF
                if not a or pops[i] >= cap or sum(x.score > best_a for x in b_set[i].values()) >= beam:
                    state.hyps[i] = _topk(b_set[i], beam)
                else:
                    still.append(i)
            running = still
        for i in live:
            state.rows[i] = {k: state.rows[i][k] for k in state.hyps[i]}
        state._compact()

    # ------------------------------------------------------------------ results

    @staticmethod
    def _out(key: Tokens, h: BeamHyp) -> HypOut:
        return HypOut(key, h.frames, h.confs, h.score)

    def best(self, state: BeamSearchState, final: bool = False) -> list[HypOut]:
        """Most probable hypothesis of each stream (no length normalization);
        final: see :class:`~streamd.decode.common.Search` (no end-of-segment term here)."""
        return [self._out(*_ranked(h)[0]) for h in state.hyps]

    def nbest(self, state: BeamSearchState, n: int, final: bool = False) -> list[list[HypOut]]:
        """Up to n hypotheses per stream, best first."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return [[self._out(k, h) for k, h in _ranked(hyps)[:n]] for hyps in state.hyps]

    def best_slots(self, state: BeamSearchState) -> None:
        """None: the hypotheses are host objects (:meth:`best` gives them)."""
        return None

    def trailing_blanks(self, state: BeamSearchState) -> Tensor:
        """(B,) int64 frames since the last token of each stream's best hypothesis."""
        return torch.tensor([_ranked(h)[0][1].trailing for h in state.hyps], dtype=torch.long,
                            device=state.dec_p.device)
