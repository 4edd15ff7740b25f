"""Context graph: an Aho-Corasick automaton over phrases' token sequences, as dense tables.

Used by ``modified_beam`` for **hotwords** (contextual biasing: a boost along
matching token paths, taken back when a path leaves the phrase, as icefall's
context graph does); :func:`phrase_graph` also spells the runtime wake words
that :mod:`streamd.decode.keyword_search` scores (its own keyword-constrained
search: no boosts).

Definitions (P phrases, phrase ``p`` = tokens ``p_1 .. p_m`` with a boost ``b_p``
per token; ``prefix`` = token ids every phrase is matched after, e.g. the word
separator of a character table, so that phrases start at word starts):

* the automaton reads the tokens of a hypothesis since its segment start,
  preceded by ``prefix``;  its **state** after a token sequence ``x`` is the
  longest suffix of ``prefix + x`` that is a prefix of some ``prefix + p``
  (the trie node of that string);
* ``acc(u)`` of such a string ``u`` = the largest ``b_p * (|u| - |prefix|)``
  over the phrases ``p`` that ``u`` begins (0 for ``u`` no longer than the
  prefix): the credit of a partial match;
* ``commit(u)`` = ``acc`` of the longest prefix of ``u`` (``u`` included) that
  is a whole ``prefix + p``: credit that a path keeps once a phrase is complete
  on it;
* taking token ``v`` in state ``s`` leads to ``n = state(s + v)`` and adds
  ``gain(s, v) = acc(n) - acc(s)`` when ``n = s + v`` (the match goes on) and
  ``acc(n) - acc(s) + commit(s)`` otherwise (the path left ``s``: the credit of
  the unfinished part of ``s`` is taken back, a completed phrase keeps its own);
* at the end of a segment the unfinished part is taken back too:
  ``back(s) = commit(s) - acc(s)``; with an ``end_token`` ``e`` the segment end
  reads as that token first: ``back(s) = gain(s, e) + back(next(s, e))`` (for
  **whole-word** phrases: ``p`` followed by the word separator, and a segment
  end counts as a separator, so a phrase is credited only where its last word
  ends: "mark" earns nothing inside "market");
* ``match(n)`` = the phrase that is complete when the state is ``n``: the
  phrase ``n`` itself spells, else the longest phrase that is a suffix of
  ``n`` (the output link), else none.

Hence the total boost of a hypothesis is the credit of the phrases completed
along the automaton's path plus the partial credit of the one in progress, and
never depends on how the tokens were split into chunks.  Phrases never credited:
a complete phrase that is only a suffix inside a longer partial match earns
nothing unless the state reaches it (``match`` still reports it).

Tables (S states, V tokens): ``next`` (S, V) int64, ``gain`` (S, V) float32,
``back`` (S,) float32, ``match`` (S,) int64 (-1: none); ``start`` is the state
after ``prefix``.  The blank token is never read: searches do not move the
automaton on blank.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["ContextGraph", "ContextTables", "GraphSet", "phrase_graph", "shared_boost"]


@dataclass(frozen=True)
class ContextTables:
    """A graph's tables on one device (see the module docstring); ``start`` the initial state."""

    next: Tensor
    gain: Tensor
    back: Tensor
    match: Tensor
    start: int


