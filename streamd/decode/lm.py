"""Token n-gram language model for shallow fusion in the transducer beam search.

A character (or BPE) model trained on a few hours of speech spells words it
has rarely heard phonetically ("tomartas", "hallwill"); a language model
over the same tokens, trained on far more text than there is speech, knows
that "tomatoes" and "hallway" are words.  Shallow fusion adds
``lm_weight * log p_lm(token | history)`` to every non-blank extension
scored by the beam search (and ``lm_weight * log p_lm(</s> | history)`` when
a segment is finalized), as icefall's ``modified_beam_search_lm_shallow_fusion``
and sherpa's n-gram fusion do.

The model is an interpolated Witten-Bell n-gram (Witten & Bell 1991; Chen &
Goodman 1998, section 2.7) over the model's token ids::

    p(w | h) = (c(h, w) + T(h) * p(w | h')) / (c(h) + T(h))

where h' drops h's oldest token, c counts training n-grams, T(h) is the
number of distinct tokens seen after h, and the empty history backs off to
the uniform distribution over the tokens (blank excluded) and </s>.
Histories seen fewer than ``min_count`` times are pruned (they back off).

For decoding it is compiled into a deterministic automaton with dense
tables, so that scoring and advancing B x K hypotheses are two gathers on
any device, with no host synchronization and no per-hypothesis Python:

* a *state* is a kept history (up to ``order - 1`` tokens, sentence start
  padded with <s>); the state reached after a token is the longest kept
  suffix of the extended history, so its row is exactly p(. | full history);
* ``logp[s, v]`` is log p(v | s) for every token v (0 in the blank column:
  blank does not advance the LM), ``eos[s]`` is log p(</s> | s), and
  ``next[s, v]`` the successor state (``next[s, blank] = s``).

The file (``streamd lm``, :mod:`streamd.train.lm`) stores the kept
histories and their log-probability rows; the transitions are rebuilt from
them at load (vectorized, well under a second).

Shape legend: S automaton states, V vocabulary (model tokens, blank
included), H = order - 1 history length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from ..model.checkpoint import read_versioned

__all__ = ["NgramLM", "build_ngram", "load_lm", "save_lm", "LM_FORMAT"]

LM_FORMAT = "streamd-ngram-lm"
_VERSION = 1


@dataclass(frozen=True)
class _Histories:
    """The kept histories of a compiled n-gram, level by level.

    keys[L]: (S_L,) int64 sorted keys of the kept histories of length L
    (oldest token first, base R = V + 1, <s> = V); level 0 holds one key, 0.
    """

    keys: tuple[np.ndarray, ...]
    radix: int

    @property
    def offsets(self) -> np.ndarray:
        """(H + 2,) state id of each level's first history (and the total at the end)."""
        return np.concatenate([[0], np.cumsum([len(k) for k in self.keys])]).astype(np.int64)

    def lookup_longest(self, key: np.ndarray, length: int) -> np.ndarray:
        """State ids of the longest kept suffix of histories ``key`` (N,) int64, all of ``length`` tokens."""
        offsets = self.offsets
        out = np.full(key.shape, -1, dtype=np.int64)
        for lvl in range(min(length, len(self.keys) - 1), -1, -1):
            suf = key % (self.radix ** lvl)
            keys = self.keys[lvl]
            if len(keys) == 0:  # everything of this length was pruned
                continue
            pos = np.searchsorted(keys, suf).clip(max=len(keys) - 1)
            hit = (keys[pos] == suf) & (out < 0)
            out[hit] = offsets[lvl] + pos[hit]
        return out


