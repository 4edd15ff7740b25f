"""Prediction network: growing a stateless decoder's context keeps its function."""

from __future__ import annotations

import pytest
import torch

from streamd.config import DecoderConfig
from streamd.model.decoder import Decoder, grow_context_conv


def grown(dec: Decoder, size: int) -> Decoder:
    new = Decoder(DecoderConfig(dim=dec.cfg.dim, context_size=size), vocab_size=dec.embedding.num_embeddings)
    sd = {k: v for k, v in dec.state_dict().items() if k != "conv.weight"}
    sd["conv.weight"] = grow_context_conv(dec.conv.weight.detach() if dec.conv is not None else None,
                                          new.conv.weight.shape)
    new.load_state_dict(sd, strict=True)
    return new


@pytest.mark.parametrize("old,new", [(2, 5), (1, 3), (3, 4)])
def test_grown_context_computes_the_same_function(old, new):
    torch.manual_seed(old * 10 + new)
    dec = Decoder(DecoderConfig(dim=16, context_size=old), vocab_size=11)
    if dec.conv is not None:
        torch.nn.init.normal_(dec.conv.weight)
    big = grown(dec, new)
    targets = torch.randint(1, 11, (3, 9))  # (N, U)
    assert torch.allclose(big(targets), dec(targets), atol=1e-6)  # training path, (N, U + 1, E)
    s_old, s_new = dec.init_state(3), big.init_state(3)
    for u in range(9):  # streaming path, one token at a time
        out_old, s_old = dec.step(s_old, targets[:, u])
        out_new, s_new = big.step(s_new, targets[:, u])
        assert torch.allclose(out_new, out_old, atol=1e-6)
    assert s_new.context.shape == (3, new)


def test_context_only_grows():
    with pytest.raises(ValueError, match="only grow"):
        grow_context_conv(torch.zeros(16, 4, 3), torch.Size((16, 4, 2)))


@pytest.mark.parametrize("dim,context", [(16, 5), (32, 2), (12, 3), (256, 5)])
def test_step_equals_the_training_path(dim, context):
    """The search's one-window step (a grouped matrix product) against the training path's conv over the
    whole sequence, its oracle: output u of forward() is the step output after token u."""
    torch.manual_seed(dim + context)
    dec = Decoder(DecoderConfig(dim=dim, context_size=context), vocab_size=29).eval()
    torch.nn.init.normal_(dec.conv.weight, std=0.3)
    targets = torch.randint(1, 29, (4, 12))  # (N, U)
    with torch.no_grad():
        want = dec(targets)  # (N, U + 1, E)
        state = dec.init_state(4)
        got = [dec._stateless(state.context)[:, -1]]
        for u in range(12):
            out, state = dec.step(state, targets[:, u])
            got.append(out)
    assert torch.allclose(torch.stack(got, 1), want, atol=1e-5, rtol=1e-5)
