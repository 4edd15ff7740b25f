"""Small random transducer models shared by the search tests."""

import pytest
import torch

from streamd.config import DecoderConfig, EncoderConfig, ModelConfig
from streamd.model.transducer import Transducer


def make_model(vocab=7, kind="stateless", seed=0, joiner_dim=16, keywords=(), ctc=True, scale=2.0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab, blank_id=0, joiner_dim=joiner_dim, ctc_head=ctc, keywords=tuple(keywords),
        encoder=EncoderConfig(num_features=20, d_model=16, num_layers=1, num_heads=2, ff_dim=32, conv_kernel=3,
                              subsampling_channels=4, chunk_size=4, left_chunks=2, dropout=0.0),
        decoder=DecoderConfig(kind=kind, dim=12, context_size=2))
    m = Transducer(cfg).eval()
    with torch.no_grad():  # sharper distributions so searches actually disagree / emit
        m.joiner.out.weight.mul_(scale)
    return m


@pytest.fixture(params=["stateless", "lstm"])
def decoder_kind(request):
    return request.param