@dataclass(frozen=True)
class NgramLM:
    """A token n-gram compiled to dense automaton tables (see module docstring).

    logp: (S, V) float32 log p(token | state); 0 in the blank column.
    eos: (S,) float32 log p(</s> | state).
    next: (S, V) int32 successor state after each token (itself for blank); int32 halves the
        largest table (states stay int64 in the searches: :meth:`advance` widens).
    start: state of an empty history (sentence start).
    order: n of the n-gram; blank_id: the model's blank.
    tokens: the token table the ids refer to (checked against the model's).
    histories: the kept histories (what :func:`save_lm` stores; transitions are rebuilt from them).
    """

    logp: Tensor
    eos: Tensor
    next: Tensor
    start: int
    order: int
    blank_id: int
    tokens: tuple[str, ...]
    histories: _Histories

    @property
    def num_states(self) -> int:
        return self.logp.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.logp.shape[1]

    def to(self, device: torch.device | str) -> "NgramLM":
        return NgramLM(self.logp.to(device), self.eos.to(device), self.next.to(device), self.start, self.order,
                       self.blank_id, self.tokens, self.histories)

    def initial(self, shape: tuple[int, ...], device: torch.device | str) -> Tensor:
        """States of empty histories: (*shape) int64."""
        return torch.full(shape, self.start, dtype=torch.long, device=device)

    def score(self, states: Tensor) -> Tensor:
        """log p(v | state) for every token: states (...) int64 -> (..., V) (0 for blank)."""
        return self.logp[states]

    def advance(self, states: Tensor, tokens: Tensor) -> Tensor:
        """States after one token: states, tokens (...) int64 -> (...) int64 (blank keeps the state)."""
        return self.next[states, tokens].long()

    def end_score(self, states: Tensor) -> Tensor:
        """log p(</s> | state): states (...) int64 -> (...) float32."""
        return self.eos[states]

    def sequence_logprob(self, ids: Sequence[int], eos: bool = True) -> float:
        """log p of a whole token sequence (blank ids are skipped), optionally with </s>; host-side helper."""
        s = torch.tensor(self.start)
        total = 0.0
        for i in ids:
            if i == self.blank_id:
                continue
            total += float(self.logp[s, i])
            s = self.next[s, i].long()
        return total + (float(self.eos[s]) if eos else 0.0)


