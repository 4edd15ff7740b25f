"""Prediction networks (decoders) of the transducer.

Two kinds share one interface so that every search works with both:

* ``stateless`` (icefall): the output depends only on the last
  ``context_size`` tokens: embedding, then a grouped Conv1d over the context,
  then ReLU.  Its state is the context itself.
* ``lstm``: embedding then an LSTM; its state is (h, c).

Blank doubles as start-of-sequence: a hypothesis' first decoder output is
``step(init_state(n), blank)``.  Searches cache decoder outputs per hypothesis
and call :meth:`Decoder.step` only for the hypotheses that emitted a token.

Shape legend: N hypotheses, U tokens, E embedding/output dim, S context size,
Lh LSTM layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import DecoderConfig

__all__ = ["DecoderState", "Decoder", "grow_context_conv"]


@dataclass
class DecoderState:
    """Per-hypothesis decoder state.

    context: (N, S) int64 last S tokens (stateless), or None.
    h, c: (Lh, N, E) LSTM states (lstm), or None.
    """

    context: Tensor | None = None
    h: Tensor | None = None
    c: Tensor | None = None

    @property
    def size(self) -> int:
        return self.context.shape[0] if self.context is not None else self.h.shape[1]

    def select(self, idx: Tensor) -> "DecoderState":
        """Gather hypotheses: idx (N',) int64 -> state of N' hypotheses."""
        if self.context is not None:
            return DecoderState(context=self.context[idx])
        return DecoderState(h=self.h[:, idx], c=self.c[:, idx])

    def where(self, mask: Tensor, other: "DecoderState") -> "DecoderState":
        """Take ``other`` where mask (N,) is true, else self."""
        if self.context is not None:
            return DecoderState(context=torch.where(mask[:, None], other.context, self.context))
        m = mask[None, :, None]
        return DecoderState(h=torch.where(m, other.h, self.h), c=torch.where(m, other.c, self.c))

    def scatter(self, idx: Tensor, other: "DecoderState") -> "DecoderState":
        """Copy of self with hypotheses idx (M,) replaced by other's M hypotheses."""
        if self.context is not None:
            ctx = self.context.clone()
            ctx[idx] = other.context
            return DecoderState(context=ctx)
        h, c = self.h.clone(), self.c.clone()
        h[:, idx] = other.h
        c[:, idx] = other.c
        return DecoderState(h=h, c=c)

    @staticmethod
    def cat(states: list["DecoderState"]) -> "DecoderState":
        if states[0].context is not None:
            return DecoderState(context=torch.cat([s.context for s in states]))
        return DecoderState(h=torch.cat([s.h for s in states], 1), c=torch.cat([s.c for s in states], 1))


class Decoder(nn.Module):
    """Stateless (context_size tokens) or LSTM prediction network."""

    def __init__(self, cfg: DecoderConfig, vocab_size: int, blank_id: int = 0):
        super().__init__()
        self.cfg = cfg
        self.blank_id = blank_id
        self.embedding = nn.Embedding(vocab_size, cfg.dim)
        if cfg.kind == "stateless":
            self.conv = (nn.Conv1d(cfg.dim, cfg.dim, cfg.context_size, groups=max(1, cfg.dim // 4), bias=False)
                         if cfg.context_size > 1 else None)
        else:
            self.lstm = nn.LSTM(cfg.dim, cfg.dim, cfg.num_layers, batch_first=True)

    @property
    def output_dim(self) -> int:
        return self.cfg.dim

    def _stateless(self, ctx_tokens: Tensor) -> Tensor:
        """ctx_tokens: (N, U + S - 1) -> (N, U, E) outputs for every window of S tokens."""
        emb = self.embedding(ctx_tokens)  # (N, U + S - 1, E)
        if self.conv is not None:
            if emb.shape[1] == self.conv.kernel_size[0]:  # one window (a search step): a grouped matrix product
                n, s, e = emb.shape
                g = self.conv.groups
                w = self.conv.weight.view(g, e // g, e // g, s)  # (G, out, in, S)
                x = emb.transpose(1, 2).reshape(n, g, e // g, s)  # (N, G, in, S)
                return F.relu(torch.einsum("ngis,gois->ngo", x, w).reshape(n, 1, e))
            emb = self.conv(emb.transpose(1, 2)).transpose(1, 2)  # (N, U, E)
        return F.relu(emb)

    def forward(self, targets: Tensor) -> Tensor:
        """Training: targets (N, U) int64 (padding any id) -> (N, U + 1, E).

        Output u is the decoder output after the first u targets (u = 0: blank start).
        """
        n = targets.shape[0]
        if self.cfg.kind == "stateless":
            s = self.cfg.context_size
            start = targets.new_full((n, s), self.blank_id)
            return self._stateless(torch.cat([start, targets], dim=1))
        start = targets.new_full((n, 1), self.blank_id)
        out, _ = self.lstm(self.embedding(torch.cat([start, targets], dim=1)))
        return out

    def init_state(self, n: int, device: torch.device | str = "cpu") -> DecoderState:
        """State before any token (all-blank context / zero LSTM state)."""
        if self.cfg.kind == "stateless":
            return DecoderState(context=torch.full((n, self.cfg.context_size), self.blank_id,
                                                   dtype=torch.long, device=device))
        z = torch.zeros(self.cfg.num_layers, n, self.cfg.dim, device=device)
        return DecoderState(h=z, c=z.clone())

    def step(self, state: DecoderState, tokens: Tensor) -> tuple[Tensor, DecoderState]:
        """Feed one token per hypothesis.

        state: N hypotheses; tokens: (N,) int64.
        Returns output (N, E) and the new state.
        """
        if self.cfg.kind == "stateless":
            ctx = torch.cat([state.context[:, 1:], tokens[:, None]], dim=1)  # (N, S)
            return self._stateless(ctx)[:, -1], DecoderState(context=ctx)
        out, (h, c) = self.lstm(self.embedding(tokens)[:, None], (state.h, state.c))
        return out[:, 0], DecoderState(h=h, c=c)


def grow_context_conv(weight: Tensor | None, shape: torch.Size) -> Tensor:
    """Conv weight of a stateless decoder with a longer context that computes the same function.

    weight: (E, E / G, S) the trained decoder's ``conv.weight`` (G groups), or
    None for S = 1 (no conv: the output is ReLU of the embedding).
    shape: (E, E / G, S') the grown decoder's ``conv.weight.shape`` (it fixes
    the grouping, so the layout is read from the module, not recomputed).
    Returns a tensor of ``shape``: the old kernel on the newest S positions,
    zeros on the older ones (the identity on the newest position when S = 1),
    so the grown decoder starts exactly where the trained one was and
    fine-tuning can learn to use the extra context.
    """
    dim, per, new_size = shape  # per: input channels per group
    old = weight.shape[-1] if weight is not None else 1
    if new_size < max(2, old):
        raise ValueError(f"a context of {old} tokens can only grow (to {max(2, old)} or more), not to {new_size}")
    out = torch.zeros(shape, dtype=weight.dtype if weight is not None else torch.float32)
    if weight is not None:
        out[..., new_size - old:] = weight  # kernel index -1 multiplies the newest token
    else:  # block-diagonal identity: output channel o reads input o % per of its group
        out[torch.arange(dim), torch.arange(dim) % per, -1] = 1.0
    return out
