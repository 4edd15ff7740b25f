"""The whole network: streaming encoder, decoder, joiner, CTC and KWS heads.

The CTC head (log-softmax over the vocabulary) and the KWS head (per-frame
sigmoid per keyword) read the same encoder output as the transducer, so a
batch step runs the encoder once for every consumer.

Shape legend: B streams, T' encoder frames, D encoder dim, J joiner dim,
V vocabulary, K keywords.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .decoder import Decoder
from .encoder import StreamingEncoder
from .joiner import Joiner

__all__ = ["Transducer", "HeadOutputs"]


@dataclass
class HeadOutputs:
    """Per-frame outputs of one encoder pass.

    enc_p: (B, T', J) encoder frames projected for the joiner.
    ctc_log_probs: (B, T', V) or None when the model has no CTC head.
    kws_probs: (B, T', K) sigmoid scores, or None when the model has no keywords.
    """

    enc_p: Tensor
    ctc_log_probs: Tensor | None
    kws_probs: Tensor | None


class Transducer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = StreamingEncoder(cfg.encoder)
        self.decoder = Decoder(cfg.decoder, cfg.vocab_size, cfg.blank_id)
        self.joiner = Joiner(self.encoder.output_dim, self.decoder.output_dim, cfg.joiner_dim, cfg.vocab_size)
        d = self.encoder.output_dim
        self.ctc = nn.Linear(d, cfg.vocab_size) if cfg.ctc_head else None
        self.kws = (nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, len(cfg.keywords)))
                    if cfg.keywords else None)

    @property
    def blank_id(self) -> int:
        return self.cfg.blank_id

    def heads(self, enc: Tensor) -> HeadOutputs:
        """enc: (B, T', D) encoder output -> every head's per-frame output."""
        return HeadOutputs(
            enc_p=self.joiner.enc_proj(enc),
            ctc_log_probs=self.ctc(enc).log_softmax(-1) if self.ctc is not None else None,
            kws_probs=torch.sigmoid(self.kws(enc)) if self.kws is not None else None,
        )

    def decoder_proj(self, dec_out: Tensor) -> Tensor:
        """dec_out: (..., Dd) -> (..., J)."""
        return self.joiner.dec_proj(dec_out)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
