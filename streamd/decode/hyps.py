"""Tensor storage of hypotheses' emitted tokens, shared by every search.

A search keeps, for B streams with up to K hypotheses each, the tokens each
hypothesis emitted in the current segment, the encoder frame that emitted
each token and that token's confidence.  Everything stays on the search's
device; nothing here synchronizes with the host except :meth:`to_lists`,
which a caller runs once per chunk to build results.

Shape legend: B streams, K hypotheses per stream (beam; 1 for greedy),
L token capacity (grows geometrically, reserved once per chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

__all__ = ["HypBuffer", "HypOut", "HypTrail", "HypTrailRows"]


@dataclass(frozen=True)
class HypOut:
    """One hypothesis as plain Python data (for results and tests)."""

    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    confs: tuple[float, ...]
    score: float = 0.0


@dataclass
class HypBuffer:
    """Emitted tokens of B x K hypotheses.

    tokens: (B, K, L) int64 token ids, valid where position < lengths.
    frames: (B, K, L) int64 encoder-frame index (since stream start) of each token.
    confs:  (B, K, L) float32 token confidence in [0, 1].
    lengths: (B, K) int64 number of valid tokens.
    """

    tokens: Tensor
    frames: Tensor
    confs: Tensor
    lengths: Tensor
    owned: bool = field(default=False, repr=False, compare=False)
    """True while no other buffer shares ``tokens``/``frames``/``confs`` (fresh from :meth:`gather` or from the
    first :meth:`append` after a :meth:`copy`): appends then write in place instead of copying the whole buffer."""

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device | str = "cpu", capacity: int = 16) -> "HypBuffer":
        z = torch.zeros(batch, k, capacity, dtype=torch.long, device=device)
        return cls(z, z.clone(), torch.zeros(batch, k, capacity, device=device),
                   torch.zeros(batch, k, dtype=torch.long, device=device))

    @property
    def capacity(self) -> int:
        return self.tokens.shape[-1]

    def reserve(self, max_len: int) -> None:
        """Make room for ``max_len`` tokens per hypothesis.

        Callers pass a host-side upper bound (e.g. tokens so far + frames in
        this chunk x max symbols per frame) so no device sync is needed.
        """
        if max_len <= self.capacity:
            return
        new = max(max_len, 2 * self.capacity)
        pad = new - self.capacity
        self.tokens = torch.nn.functional.pad(self.tokens, (0, pad))
        self.frames = torch.nn.functional.pad(self.frames, (0, pad))
        self.confs = torch.nn.functional.pad(self.confs, (0, pad))

    def gather(self, parent: Tensor) -> "HypBuffer":
        """New buffer whose hypothesis (b, j) is a copy of (b, parent[b, j]).

        parent: (B, K') int64 indices into the K axis.
        """
        b, k, cap = self.tokens.shape
        rows = (torch.arange(b, device=parent.device)[:, None] * k + parent).reshape(-1)  # (B K') into (B K)

        def take(x: Tensor) -> Tensor:  # whole rows copied: faster than an element-wise gather
            return x.reshape(b * k, cap).index_select(0, rows).view(b, parent.shape[1], cap)

        return HypBuffer(take(self.tokens), take(self.frames), take(self.confs), self.lengths.gather(1, parent),
                         owned=True)

    def append(self, mask: Tensor, tokens: Tensor, frames: Tensor, confs: Tensor) -> None:
        """Append one token to each hypothesis where ``mask`` is true.

        mask: (B, K) bool; tokens, frames: (B, K) int64; confs: (B, K) float.
        The caller must have reserved capacity for one more token.  Tensors
        shared with another buffer are never written: the first append after
        a :meth:`copy` copies them once, later ones write in place, so a copy
        of this buffer taken before a search step stays valid (the engine
        relies on that to roll back a failed batch).
        """
        if not self.owned:
            self.tokens, self.frames, self.confs = self.tokens.clone(), self.frames.clone(), self.confs.clone()
            self.owned = True
        pos = self.lengths.clamp(max=self.capacity - 1).unsqueeze(-1)  # (B, K, 1)
        m = mask.unsqueeze(-1)
        self.tokens.scatter_(2, pos, torch.where(m, tokens.unsqueeze(-1), self.tokens.gather(2, pos)))
        self.frames.scatter_(2, pos, torch.where(m, frames.unsqueeze(-1), self.frames.gather(2, pos)))
        self.confs.scatter_(2, pos, torch.where(m, confs.unsqueeze(-1).to(self.confs.dtype), self.confs.gather(2, pos)))
        self.lengths = self.lengths + mask.long()

    def copy(self) -> "HypBuffer":
        """Shallow copy: the tensors are shared, so neither buffer writes them in place any more."""
        self.owned = False
        return HypBuffer(self.tokens, self.frames, self.confs, self.lengths)

    def select_streams(self, rows: Tensor) -> "HypBuffer":
        """Sub-batch of streams: rows (B',) int64 indices into the B axis."""
        return HypBuffer(self.tokens[rows], self.frames[rows], self.confs[rows], self.lengths[rows])

    def clear(self, rows: Tensor) -> None:
        """Empty every hypothesis of the streams where rows (B,) bool is true."""
        self.lengths = self.lengths.masked_fill(rows.unsqueeze(-1), 0)

    @staticmethod
    def cat(bufs: list["HypBuffer"]) -> "HypBuffer":
        """Concatenate along B, padding K and L to the largest."""
        k = max(b.tokens.shape[1] for b in bufs)
        cap = max(b.capacity for b in bufs)

        def pad(x: Tensor) -> Tensor:
            return torch.nn.functional.pad(x, (0, cap - x.shape[-1], 0, k - x.shape[1]))

        return HypBuffer(torch.cat([pad(b.tokens) for b in bufs]), torch.cat([pad(b.frames) for b in bufs]),
                         torch.cat([pad(b.confs) for b in bufs]),
                         torch.cat([torch.nn.functional.pad(b.lengths, (0, k - b.lengths.shape[1])) for b in bufs]))

    def windows_to_host(self, rows: Tensor, which: Tensor, start: Tensor, width: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Host copies of ``width`` positions from ``start`` of one hypothesis per chosen stream (one
        device-to-host transfer, as :meth:`to_lists`).

        rows: (R,) int64 streams; which: (R,) int64 their hypothesis (index into K); start: (R,) int64 first
        position.  Returns tokens (R, width) int64, frames (R, width) int64, confs (R, width) float64; a
        position at or past a hypothesis' length holds no meaning (the caller knows the lengths).
        """
        r = rows.shape[0]
        if r == 0 or width <= 0:
            return (np.zeros((r, 0), np.int64), np.zeros((r, 0), np.int64), np.zeros((r, 0)))
        pos = (start[:, None] + torch.arange(width, device=start.device)).clamp(max=self.capacity - 1)  # (R, W)
        packed = torch.cat([x[rows, which].gather(1, pos).double()
                            for x in (self.tokens, self.frames, self.confs)], dim=1)
        host = packed.cpu().numpy()  # (R, 3W)
        return (host[:, :width].astype(np.int64), host[:, width:2 * width].astype(np.int64),
                host[:, 2 * width:])

    def to_lists(self, which: Tensor, scores: Tensor | None = None) -> list[HypOut]:
        """Host copies of one hypothesis per stream.

        which: (B,) int64 index into K of the hypothesis to return per stream.
        scores: optional (B, K) scores to attach.
        Everything travels in one float64 tensor: one device-to-host transfer
        for the whole batch (ids and frames are exact in float64).
        """
        b = which.shape[0]
        if b == 0:
            return []
        ar = torch.arange(b, device=which.device)
        n = self.lengths[ar, which]  # (B,)
        sc = scores[ar, which] if scores is not None else torch.zeros(b, device=which.device)
        packed = torch.cat([n[:, None].double(), sc[:, None].double(), self.tokens[ar, which].double(),
                            self.frames[ar, which].double(), self.confs[ar, which].double()], dim=1)
        host = packed.cpu().numpy()  # (B, 2 + 3L)
        cap = self.capacity
        lens = host[:, 0].astype(np.int64).tolist()
        score = host[:, 1].tolist()
        toks = host[:, 2:2 + cap].astype(np.int64)
        frames = host[:, 2 + cap:2 + 2 * cap].astype(np.int64)
        confs = host[:, 2 + 2 * cap:2 + 3 * cap]
        return [HypOut(tuple(toks[i, :ln].tolist()), tuple(frames[i, :ln].tolist()), tuple(confs[i, :ln].tolist()),
                       score[i]) for i, ln in enumerate(lens)]


class HypTrail:
    """A search step's history of a :class:`HypBuffer` as parent pointers, written into it once at the end.

    A beam search reorders its hypotheses every round (each new hypothesis continues a parent) and appends
    tokens to some.  Doing that on the buffer copies every hypothesis' whole token, frame and confidence
    rows each round (B x K x L per round).  The trail records only each round's parents and appended tokens
    ((B, K) per round) and keeps the lengths; :meth:`materialize` follows the final hypotheses back through
    the rounds to their ancestors at the start, copies the buffer once along those ancestors and appends
    the tokens the chain collected.  The result equals :meth:`HypBuffer.gather` and :meth:`HypBuffer.append`
    applied round by round (tests/decode/test_hyps.py checks it against that definition).

    lengths: (B, K) int64 tokens of each current hypothesis (parents' lengths followed, appends counted).
    """

    def __init__(self, start: HypBuffer) -> None:
        self.start = start
        self.lengths = start.lengths
        self._rounds: list[tuple[Tensor, tuple[Tensor, Tensor, Tensor, Tensor] | None]] = []
        self._k = start.lengths.shape[1]

    def follow(self, parent: Tensor) -> None:
        """A round's reorder: hypothesis (b, j) continues (b, parent[b, j]); parent (B, K') int64."""
        self.lengths = self.lengths.gather(1, parent)
        self._rounds.append((parent, None))
        self._k = parent.shape[1]

    def append(self, mask: Tensor, tokens: Tensor, frames: Tensor, confs: Tensor) -> None:
        """One token onto each hypothesis where ``mask`` (B, K) is true (as :meth:`HypBuffer.append`; after
        the round's :meth:`follow`, at most one append per round)."""
        if self._rounds and self._rounds[-1][1] is None:
            parent = self._rounds[-1][0]
        else:  # an append with no reorder before it: the identity
            parent = None
            self._rounds.append((parent, None))
        self._rounds[-1] = (parent, (mask, tokens, frames, confs))
        self.lengths = self.lengths + mask.long()

    def rows(self, rows: Tensor) -> "HypTrailRows":
        """A round of the streams ``rows`` (B',) int64 only, recorded on this trail (see :class:`HypTrailRows`)."""
        return HypTrailRows(self, rows)

    def materialize(self) -> HypBuffer:
        """The buffer after every recorded round (the start buffer is left unchanged); capacity for the
        appended tokens must have been reserved on the start buffer."""
        if not self._rounds:
            return self.start
        lengths = self.lengths
        b = lengths.shape[0]
        slot = torch.arange(self._k, device=lengths.device).expand(b, self._k)  # (B, K) the final hypotheses
        chain = []
        for parent, app in reversed(self._rounds):
            if app is not None:
                mask, tokens, frames, confs = app
                chain.append(tuple(x.gather(1, slot) for x in (mask, tokens, frames, confs)))
            if parent is not None:
                slot = parent.gather(1, slot)
        buf = self.start.gather(slot)
        for mask, tokens, frames, confs in reversed(chain):
            buf.append(mask, tokens, frames, confs)
        return buf


class HypTrailRows:
    """One round of a sub-batch of streams, recorded on the whole batch's :class:`HypTrail`.

    It offers the trail's ``follow``, ``append`` and ``lengths`` in the sub-batch's terms ((B', K) tensors);
    the streams outside ``rows`` keep their hypotheses in place (the identity parent) and get no token, as if
    the round had not run for them.  Each call writes one (B, K) round onto the trail, so :meth:`HypTrail.
    materialize` is unchanged.

    rows: (B',) int64 the sub-batch's streams (indices into the trail's B axis).
    """

    def __init__(self, trail: HypTrail, rows: Tensor) -> None:
        self.trail, self.rows = trail, rows

    @property
    def lengths(self) -> Tensor:
        """(B', K) int64 tokens of each of the sub-batch's current hypotheses."""
        return self.trail.lengths[self.rows]

    def _whole(self, x: Tensor, fill: Tensor) -> Tensor:
        return fill.index_copy(0, self.rows, x.to(fill.dtype))

    def follow(self, parent: Tensor) -> None:
        """As :meth:`HypTrail.follow`, parent (B', K) int64 for the sub-batch (K: the trail's)."""
        b, k = self.trail.lengths.shape
        ident = torch.arange(k, device=parent.device).repeat(b, 1)
        self.trail.follow(self._whole(parent, ident))

    def append(self, mask: Tensor, tokens: Tensor, frames: Tensor, confs: Tensor) -> None:
        """As :meth:`HypTrail.append`, every argument (B', K) for the sub-batch."""
        b, k = self.trail.lengths.shape
        dev = mask.device
        self.trail.append(self._whole(mask, torch.zeros(b, k, dtype=torch.bool, device=dev)),
                          self._whole(tokens, torch.zeros(b, k, dtype=tokens.dtype, device=dev)),
                          self._whole(frames, torch.zeros(b, k, dtype=frames.dtype, device=dev)),
                          self._whole(confs, torch.zeros(b, k, dtype=confs.dtype, device=dev)))
