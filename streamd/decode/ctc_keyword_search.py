"""Runtime wake words scored on the model's CTC head (``kws.wake_score: ctc``).

The same keyword-constrained search as :mod:`streamd.decode.keyword_search` (a trie of the keywords' token
sequences, a free start at every frame, trailing-blank or separator confirmation, the best candidate
reported once unbeaten for ``settle_frames``, a refractory period; the same :class:`KeywordSet`,
:class:`KeywordState` and hits), but each keyword's path is a **CTC alignment** on the CTC head's per-frame
log-probs ``lp_t(.)`` instead of a path through the transducer's lattice.  The CTC head reads the same
encoder output in the same batched step; it has no prediction network, so no table of decoder outputs is
needed and a frame's weights are shared by every keyword.

**States** (per trie node ``u`` other than the root, ``tok(u)`` its last token): ``L(u)``, the path's last
frame emitted ``tok(u)``; ``B(u)``, it has been in blank since.  The root is the free start.  Each keyword
``p`` (``n_p`` tokens, its last node ``e_p``) also has tail states ``tau_1 .. tau_tb`` ("``L(e_p)``, then
exactly ``k`` blank frames") and, with a word separator, ``S(p)`` ("``e_p`` complete, then the separator").

**Weights**: ``w_t(v) = lp_t(v) - max lp_t(.)``, each frame's log ratio of the path's symbol to the CTC
head's preferred one (<= 0).

**Search, per stream and frame ``t``**, all states at once from the previous frame's values (every path
takes exactly one symbol per frame; the root holds weight 0 with first frame ``t``):

1. ``L(u) <- max(L(u), B(parent(u)), L(parent(u)) if tok(parent(u)) != tok(u)) + w_t(tok(u))`` (the token
   repeated, or entered after a blank, or entered directly when it differs from the one before; from the
   root: the path's first token, first frame ``t``), last token frame ``t``;
2. ``B(u) <- max(B(u), L(u)) + w_t(blank)``; ``tau_1 <- L(e_p) + w_t(blank)``, ``tau_k <- tau_{k-1} +
   w_t(blank)``; ``S(p) <- max(L(e_p), B(e_p)) + w_t(sep)``;
3. **confirmation**: ``D_t(p)`` is ``L(e_p)`` for ``trailing_blanks`` 0, else the larger of ``tau_tb`` and
   ``S(p)`` (ties: the blanks); score ``exp(D_t(p) / n_p)`` (the geometric mean per keyword token of the
   path's likelihood ratio, its blank frames included);
4. **detection** exactly as :func:`streamd.decode.keyword_search.decide` (threshold, refractory period,
   best candidate, settle); a detection resets the stream's states.

Shape legend: B streams, T frames of a chunk, N states, P keywords, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.transducer import Transducer
from .keyword_search import (_NEG, KeywordSearch, KeywordState, _fresh, _no_best, chunk_clock, decide, keyword_columns,
                             layout_rows, pad_rows, trie_nodes)

__all__ = ["CtcKeywordSearch", "CtcKeywordTables"]

_DEAD = -1  # a source that does not exist (a -inf row at layout time)


@dataclass(frozen=True, eq=False)
class CtcKeywordTables:
    """What :meth:`CtcKeywordSearch.prepare` precomputes for a keyword set, on the CPU.

    Per state (N,): src (N, 3) the states a frame can come from (``_DEAD`` for none; the root has none: it is
    set every frame), arc the symbol its frame takes (-1 for the root), label (bool) whether that symbol is a
    keyword token (the path's last token frame moves); per keyword (P,): end (``L(e_p)``), tail (``tau_tb``,
    or ``L(e_p)`` for tb 0), sep (``S(p)``, -1 without a separator); key: the search settings."""

    src: Tensor
    arc: Tensor
    label: Tensor
    end: Tensor
    tail: Tensor
    sep: Tensor
    key: tuple

    @property
    def states(self) -> int:
        return int(self.arc.shape[0])


@dataclass(frozen=True)
class _CtcLayout:
    """A batch's tables on the device, one row per stream (padded when the streams' sets differ)."""

    src: Tensor  # (B, N * 3, 4) int64 into the states plus one -inf row (index N)
    arc: Tensor  # (B, N) int64 into (V + 1), sentinel V
    label: Tensor  # (B, N) bool
    end: Tensor  # (B, P, 4)
    tail: Tensor  # (B, P, 4)
    sep: Tensor  # (B, P, 4) (the end again where there is no separator state)
    n: Tensor  # (B, P) float64 keyword lengths
    thr: Tensor  # (B, P) float64 thresholds (inf for padding)
    fresh: Tensor  # (N, 4) float64 the reset state
    has_sep: bool


class CtcKeywordSearch(KeywordSearch):
    """Batched keyword-constrained search on the CTC head (module docstring); the interface of
    :class:`KeywordSearch` (``prepare``, ``init_state``, ``step``, ``detect``, ``reset``), ``step`` reading
    ``ctc_log_probs`` (B, T, V) instead of projected encoder frames.

    model: the transducer (it must have a CTC head); separator: the word-separator token id of a character
    table (None for BPE); trailing_blanks, refractory_frames, settle_frames: the detection rule's frames."""

    reads = "ctc_log_probs"

    def __init__(self, model: Transducer, separator: int | None = None, trailing_blanks: int = 2,
                 refractory_frames: int = 25, settle_frames: int = 0):
        if model.ctc is None:
            raise ValueError("wake_score ctc needs a model with a CTC head (model.ctc_head); this one has none")
        super().__init__(model, 1, separator, trailing_blanks, refractory_frames, "llr", settle_frames)
        self.score = "ctc"
        self._key = ("ctc", id(model), separator, trailing_blanks)

    # ------------------------------------------------------------------ tables

    def _tables(self, keywords: tuple[tuple[int, ...], ...]) -> CtcKeywordTables:
        blank = self.model.blank_id
        nodes = trie_nodes(keywords)
        prefixes = list(nodes)
        lab = lambda i: 2 * i - 1  # noqa: E731  L(u) of node i >= 1
        blk = lambda i: 2 * i  # noqa: E731  B(u)
        src, arc, label = [[_DEAD] * 3], [-1], [False]
        for i, u in enumerate(prefixes[1:], 1):
            par = nodes[u[:-1]]
            if par == 0:
                froms = [lab(i), 0, _DEAD]
            else:
                froms = [lab(i), blk(par), lab(par) if u[-2] != u[-1] else _DEAD]
            src += [froms, [blk(i), lab(i), _DEAD]]
            arc += [u[-1], blank]
            label += [True, False]
        end, tail, sep = [], [], []
        tb = self.trailing_blanks
        for k in keywords:
            e = lab(nodes[k])
            end.append(e)
            prev = e
            for _ in range(tb):  # tau_1 .. tau_tb
                src.append([prev, _DEAD, _DEAD])
                arc.append(blank)
                label.append(False)
                prev = len(arc) - 1
            tail.append(prev)
            if self.separator is not None:
                src.append([e, blk(nodes[k]), _DEAD])
                arc.append(self.separator)
                label.append(False)
                sep.append(len(arc) - 1)
            else:
                sep.append(-1)
        t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
        return CtcKeywordTables(t(src), t(arc), torch.tensor(label), t(end), t(tail), t(sep), self._key)

    def _layout(self, state: KeywordState, device: torch.device) -> _CtcLayout:
        sets = state.sets
        b, n = state.batch, state.alpha.shape[1]
        v = self.model.cfg.vocab_size
        p = max(len(k.names) for k in sets)
        rows, stack = layout_rows(sets, b, device)
        tabs = [k.tables for k in rows]
        src = stack([pad_rows(torch.where(t.src < 0, n, t.src), n, n).flatten() for t in tabs])
        arc = stack([pad_rows(torch.where(t.arc < 0, v, t.arc), n, v) for t in tabs])
        label = stack([pad_rows(t.label, n, False) for t in tabs])
        end = stack([pad_rows(t.end, p, 0) for t in tabs])
        tail = stack([pad_rows(t.tail, p, 0) for t in tabs])
        sep = stack([pad_rows(torch.where(t.sep < 0, t.end, t.sep), p, 0) for t in tabs])
        lens, thr = keyword_columns(rows, p, stack)
        e4 = lambda x: x[..., None].expand(*x.shape, 4)  # noqa: E731
        return _CtcLayout(e4(src), arc, label, e4(end), e4(tail), e4(sep), lens, thr, _fresh(n, device),
                          self.separator is not None)

    # ------------------------------------------------------------------ search

    @torch.no_grad()
    def step(self, state: KeywordState, ctc_lp: Tensor, lengths: Tensor, frame_offset: Tensor) -> KeywordState:
        """Search one chunk: ctc_lp (B, T, V) the CTC head's log-probs, lengths (B,) valid frames per stream,
        frame_offset (B,) frames each stream decoded before.  Detections are decided frame by frame (and the
        detected streams reset at once); :meth:`detect` hands them over.  The given state is left unchanged."""
        b, t_max = ctc_lp.shape[0], ctc_lp.shape[1]
        if b == 0 or t_max == 0:
            return state
        device = ctc_lp.device
        lay = state.layout
        if not isinstance(lay, _CtcLayout) or lay.arc.device != device:
            lay = self._layout(state, device)
        n = state.alpha.shape[1]
        lp = ctc_lp.double()
        w = lp - lp.amax(-1, keepdim=True)
        w = torch.cat([w, w.new_full((b, t_max, 1), _NEG)], 2).gather(2, lay.arc[:, None, :].expand(b, t_max, n))
        frames, valid = chunk_clock(frame_offset, lengths, t_max, device)
        tb = self.trailing_blanks
        refr, settle = float(self.refractory_frames), float(self.settle_frames)
        last_fire = state.last_fire.double()
        alpha, pend = state.alpha, state.best
        no_best = _no_best(b, device)
        dead = alpha.new_zeros(b, 1, 4)
        dead[..., 0] = _NEG
        hits = []
        for i in range(t_max):
            prev = alpha.clone()
            prev[:, 0] = torch.stack([torch.zeros_like(frames[:, i]), frames[:, i], torch.zeros_like(frames[:, i]),
                                      frames[:, i]], -1)
            cand = torch.cat([prev, dead], 1).gather(1, lay.src).view(b, n, 3, 4)
            pick = cand[..., 0].argmax(2, keepdim=True)  # (B, N, 1) first of equals
            a = cand.gather(2, pick[..., None].expand(b, n, 1, 4))[:, :, 0].clone()  # (B, N, 4)
            a[..., 0] = a[..., 0] + w[:, i]
            a[..., 3] = torch.where(lay.label, frames[:, i, None], a[..., 3])
            a[:, 0] = prev[:, 0]
            if tb == 0:
                d = a.gather(1, lay.end)
            else:
                d = a.gather(1, lay.tail)
                if lay.has_sep:
                    s = a.gather(1, lay.sep)
                    d = torch.where((s[..., 0] > d[..., 0])[..., None], s, d)
            score = (d[..., 0] / lay.n).exp()  # (B, P)
            fired, hit, pend, last_fire = decide(score, d, lay, pend, last_fire, frames[:, i], valid[:, i], refr,
                                                 settle, no_best)
            hits.append(hit)
            a = torch.where(fired[:, None, None], lay.fresh, a)
            alpha = torch.where(valid[:, i, None, None], a, alpha)
        return KeywordState(alpha, last_fire.long(), state.sets, pend, state.pending + (torch.stack(hits, 1),), lay)
