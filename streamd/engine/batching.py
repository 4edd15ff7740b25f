"""Batched state between steps: kept while the next batch is the same set of streams; otherwise a new batch is
taken from the streams' pools (the batches they were last stepped in) with a few tensor ops per step."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .state import _Batch, _Stream


class Batching:
    """Part of :class:`~streamd.engine.Recognizer`: the kept batch."""

    def _decodable(self, st: _Stream) -> bool:
        """A full chunk is ready, or the (padded) tail of a finished stream."""
        n = st.fbank.frames_ready()
        return n >= self.chunk_fbank or (st.finished and n > 0)

    def _ready(self, st: _Stream) -> bool:
        """Finished, a segment to close, or a full chunk (:meth:`_decodable` for a stream not finished)."""
        return st.finished or st.reset_at is not None or st.fbank.frames_ready() >= self.chunk_fbank

    def ready_streams(self) -> list[int]:
        """Streams that the next step would process (in order)."""
        ready = self._ready
        return [sid for sid, st in self._streams.items() if ready(st)]

    def pending(self) -> bool:
        """True while some stream has work for :meth:`step`."""
        return any(self._ready(st) for st in self._streams.values())

    # A stream's batched state lives in a *pool*: the batch it was last stepped in (its ``_Stream.pool`` is that
    # batch and its row).  Dropping the kept batch (the next step takes another set of streams, a stream
    # closes, a step failed) only points its streams at it; gathering a new batch takes each pool's rows with
    # one ``select`` per state and joins the pieces with one ``cat``: the ops per step do not grow with the
    # streams.  A pool whose live rows fall under a quarter (streams gone idle elsewhere, closed) is compacted,
    # so the state kept is at most about four times the live streams'.

    COMPACT_MIN_ROWS = 32
    """A pool is compacted once fewer than a quarter of its rows (and at least this many in all) are live."""

    def _drop_batch(self) -> None:
        """Stop keeping the batch: its streams' state stays in it, as their pool."""
        b = self._batch
        if b is None:
            return
        self._batch = None
        b.shown.clear()
        live = 0
        for row, sid in enumerate(b.ids):
            st = self._streams.get(sid)
            if st is not None:
                st.pool = (b, row)
                live += 1
        b.live = live
        self._maybe_compact(b)

    def _leave_pool(self, st: _Stream) -> _Batch | None:
        """The stream's state no longer lives in its pool (taken into a batch, or the stream closed); the pool."""
        if st.pool is None:
            return None
        pool = st.pool[0]
        st.pool = None
        pool.live -= 1
        return pool

    def _maybe_compact(self, pool: _Batch | None) -> None:
        """Move the live rows of a mostly dead pool into a pool of their own."""
        if pool is None or not (0 < 4 * pool.live < len(pool.ids) and len(pool.ids) >= self.COMPACT_MIN_ROWS):
            return
        ids = tuple(sid for row, sid in enumerate(pool.ids)
                    if (st := self._streams.get(sid)) is not None and st.pool is not None and st.pool[0] is pool
                    and st.pool[1] == row)
        if ids:
            compact = self._build(ids)
            for row, sid in enumerate(ids):
                self._streams[sid].pool = (compact, row)
            compact.live = len(ids)

    def _gather(self, ids: tuple[int, ...]) -> _Batch:
        """The batch of streams ``ids`` (in this order): the kept one if it is the same set, else a new one."""
        if self._batch is not None and self._batch.ids == ids:
            return self._batch
        self._drop_batch()
        self._batch = self._build(ids)
        return self._batch

    def _build(self, ids: tuple[int, ...]) -> _Batch:
        """A new batch of streams ``ids`` from their pools (one ``select`` per pool and state) and fresh states
        for new streams (one per kind and search options); the streams leave their pools."""
        streams = [self._streams[i] for i in ids]
        pools: dict[int, tuple[_Batch, list[int], list[int]]] = {}  # id -> (pool, new rows, its rows)
        fresh: list[int] = []
        for row, st in enumerate(streams):
            if st.pool is None:
                fresh.append(row)
                continue
            pool, old = st.pool
            entry = pools.setdefault(id(pool), (pool, [], []))
            entry[1].append(row), entry[2].append(old)
        dev = self.device
        made: dict[tuple, Any] = {}  # new streams' initial states, one object per kind (and search options)

        def new(key: tuple, make: Callable[[], Any]) -> Any:
            if key not in made:
                made[key] = make()
            return made[key]

        def parts(kind: str, rows: list[int], method: str = "") -> list[tuple[Any, list[int]]]:
            """(state, the places among ``rows`` it fills) of kind ``kind`` for the batch rows ``rows``."""
            place = {r: k for k, r in enumerate(rows)}
            out: list[tuple[Any, list[int]]] = []
            for pool, new_rows, old_rows in pools.values():
                mine = [(place[r], o) for r, o in zip(new_rows, old_rows) if r in place]
                if mine:
                    pos = pool.positions(kind, method)  # pool row -> its place in the pool's state of this kind
                    rows_t = torch.from_numpy(pos[[o for _, o in mine]]).to(dev)
                    out.append((pool.state(kind, method).select(rows_t), [k for k, _ in mine]))
            by_key: dict[tuple, tuple[Any, list[int]]] = {}
            for r in fresh:
                if r not in place:
                    continue
                st, o = streams[r], streams[r].opts
                if kind == "enc":
                    key, make = ("enc",), lambda: self.model.encoder.init_cache(1, dev)
                elif kind == "search":
                    key = ("search", o.method, o.beam, id(st.hot))
                    make = lambda: self.searches[o.method].new_state(o.beam, dev, graph=st.hot)  # noqa: E731
                elif kind == "kws":
                    key, make = ("kws",), lambda: self.kws.init_state(1, dev)
                else:
                    key, make = ("wake", id(st.wake)), lambda: self.keyword_search.init_state(st.wake, dev)
                state = new(key, make)
                by_key.setdefault(key, (state, []))[1].append(place[r])
            for state, places in by_key.values():
                out.append((state.select(torch.zeros(len(places), dtype=torch.long, device=dev))
                            if len(places) > 1 else state, places))
            return out

        def rows_and_state(kind: str, rows: list[int], method: str = "") -> tuple[torch.Tensor, Any]:
            """The batch rows ``rows`` that hold a state of ``kind`` (as a tensor) and their batched state."""
            return torch.tensor(rows, device=dev), self._assemble(parts(kind, rows, method), len(rows))

        batch = _Batch(ids, self._assemble(parts("enc", list(range(len(ids)))), len(ids)))
        by_method: dict[str, list[int]] = {}
        for row, st in enumerate(streams):
            by_method.setdefault(st.opts.method, []).append(row)
        for method, rows in by_method.items():
            batch.groups[method] = rows_and_state("search", rows, method)
        kws_rows = [row for row, st in enumerate(streams) if self.kws is not None and st.opts.keywords]
        if kws_rows:
            batch.kws_rows, batch.kws = rows_and_state("kws", kws_rows)
        wake_rows = [row for row, st in enumerate(streams) if st.wake is not None]
        if wake_rows:
            batch.wake_rows, batch.wake = rows_and_state("wake", wake_rows)
        left = {id(p): p for p in (self._leave_pool(st) for st in streams) if p is not None}  # the batch holds it now
        for pool in left.values():
            self._maybe_compact(pool)
        return batch

    def _assemble(self, parts: list[tuple[Any, list[int]]], n: int) -> Any:
        """One batched state of ``n`` rows from ``parts``: (a state, the rows 0..n-1 its rows fill)."""
        order = [k for _, places in parts for k in places]
        state = parts[0][0] if len(parts) == 1 else type(parts[0][0]).cat([p for p, _ in parts])
        if order != list(range(n)):
            where = np.empty(n, dtype=np.int64)
            where[order] = np.arange(n)
            state = state.select(torch.from_numpy(where).to(self.device))
        return state
