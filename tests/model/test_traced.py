"""The traced chunk step (streamd.model.traced) against eager ``forward_chunk``, its oracle: bitwise equal
outputs and caches over batch sizes, chunk lengths, left contexts and padded last chunks; eager where it must be."""

import dataclasses

import pytest
import torch

from helpers import random_audio, tiny_model
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from streamd.model.checkpoint import load_checkpoint
from streamd.model.encoder import EncoderCache
from streamd.model.traced import TracedChunkEncoder

FIELDS = [f.name for f in dataclasses.fields(EncoderCache)]


def _run(step, enc, x, lengths, chunk_t, left_context=None):
    """Chunks of ``chunk_t`` fbank frames of x (B, T, F) through ``step`` (a forward_chunk); returns outputs
    and caches of every call."""
    cache = enc.init_cache(x.shape[0], left_context=left_context)
    outs = []
    with torch.inference_mode():
        for s in range(0, x.shape[1], chunk_t):
            ln = (lengths - s).clamp(0, chunk_t)
            y, n, cache = step(x[:, s:s + chunk_t], ln, cache)
            outs.append((y, n, cache))
    return outs


def _same(a, b):
    for (y1, n1, c1), (y2, n2, c2) in zip(a, b, strict=True):
        assert torch.equal(y1, y2) and torch.equal(n1, n2)
        for f in FIELDS:
            assert torch.equal(getattr(c1, f), getattr(c2, f)), f


@pytest.mark.parametrize("batch,chunk_t,left", [(1, 16, None), (3, 16, None), (5, 32, None), (2, 8, 0),
                                                (4, 16, 3), (2, 64, 24)])
