"""streamd.model.transducer: one encoder pass feeds every head (the joiner's projection, CTC log-probs, KWS
sigmoid scores); models without a CTC head or keywords have none of it."""

import pytest
import torch

from helpers import make_model


@torch.no_grad()
def test_heads_of_one_encoder_pass():
    model = make_model(vocab=7, keywords=("hey stream", "computer"), ctc=True)
    enc = torch.randn(2, 5, model.encoder.output_dim)
    h = model.heads(enc)
    assert h.enc_p.shape == (2, 5, model.cfg.joiner_dim) and torch.equal(h.enc_p, model.joiner.enc_proj(enc))
    assert h.ctc_log_probs.shape == (2, 5, 7)
    assert torch.allclose(h.ctc_log_probs, torch.log_softmax(model.ctc(enc), -1))
    assert torch.allclose(h.ctc_log_probs.exp().sum(-1), torch.ones(2, 5), atol=1e-5)
    assert h.kws_probs.shape == (2, 5, 2) and ((h.kws_probs > 0) & (h.kws_probs < 1)).all()
    assert torch.allclose(h.kws_probs, torch.sigmoid(model.kws(enc)))


@torch.no_grad()
def test_without_ctc_head_or_keywords():
    with_all = make_model(vocab=7, keywords=("hey stream",), ctc=True)
    bare = make_model(vocab=7, keywords=(), ctc=False)
    assert bare.ctc is None and bare.kws is None
    h = bare.heads(torch.randn(1, 3, bare.encoder.output_dim))
    assert h.ctc_log_probs is None and h.kws_probs is None and h.enc_p.shape == (1, 3, bare.cfg.joiner_dim)
    extra = sum(p.numel() for p in with_all.ctc.parameters()) + sum(p.numel() for p in with_all.kws.parameters())
    assert with_all.num_params() - bare.num_params() == extra
    assert bare.num_params() == sum(p.numel() for p in bare.parameters())


@pytest.mark.parametrize("kind", ["stateless", "lstm"])
@torch.no_grad()
def test_decoder_projection_and_blank(kind):
    model = make_model(kind=kind)
    assert model.blank_id == model.cfg.blank_id == 0
    out = torch.randn(4, model.decoder.output_dim)
    assert torch.equal(model.decoder_proj(out), model.joiner.dec_proj(out))
    # the joiner scores an encoder frame against the decoder's state after the start symbol
    st = model.decoder.init_state(1)
    dec_out, _ = model.decoder.step(st, torch.tensor([model.blank_id]))
    enc_p = model.heads(torch.randn(1, 2, model.encoder.output_dim)).enc_p
    lp = model.joiner.log_probs(enc_p[0], model.decoder_proj(dec_out))
    assert lp.shape == (2, model.cfg.vocab_size) and torch.allclose(lp.exp().sum(-1), torch.ones(2), atol=1e-5)
