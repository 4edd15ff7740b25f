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

    # The ready streams are kept as a set of ids (``_ready_ids``), O(ready) per step instead of a scan of every
    # stream: a stream can only become ready where audio arrives (accept_audio), at finish() and at reset() (each
    # adds it when it is ready then), and only stop being ready where it is stepped (:meth:`step` notes the
    # streams it takes in ``_ready_recheck``, whose readiness the next call here checks again) or closed (which
    # removes it).  Stream ids grow with creation, which is the order of ``_streams``: sorted ids are the order
    # a scan of ``_streams`` gives (:meth:`_ready_scan`).

    def ready_streams(self) -> list[int]:
        """Streams that the next step would process (in order: that of their creation)."""
        ids, recheck = self._ready_ids, self._ready_recheck
        if recheck:
            streams, ready = self._streams, self._ready
            for sid in recheck:
                st = streams.get(sid)
                if st is None or not ready(st):
                    ids.discard(sid)
            recheck.clear()
        return sorted(ids)

    def _ready_scan(self) -> list[int]:
        """:meth:`ready_streams` the slow way, a scan of every stream (the reference for tests)."""
        ready = self._ready
        return [sid for sid, st in self._streams.items() if ready(st)]

    def pending(self) -> bool:
        """True while some stream has work for :meth:`step`."""
        return bool(self.ready_streams())

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
        n = len(ids)
        # one pass over the streams: each pool's (new rows, its rows), consecutive streams mostly share a pool
        pools: dict[_Batch, tuple[list[int], list[int]]] = {}  # pool -> (new rows, its rows), first seen first
        fresh: list[int] = []
        last = new_rows = old_rows = None
        for row, st in enumerate(streams):
            p = st.pool
            if p is None:
                fresh.append(row)
                continue
            pool = p[0]
            if pool is not last:
                entry = pools.get(pool)
                if entry is None:
                    entry = pools[pool] = ([], [])
                last, (new_rows, old_rows) = pool, entry
            new_rows.append(row)
            old_rows.append(p[1])
        taken = [(pool, np.array(nr, dtype=np.int64), np.array(orow, dtype=np.int64))
                 for pool, (nr, orow) in pools.items()]
        dev = self.device
        made: dict[tuple, Any] = {}  # new streams' initial states, one object per kind (and search options)

        def new(key: tuple, make: Callable[[], Any]) -> Any:
            if key not in made:
                made[key] = make()
            return made[key]

        def parts(kind: str, rows: list[int] | None, method: str = "") -> list[tuple[Any, np.ndarray]]:
            """(state, the places among ``rows`` it fills) of kind ``kind`` for the batch rows ``rows`` (None:
            every row, each its own place)."""
            out: list[tuple[Any, np.ndarray]] = []
            place = None
            if rows is not None:
                place = np.full(n, -1, dtype=np.int64)
                place[rows] = np.arange(len(rows))
            for pool, nr, orow in taken:
                if place is None:
                    places, olds = nr, orow
                else:
                    places = place[nr]
                    mine = places >= 0
                    places, olds = places[mine], orow[mine]
                    if not places.size:
                        continue
                pos = pool.positions(kind, method)  # pool row -> its place in the pool's state of this kind
                at = pos[olds]
                state = pool.state(kind, method)
                if not (at.size == np.count_nonzero(pos >= 0) and np.array_equal(at, np.arange(at.size))):
                    state = state.select(torch.from_numpy(at).to(dev))
                # else every row of the pool's state, in order (the streams last stepped together): the state
                # itself, no copy (the pool has no other stream left that holds a row of it)
                out.append((state, places))
            by_key: dict[tuple, tuple[Any, list[int]]] = {}
            for r in fresh:
                k = r if place is None else int(place[r])
                if k < 0:
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
                by_key.setdefault(key, (state, []))[1].append(k)
            for state, places in by_key.values():
                out.append((state.select(torch.zeros(len(places), dtype=torch.long, device=dev))
                            if len(places) > 1 else state, np.array(places, dtype=np.int64)))
            return out

        def rows_and_state(kind: str, rows: list[int], method: str = "") -> tuple[torch.Tensor, Any]:
            """The batch rows ``rows`` (ascending) that hold a state of ``kind`` (as a tensor) and their batched
            state; every row: each its own place, no place lookups."""
            state = self._assemble(parts(kind, None if len(rows) == n else rows, method), len(rows))
            return torch.tensor(rows, device=dev), state

        batch = _Batch(ids, self._assemble(parts("enc", None), n))
        by_method: dict[str, list[int]] = {}
        for row, st in enumerate(streams):
            by_method.setdefault(st.opts.method, []).append(row)
        for method, rows in by_method.items():
            batch.groups[method] = rows_and_state("search", rows, method)
        if self.kws is not None:
            kws_rows = [row for row, st in enumerate(streams) if st.opts.keywords]
            if kws_rows:
                batch.kws_rows, batch.kws = rows_and_state("kws", kws_rows)
        wake_rows = [row for row, st in enumerate(streams) if st.wake is not None]
        if wake_rows:
            batch.wake_rows, batch.wake = rows_and_state("wake", wake_rows)
        for st in streams:  # the batch holds their state now
            self._leave_pool(st)
        for pool, _, _ in taken:
            self._maybe_compact(pool)
        return batch

    def _assemble(self, parts: list[tuple[Any, np.ndarray]], n: int) -> Any:
        """One batched state of ``n`` rows from ``parts``: (a state, the rows 0..n-1 its rows fill)."""
        order = parts[0][1] if len(parts) == 1 else np.concatenate([places for _, places in parts])
        state = parts[0][0] if len(parts) == 1 else type(parts[0][0]).cat([p for p, _ in parts])
        if not np.array_equal(order, np.arange(n)):
            where = np.empty(n, dtype=np.int64)
            where[order] = np.arange(n)
            state = state.select(torch.from_numpy(where).to(self.device))
        return state