def test_bitwise_equal_to_eager(batch, chunk_t, left):
    enc = tiny_model(seed=1).encoder.eval()
    traced = TracedChunkEncoder(enc)
    g = torch.Generator().manual_seed(batch * 100 + chunk_t)
    x = torch.randn(batch, 4 * chunk_t + max(4, chunk_t // 2), 80, generator=g) * 3 - 8  # a short last chunk
    lengths = torch.randint(chunk_t, x.shape[1] + 1, (batch,), generator=g)  # some streams end early (padding)
    want = _run(enc.forward_chunk, enc, x, lengths, chunk_t, left)
    got = _run(traced.forward_chunk, enc, x, lengths, chunk_t, left)
    assert traced.eager_reason is None
    _same(want, got)


def test_one_recording_serves_other_shapes():
    enc = tiny_model(seed=2).encoder.eval()
    traced = TracedChunkEncoder(enc)
    x = torch.randn(6, 64, 80)
    for b, t, left in [(2, 16, None), (6, 32, None), (1, 64, 5), (4, 8, 1)]:
        lengths = torch.full((b,), t * 2)
        _same(_run(enc.forward_chunk, enc, x[:b], lengths, t, left), _run(traced.forward_chunk, enc, x[:b], lengths, t, left))
    assert len(traced._graphs) == 1  # one device, dtype and kind of cache: one graph


def test_reads_the_live_weights():
    enc = tiny_model(seed=3).encoder.eval()
    traced = TracedChunkEncoder(enc)
    x, n = torch.randn(2, 16, 80), torch.tensor([16, 16])
    _run(traced.forward_chunk, enc, x, n, 16)
    with torch.no_grad():
        enc.layers[0].ff1.w1.weight.mul_(1.5)
    _same(_run(enc.forward_chunk, enc, x, n, 16), _run(traced.forward_chunk, enc, x, n, 16))


def test_eager_with_gradients_and_checks():
    enc = tiny_model(seed=4).encoder.eval()
    traced = TracedChunkEncoder(enc)
    x, n = torch.randn(1, 16, 80, requires_grad=True), torch.tensor([16])
    y, _, _ = traced.forward_chunk(x, n, enc.init_cache(1))
    assert y.requires_grad and traced.eager_reason and not traced._graphs
    with pytest.raises(ValueError, match="multiple of 4"):
        traced.forward_chunk(torch.zeros(1, 6, 80), torch.tensor([6]), enc.init_cache(1))


def test_failed_recording_stays_eager(monkeypatch):
    enc = tiny_model(seed=5).encoder.eval()
    traced = TracedChunkEncoder(enc)
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("no tracer here")

    monkeypatch.setattr(torch.jit, "trace", broken)
    x, n = torch.randn(2, 32, 80), torch.tensor([32, 20])
    _same(_run(enc.forward_chunk, enc, x, n, 16), _run(traced.forward_chunk, enc, x, n, 16))
    assert traced.eager_reason == "trace failed: RuntimeError: no tracer here" and calls == [1]  # tried once


def _events(model_path, trace, audio):
    rec = Recognizer(load_checkpoint(model_path), EngineConfig(trace_encoder=trace))
    rec.warm_up()  # records the graph now (not after Recognizer.EAGER_STEPS steps)
    ids = [rec.create_stream(method=m) for m in ("greedy", "modified_beam")]
    out = []
    for i, sid in enumerate(ids):
        x = audio[i]
        for s in range(0, x.size, 1600 + 700 * i):  # uneven packets: streams join and leave batches
            out += rec.accept_audio(sid, x[s:s + 1600 + 700 * i])
            out += rec.step()
        rec.finish(sid)
    out += rec.drain()
    return out


def test_engine_events_identical(ckpt5):
    """The Recognizer with and without the traced step: the same events (text, words, times, confidences)."""
    audio = [random_audio(3.1, seed=11), random_audio(2.3, seed=12)]
    a, b = _events(ckpt5, True, audio), _events(ckpt5, False, audio)
    assert a == b and any(getattr(e, "text", "") for e in a)


def test_eager_calls_then_recorded():
    enc = tiny_model(seed=6).encoder.eval()
    traced = TracedChunkEncoder(enc, eager_calls=2)
    x, n = torch.randn(1, 64, 80), torch.tensor([64])
    want = _run(enc.forward_chunk, enc, x, n, 16)
    reasons = []
    _same(want, _run(lambda *a: (traced.forward_chunk(*a), reasons.append(traced.eager_reason))[0], enc, x, n, 16))
    assert reasons == ["not recorded yet (eager_calls)"] * 2 + [None] * 2
    soon = TracedChunkEncoder(enc, eager_calls=100)
    soon.record_soon()
    _same(want, _run(soon.forward_chunk, enc, x, n, 16))
    assert soon.eager_reason is None and len(soon._graphs) == 1
    with pytest.raises(ValueError, match="eager_calls"):
        TracedChunkEncoder(enc, eager_calls=-1)


def test_engine_records_after_its_eager_steps_or_at_warm_up(ckpt5, monkeypatch):
    """A Recognizer runs eager for EAGER_STEPS batch steps (a short job never pays for the recording), then
    traced; warm_up records at once."""
    monkeypatch.setattr(Recognizer, "EAGER_STEPS", 3)
    rec = Recognizer(load_checkpoint(ckpt5), EngineConfig())
    sid = rec.create_stream()
    states = []
    for i in range(5):
        rec.accept_audio(sid, random_audio(0.32, seed=i))
        rec.step()
        states.append(rec.encoder.eager_reason)
    assert states[:3] == ["not recorded yet (eager_calls)"] * 3 and states[3:] == [None, None]
    warm = Recognizer(load_checkpoint(ckpt5), EngineConfig())
    warm.warm_up()
    assert warm.encoder.eager_reason is None and warm.encoder._graphs
    assert not isinstance(Recognizer(load_checkpoint(ckpt5), EngineConfig(trace_encoder=False)).encoder,
                          TracedChunkEncoder)


def test_config_checks_the_flag():
    with pytest.raises(ValueError, match="trace_encoder"):
        EngineConfig(trace_encoder="yes")
