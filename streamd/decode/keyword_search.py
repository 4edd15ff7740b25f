"""Runtime wake words: a keyword-constrained transducer search over the recognizer's own encoder output.

Keywords are text, given at run time (no retraining).  Instead of decoding freely and looking for the
keyword's spelling among a few hypotheses (on real speech a beam rarely holds a keyword's spelling; the
beam search this replaced is in docs/benchmarks_history.md), each keyword's own token path is scored against the
transducer lattice: a Viterbi search over the lattice of the keyword's tokens with a free start at every
frame.  It shares the batched engine step with recognition (same projected encoder frames) and adds one
batched joiner call per chunk and a few tiny tensor operations per frame.

**Keyword states.**  The keywords' token sequences (``table.encode(phrase)``) form a trie: the root (no
keyword token yet) and one node per distinct non-empty prefix.  The prediction network's output at a node
is fixed: the decoder after the stream-start blank, the word separator (character tables; none for BPE)
and the prefix's tokens, so it is **precomputed** once per keyword set (:meth:`KeywordSearch.prepare`,
projected for the joiner; a stateless decoder's nodes with the same last ``context_size`` tokens share one
output).  Each keyword ``p`` (``n_p`` tokens, its last node ``e_p``) also has ``trailing_blanks`` tail
states ``tau_1 .. tau_tb``: "complete, then at least ``k`` blanks at ``e_p``" (``tau_tb`` is not stored:
reaching it is a confirmation, step 3).

**Arcs and weights.**  At frame ``t`` node ``u`` has the joiner's log-probs ``lp_t(u, .)`` (log-softmax over
the whole vocabulary).  An arc taking token ``v`` there weighs ``w_t(u, v) = lp_t(u, v) - c * max lp_t(u, .)``:
``c = 1`` for the score ``llr`` (each step's log ratio of the keyword's symbol to the model's preferred one,
<= 0), ``c = 0`` for ``prob`` (plain log-likelihood).

**Search, per stream and frame ``t``** (frames in order; the state after the last frame is carried to the
next chunk, so any chunking gives the same result):

1. the root holds weight 0 (a keyword may start at any frame: the **free start**); every other node ``u``
   holds the best weight ``alpha(u)`` of a path from the root since the last reset, with that path's first
   token frame, sum of token probabilities and last token frame;
2. ``max_symbols_per_frame`` emission rounds: ``alpha(u) <- max(alpha(u), alpha(parent(u)) + w_t(parent(u),
   token(u)))``, all nodes at once from the previous round's values (ties keep ``alpha(u)``); an emission
   sets the last token frame to ``t`` (and the first to ``t`` from the root);
3. **confirmation candidates** (the keyword is a word of its own): ``alpha(e_p) + w_t(e_p, separator)`` (the
   separator follows), and ``tau_{tb-1} + w_t(e_p, blank)`` with ``tau_0 = alpha(e_p)`` (``tb`` blanks
   followed); the larger is ``D_t(p)`` (ties: the blanks); ``tb = 0``: ``D_t(p) = alpha(e_p)``;
4. **detection**: keyword ``p`` qualifies when its score is at least its threshold and ``f_m - last >=
   refractory_frames`` (``f_m`` the path's last keyword-token frame, ``last`` the stream's previous
   detection's).  Score ``llr``: ``exp(D_t(p) / n_p)`` (the geometric mean, per keyword token, of the
   path's likelihood ratio to the model's own choices, confirmation arcs included; 1 when the model
   prefers every symbol of the path); ``prob``: the mean probability of the path's keyword tokens.  The
   qualifying keyword with the highest score (ties: the first listed) becomes the stream's **candidate**
   when it scores higher than the candidate it has (if any); a candidate unbeaten for ``settle_frames``
   frames (``t - t_found >= settle_frames``; 0: at once), or still there when the stream ends
   (:meth:`KeywordSearch.detect` with ``flush``), is **detected**: its span runs from its first token's
   frame to ``f_m``, ``last = f_m``, and the candidate, every ``alpha`` and tail state are reset (a
   detection at frame ``t`` skips step 5);
5. otherwise blank arcs: ``alpha(u) <- alpha(u) + w_t(u, blank)``, ``tau_k <- tau_{k-1} + w_t(e_p, blank)``.

:class:`KeywordSearch` runs this batched over streams (each with its own keyword set) and states, with
no host synchronization inside the frame loop; :meth:`KeywordSearch.step` decides detections frame by
frame and keeps them until :meth:`KeywordSearch.detect` hands them over.  Since a candidate only ever
gives way to a higher score, a decode at threshold ``u`` whose detections all score at least ``s`` is
the decode at every threshold in ``[u, s]`` (what :func:`streamd.evaluation.keywords.keyword_sweep`
relies on).  The old ``kws.wake_boost`` and ``kws.wake_beam`` have no role in this search (the config still
accepts them).  Overlapping lists: a keyword that ends another ("computer", "hey computer") competes with it
on score, and the shorter one often wins.

Shape legend: B streams, T frames of a chunk, U distinct decoder outputs, N states (root, trie nodes,
tails), P keywords, V vocabulary, J joiner dim.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..config import TRANSDUCER_SCORES
from ..model.decoder import DecoderState
from ..model.transducer import Transducer

__all__ = ["KeywordSet", "KeywordTables", "KeywordState", "KeywordHit", "KeywordSearch", "keyword_set",
           "check_runtime_wake_words", "SCORES"]

SCORES = TRANSDUCER_SCORES  # this search's; "ctc" is :class:`~streamd.decode.ctc_keyword_search.CtcKeywordSearch`
_NEVER = -(2 ** 40)
_NEG = float("-inf")


@dataclass(frozen=True, eq=False)
class KeywordTables:
    """What :meth:`KeywordSearch.prepare` precomputes for a keyword set (module docstring), on the CPU.

    dec_p (U, J) projected decoder outputs; per state (N,): parent (root: itself), emit (index of the
    emission arc into the state in the flattened (U * V) log-probs, -1 for none), blank (its blank arc),
    blank_src (the state a blank arc comes from: itself, or the previous tail); per keyword (P,): end
    (``e_p``), tail (``tau_{tb-1}``, ``e_p`` itself for tb <= 1), sep (its separator arc, -1 for none),
    end_blank (its blank arc); key: the search settings they were made for."""

    dec_p: Tensor
    parent: Tensor
    emit: Tensor
    blank: Tensor
    blank_src: Tensor
    end: Tensor
    tail: Tensor
    sep: Tensor
    end_blank: Tensor
    key: tuple

    @property
    def states(self) -> int:
        return int(self.parent.shape[0])


@dataclass(frozen=True, eq=False)
class KeywordSet:
    """The keywords of a stream: names (P,), per-keyword thresholds (P,), token counts (P,), token
    sequences (P,) and, once prepared by a search, its precomputed tables."""

    names: tuple[str, ...]
    thresholds: tuple[float, ...]
    lengths: tuple[int, ...]
    tokens: tuple[tuple[int, ...], ...]
    tables: KeywordTables | None = None


@dataclass(frozen=True, eq=False)
class _Layout:
    """A batch's tables on the device, one row per stream (padded when the streams' sets differ)."""

    dec_p: Tensor  # (B, U, J)
    parent: Tensor  # (B, N, 4) int64, expanded for gather
    blank_src: Tensor  # (B, N, 4)
    end: Tensor  # (B, P, 4)
    tail: Tensor  # (B, P, 4)
    arcs: Tensor  # (B, 2N + 2P) int64: emit, blank, sep, end_blank into (U * V + 1), sentinel U * V
    n: Tensor  # (B, P) float64 keyword lengths
    thr: Tensor  # (B, P) float64 thresholds (inf for padding)
    fresh: Tensor  # (N, 4) float64 the reset state
    has_sep: bool


@dataclass
class KeywordState:
    """alpha: (B, N, 4) float64 per state [weight, first token frame, sum of token probabilities, last token
    frame] (weight -inf: unreached); last_fire: (B,) int64 frame of each stream's last detection (very
    negative if none); sets: (B,) each stream's prepared :class:`KeywordSet`; pending: per stepped chunk not
    yet handed over by :meth:`KeywordSearch.detect`, (B, T, 5) float64 [detected, keyword, score, first
    frame, last frame]."""

    alpha: Tensor
    last_fire: Tensor
    sets: tuple[KeywordSet, ...]
    best: Tensor | None = None
    pending: tuple[Tensor, ...] = ()
    layout: _Layout | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.best is None:
            self.best = _no_best(self.batch, self.alpha.device)

    @property
    def batch(self) -> int:
        return self.last_fire.shape[0]

    @staticmethod
    def cat(states: list["KeywordState"]) -> "KeywordState":
        if any(s.pending for s in states):
            raise ValueError("KeywordState.cat: detect() the stepped chunks first")
        n = max(s.alpha.shape[1] for s in states)
        alphas = [_pad_states(s.alpha, n) for s in states]
        return KeywordState(torch.cat(alphas), torch.cat([s.last_fire for s in states]),
                            tuple(k for s in states for k in s.sets), torch.cat([s.best for s in states]))

    def select(self, rows: Tensor) -> "KeywordState":
        if self.pending:
            raise ValueError("KeywordState.select: detect() the stepped chunks first")
        idx = rows.tolist()
        sets = tuple(self.sets[i] for i in idx)
        alpha = self.alpha[rows]
        n = max((k.tables.states for k in sets), default=0)
        if sets and all(k is sets[0] for k in sets):
            alpha = alpha[:, :n]  # one set: its own width again
        return KeywordState(alpha, self.last_fire[rows], sets, self.best[rows])


def _no_best(b: int, device) -> Tensor:
    """(B, 5) float64 best candidates of no detection yet: [score -inf, keyword, first, last, frame found]."""
    x = torch.zeros(b, 5, dtype=torch.float64, device=device)
    x[:, 0] = _NEG
    return x


def _pad_states(alpha: Tensor, n: int) -> Tensor:
    if alpha.shape[1] == n:
        return alpha
    pad = alpha.new_zeros(alpha.shape[0], n - alpha.shape[1], 4)
    pad[..., 0] = _NEG
    return torch.cat([alpha, pad], 1)


@dataclass(frozen=True)
class KeywordHit:
    """One detection: stream row, keyword, score, span in frames (``first_frame`` .. ``frame``, inclusive)
    and ``frame`` where the keyword's last token was emitted."""

    row: int
    keyword: str
    score: float
    first_frame: int
    frame: int


