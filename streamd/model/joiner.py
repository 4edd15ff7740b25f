"""Transducer joiner with separable projections.

``logits = out(tanh(enc_proj(e) + dec_proj(d)))``.  Encoder frames are
projected once per chunk and decoder outputs once per emitted token, so a
search step only adds two (N, J) tensors and applies ``out``.

Shape legend: J joiner dim, V vocabulary, De / Dd encoder / decoder dims.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["Joiner"]


class Joiner(nn.Module):
    def __init__(self, enc_dim: int, dec_dim: int, joiner_dim: int, vocab_size: int):
        super().__init__()
        self.enc_proj = nn.Linear(enc_dim, joiner_dim)
        self.dec_proj = nn.Linear(dec_dim, joiner_dim)
        self.out = nn.Linear(joiner_dim, vocab_size)

    def forward(self, enc_p: Tensor, dec_p: Tensor) -> Tensor:
        """enc_p: (..., J) projected encoder frames; dec_p: (..., J) projected decoder outputs
        (broadcastable to each other) -> logits (..., V)."""
        return self.out(torch.tanh(enc_p + dec_p))

    def log_probs(self, enc_p: Tensor, dec_p: Tensor) -> Tensor:
        """Log-softmax of :meth:`forward` over V."""
        return self.forward(enc_p, dec_p).log_softmax(dim=-1)
