"""Streaming Conformer encoder: causal x4 subsampling and chunked attention.

The same weights run two ways that give the same output (to float error):

* ``forward(x, lengths)`` on a whole utterance with the chunk-causal mask
  (training and offline decoding): frame ``i`` of chunk ``c = i // C``
  attends to frames of chunks ``c - left_chunks .. c``;
* ``forward_chunk(x, lengths, cache)`` one chunk at a time, carrying an
  :class:`EncoderCache` (attention keys/values of the last ``left_context``
  frames, convolution left contexts, subsampling left contexts, and the
  number of frames already seen for positions).

Nothing looks ahead past the current chunk:

* subsampling is two Conv2d layers (kernel 3, stride 2) that are causal in
  time: each pads one frame on the left (taken from the cache when
  streaming), so encoder frame ``i`` sees fbank frames ``<= 4 i + 3``;
* the convolution module is a causal depthwise conv (left context cached);
* attention positions are rotary (RoPE) with absolute frame indices, so a
  cached key keeps its rotation and only relative distances matter.

Shape legend: B batch (streams), T fbank frames, T' = T / 4 encoder frames,
F fbank bins, D d_model, H heads, Dh = D / H, L left context (encoder
frames), N layers, K conv kernel, C' subsampling channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import EncoderConfig

__all__ = ["EncoderCache", "StreamingEncoder", "chunk_attention_mask", "widen_feedforwards"]


@dataclass
class EncoderCache:
    """Streaming state of the encoder for B streams (all tensors batch-major except layer stacks).

    sub1: (B, 1, 1, F) last fbank frame (left pad of the first subsampling conv).
    sub2: (B, C', 1, F1) last output frame of the first conv (left pad of the second).
    keys, values: (N, B, H, L, Dh) rotated keys / values of the last L encoder frames.
    conv: (N, B, D, K - 1) last inputs of each layer's causal depthwise conv.
    offset: (B,) int64 encoder frames already processed (absolute position of the next frame).
    """

    sub1: Tensor
    sub2: Tensor
    keys: Tensor
    values: Tensor
    conv: Tensor
    offset: Tensor

    @staticmethod
    def cat(caches: list["EncoderCache"]) -> "EncoderCache":
        """Concatenate along the stream axis."""
        return EncoderCache(
            torch.cat([c.sub1 for c in caches]), torch.cat([c.sub2 for c in caches]),
            torch.cat([c.keys for c in caches], dim=1), torch.cat([c.values for c in caches], dim=1),
            torch.cat([c.conv for c in caches], dim=1), torch.cat([c.offset for c in caches]))

    def select(self, rows: Tensor) -> "EncoderCache":
        """Sub-batch: rows (B',) int64 stream indices."""
        return EncoderCache(self.sub1[rows], self.sub2[rows], self.keys[:, rows], self.values[:, rows],
                            self.conv[:, rows], self.offset[rows])

    def split(self) -> list["EncoderCache"]:
        """One cache per stream (views into this one)."""
        return [self.select(torch.tensor([i], device=self.offset.device)) for i in range(self.offset.shape[0])]


def check_chunk_frames(t: int) -> None:
    """ValueError unless ``t`` fbank frames can be one streaming chunk (a multiple of the x4 subsampling)."""
    if t % 4:
        raise ValueError(f"forward_chunk needs a multiple of 4 fbank frames, got {t}")


def chunk_attention_mask(num_frames: int, chunk_size: int, left_chunks: int, device=None) -> Tensor:
    """Training-time chunk-causal mask.

    Returns (T', T') bool, True where query frame i may attend key frame j:
    chunk(j) <= chunk(i) and chunk(j) >= chunk(i) - left_chunks (left_chunks < 0: unlimited).
    """
    c = torch.arange(num_frames, device=device) // chunk_size
    allowed = c[None, :] <= c[:, None]
    if left_chunks >= 0:
        allowed &= c[None, :] >= c[:, None] - left_chunks
    return allowed


class CausalSubsampling(nn.Module):
    """Conv2d x2 (kernel 3, stride 2 in time and frequency), causal in time.

    Input (B, T, F) with T a multiple of 4; output (B, T/4, D).
    """

    def __init__(self, num_features: int, channels: int, d_model: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=2, padding=(0, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2, padding=(0, 1))
        self.f1 = (num_features - 1) // 2 + 1
        self.f2 = (self.f1 - 1) // 2 + 1
        self.channels = channels
        self.out = nn.Linear(channels * self.f2, d_model)

    def forward(self, x: Tensor, left1: Tensor, left2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x: (B, T, F); left1: (B, 1, 1, F) and left2: (B, C', 1, F1) left-context frames.

        Returns (B, T/4, D) and the new left contexts (last input frame of each conv).
        """
        x = x.unsqueeze(1)  # (B, 1, T, F)
        x1 = torch.cat([left1, x], dim=2)  # (B, 1, T + 1, F)
        y = F.silu(self.conv1(x1))  # (B, C', T/2, F1)
        y2 = torch.cat([left2, y], dim=2)  # (B, C', T/2 + 1, F1)
        z = F.silu(self.conv2(y2))  # (B, C', T/4, F2)
        b, c, t, f = z.shape
        z = z.permute(0, 2, 1, 3).reshape(b, t, c * f)  # (B, T/4, C' * F2)
        return self.out(z), x[:, :, -1:], y[:, :, -1:]


def rope_angles(pos: Tensor, dh: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Rotary cos/sin for absolute positions, computed once per forward for all layers.

    pos: (B, T) int64 absolute frame indices -> cos, sin: (B, 1, T, Dh/2).
    Angles are computed in float64 so positions stay exact over hours of audio.
    """
    inv = 10000.0 ** (-torch.arange(0, dh, 2, device=pos.device, dtype=torch.float64) / dh)  # (Dh/2,)
    ang = pos.to(torch.float64).unsqueeze(-1) * inv  # (B, T, Dh/2)
    return ang.cos().to(dtype).unsqueeze(1), ang.sin().to(dtype).unsqueeze(1)


def _rope(x: Tensor, rot: tuple[Tensor, Tensor]) -> Tensor:
    """Rotate channel pairs of x: (B, H, T, Dh) by rot = (cos, sin) each (B, 1, T, Dh/2)."""
    cos, sin = rot
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, H, T, Dh/2, 2)
    return out.flatten(-2)


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, ff)
        self.w2 = nn.Linear(ff, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        return self.w2(self.drop(F.silu(self.w1(self.norm(x)))))


class SelfAttention(nn.Module):
    """Multi-head self-attention with RoPE over [cached keys; current chunk]."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.dropout = dropout

    def forward(self, x: Tensor, rot: tuple[Tensor, Tensor], mask: Tensor, past_k: Tensor | None = None,
                past_v: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """x: (B, T, D); rot: rotary (cos, sin) of the frames' absolute positions (see rope_angles);
        mask: (B, 1, T, L + T) bool (True = attend).

        past_k, past_v: (B, H, L, Dh) cached rotated keys and values (None for L = 0).
        Returns output (B, T, D) and this call's rotated keys and values (B, H, T, Dh).
        """
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = _rope(q, rot), _rope(k, rot)  # (B, H, T, Dh)
        kk = k if past_k is None else torch.cat([past_k, k], dim=2)  # (B, H, L + T, Dh)
        vv = v if past_v is None else torch.cat([past_v, v], dim=2)
        y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.out(y), k, v


class CausalConvModule(nn.Module):
    """Conformer convolution module with a causal depthwise conv."""

    def __init__(self, d: int, kernel: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 2 * d)
        self.dw = nn.Conv1d(d, d, kernel, groups=d)
        self.dw_norm = nn.LayerNorm(d)
        self.pw2 = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)
        self.kernel = kernel

    def forward(self, x: Tensor, left: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """x: (B, T, D); left: (B, D, K-1) previous conv inputs; valid: (B, T) bool frame mask.

        Padding frames are zeroed before the conv so they never leak into
        valid ones (they only come after them anyway: the conv is causal).
        Returns (B, T, D) and the new left context (B, D, K-1).
        """
        y = F.glu(self.pw1(self.norm(x)), dim=-1)  # (B, T, D)
        y = y.masked_fill(~valid.unsqueeze(-1), 0.0).transpose(1, 2)  # (B, D, T)
        y = torch.cat([left, y], dim=2)  # (B, D, K - 1 + T)
        new_left = y[:, :, y.shape[2] - (self.kernel - 1):]
        y = self.dw(y).transpose(1, 2)  # (B, T, D)
        y = self.pw2(F.silu(self.dw_norm(y)))
        return self.drop(y), new_left


class ConformerLayer(nn.Module):
    """Macaron Conformer block: FF/2, MHSA, Conv, FF/2, LayerNorm."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        d = cfg.d_model
        self.ff1 = FeedForward(d, cfg.ff_dim, cfg.dropout)
        self.attn = SelfAttention(d, cfg.num_heads, cfg.dropout)
        self.conv = CausalConvModule(d, cfg.conv_kernel, cfg.dropout)
        self.ff2 = FeedForward(d, cfg.ff_dim, cfg.dropout)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, rot, mask, valid, past_k, past_v, conv_left):
        """x: (B, T, D) -> (B, T, D), new keys/values (B, H, T, Dh), new conv left (B, D, K-1)."""
        x = x + 0.5 * self.drop(self.ff1(x))
        a, k, v = self.attn(x, rot, mask, past_k, past_v)
        x = x + self.drop(a)
        c, conv_left = self.conv(x, conv_left, valid)
        x = x + c
        x = x + 0.5 * self.drop(self.ff2(x))
        return self.norm(x), k, v, conv_left


class StreamingEncoder(nn.Module):
    """Fbank (B, T, F) -> encoder frames (B, T/4, D), offline or chunk by chunk."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("feat_mean", torch.zeros(cfg.num_features))
        self.register_buffer("feat_std", torch.ones(cfg.num_features))
        self.subsampling = CausalSubsampling(cfg.num_features, cfg.subsampling_channels, cfg.d_model)
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.num_layers))

    @property
    def output_dim(self) -> int:
        return self.cfg.d_model

    def _normalize(self, x: Tensor, lengths: Tensor) -> Tensor:
        """Global mean/variance normalization; frames at or beyond lengths (B,) become 0,
        so whatever padding a caller used, the last partial encoder frame is the same."""
        valid = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]  # (B, T)
        return ((x - self.feat_mean) / self.feat_std).masked_fill(~valid.unsqueeze(-1), 0.0)

    def _zeros_sub(self, b: int, device) -> tuple[Tensor, Tensor]:
        s = self.subsampling
        return (torch.zeros(b, 1, 1, self.cfg.num_features, device=device),
                torch.zeros(b, s.channels, 1, s.f1, device=device))

    def forward(self, x: Tensor, lengths: Tensor, chunk_size: int | None = None,
                left_chunks: int | None = None, return_layers: bool = False):
        """Whole utterances under the chunk-causal mask.

        x: (B, T, F) fbank (T padded internally to a multiple of 4);
        lengths: (B,) valid fbank frames.
        chunk_size: encoder frames per chunk (default from config; <= 0 means
        full context); left_chunks: attention left context in chunks (default
        from config; < 0 unlimited).
        Returns enc (B, T', D) and enc_lengths (B,) = ceil(lengths / 4); with
        ``return_layers`` also the list of every Conformer layer's output, N
        tensors (B, T', D), first layer first (the last one is ``enc``), e.g.
        for data2vec-style pretraining targets.
        """
        cfg = self.cfg
        chunk_size = cfg.chunk_size if chunk_size is None else chunk_size
        left_chunks = cfg.left_chunks if left_chunks is None else left_chunks
        b, t, _ = x.shape
        x = F.pad(x, (0, 0, 0, (-t) % 4))
        x = self._normalize(x, lengths)
        y, _, _ = self.subsampling(x, *self._zeros_sub(b, x.device))  # (B, T', D)
        t2 = y.shape[1]
        enc_len = (lengths + 3) // 4
        valid = torch.arange(t2, device=x.device)[None, :] < enc_len[:, None]  # (B, T')
        if chunk_size <= 0:
            allowed = torch.ones(t2, t2, dtype=torch.bool, device=x.device)
        else:
            allowed = chunk_attention_mask(t2, chunk_size, left_chunks, x.device)
        # every frame also sees itself, so padding rows never attend to nothing (NaN)
        eye = torch.eye(t2, dtype=torch.bool, device=x.device)
        mask = ((allowed[None] & valid[:, None, :]) | eye).unsqueeze(1)  # (B, 1, T', T')
        pos = torch.arange(t2, device=x.device).expand(b, t2)
        rot = rope_angles(pos, cfg.d_model // cfg.num_heads, y.dtype)
        k_pad = self.cfg.conv_kernel - 1
        outs: list[Tensor] = []
        for layer in self.layers:
            conv_left = y.new_zeros(b, cfg.d_model, k_pad)
            y, _, _, _ = layer(y, rot, mask, valid, None, None, conv_left)
            if return_layers:
                outs.append(y)
        if return_layers:
            return y, enc_len, outs
        return y, enc_len

    def init_cache(self, batch: int, device: torch.device | str = "cpu", left_context: int | None = None) -> EncoderCache:
        """Empty streaming state for ``batch`` streams; ``left_context`` in encoder frames."""
        cfg = self.cfg
        lc = cfg.left_context if left_context is None else left_context
        dh = cfg.d_model // cfg.num_heads
        kv = torch.zeros(cfg.num_layers, batch, cfg.num_heads, lc, dh, device=device)
        s1, s2 = self._zeros_sub(batch, device)
        return EncoderCache(s1, s2, kv, kv.clone(),
                            torch.zeros(cfg.num_layers, batch, cfg.d_model, cfg.conv_kernel - 1, device=device),
                            torch.zeros(batch, dtype=torch.long, device=device))

    def forward_chunk(self, x: Tensor, lengths: Tensor, cache: EncoderCache) -> tuple[Tensor, Tensor, EncoderCache]:
        """One chunk per stream.

        x: (B, T, F) fbank frames of this chunk, T a multiple of 4 (4 x chunk size);
        lengths: (B,) valid fbank frames in the chunk (T except in a stream's last, padded chunk);
        cache: state from ``init_cache`` or the previous call.
        Returns enc (B, T/4, D), enc_lengths (B,) valid encoder frames, and the new cache.
        The chunk size may differ from the training one; the attention left
        context is the cache's (cache.keys.shape[3]).
        """
        b, t, _ = x.shape
        check_chunk_frames(t)
        x = self._normalize(x, lengths)
        y, s1, s2 = self.subsampling(x, cache.sub1, cache.sub2)  # (B, T', D)
        t2 = y.shape[1]
        lc = cache.keys.shape[3]
        enc_len = (lengths + 3) // 4
        ar = torch.arange(t2, device=x.device)
        valid = ar[None, :] < enc_len[:, None]  # (B, T')
        # cache slot p holds absolute frame offset - L + p: valid once that is >= 0
        cache_ok = torch.arange(lc, device=x.device)[None, :] >= (lc - cache.offset)[:, None]  # (B, L)
        keys_ok = torch.cat([cache_ok, valid], dim=1)  # (B, L + T')
        eye = torch.cat([torch.zeros(t2, lc, dtype=torch.bool, device=x.device),
                         torch.eye(t2, dtype=torch.bool, device=x.device)], dim=1)  # (T', L + T')
        mask = (keys_ok[:, None, :] | eye).unsqueeze(1)  # (B, 1, T', L + T')
        pos = cache.offset[:, None] + ar[None, :]  # (B, T')
        rot = rope_angles(pos, self.cfg.d_model // self.cfg.num_heads, y.dtype)
        new_k, new_v, new_conv = [], [], []
        for i, layer in enumerate(self.layers):
            y, k, v, cl = layer(y, rot, mask, valid, cache.keys[i], cache.values[i], cache.conv[i])
            new_k.append(torch.cat([cache.keys[i], k], dim=2)[:, :, t2:] if lc else cache.keys[i])
            new_v.append(torch.cat([cache.values[i], v], dim=2)[:, :, t2:] if lc else cache.values[i])
            new_conv.append(cl)
        new_cache = EncoderCache(s1, s2, torch.stack(new_k), torch.stack(new_v), torch.stack(new_conv),
                                 cache.offset + t2)
        return y, enc_len, new_cache

    @staticmethod
    def param_count(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())


def widen_feedforwards(state: dict[str, Tensor], ff_dim: int, generator: torch.Generator | None = None
                       ) -> dict[str, Tensor]:
    """An encoder state dict with every feed-forward module widened to ``ff_dim`` hidden units, computing the
    same function: the new units get random input weights (``nn.Linear``'s own initialization) and zero output
    weights, so they contribute nothing until fine-tuning trains them (function-preserving growth, as in
    Net2Net's wider step).

    state: the encoder's (or the whole model's) state dict; ``*.w1.weight`` (F, D), ``*.w1.bias`` (F,),
    ``*.w2.weight`` (D, F) of each FeedForward are replaced by (ff_dim, D), (ff_dim,), (D, ff_dim); other
    tensors are returned as they are.  ValueError unless ``ff_dim`` is at least the current width."""
    out = dict(state)
    for name in [k for k in state if k.endswith(".w1.weight")]:
        prefix = name[: -len("w1.weight")]
        w1, b1, w2 = state[name], state[prefix + "w1.bias"], state[prefix + "w2.weight"]
        old, d = w1.shape
        if ff_dim < old:
            raise ValueError(f"feed-forward width can only grow: {prefix[:-1]} has {old} units, asked {ff_dim}")
        fresh = nn.Linear(d, ff_dim - old)
        if generator is not None:
            bound = 1.0 / d ** 0.5  # nn.Linear's default uniform bound, drawn from the given generator
            with torch.no_grad():
                fresh.weight.uniform_(-bound, bound, generator=generator)
                fresh.bias.uniform_(-bound, bound, generator=generator)
        out[name] = torch.cat([w1, fresh.weight.detach().to(w1.dtype)], 0)
        out[prefix + "w1.bias"] = torch.cat([b1, fresh.bias.detach().to(b1.dtype)], 0)
        out[prefix + "w2.weight"] = torch.cat([w2, w2.new_zeros(w2.shape[0], ff_dim - old)], 1)
    return out

