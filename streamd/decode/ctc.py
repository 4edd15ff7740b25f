"""Batched, incremental CTC searches: greedy and prefix beam search.

Conventions
-----------
* ``log_probs`` (B, T, V): log-softmax output of the CTC head for one chunk of
  T encoder frames of B streams.  ``lengths`` (B,) int64: valid frames per
  stream in the chunk; frames ``>= lengths[b]`` are padding and are never read
  into the result (they may hold anything, even NaN).  ``frame_offset`` (B,)
  int64: frames of each stream processed before this chunk, so the frame index
  stored for a token is absolute (since stream start).
* A search object only holds options; per-stream state lives in a small
  dataclass the caller carries from chunk to chunk.  ``step`` returns a new
  state and never modifies its argument.  Decoding a sequence chunk by chunk
  gives exactly the result of one call on the whole sequence.
* ``reset(state, rows)`` starts a new segment for the selected streams (in
  place).  ``trailing_blanks`` counts frames decoded since the best
  hypothesis' last token (or since segment start when it has none).
* Token confidence = ``measure(log-prob vector of the emitting frame)``, or
  1.0 without a measure.
* Host syncs: ``step`` does one (validating ``lengths``/``frame_offset``
  values and sizing the token buffer); ``best``/``nbest`` one result transfer.
  Nothing syncs inside the per-frame loop.

Greedy search: per frame argmax, collapse repeats (the last frame's argmax is
carried across chunks), drop blanks; fully vectorized over (B, T).

Prefix beam search (Hannun et al. 2014) in log space.  Each prefix keeps
(p_b, p_nb): log prob of the prefix with the frames so far ending in blank /
in its last token.  Per frame t, for every prefix y in the beam:

* stay:   new[y].p_b ⊕= (p_b ⊕ p_nb) + lp[blank]; new[y].p_nb ⊕= p_nb + lp[last(y)]
  (the repeat term is always taken; it is not an extension);
* extend: for each candidate token c (the top ``beam`` non-blank tokens of the
  frame): new[y+c].p_nb ⊕= (p_b if c == last(y) else p_b ⊕ p_nb) + lp[c];

then keep the ``beam`` best prefixes by p_b ⊕ p_nb.  With an insertion
penalty q >= 0 (nats), every extension also adds -q, so a prefix's score is
log P(y) - q |y| (every alignment of y has exactly |y| extensions); q = 0 is
the plain search.  The penalty answers a property of the sum over
alignments: where no frame makes a token more likely than blank (greedy
writes nothing), several frames of a weak token can still add up to a
prefix more likely than the empty one; q asks each token for e^q times the
evidence.  Prefixes are identified
by a rolling int64 hash (h' = h * P + c + 1, wrapping) plus their length.  As
the beam never holds duplicates, a new prefix gets at most two contributions:
its own stay and one extension of its parent y[:-1].  Those pairs are found
by matching each beam entry's parent hash against the beam and its last token
against the frame's candidates, and merged with logaddexp.  The merged
prefix's last token keeps its old frame/confidence unless the extension's
contribution is strictly larger than the stay's, in which case it takes frame
t and that frame's confidence.  Prefixes whose score is -inf are dropped.
Per-stream beams are padded to K = max beam; slots >= beam[b] stay -inf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from streamd.decode.common import refuse_hotwords
from streamd.decode.hyps import HypBuffer, HypOut

__all__ = ["CtcGreedySearch", "CtcGreedyState", "CtcPrefixBeamSearch", "CtcPrefixState", "Measure"]

Measure = Callable[[Tensor], Tensor]
"""Maps log-prob vectors (..., V) to confidences (...) in [0, 1]."""

NEG_INF = float("-inf")
HASH_P = 1099511628211  # FNV-64 prime; hashes wrap modulo 2**64 in int64 arithmetic
_MIN_CAP = 16


# --------------------------------------------------------------------------- shared helpers


def _check_int_vector(name: str, x: object, batch: int, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a (B,) int64 tensor, got {type(x).__name__}")
    if x.dim() != 1 or x.shape[0] != batch:
        raise ValueError(f"{name}: expected shape ({batch},), got {tuple(x.shape)}")
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor, got dtype {x.dtype}")
    if x.device != device:
        raise ValueError(f"{name}: on device {x.device}, but log_probs are on {device}")
    return x.long()


def _check_chunk(log_probs: object, lengths: object, frame_offset: object, batch: int, device: torch.device,
                 blank_id: int) -> tuple[Tensor, Tensor]:
    """Shape/dtype/device checks (no host sync); returns int64 lengths, frame_offset."""
    if not isinstance(log_probs, Tensor):
        raise TypeError(f"log_probs: expected a (B, T, V) tensor, got {type(log_probs).__name__}")
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs: expected shape (B, T, V), got {tuple(log_probs.shape)}")
    if not log_probs.dtype.is_floating_point:
        raise TypeError(f"log_probs: expected a floating tensor, got dtype {log_probs.dtype}")
    b, _, v = log_probs.shape
    if b != batch:
        raise ValueError(f"log_probs: batch {b} does not match the state's batch {batch}")
    if log_probs.device != device:
        raise ValueError(f"log_probs: on device {log_probs.device}, but the state is on {device}")
    if not 0 <= blank_id < v:
        raise ValueError(f"log_probs: blank_id {blank_id} is out of range for vocabulary size V={v}")
    return (_check_int_vector("lengths", lengths, b, device),
            _check_int_vector("frame_offset", frame_offset, b, device))


def _sync_check(lengths: Tensor, frame_offset: Tensor, t: int, hyp_lengths: Tensor) -> int:
    """Validate values with one host transfer; return the longest hypothesis (tokens)."""
    bad_len = ((lengths < 0) | (lengths > t)).any()
    bad_off = (frame_offset < 0).any()
    longest = hyp_lengths.max() if hyp_lengths.numel() else torch.zeros((), dtype=torch.long, device=lengths.device)
    flags = torch.stack([bad_len.long(), bad_off.long(), longest]).tolist()
    if flags[0]:
        raise ValueError(f"lengths: every value must be in [0, T={t}], got {lengths.tolist()}")
    if flags[1]:
        raise ValueError(f"frame_offset: every value must be >= 0, got {frame_offset.tolist()}")
    return int(flags[2])


def _frame_conf(measure: Measure | None, log_probs: Tensor) -> Tensor:
    """(B, T) float32 confidence of every frame of log_probs (B, T, V)."""
    if measure is None:
        return torch.ones(log_probs.shape[:2], device=log_probs.device)
    conf = measure(log_probs)
    if not isinstance(conf, Tensor) or conf.shape != log_probs.shape[:2]:
        got = tuple(conf.shape) if isinstance(conf, Tensor) else type(conf).__name__
        raise ValueError(f"measure: must map log_probs {tuple(log_probs.shape)} to shape "
                         f"{tuple(log_probs.shape[:2])}, got {got}")
    return conf.float()


def _fit(buf: HypBuffer, need: int) -> HypBuffer:
    """New buffer handle with capacity >= need; shrinks a far-oversized one (after long segments)."""
    if buf.capacity > max(_MIN_CAP, 4 * need):
        cap = max(_MIN_CAP, 2 * need)
        buf = HypBuffer(buf.tokens[..., :cap].contiguous(), buf.frames[..., :cap].contiguous(),
                        buf.confs[..., :cap].contiguous(), buf.lengths)
    else:
        buf = HypBuffer(buf.tokens, buf.frames, buf.confs, buf.lengths)
    buf.reserve(need)
    return buf


def _trailing(buf: HypBuffer, which: Tensor, end: Tensor, seg_frames: Tensor) -> Tensor:
    """(B,) frames after the last token of hypothesis ``which`` (B,), or seg_frames if it has none."""
    b = torch.arange(which.shape[0], device=which.device)
    n = buf.lengths[b, which]
    last_frame = buf.frames[b, which, (n - 1).clamp(min=0)]
    return torch.where(n > 0, end - last_frame - 1, seg_frames)


def _check_rows_mask(rows: object, batch: int, device: torch.device) -> Tensor:
    if not isinstance(rows, Tensor) or rows.dtype != torch.bool or rows.shape != (batch,):
        got = f"{rows.dtype} {tuple(rows.shape)}" if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(f"rows: expected a ({batch},) bool tensor, got {got}")
    return rows.to(device)


def _check_index(rows: object) -> Tensor:
    if not isinstance(rows, Tensor) or rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype == torch.bool:
        got = f"{rows.dtype} {tuple(rows.shape)}" if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(f"rows: expected a (B',) int64 index tensor, got {got}")
    return rows.long()


# --------------------------------------------------------------------------- greedy


@dataclass
class CtcGreedyState:
    """Greedy CTC state of B streams.

    hyps: HypBuffer (B, 1, L) tokens of the current segment.
    last: (B,) int64 argmax of each stream's latest frame (blank at segment start).
    end: (B,) int64 absolute index one past the last decoded frame.
    seg_frames: (B,) int64 frames decoded in the current segment.
    """

    hyps: HypBuffer
    last: Tensor
    end: Tensor
    seg_frames: Tensor

    @property
    def batch(self) -> int:
        return self.last.shape[0]

    @property
    def device(self) -> torch.device:
        return self.last.device

    @staticmethod
    def cat(states: list["CtcGreedyState"]) -> "CtcGreedyState":
        """Concatenate along B (padding L)."""
        if not states:
            raise ValueError("cat: expected at least one state, got an empty list")
        return CtcGreedyState(HypBuffer.cat([s.hyps for s in states]), torch.cat([s.last for s in states]),
                              torch.cat([s.end for s in states]), torch.cat([s.seg_frames for s in states]))

    def select(self, rows: Tensor) -> "CtcGreedyState":
        """Sub-batch: rows (B',) int64 indices into B."""
        rows = _check_index(rows).to(self.device)
        return CtcGreedyState(self.hyps.select_streams(rows), self.last[rows], self.end[rows], self.seg_frames[rows])


class CtcGreedySearch:
    """Batched greedy CTC decoding (argmax, collapse repeats, drop blanks)."""

    reads = "ctc_log_probs"
    several = False
    ranks_final = False
    append_only = True

    def __init__(self, blank_id: int = 0, measure: Measure | None = None) -> None:
        if not isinstance(blank_id, int) or blank_id < 0:
            raise ValueError(f"blank_id: must be an int >= 0, got {blank_id!r}")
        self.blank_id = blank_id
        self.measure = measure

    def new_state(self, beam: int, device: torch.device | str = "cpu", graph=None):
        """Fresh state of one stream (the :class:`~streamd.decode.common.Search` interface)."""
        refuse_hotwords(graph)
        return self.init_state(1, device)

    def init_state(self, batch: int, device: torch.device | str = "cpu") -> CtcGreedyState:
        if not isinstance(batch, int) or batch < 0:
            raise ValueError(f"batch: must be an int >= 0, got {batch!r}")
        z = torch.zeros(batch, dtype=torch.long, device=device)
        return CtcGreedyState(HypBuffer.empty(batch, 1, device, _MIN_CAP), z + self.blank_id, z.clone(), z.clone())

    def step(self, state: CtcGreedyState, log_probs: Tensor, lengths: Tensor,
             frame_offset: Tensor) -> CtcGreedyState:
        """Decode one chunk.

        log_probs: (B, T, V) CTC log-softmax; lengths: (B,) int64 valid frames;
        frame_offset: (B,) int64 frames of each stream decoded before this chunk.
        """
        lengths, frame_offset = _check_chunk(log_probs, lengths, frame_offset, state.batch, state.device,
                                             self.blank_id)
        _, t_len, _ = log_probs.shape
        longest = _sync_check(lengths, frame_offset, t_len, state.hyps.lengths)
        if t_len == 0:
            return CtcGreedyState(state.hyps, state.last, state.end, state.seg_frames)
        dev = log_probs.device
        t = torch.arange(t_len, device=dev)
        valid = t < lengths[:, None]  # (B, T)
        am = log_probs.argmax(-1)  # (B, T)
        prev = torch.cat([state.last[:, None], am[:, :-1]], 1)
        emit = valid & (am != self.blank_id) & (am != prev)  # (B, T)
        conf = _frame_conf(self.measure, log_probs)  # (B, T)
        frames = frame_offset[:, None] + t  # (B, T)
        # Emitting frames first, in time order; written at positions n0 .. n0+T-1 (distinct), of which
        # the first emit.sum() become valid.
        order = torch.sort((~emit).to(torch.int8), dim=1, stable=True).indices  # (B, T)
        buf = _fit(state.hyps, longest + t_len)
        n0 = buf.lengths[:, 0]
        pos = n0[:, None] + t  # (B, T)
        hyps = HypBuffer(buf.tokens[:, 0].scatter(1, pos, am.gather(1, order))[:, None],
                         buf.frames[:, 0].scatter(1, pos, frames.gather(1, order))[:, None],
                         buf.confs[:, 0].scatter(1, pos, conf.gather(1, order))[:, None],
                         (n0 + emit.sum(1))[:, None])
        has = lengths > 0
        last_t = am.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
        return CtcGreedyState(hyps, torch.where(has, last_t, state.last),
                              torch.where(has, frame_offset + lengths, state.end), state.seg_frames + lengths)

    def best(self, state: CtcGreedyState, final: bool = False) -> list[HypOut]:
        """Tokens of the current segment per stream (one host transfer via HypBuffer.to_lists);
        final: see :class:`~streamd.decode.common.Search` (no end-of-segment term here)."""
        return state.hyps.to_lists(self.best_slots(state))

    def best_slots(self, state: CtcGreedyState) -> Tensor:
        """(B,) zeros: one hypothesis per stream."""
        return torch.zeros(state.batch, dtype=torch.long, device=state.device)

    def trailing_blanks(self, state: CtcGreedyState) -> Tensor:
        """(B,) int64 frames since the last emitted token (or since segment start)."""
        which = torch.zeros(state.batch, dtype=torch.long, device=state.device)
        return _trailing(state.hyps, which, state.end, state.seg_frames)

    def reset(self, state: CtcGreedyState, rows: Tensor) -> CtcGreedyState:
        """Start a new segment where rows (B,) bool is true (in place; returns ``state``)."""
        rows = _check_rows_mask(rows, state.batch, state.device)
        h = state.hyps
        state.hyps = HypBuffer(h.tokens, h.frames, h.confs, h.lengths.masked_fill(rows[:, None], 0))
        state.last = state.last.masked_fill(rows, self.blank_id)
        state.seg_frames = state.seg_frames.masked_fill(rows, 0)
        return state


# --------------------------------------------------------------------------- prefix beam search


@dataclass
class CtcPrefixState:
    """Prefix beam search state of B streams with up to K prefixes each.

    hyps: HypBuffer (B, K, L) tokens/frames/confidences of each prefix.
    p_b, p_nb: (B, K) float log probs of each prefix ending in blank / non-blank; -inf = empty slot.
    hash: (B, K) int64 rolling hash of each prefix's tokens (0 for the empty prefix).
    parent_hash: (B, K) int64 hash of the prefix without its last token (0 if empty).
    last: (B, K) int64 last token of each prefix, -1 if empty.
    beams: (B,) int64 beam size per stream (<= K).
    end: (B,) int64 absolute index one past the last decoded frame.
    seg_frames: (B,) int64 frames decoded in the current segment.
    Slots are kept sorted by p_b ⊕ p_nb, best first.
    """

    hyps: HypBuffer
    p_b: Tensor
    p_nb: Tensor
    hash: Tensor
    parent_hash: Tensor
    last: Tensor
    beams: Tensor
    end: Tensor
    seg_frames: Tensor

    @property
    def batch(self) -> int:
        return self.beams.shape[0]

    @property
    def k(self) -> int:
        return self.p_b.shape[1]

    @property
    def device(self) -> torch.device:
        return self.beams.device

    def scores(self) -> Tensor:
        """(B, K) log(p_b + p_nb) per prefix."""
        return torch.logaddexp(self.p_b, self.p_nb)

    @staticmethod
    def cat(states: list["CtcPrefixState"]) -> "CtcPrefixState":
        """Concatenate along B, padding K (with empty slots) and L."""
        if not states:
            raise ValueError("cat: expected at least one state, got an empty list")
        dtypes = {s.p_b.dtype for s in states}
        if len(dtypes) > 1:
            raise ValueError(f"cat: states have different score dtypes {sorted(map(str, dtypes))}")
        k = max(s.k for s in states)

        def pad(x: Tensor, value: float) -> Tensor:
            return torch.nn.functional.pad(x, (0, k - x.shape[1]), value=value)

        return CtcPrefixState(
            HypBuffer.cat([s.hyps for s in states]),
            torch.cat([pad(s.p_b, NEG_INF) for s in states]), torch.cat([pad(s.p_nb, NEG_INF) for s in states]),
            torch.cat([pad(s.hash, 0) for s in states]), torch.cat([pad(s.parent_hash, 0) for s in states]),
            torch.cat([pad(s.last, -1) for s in states]), torch.cat([s.beams for s in states]),
            torch.cat([s.end for s in states]), torch.cat([s.seg_frames for s in states]))

    def select(self, rows: Tensor) -> "CtcPrefixState":
        """Sub-batch: rows (B',) int64 indices into B; K shrinks to the largest selected beam (one sync)."""
        rows = _check_index(rows).to(self.device)
        beams = self.beams[rows]
        k = max(int(beams.max()), 1) if beams.numel() else 1
        h = self.hyps.select_streams(rows)
        return CtcPrefixState(
            HypBuffer(h.tokens[:, :k], h.frames[:, :k], h.confs[:, :k], h.lengths[:, :k]),
            self.p_b[rows, :k], self.p_nb[rows, :k], self.hash[rows, :k], self.parent_hash[rows, :k],
            self.last[rows, :k], beams, self.end[rows], self.seg_frames[rows])


class CtcPrefixBeamSearch:
    """Batched CTC prefix beam search with per-stream beam sizes (see module docstring)."""

    reads = "ctc_log_probs"
    several = True
    ranks_final = False
    append_only = False

    def __init__(self, blank_id: int = 0, measure: Measure | None = None, insertion_penalty: float = 0.0) -> None:
        if not isinstance(blank_id, int) or blank_id < 0:
            raise ValueError(f"blank_id: must be an int >= 0, got {blank_id!r}")
        if not isinstance(insertion_penalty, (int, float)) or not 0.0 <= insertion_penalty < float("inf"):
            raise ValueError(f"insertion_penalty: must be a finite number >= 0, got {insertion_penalty!r}")
        self.blank_id = blank_id
        self.measure = measure
        self.insertion_penalty = float(insertion_penalty)

    def new_state(self, beam: int, device: torch.device | str = "cpu", graph=None):
        """Fresh state of one stream (the :class:`~streamd.decode.common.Search` interface)."""
        refuse_hotwords(graph)
        return self.init_state(torch.tensor([beam], device=device), device)

    def init_state(self, beams: Tensor, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> CtcPrefixState:
        """beams: (B,) int64 beam size per stream (>= 1); dtype: score dtype (log_probs are cast to it)."""
        if not isinstance(beams, Tensor) or beams.dim() != 1 or beams.dtype.is_floating_point \
                or beams.dtype == torch.bool:
            got = f"{beams.dtype} {tuple(beams.shape)}" if isinstance(beams, Tensor) else type(beams).__name__
            raise ValueError(f"beams: expected a (B,) int64 tensor, got {got}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype: must be a floating dtype, got {dtype}")
        beams = beams.to(device=device, dtype=torch.long)
        b = beams.shape[0]
        if b and bool((beams < 1).any()):
            raise ValueError(f"beams: every beam size must be >= 1, got {beams.tolist()}")
        k = int(beams.max()) if b else 1
        zl = torch.zeros(b, k, dtype=torch.long, device=device)
        p_b = torch.full((b, k), NEG_INF, dtype=dtype, device=device)
        p_b[:, 0] = 0.0
        z = torch.zeros(b, dtype=torch.long, device=device)
        return CtcPrefixState(HypBuffer.empty(b, k, device, _MIN_CAP), p_b, torch.full_like(p_b, NEG_INF),
                              zl, zl.clone(), zl - 1, beams, z, z.clone())

    def step(self, state: CtcPrefixState, log_probs: Tensor, lengths: Tensor,
             frame_offset: Tensor) -> CtcPrefixState:
        """Decode one chunk.

        log_probs: (B, T, V) CTC log-softmax (V >= 2); lengths: (B,) int64 valid frames;
        frame_offset: (B,) int64 frames of each stream decoded before this chunk.
        """
        lengths, frame_offset = _check_chunk(log_probs, lengths, frame_offset, state.batch, state.device,
                                             self.blank_id)
        bsz, t_len, v = log_probs.shape
        if v < 2:
            raise ValueError(f"log_probs: prefix beam search needs V >= 2 (blank plus a token), got V={v}")
        longest = _sync_check(lengths, frame_offset, t_len, state.hyps.lengths)
        k, kc, dev = state.k, min(state.k, v - 1), log_probs.device
        lp_all = log_probs.to(state.p_b.dtype)
        conf = _frame_conf(self.measure, log_probs)  # (B, T)
        lp_blank = lp_all[..., self.blank_id]  # (B, T)
        # candidate extensions of every frame: top kc non-blank tokens (B, T, kc)
        cand_lp_all, cand_all = lp_all.index_fill(-1, torch.tensor([self.blank_id], device=dev), NEG_INF).topk(kc, -1)
        cand_lp_all = cand_lp_all - self.insertion_penalty  # what an extension by the candidate adds
        cand_ok = torch.arange(kc, device=dev) < state.beams[:, None]  # (B, kc)
        slot = torch.arange(k, device=dev)
        slot_ok = slot < state.beams[:, None]  # (B, K)

        hyps = _fit(state.hyps, longest + t_len)
        p_b, p_nb, h, ph, last = state.p_b, state.p_nb, state.hash, state.parent_hash, state.last
        for t in range(t_len):
            ok = (t < lengths)[:, None]  # (B, 1) frame t is valid
            lp = lp_all[:, t]  # (B, V)
            cand, cand_lp = cand_all[:, t], cand_lp_all[:, t]  # (B, kc)
            n = hyps.lengths  # (B, K)
            tot = torch.logaddexp(p_b, p_nb)  # (B, K)
            alive = tot > NEG_INF
            # stay: same prefix through blank or a repeat of its last token
            s_pb = tot + lp_blank[:, t, None]
            s_pnb = torch.where(last >= 0, p_nb + lp.gather(1, last.clamp(min=0)), NEG_INF)
            # extend: prefix k + candidate j, flattened to k * kc + j
            same = cand[:, None, :] == last[:, :, None]  # (B, K, kc)
            e_pnb = torch.where(same, p_b[..., None], tot[..., None]) + cand_lp[:, None, :]
            e_pnb = e_pnb.masked_fill(~(alive[..., None] & cand_ok[:, None, :]), NEG_INF).reshape(bsz, k * kc)
            # merge: stay of prefix k == extension of its parent k' by last(k)
            par = (alive[:, :, None] & alive[:, None, :] & (ph[:, :, None] == h[:, None, :])
                   & (n[:, :, None] - 1 == n[:, None, :]))  # (B, K, K')
            tok = same & cand_ok[:, None, :]  # (B, K, kc)
            dup = par.any(-1) & tok.any(-1)  # (B, K)
            eidx = par.long().argmax(-1) * kc + tok.long().argmax(-1)  # (B, K)
            ev = e_pnb.gather(1, eidx).masked_fill(~dup, NEG_INF)
            take_ext = dup & (ev > torch.logaddexp(s_pb, s_pnb))  # merged prefix's last token -> frame t
            s_pnb = torch.logaddexp(s_pnb, ev)
            merged = torch.zeros(bsz, k * kc, dtype=torch.long, device=dev).scatter_add_(1, eidx, dup.long()) > 0
            e_pnb = e_pnb.masked_fill(merged, NEG_INF)
            # prune to the beam
            all_pnb = torch.cat([s_pnb, e_pnb], 1)  # (B, K + K*kc)
            top, sel = torch.cat([torch.logaddexp(s_pb, s_pnb), e_pnb], 1).topk(k, 1)  # (B, K)
            keep = slot_ok & (top > NEG_INF)
            is_ext = sel >= k
            parent = torch.where(is_ext, torch.div(sel - k, kc, rounding_mode="floor"), sel)
            token = cand.gather(1, (sel - k).clamp(min=0) % kc)
            hp = h.gather(1, parent)
            new_pb = torch.where(is_ext | ~keep, NEG_INF, s_pb.gather(1, parent))
            new_pnb = all_pnb.gather(1, sel).masked_fill(~keep, NEG_INF)
            new_h = torch.where(is_ext, hp * HASH_P + token + 1, hp)
            new_ph = torch.where(is_ext, hp, ph.gather(1, parent))
            new_last = torch.where(is_ext, token, last.gather(1, parent))
            retime = ok & keep & ~is_ext & take_ext.gather(1, parent)
            # commit where frame t is valid
            p_b, p_nb = torch.where(ok, new_pb, p_b), torch.where(ok, new_pnb, p_nb)
            h, ph, last = torch.where(ok, new_h, h), torch.where(ok, new_ph, ph), torch.where(ok, new_last, last)
            hyps = hyps.gather(torch.where(ok, parent, slot))
            frame = (frame_offset + t)[:, None].expand(-1, k)
            cf = conf[:, t, None].expand(-1, k)
            pos = (hyps.lengths - 1).clamp(min=0)[..., None]  # (B, K, 1) last token of a stay
            hyps.frames.scatter_(2, pos, torch.where(retime[..., None], frame[..., None], hyps.frames.gather(2, pos)))
            hyps.confs.scatter_(2, pos, torch.where(retime[..., None], cf[..., None], hyps.confs.gather(2, pos)))
            hyps.append(ok & keep & is_ext, token, frame, cf)

        has = lengths > 0
        return CtcPrefixState(hyps, p_b, p_nb, h, ph, last, state.beams,
                              torch.where(has, frame_offset + lengths, state.end), state.seg_frames + lengths)

    def _best_slot(self, state: CtcPrefixState) -> Tensor:
        return state.scores().argmax(1)

    def best_slots(self, state: CtcPrefixState) -> Tensor:
        """(B,) slot of each stream's best prefix."""
        return self._best_slot(state)

    def best(self, state: CtcPrefixState, final: bool = False) -> list[HypOut]:
        """Best prefix per stream, score = log(p_b + p_nb) (one host transfer via HypBuffer.to_lists);
        final: see :class:`~streamd.decode.common.Search` (no end-of-segment term here)."""
        return state.hyps.to_lists(self._best_slot(state), state.scores())

    def nbest(self, state: CtcPrefixState, n: int, final: bool = False) -> list[list[HypOut]]:
        """Up to n prefixes per stream, best first, score = log(p_b + p_nb); empty slots are omitted."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n: must be an int >= 1, got {n!r}")
        b, m = state.batch, min(n, state.k)
        scores, idx = state.scores().topk(m, 1)  # (B, m)
        g = state.hyps.gather(idx)  # (B, m, L)
        cap = g.capacity
        flat = HypBuffer(g.tokens.reshape(b * m, 1, cap), g.frames.reshape(b * m, 1, cap),
                         g.confs.reshape(b * m, 1, cap), g.lengths.reshape(b * m, 1))
        outs = flat.to_lists(torch.zeros(b * m, dtype=torch.long, device=state.device), scores.reshape(b * m, 1))
        return [[o for o in outs[i * m:(i + 1) * m] if o.score > NEG_INF] for i in range(b)]

    def trailing_blanks(self, state: CtcPrefixState) -> Tensor:
        """(B,) int64 frames since the best prefix's last token (or since segment start)."""
        return _trailing(state.hyps, self._best_slot(state), state.end, state.seg_frames)

    def reset(self, state: CtcPrefixState, rows: Tensor) -> CtcPrefixState:
        """Start a new segment (only the empty prefix) where rows (B,) bool is true (in place; returns ``state``)."""
        rows = _check_rows_mask(rows, state.batch, state.device)
        r = rows[:, None]
        first = torch.arange(state.k, device=state.device) == 0
        state.p_b = torch.where(r, torch.where(first, 0.0, NEG_INF).to(state.p_b.dtype), state.p_b)
        state.p_nb = state.p_nb.masked_fill(r, NEG_INF)
        state.hash = state.hash.masked_fill(r, 0)
        state.parent_hash = state.parent_hash.masked_fill(r, 0)
        state.last = state.last.masked_fill(r, -1)
        h = state.hyps
        state.hyps = HypBuffer(h.tokens, h.frames, h.confs, h.lengths.masked_fill(r, 0))
        state.seg_frames = state.seg_frames.masked_fill(rows, 0)
        return state