class KeywordSearch:
    """Batched keyword-constrained search (module docstring).

    model: the transducer; max_symbols_per_frame: emission rounds per frame; separator: the word-separator
    token id of a character table (None for BPE: no separator context and no separator confirmation);
    trailing_blanks, refractory_frames: the detection rule's frame counts; score: ``llr`` or ``prob``.
    """

    reads = "enc_p"  # the head output :meth:`step` takes (streamd.engine passes it)

    def __init__(self, model: Transducer, max_symbols_per_frame: int = 3, separator: int | None = None,
                 trailing_blanks: int = 2, refractory_frames: int = 25, score: str = "llr", settle_frames: int = 0):
        if max_symbols_per_frame < 1 or trailing_blanks < 0 or refractory_frames < 0 or settle_frames < 0:
            raise ValueError("max_symbols_per_frame must be >= 1, trailing_blanks, refractory_frames and "
                             "settle_frames >= 0")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.model = model
        self.max_symbols = max_symbols_per_frame
        self.separator = separator
        self.trailing_blanks = trailing_blanks
        self.refractory_frames = refractory_frames
        self.score = score
        self.settle_frames = settle_frames
        self._key = (id(model), separator, trailing_blanks)
        self._prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ tables

    @torch.no_grad()
    def prepare(self, kset: KeywordSet) -> KeywordSet:
        """``kset`` with its tables for this search (the decoder outputs of every keyword prefix, precomputed);
        the same object when it has them already, and one prepared object per given set."""
        if kset.tables is not None and kset.tables.key == self._key:
            return kset
        hit = self._prepared.get(kset)
        if hit is None:
            hit = replace(kset, tables=self._tables(kset.tokens))
            self._prepared[kset] = hit
        return hit

    def _tables(self, keywords: tuple[tuple[int, ...], ...]) -> KeywordTables:
        model = self.model
        dec = model.decoder
        blank, v = model.blank_id, model.cfg.vocab_size
        device = next(model.parameters()).device
        nodes = trie_nodes(keywords)
        prefixes = list(nodes)
        # decoder outputs: the stream start (blank), the separator, then the prefix
        st = dec.init_state(1, device)
        out, st = dec.step(st, torch.tensor([blank], device=device))
        if self.separator is not None:
            out, st = dec.step(st, torch.tensor([self.separator], device=device))
        outs: list[Tensor] = [out[0]] * len(prefixes)
        states: list[DecoderState] = [st] * len(prefixes)
        for i, u in enumerate(prefixes[1:], 1):  # parents come first (breadth-first)
            p = nodes[u[:-1]]
            o, s = dec.step(states[p], torch.tensor([u[-1]], device=device))
            outs[i], states[i] = o[0], s
        # distinct decoder outputs: a stateless decoder's nodes with the same context share one
        if states[0].context is not None:
            keys = [tuple(s.context[0].tolist()) for s in states]
        else:
            keys = list(range(len(prefixes)))
        ctx_of: dict = {}
        ctx = [ctx_of.setdefault(k, len(ctx_of)) for k in keys]
        firsts = {c: i for i, c in reversed(list(enumerate(ctx)))}
        dec_p = model.decoder_proj(torch.stack([outs[firsts[c]] for c in range(len(ctx_of))])).float().cpu()
        m = len(prefixes)
        parent = [0] + [nodes[u[:-1]] for u in prefixes[1:]]
        emit = [-1] + [ctx[nodes[u[:-1]]] * v + u[-1] for u in prefixes[1:]]
        blank_arc = [-1] + [ctx[i] * v + blank for i in range(1, m)]
        blank_src = list(range(m))
        end, tail, sep, end_blank = [], [], [], []
        tb = self.trailing_blanks
        for k in keywords:
            e = nodes[k]
            end.append(e)
            end_blank.append(ctx[e] * v + blank)
            sep.append(ctx[e] * v + self.separator if self.separator is not None else -1)
            prev = e
            for _ in range(1, tb):  # tails tau_1 .. tau_{tb-1} (tau_tb is the candidate itself)
                idx = len(parent)
                parent.append(idx)
                emit.append(-1)
                blank_arc.append(ctx[e] * v + blank)
                blank_src.append(prev)
                prev = idx
            tail.append(prev)
        t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
        return KeywordTables(dec_p, t(parent), t(emit), t(blank_arc), t(blank_src), t(end), t(tail), t(sep),
                             t(end_blank), self._key)

    def _layout(self, state: KeywordState, device: torch.device) -> _Layout:
        sets = state.sets
        b, n = state.batch, state.alpha.shape[1]
        tabs = [k.tables for k in sets]
        v = self.model.cfg.vocab_size
        u = max(t.dec_p.shape[0] for t in tabs)
        p = max(len(k.names) for k in sets)
        sentinel = u * v
        rows, stack = layout_rows(sets, b, device)

        def arc(x: Tensor, size: int) -> Tensor:
            return pad_rows(torch.where(x < 0, torch.full_like(x, sentinel), x), size, sentinel)

        t_rows = [k.tables for k in rows]
        dec_p = stack([torch.cat([t.dec_p, t.dec_p.new_zeros(u - t.dec_p.shape[0], t.dec_p.shape[1])])
                       for t in t_rows])
        ar_n = torch.arange(n)
        parent = stack([pad_rows(t.parent, n, 0) for t in t_rows])
        blank_src = stack([torch.cat([t.blank_src, ar_n[t.states:]]) for t in t_rows])
        end = stack([pad_rows(t.end, p, 0) for t in t_rows])
        tail = stack([pad_rows(t.tail, p, 0) for t in t_rows])
        arcs = stack([torch.cat([arc(t.emit, n), arc(t.blank, n), arc(t.sep, p), arc(t.end_blank, p)])
                      for t in t_rows])
        lens, thr = keyword_columns(rows, p, stack)
        fresh = _fresh(n, device)
        e4 = lambda x: x[..., None].expand(*x.shape, 4)  # noqa: E731
        return _Layout(dec_p, e4(parent), e4(blank_src), e4(end), e4(tail), arcs, lens, thr, fresh,
                       self.separator is not None)

    # ------------------------------------------------------------------ states

    def init_state(self, kset: KeywordSet, device: torch.device | str = "cpu") -> KeywordState:
        """Fresh state of one stream with keywords ``kset`` (prepared here if it is not yet)."""
        kset = self.prepare(kset)
        n = kset.tables.states
        return KeywordState(_fresh(n, device)[None], torch.full((1,), _NEVER, dtype=torch.long, device=device), (kset,))

    @torch.no_grad()
    def step(self, state: KeywordState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> KeywordState:
        """Search one chunk: enc_p (B, T, J) projected encoder frames, lengths (B,) valid frames per stream,
        frame_offset (B,) frames each stream decoded before.  Detections are decided frame by frame (and the
        detected streams reset at once); :meth:`detect` hands them over.  The given state is left unchanged."""
        b, t_max = enc_p.shape[0], enc_p.shape[1]
        if b == 0 or t_max == 0:
            return state
        device = enc_p.device
        lay = state.layout
        if lay is None or lay.dec_p.device != device:
            lay = self._layout(state, device)
        n, p = state.alpha.shape[1], lay.n.shape[1]
        # one joiner call over (streams, frames, decoder outputs) and the arcs' weights
        lp = self.model.joiner(enc_p[:, :, None, :], lay.dec_p[:, None, :, :].to(enc_p.dtype)).log_softmax(-1)
        w = lp - lp.amax(-1, keepdim=True) if self.score == "llr" else lp
        neg = w.new_full((b, t_max, 1), _NEG)
        arcs = lay.arcs[:, None, :].expand(b, t_max, -1)
        g = torch.cat([w.flatten(2), neg], 2).gather(2, arcs).double()  # (B, T, 2N + 2P) from (U * V + 1)
        e_w, b_w, s_w, eb_w = g.split([n, n, p, p], 2)
        z_n = torch.zeros_like(e_w)
        if self.score == "prob":  # (B, T, N) token probabilities
            e_p = torch.cat([lp.flatten(2), neg], 2).gather(2, arcs[..., :n]).double().exp()
        else:
            e_p = z_n
        inc_emit = torch.stack([e_w, z_n, e_p, z_n], -1)  # (B, T, N, 4)
        inc_blank = torch.stack([b_w, z_n, z_n, z_n], -1)
        z_p = torch.zeros_like(s_w)
        inc_sep = torch.stack([s_w, z_p, z_p, z_p], -1)  # (B, T, P, 4)
        inc_eb = torch.stack([eb_w, z_p, z_p, z_p], -1)
        frames, valid = chunk_clock(frame_offset, lengths, t_max, device)
        root = torch.stack([torch.zeros_like(frames), frames, torch.zeros_like(frames), frames], -1)  # (B, T, 4)
        llr = self.score == "llr"
        tb = self.trailing_blanks
        refr = float(self.refractory_frames)
        settle = float(self.settle_frames)
        last_fire = state.last_fire.double()
        alpha, pend = state.alpha, state.best
        no_best = _no_best(b, device)
        hits = []
        for i in range(t_max):
            prev = alpha
            a = alpha.clone()
            a[:, 0] = root[:, i]
            for _ in range(self.max_symbols):
                cand = a.gather(1, lay.parent) + inc_emit[:, i]
                cand[..., 3] = frames[:, i, None]
                a = torch.where((cand[..., 0] > a[..., 0])[..., None], cand, a)
            end = a.gather(1, lay.end)  # (B, P, 4)
            if tb == 0:
                d = end
            else:
                d = a.gather(1, lay.tail) + inc_eb[:, i]
                if lay.has_sep:
                    s = end + inc_sep[:, i]
                    d = torch.where((s[..., 0] > d[..., 0])[..., None], s, d)
            score = (d[..., 0] / lay.n).exp() if llr else d[..., 2] / lay.n  # (B, P)
            fired, hit, pend, last_fire = decide(score, d, lay, pend, last_fire, frames[:, i], valid[:, i], refr,
                                                 settle, no_best)
            hits.append(hit)
            nxt = a.gather(1, lay.blank_src) + inc_blank[:, i]
            nxt = torch.where(fired[:, None, None], lay.fresh, nxt)
            alpha = torch.where(valid[:, i, None, None], nxt, prev)
        return KeywordState(alpha, last_fire.long(), state.sets, pend, state.pending + (torch.stack(hits, 1),), lay)

    def detect(self, state: KeywordState, end_frames: Tensor | None = None,
               flush: Tensor | None = None) -> tuple[KeywordState, list[KeywordHit]]:
        """The detections of the chunks stepped since the last call (per stream in frame order), and the state
        without them.  flush: (B,) bool streams that have ended: a best candidate still settling is
        detected now (and the stream reset).  One host transfer for the batch.  end_frames is not needed
        (detections are decided frame by frame in :meth:`step`); it is accepted for callers of the old search."""
        pending, best, last_fire, alpha = list(state.pending), state.best, state.last_fire, state.alpha
        if flush is not None:
            f = flush.to(best.device) & (best[:, 0] > _NEG)
            pending.append(torch.stack([f.double(), best[:, 1], best[:, 0], best[:, 2], best[:, 3]], 1)[:, None])
            last_fire = torch.where(f, best[:, 3].long(), last_fire)
            best = torch.where(f[:, None], _no_best(state.batch, best.device), best)
            alpha = torch.where(f[:, None, None], _fresh(alpha.shape[1], alpha.device), alpha)
        out = KeywordState(alpha, last_fire, state.sets, best, (), state.layout)
        if not pending:
            return out, []
        info = torch.cat(pending, 1)  # (B, T', 5)
        rows, cols = info[..., 0].nonzero(as_tuple=True)
        if rows.numel() == 0:
            return out, []
        sel = info[rows, cols].cpu().tolist()
        hits = [KeywordHit(r, state.sets[r].names[int(k)], s, int(f0), int(f1))
                for r, (_, k, s, f0, f1) in zip(rows.tolist(), sel)]
        return out, hits

    def reset(self, state: KeywordState, rows: Tensor) -> KeywordState:
        """New keyword segment for the streams where rows (B,) bool is set: paths and a settling candidate are
        dropped (the refractory clock is kept)."""
        r = rows.to(state.alpha.device)
        alpha = torch.where(r[:, None, None], _fresh(state.alpha.shape[1], state.alpha.device), state.alpha)
        best = torch.where(r[:, None], _no_best(state.batch, state.alpha.device), state.best)
        return KeywordState(alpha, state.last_fire, state.sets, best, state.pending, state.layout)


def trie_nodes(keywords: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """The keywords' trie: every distinct prefix (the root ``()`` first) -> its index, breadth-first (a node's
    parent always comes before it)."""
    nodes: dict[tuple[int, ...], int] = {(): 0}
    for d in range(1, max(len(k) for k in keywords) + 1):
        for k in keywords:
            if len(k) >= d and k[:d] not in nodes:
                nodes[k[:d]] = len(nodes)
    return nodes


def pad_rows(x: Tensor, size: int, fill) -> Tensor:
    """``x`` (R, ...) padded with ``fill`` to ``size`` rows along its first dimension (as it is if it has them)."""
    return torch.cat([x, x.new_full((size - x.shape[0], *x.shape[1:]), fill)]) if x.shape[0] < size else x


def layout_rows(sets: Sequence[KeywordSet], batch: int, device) -> tuple[list[KeywordSet], Callable]:
    """A batch layout's distinct rows and how to stack them: one row expanded to all ``batch`` streams when every
    stream has the same keyword set (the usual case), else one per stream.  Returns ``(rows, stack)``: ``stack``
    turns one tensor per row into (B, ...) on ``device``."""
    same = all(k is sets[0] for k in sets)
    rows = [sets[0]] if same else list(sets)

    def stack(xs: list[Tensor]) -> Tensor:
        x = torch.stack(xs).to(device)
        return x.expand(batch, *x.shape[1:]) if same else x

    return rows, stack


def keyword_columns(rows: Sequence[KeywordSet], p: int, stack: Callable) -> tuple[Tensor, Tensor]:
    """(B, P) float64 per keyword of each layout row: token counts (padding 1) and thresholds (padding inf: a
    padding keyword never fires)."""
    lens = stack([pad_rows(torch.tensor(k.lengths, dtype=torch.float64), p, 1.0) for k in rows])
    thr = stack([pad_rows(torch.tensor(k.thresholds, dtype=torch.float64), p, math.inf) for k in rows])
    return lens, thr


def chunk_clock(frame_offset: Tensor, lengths: Tensor, t_max: int, device) -> tuple[Tensor, Tensor]:
    """A chunk's frames (B, T) float64 (each stream's own frame numbers) and valid (B, T) bool."""
    frames = (frame_offset.to(device)[:, None] + torch.arange(t_max, device=device)).double()
    valid = torch.arange(t_max, device=device)[None, :] < lengths.to(device)[:, None]
    return frames, valid


def decide(score: Tensor, d: Tensor, lay, pend: Tensor, last_fire: Tensor, frame: Tensor, valid: Tensor,
           refr: float, settle: float, no_best: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Step 4 of the search at one frame (module docstring), for every stream at once.

    score (B, P) the keywords' scores and d (B, P, 4) their confirmed paths [weight, first token frame, sum of
    token probabilities, last token frame]; lay.thr (B, P) thresholds; pend (B, 5) each stream's best candidate
    (:func:`_no_best`); last_fire (B,) float64; frame (B,) float64 this frame; valid (B,) bool.
    Returns fired (B,) bool, the frame's hit row (B, 5) [detected, keyword, score, first, last], the new
    candidates and last_fire."""
    b = score.shape[0]
    ok = (score >= lay.thr) & (d[..., 3] - last_fire[:, None] >= refr) & (d[..., 0] > _NEG) & valid[:, None]
    best = torch.where(ok, score, -1.0).argmax(1, keepdim=True)  # (B, 1)
    d_best = d.gather(1, best[..., None].expand(b, 1, 4))[:, 0]  # (B, 4)
    s_best = score.gather(1, best)[:, 0]
    better = ok.any(1) & (s_best > pend[:, 0])  # (B,) a new best candidate
    cand = torch.stack([s_best, best[:, 0].double(), d_best[:, 1], d_best[:, 3], frame], 1)
    pend = torch.where(better[:, None], cand, pend)
    fired = valid & (pend[:, 0] > _NEG) & (frame - pend[:, 4] >= settle)  # (B,)
    hit = torch.stack([fired.double(), pend[:, 1], pend[:, 0], pend[:, 2], pend[:, 3]], 1)
    last_fire = torch.where(fired, pend[:, 3], last_fire)
    pend = torch.where(fired[:, None], no_best, pend)
    return fired, hit, pend, last_fire


def _fresh(n: int, device) -> Tensor:
    """(N, 4) the state of no path: weight 0 at the root, -inf elsewhere."""
    x = torch.zeros(n, 4, dtype=torch.float64, device=device)
    x[1:, 0] = _NEG
    return x


def check_runtime_wake_words(model_keywords: Sequence[str], specs: Sequence, path: str) -> None:
    """ValueError naming the entry of ``specs`` that repeats one of the model's own wake words (its KWS head,
    ``model_keywords``, spots it already; listed again its events would come twice)."""
    head = {w.casefold() for w in model_keywords}
    for i, spec in enumerate(specs):
        if spec.phrase.casefold() in head:
            raise ValueError(f"{path}[{i}] {spec.phrase!r}: the model's own wake word (its KWS head spots it "
                             "already; listed again its events would come twice)")


def keyword_set(table, specs: Sequence, default_threshold: float, path: str) -> KeywordSet:
    """A :class:`KeywordSet` (not yet prepared) from phrase specs (:class:`~streamd.config.PhraseSpec`) spelled
    by ``table``.  ValueError names the entry the table cannot spell (or that repeats another's spelling)."""
    from .context_graph import phrase_graph

    tokens = phrase_graph(table, specs, 0.0, path).phrases
    return KeywordSet(tuple(s.phrase for s in specs),
                      tuple(default_threshold if s.threshold is None else s.threshold for s in specs),
                      tuple(len(p) for p in tokens), tuple(tuple(p) for p in tokens))
