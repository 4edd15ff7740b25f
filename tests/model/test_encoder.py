"""Streaming equals offline: chunked forward with caches vs whole utterance under the chunk mask; widening the
feed-forwards keeps the function."""

import pytest
import torch

from streamd.config import EncoderConfig
from streamd.model.encoder import EncoderCache, StreamingEncoder, chunk_attention_mask, widen_feedforwards


def small_cfg(**kw):
    base = dict(num_features=20, d_model=32, num_layers=2, num_heads=4, ff_dim=64, conv_kernel=5,
                subsampling_channels=8, chunk_size=4, left_chunks=2, dropout=0.0)
    base.update(kw)
    return EncoderConfig(**base)


def stream(enc: StreamingEncoder, x: torch.Tensor, lengths: torch.Tensor, chunk: int):
    """Run forward_chunk over x (B, T, F) in chunks of ``chunk`` encoder frames."""
    b, t, _ = x.shape
    step = 4 * chunk
    pad = (-t) % step
    x = torch.nn.functional.pad(x, (0, 0, 0, pad))
    cache = enc.init_cache(b)
    outs = []
    for s in range(0, x.shape[1], step):
        ln = (lengths - s).clamp(0, step)
        y, _, cache = enc.forward_chunk(x[:, s:s + step], ln, cache)
        outs.append(y)
    return torch.cat(outs, 1), cache


def test_mask_shape_and_content():
    m = chunk_attention_mask(6, 2, 1)
    # frame 5 (chunk 2) sees chunks 1 and 2 -> frames 2..5
    assert m[5].tolist() == [False, False, True, True, True, True]
    assert m[0].tolist() == [True, True, False, False, False, False]
    assert chunk_attention_mask(4, 2, -1)[3].all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk,left", [(4, 2), (2, 3), (8, 1)])
def test_streaming_equals_offline(seed, chunk, left):
    torch.manual_seed(seed)
    cfg = small_cfg(chunk_size=chunk, left_chunks=left)
    enc = StreamingEncoder(cfg).eval()
    with torch.no_grad():
        enc.feat_mean.normal_()
        enc.feat_std.uniform_(0.5, 2.0)
    b = 3
    lengths = torch.tensor([97, 64, 33])
    x = torch.randn(b, 97, cfg.num_features)
    with torch.no_grad():
        off, off_len = enc(x, lengths)
        on, _ = stream(enc, x, lengths, chunk)
    assert off_len.tolist() == [25, 16, 9]
    for i in range(b):
        n = off_len[i]
        torch.testing.assert_close(on[i, :n], off[i, :n], atol=1e-4, rtol=1e-4)


def test_cache_cat_select_roundtrip():
    torch.manual_seed(0)
    cfg = small_cfg()
    enc = StreamingEncoder(cfg).eval()
    x = torch.randn(2, 16, cfg.num_features)
    full = torch.tensor([16, 16])
    with torch.no_grad():
        y, _, cache = enc.forward_chunk(x, full, enc.init_cache(2))
        y2, _, cache2 = enc.forward_chunk(x, full, cache)
        parts = cache.split()
        joined = EncoderCache.cat([parts[1], parts[0]])
        y3, _, _ = enc.forward_chunk(x.flip(0), full, joined)
    torch.testing.assert_close(y3.flip(0), y2)


def test_padding_frames_do_not_leak():
    """Garbage in frames beyond lengths never changes valid outputs (offline and streaming)."""
    torch.manual_seed(3)
    cfg = small_cfg()
    enc = StreamingEncoder(cfg).eval()
    x = torch.randn(1, 40, cfg.num_features)
    y = x.clone()
    y[:, 30:] = 1e3 * torch.randn(1, 10, cfg.num_features)
    ln = torch.tensor([30])
    with torch.no_grad():
        a, n = enc(x, ln)
        b, _ = enc(y, ln)
        c, _ = stream(enc, y, ln, cfg.chunk_size)
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    torch.testing.assert_close(a[:, :n[0]], b[:, :n[0]])
    torch.testing.assert_close(c[:, :n[0]], a[:, :n[0]], atol=1e-4, rtol=1e-4)


def test_chunk_needs_multiple_of_four():
    enc = StreamingEncoder(small_cfg()).eval()
    with pytest.raises(ValueError, match="multiple of 4"):
        enc.forward_chunk(torch.zeros(1, 6, 20), torch.tensor([6]), enc.init_cache(1))


def test_rope_relative_far_from_start():
    """Streams hours long: scores depend only on distance, also ~1e6 frames in (float64 angles)."""
    from streamd.model.encoder import _rope, rope_angles

    torch.manual_seed(0)
    q = torch.randn(1, 2, 1, 8)
    k = torch.randn(1, 2, 1, 8)

    def score(pq, pk):
        rq = rope_angles(torch.tensor([[pq]]), 8, torch.float32)
        rk = rope_angles(torch.tensor([[pk]]), 8, torch.float32)
        return (_rope(q, rq) * _rope(k, rk)).sum(-1)

    torch.testing.assert_close(score(5, 2), score(1_000_005, 1_000_002), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(score(5, 2), score(5, 4))


def test_widened_feedforwards_compute_the_same_function():
    torch.manual_seed(5)
    enc = StreamingEncoder(small_cfg()).eval()
    cfg = small_cfg(ff_dim=small_cfg().ff_dim + 24)
    wide = StreamingEncoder(cfg).eval()
    sd = widen_feedforwards(enc.state_dict(), cfg.ff_dim, torch.Generator().manual_seed(0))
    wide.load_state_dict(sd, strict=True)
    w1 = wide.layers[0].ff1.w1.weight
    assert w1.shape == (cfg.ff_dim, cfg.d_model) and w1[-24:].abs().sum() > 0  # new units: random inputs
    assert wide.layers[0].ff2.w2.weight[:, -24:].abs().sum() == 0  # ... and zero outputs
    x, lengths = torch.randn(2, 40, enc.cfg.num_features), torch.tensor([40, 29])
    with torch.no_grad():
        a, la = enc(x, lengths)
        b, lb = wide(x, lengths)
    assert torch.equal(la, lb) and torch.allclose(a, b, atol=1e-5)
    again = widen_feedforwards(enc.state_dict(), cfg.ff_dim, torch.Generator().manual_seed(0))
    assert all(torch.equal(sd[k], again[k]) for k in sd)  # seeded: reproducible
    with pytest.raises(ValueError, match="can only grow"):
        widen_feedforwards(sd, small_cfg().ff_dim)