@dataclass(eq=False)
class ContextGraph:
    """Aho-Corasick automaton over ``phrases`` (token-id sequences) with per-phrase ``boosts``.

    phrases: (P,) non-empty token-id tuples (distinct); boosts: (P,) per-token boost, >= 0;
    vocab_size: V; prefix: token ids every phrase is matched after (may be empty);
    end_token: the token a segment end reads as (None: none).
    Graphs are compared by identity (searches batch streams that share one).
    """

    phrases: tuple[tuple[int, ...], ...]
    boosts: tuple[float, ...]
    vocab_size: int
    prefix: tuple[int, ...] = ()
    end_token: int | None = None
    next: np.ndarray = field(init=False, repr=False)
    gain: np.ndarray = field(init=False, repr=False)
    back: np.ndarray = field(init=False, repr=False)
    match: np.ndarray = field(init=False, repr=False)
    start: int = field(init=False)
    _device_cache: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.phrases = tuple(tuple(int(t) for t in p) for p in self.phrases)
        self.boosts = tuple(float(b) for b in self.boosts)
        self.prefix = tuple(int(t) for t in self.prefix)
        if len(self.boosts) != len(self.phrases):
            raise ValueError(f"{len(self.phrases)} phrases but {len(self.boosts)} boosts")
        if len(set(self.phrases)) != len(self.phrases):
            raise ValueError("duplicate phrase token sequences")
        v = self.vocab_size
        for i, p in enumerate(self.phrases):
            if not p:
                raise ValueError(f"phrase {i} has no tokens")
            if any(not 0 <= t < v for t in p + self.prefix):
                raise ValueError(f"phrase {i}: token ids must be in [0, {v})")
            if not np.isfinite(self.boosts[i]) or self.boosts[i] < 0:
                raise ValueError(f"phrase {i}: boost must be a finite number >= 0, got {self.boosts[i]}")
        if self.end_token is not None and not 0 <= self.end_token < v:
            raise ValueError(f"end_token must be in [0, {v}), got {self.end_token}")
        self._build()

    @property
    def num_states(self) -> int:
        return self.next.shape[0]

    def _build(self) -> None:
        v, pre = self.vocab_size, len(self.prefix)
        children: list[dict[int, int]] = [{}]
        acc = [0.0]
        end = [-1]  # phrase spelled by the node (prefix + phrase), -1 if none
        parent = [0]
        for pid, p in enumerate(self.phrases):
            node = 0
            for i, tok in enumerate(self.prefix + p):
                nxt = children[node].get(tok)
                if nxt is None:
                    nxt = len(children)
                    children[node][tok] = nxt
                    children.append({})
                    acc.append(0.0)
                    end.append(-1)
                    parent.append(node)
                node = nxt
                acc[node] = max(acc[node], self.boosts[pid] * max(0, i + 1 - pre))
            end[node] = pid
        s = len(children)
        fail = [0] * s
        nxt_t = np.zeros((s, v), dtype=np.int64)
        is_child = np.zeros((s, v), dtype=bool)
        commit = [0.0] * s
        match = [-1] * s
        order = deque([0])
        while order:  # breadth first: a node's fail target is done before the node
            node = order.popleft()
            commit[node] = acc[node] if end[node] >= 0 else (commit[parent[node]] if node else 0.0)
            match[node] = end[node] if end[node] >= 0 else (match[fail[node]] if node else -1)
            nxt_t[node] = nxt_t[fail[node]] if node else 0
            for tok, child in children[node].items():
                fail[child] = nxt_t[fail[node], tok] if node else 0
                nxt_t[node, tok] = child
                is_child[node, tok] = True
                order.append(child)
        acc_a = np.asarray(acc, dtype=np.float64)
        commit_a = np.asarray(commit, dtype=np.float64)
        gain = acc_a[nxt_t] - acc_a[:, None] + np.where(is_child, 0.0, commit_a[:, None])
        back = commit_a - acc_a
        if self.end_token is not None:  # the segment end reads as end_token, then takes back what is unfinished
            e = self.end_token
            back = gain[:, e] + back[nxt_t[:, e]]
        self.next = nxt_t
        self.gain = gain.astype(np.float32)
        self.back = back.astype(np.float32)
        self.match = np.asarray(match, dtype=np.int64)
        start = 0
        for tok in self.prefix:
            start = int(nxt_t[start, tok])
        self.start = start

    def tables(self, device: torch.device | str = "cpu") -> ContextTables:
        """The tables as tensors on ``device`` (cached per device)."""
        key = str(device)
        t = self._device_cache.get(key)
        if t is None:
            t = self._device_cache[key] = ContextTables(
                torch.from_numpy(self.next).to(device), torch.from_numpy(self.gain).to(device),
                torch.from_numpy(self.back).to(device), torch.from_numpy(self.match).to(device), self.start)
        return t

    def walk(self, tokens: Sequence[int]) -> tuple[int, float]:
        """(state, total gain) after ``tokens`` from :attr:`start` (host; for tests and tools)."""
        s, total = self.start, 0.0
        for t in tokens:
            total += float(self.gain[s, t])
            s = int(self.next[s, t])
        return s, total