def _counts(seqs: Iterable[Sequence[int]], order: int, radix: int, bos: int, eos_col: int
            ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """N-gram counts per history length L = 0..order-1: (history keys, next columns, counts), sorted."""
    h = order - 1
    parts = []
    for s in seqs:
        a = np.asarray(s, dtype=np.int64)
        parts.append(np.concatenate([np.full(h, bos, dtype=np.int64), a, [-1]]))  # -1 marks </s>
    if not parts:
        raise ValueError("no training sequences for the n-gram")
    seq = np.concatenate(parts)
    # predicted positions: every token and every </s>, never the <s> padding
    is_pad = np.concatenate([np.r_[np.ones(h, bool), np.zeros(len(p) - h, bool)] for p in parts])
    pos = np.nonzero(~is_pad)[0]
    col = seq[pos].copy()
    col[col < 0] = eos_col
    out = []
    key = np.zeros(len(pos), dtype=np.int64)
    for lvl in range(order):
        if lvl > 0:
            prev = seq[pos - lvl]  # the token lvl places back: the oldest of this history
            if (prev < 0).any():
                raise AssertionError("history crossed a sentence end")  # padding makes this impossible
            key = key + prev * radix ** (lvl - 1)
        pair = key * (eos_col + 1) + col
        uniq, cnt = np.unique(pair, return_counts=True)
        out.append((uniq // (eos_col + 1), uniq % (eos_col + 1), cnt))
    return out


def build_ngram(seqs: Iterable[Sequence[int]], vocab_size: int, blank_id: int, order: int = 6,
                min_count: int = 2, tokens: Sequence[str] = ()) -> NgramLM:
    """Train and compile an interpolated Witten-Bell n-gram.

    seqs: token-id sequences (no blank), one per sentence; vocab_size V of the
    model (blank included); order n >= 1; histories seen fewer than
    ``min_count`` times are pruned.
    """
    if order < 1 or order > 12:
        raise ValueError(f"order must be 1..12, got {order}")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    v = vocab_size
    radix, bos, eos_col = v + 1, v, v  # history symbols: tokens and <s>; predicted: tokens and </s> (column V)
    seqs = [np.asarray(s, dtype=np.int64).reshape(-1) for s in seqs]
    flat = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    if ((flat < 0) | (flat >= v) | (flat == blank_id)).any():
        raise ValueError(f"token ids must be in 0..{v - 1} and not blank ({blank_id})")
    counts = _counts(seqs, order, radix, bos, eos_col)
    allowed = np.ones(v + 1, dtype=bool)
    allowed[blank_id] = False
    rows_prev = None
    keys, rows = [], []
    for lvl, (hk, col, cnt) in enumerate(counts):
        uk, inv = np.unique(hk, return_inverse=True)
        c = np.zeros((len(uk), v + 1))
        np.add.at(c, (inv, col), cnt)
        total = c.sum(1)
        keep = total >= (min_count if lvl > 0 else 1)
        uk, c, total = uk[keep], c[keep], total[keep]
        types = (c > 0).sum(1)
        if lvl == 0:
            lower = np.where(allowed, 1.0 / allowed.sum(), 0.0)[None, :]
        else:
            parent = np.searchsorted(keys[-1], uk % radix ** (lvl - 1))
            assert np.array_equal(keys[-1][parent], uk % radix ** (lvl - 1)), "pruning must keep suffixes"
            lower = rows_prev[parent]
        row = (c + types[:, None] * lower) / (total + types)[:, None]
        keys.append(uk)
        rows.append(row)
        rows_prev = row
    hist = _Histories(tuple(keys), radix)
    with np.errstate(divide="ignore"):  # the blank column is 0: log 0 = -inf, replaced in _compile
        logp = np.log(np.concatenate(rows))  # (S, V + 1)
    return _compile(hist, logp, order, blank_id, tuple(tokens))


def _compile(hist: _Histories, logp: np.ndarray, order: int, blank_id: int, tokens: tuple[str, ...]) -> NgramLM:
    """Automaton tables from the kept histories and their log-probability rows (S, V + 1) (column V: </s>)."""
    v = logp.shape[1] - 1
    offsets = hist.offsets
    h = order - 1
    if len(logp) >= 2 ** 31:
        raise ValueError(f"{len(logp)} LM states do not fit int32 transitions; prune more (min_count)")
    nxt = np.empty((len(logp), v), dtype=np.int32)
    for lvl, keys in enumerate(hist.keys):
        ext = keys[:, None] * hist.radix + np.arange(v)[None, :]  # (S_L, V) history + token, length lvl + 1
        length = lvl + 1
        if length > h:
            ext, length = ext % hist.radix ** h, h
        nxt[offsets[lvl]:offsets[lvl + 1]] = hist.lookup_longest(ext.reshape(-1), length).reshape(ext.shape)
    nxt[:, blank_id] = np.arange(len(logp), dtype=np.int32)
    start_key = sum(v * hist.radix ** i for i in range(h))  # h times <s>
    start = int(hist.lookup_longest(np.array([start_key], dtype=np.int64), h)[0])
    lp = logp[:, :v].astype(np.float32)
    lp[:, blank_id] = 0.0
    return NgramLM(torch.from_numpy(lp), torch.from_numpy(logp[:, v].astype(np.float32)), torch.from_numpy(nxt),
                   start, order, blank_id, tokens, hist)


def save_lm(lm: NgramLM, path: str | Path, meta: dict | None = None) -> None:
    """Write the LM: kept histories + float16 log-probability rows (transitions are rebuilt at load)."""
    keys = lm.histories.keys
    rows = torch.cat([lm.logp, lm.eos[:, None]], dim=1).half()
    torch.save({"format": LM_FORMAT, "version": _VERSION, "order": lm.order, "blank_id": lm.blank_id,
                "tokens": list(lm.tokens), "keys": [torch.from_numpy(np.asarray(k)) for k in keys],
                "rows": rows, "meta": dict(meta or {})}, str(path))


def load_lm(path: str | Path) -> tuple[NgramLM, dict]:
    """Read an LM written by :func:`save_lm`; returns (lm, meta).  ValueError names what is wrong."""
    d = read_versioned(path, LM_FORMAT, _VERSION, "language model")
    logp = d["rows"].float().numpy()  # (S, V + 1); the blank column is 0 as saved, and _compile sets it so
    hist = _Histories(tuple(k.numpy() for k in d["keys"]), logp.shape[1])
    lm = _compile(hist, logp, int(d["order"]), int(d["blank_id"]), tuple(d["tokens"]))
    return lm, dict(d.get("meta", {}))
