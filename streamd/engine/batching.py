"""Batched state between steps: gathered from the streams when the batch changes, kept when the
next batch is the same set of streams, scattered back when it is dropped."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor
from .state import _Batch, _Stream


class Batching:
    """Part of :class:`~streamd.engine.Recognizer`: the kept batch."""


    def _decodable(self, st: _Stream) -> bool:
        """A full chunk is ready, or the (padded) tail of a finished stream."""
        n = st.fbank.frames_ready()
        return n >= self.chunk_fbank or (st.finished and n > 0)

    def _ready(self, st: _Stream) -> bool:
        return st.finished or st.reset_at is not None or self._decodable(st)

    def ready_streams(self) -> list[int]:
        """Streams that the next step would process (in order): :meth:`_ready`, inlined (every stream, every
        step)."""
        c = self.chunk_fbank
        return [sid for sid, st in self._streams.items()
                if st.finished or st.reset_at is not None or st.fbank.frames_ready() >= c]

    def pending(self) -> bool:
        """True while some stream has work for :meth:`step`."""
        return any(self._ready(st) for st in self._streams.values())

    def _drop_batch(self) -> None:
        """Scatter the kept batch back into per-stream slices."""
        b = self._batch
        if b is None:
            return
        self._batch = None
        for row, sid in enumerate(b.ids):
            st = self._streams.get(sid)
            if st is None:
                continue
            r = torch.tensor([row], device=self.device)
            st.enc = b.enc.select(r)
        for rows, state in b.groups.values():
            self._scatter(b.ids, rows, state, "search")
        if b.kws_rows is not None:
            self._scatter(b.ids, b.kws_rows, b.kws, "kws")
        if b.wake_rows is not None:
            self._scatter(b.ids, b.wake_rows, b.wake, "kwsearch")

    def _scatter(self, ids: tuple[int, ...], rows: Tensor, state: Any, attr: str) -> None:
        """Give each still-open stream of ``rows`` (R,) its one-row slice of the batched ``state`` as ``attr``."""
        for j, row in enumerate(rows.tolist()):
            st = self._streams.get(ids[row])
            if st is not None:
                setattr(st, attr, state.select(torch.tensor([j], device=self.device)))

    def _stack(self, states: list[Any], rows: list[int]) -> tuple[Tensor, Any]:
        """(R,) row indices and the states of ``rows`` (one per row) as one batched state.

        Runs of rows that share one state object (the fresh state of new streams, see :meth:`_gather`) are
        repeated with one ``select`` each, not concatenated stream by stream."""
        parts: list[Any] = []
        k = 0
        while k < len(states):
            j = k + 1
            while j < len(states) and states[j] is states[k]:
                j += 1
            parts.append(states[k].select(torch.zeros(j - k, dtype=torch.long, device=self.device))
                         if j - k > 1 else states[k])
            k = j
        return torch.tensor(rows, device=self.device), type(parts[0]).cat(parts)

    def _gather(self, ids: tuple[int, ...]) -> _Batch:
        if self._batch is not None and self._batch.ids == ids:
            return self._batch
        self._drop_batch()
        streams = [self._streams[i] for i in ids]
        fresh: dict[Any, Any] = {}  # new streams' initial states, one object per kind (and search options)

        def new(key: tuple, make: Callable[[], Any]) -> Any:
            if key not in fresh:
                fresh[key] = make()
            return fresh[key]

        dev = self.device
        enc, search, kws, kwsearch = [], [], [], []  # per row: the stream's state, or a fresh one (None: none)
        for st in streams:
            if st.enc is not None:
                enc.append(st.enc), search.append(st.search), kws.append(st.kws), kwsearch.append(st.kwsearch)
                continue
            o = st.opts
            enc.append(new(("enc",), lambda: self.model.encoder.init_cache(1, dev)))
            search.append(new(("search", o.method, o.beam, id(st.hot)), lambda: self.searches[o.method].new_state(
                o.beam, dev, graph=st.hot)))
            kws.append(new(("kws",), lambda: self.kws.init_state(1, dev))
                       if self.kws is not None and o.keywords else None)
            kwsearch.append(new(("wake", id(st.wake)), lambda: self.keyword_search.init_state(st.wake, dev))
                            if st.wake is not None else None)
        batch = _Batch(ids, self._stack(enc, list(range(len(ids))))[1])
        by_method: dict[str, list[int]] = {}
        for row, st in enumerate(streams):
            by_method.setdefault(st.opts.method, []).append(row)
        for method, rows in by_method.items():
            batch.groups[method] = self._stack([search[r] for r in rows], rows)
        kws_rows = [row for row, x in enumerate(kws) if x is not None]
        if kws_rows:
            batch.kws_rows, batch.kws = self._stack([kws[r] for r in kws_rows], kws_rows)
        wake_rows = [row for row, x in enumerate(kwsearch) if x is not None]
        if wake_rows:
            batch.wake_rows, batch.wake = self._stack([kwsearch[r] for r in wake_rows], wake_rows)
        for st in streams:  # the batch owns the state now
            st.enc = st.search = st.kws = st.kwsearch = None
        self._batch = batch
        return batch