@dataclass(frozen=True, eq=False)
class GraphSet:
    """The distinct context graphs of a batch of streams, their tables stacked on one device.

    graphs: (P,) graphs; None stands for "no phrases" (one state, no gains).
    base: (P,) int64 first global state of each graph.
    next: (S, V) int64 global next state (blank keeps the state); gain: (S, V) float32 (0 for blank);
    back: (S,) float32; match: (S,) int64 phrase index within its own graph, -1 for none.
    """

    graphs: tuple[ContextGraph | None, ...]
    base: Tensor
    next: Tensor
    gain: Tensor
    back: Tensor
    match: Tensor
    blank_id: int
    vocab_size: int

    @staticmethod
    def build(graphs: Sequence[ContextGraph | None], blank_id: int, vocab_size: int,
              device: torch.device | str) -> "GraphSet":
        nexts, gains, backs, matches, bases = [], [], [], [], []
        offset = 0
        for g in graphs:
            if g is None:
                nx = torch.zeros(1, vocab_size, dtype=torch.long, device=device)
                gn = torch.zeros(1, vocab_size, device=device)
                bk = torch.zeros(1, device=device)
                mt = torch.full((1,), -1, dtype=torch.long, device=device)
            else:
                if g.vocab_size != vocab_size:
                    raise ValueError(f"context graph built for {g.vocab_size} tokens, the model has {vocab_size}")
                t = g.tables(device)
                nx, gn, bk, mt = t.next, t.gain, t.back, t.match
            nx = nx.clone()
            nx[:, blank_id] = torch.arange(nx.shape[0], device=device)
            gn = gn.clone()
            gn[:, blank_id] = 0.0
            nexts.append(nx + offset)
            gains.append(gn)
            backs.append(bk)
            matches.append(mt)
            bases.append(offset)
            offset += nx.shape[0]
        return GraphSet(tuple(graphs), torch.tensor(bases, dtype=torch.long, device=device), torch.cat(nexts),
                        torch.cat(gains), torch.cat(backs), torch.cat(matches), blank_id, vocab_size)

    def starts(self, part: Tensor) -> Tensor:
        """(B,) global start state of each stream; part: (B,) int64 graph index per stream."""
        local = torch.tensor([g.start if g is not None else 0 for g in self.graphs], dtype=torch.long,
                             device=self.base.device)
        return self.base[part] + local[part]

    @staticmethod
    def merge(sets: Sequence["GraphSet | None"], parts: Sequence[Tensor], states: Sequence[Tensor]
              ) -> tuple["GraphSet", Tensor, list[Tensor]]:
        """One set for the union of several batches' graphs (each graph once, by identity).

        parts[i]: (B_i,) graph index of batch i's streams in sets[i] (ignored where sets[i] is None);
        states[i]: (B_i, ...) global states in sets[i]. Returns the set, the new (sum B_i,) parts and
        each batch's states renumbered into it (at least one of ``sets`` is not None)."""
        ref = next(s for s in sets if s is not None)
        blank_id, vocab_size, device = ref.blank_id, ref.vocab_size, ref.base.device
        order: list[ContextGraph | None] = []
        index: dict[int, int] = {}

        def key(g):
            return id(g) if g is not None else 0

        for s in sets:
            for g in (s.graphs if s is not None else (None,)):
                if key(g) not in index:
                    index[key(g)] = len(order)
                    order.append(g)
        gs = GraphSet.build(order, blank_id, vocab_size, device)
        new_parts, new_states = [], []
        for s, part, st in zip(sets, parts, states):
            if s is None:
                np_ = torch.full_like(part, index[0])
                local = torch.zeros_like(st)
            else:
                remap = torch.tensor([index[key(g)] for g in s.graphs], dtype=torch.long, device=device)
                np_ = remap[part]
                local = st - s.base[part].view(-1, *([1] * (st.dim() - 1)))
            new_parts.append(np_)
            new_states.append(gs.base[np_].view(-1, *([1] * (st.dim() - 1))) + local)
        return gs, torch.cat(new_parts), new_states


def shared_boost(boost: float, n: int) -> float:
    """The per-token boost of each phrase of a hotword list of ``n`` phrases: ``boost / (1 + ln n)``.

    A list is evidence that one of its phrases may be said, not that each is: the more phrases share it, the
    less each one is lifted (one phrase: ``boost``; 2: 0.59 x; 10: 0.30 x; 100: 0.18 x).  Measured with
    the shipped model (docs/benchmarks.md, "Hotwords"): a fixed boost that halves the name errors of a
    one- or two-name list (4) raises dev WER by 8 points with 100 unrelated names, one that keeps dev
    WER (<= 1) leaves most names wrong."""
    if n < 1:
        raise ValueError(f"n: a list has at least one phrase, got {n}")
    return boost / (1.0 + math.log(n))


def phrase_graph(table, specs, default_boost: float, path: str, whole_words: bool = False) -> ContextGraph:
    """The context graph of phrase specs (:class:`~streamd.config.PhraseSpec`) spelled by a token table.

    table: the model's :class:`~streamd.tokens.TokenTable`; a character table matches phrases
    after its word separator (phrases start at word starts), a BPE table's pieces carry the word start.
    whole_words: a character table's phrases also end at a word end (the separator, or the segment end,
    completes them; the separator is boosted like the phrase's tokens); no effect on a BPE table.
    ValueError names the entry (``path[i]``) that the table cannot spell."""
    phrases, boosts = [], []
    for i, spec in enumerate(specs):
        try:
            toks = tuple(table.encode(spec.phrase))
        except ValueError as e:
            raise ValueError(f"{path}[{i}] {spec.phrase!r}: {e}") from None
        if not toks:
            raise ValueError(f"{path}[{i}] {spec.phrase!r}: no tokens")
        if toks in phrases:
            raise ValueError(f"{path}[{i}] {spec.phrase!r}: spelled like entry {phrases.index(toks)}")
        phrases.append(toks)
        boosts.append(default_boost if spec.boost is None else spec.boost)
    sep = table.separator if table.kind == "char" else None
    prefix = (table.id(sep),) if sep is not None else ()
    if whole_words and prefix:
        return ContextGraph(tuple(p + prefix for p in phrases), tuple(boosts), len(table), prefix, prefix[0])
    return ContextGraph(tuple(phrases), tuple(boosts), len(table), prefix)
