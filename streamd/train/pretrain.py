"""Self-supervised data2vec-style pretraining of the streaming encoder (``streamd pretrain``).

data2vec (Baevski et al. 2022; fairseq's ``Data2VecAudioModel``) learns from
audio without transcripts: a *student* encoder sees masked input and regresses
what an exponential-moving-average *teacher* computes from the unmasked input.
Here both are streamd's own :class:`~streamd.model.encoder.StreamingEncoder`
(same class, same chunk-causal attention mask and per-step chunk-size /
left-context draw as RNN-T training), so the pretrained weights drop into
``streamd train --set init_from=PRETRAIN.pt``.

One step on a batch of B utterances (T fbank frames, T' = ceil(T / 4) encoder
frames, D = d_model, N layers):

1. features: the training pipeline's (cached fbank, :class:`AudioDataset`; a
   manifest line needs only ``audio``: missing or empty ``text`` is fine); with
   ``spec_augment.enabled`` (off by default, as in data2vec) the trainer's
   augmentation with its seeds: the random channel response (``max_eq_db``)
   for student and teacher alike, the SpecAugment masks for the student only;
2. time mask (B, T') over *encoder frames* (:func:`sample_time_masks`, fairseq's
   ``compute_mask_indices``: ``mask.prob`` 0.65, spans of ``mask.span`` 10
   frames, at least ``mask.min_masks`` spans); the masked frames of the
   subsampling output, the input of the Conformer layers, are replaced by a
   learned mask embedding (D,), as data2vec masks the output of its CNN feature
   extractor.  The replacement is a forward hook on ``encoder.subsampling``,
   so the encoder code is untouched and a masked frame's own fbank frames
   cannot reach the layers;
3. teacher (no gradients, eval mode, unmasked input, the same chunking as the
   student): every layer's output (B, T', D); targets (:func:`build_targets`) =
   the mean of the top ``target.top_k`` layers (all of them if fewer), each
   instance-normalized over time per utterance and channel on valid frames,
   then optionally instance- or layer-normalized again (``target.norm``);
4. student prediction = ``head(encoder(masked input))``, head a linear D -> D
   (data2vec's ``final_proj``); loss (:func:`regression_loss`) on the masked,
   valid frames only: per frame the squared error summed over D (``loss.beta``
   0) or smooth L1 with ``beta``, times ``loss.scale`` (0: 1 / sqrt(D)), averaged
   over those frames;
5. AdamW step (learning-rate schedule, clipping and skipped non-finite steps
   as in training), then the EMA update ``teacher = tau * teacher + (1 - tau) *
   student`` over all encoder weights with tau annealed linearly from
   ``ema.tau0`` to ``ema.tau_end`` over ``ema.tau_n`` updates (:func:`ema_decay`).

``target_var`` (mean over channels of the targets' variance over the masked
frames) is logged next to the loss: if it falls towards 0 the teacher
collapsed to a constant.

Outputs in ``exp_dir`` follow :mod:`streamd.train.trainer`: ``checkpoint-<s>.pt``
is a regular streamd checkpoint (``load_checkpoint``, ``streamd model-info``
and ``streamd average`` work) whose encoder is the *student* (what data2vec
fine-tunes) and whose prediction network and joiner are untrained
placeholders; its ``meta["pretrain"]`` mapping marks it as a pretrain
checkpoint, so ``init_from`` takes its encoder (with the feature mean/std
measured on the pretraining audio) and starts the rest fresh.
``train_state-<s>.pt`` holds what resume needs besides: optimizer state, data
position, the teacher's weights and the student's mask embedding and head.
Every random choice of step ``s`` is seeded from ``(seed, s)``, so ``resume``
continues exactly.  ``log.jsonl`` gets one record per ``log_every`` steps and
one per validation.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from ..config import ConfigError, FbankConfig, ModelConfig, from_dict, to_dict
from ..device import resolve_device
from ..model.checkpoint import save_checkpoint
from ..model.encoder import StreamingEncoder
from ..model.transducer import Transducer
from .average import checkpoint_path, list_checkpoints
from ..audio.fbank import num_frames
from .data import (AsrDataset, Batch, LengthBucketSampler, Utterance, _fbank_hash, _header_duration,
                   apply_spec_augment, collate, default_char_tokens, feature_stats, sample_spec_augment,
                   sample_spectral_eq, worker_init)
from .manifest_lines import iter_audio_lines
from .trainer import (DataConfig, OptimConfig, SpecAugmentConfig, _differing_keys, _latest_complete, _load_tokens,
                      _Progress, _req, _set_dotted, _state_path, _step_seed, _truncate_log, learning_rate)

__all__ = ["MaskConfig", "EmaConfig", "TargetConfig", "RegressionLossConfig", "PretrainConfig",
           "load_pretrain_config", "AudioDataset", "sample_time_masks", "instance_norm", "build_targets",
           "regression_loss", "masked_variance", "ema_decay", "Data2VecStudent", "EmaTeacher", "PretrainParts",
           "pretrain_losses", "PretrainStep", "PretrainResult", "pretrain", "main", "PRETRAIN_METHOD"]

log = logging.getLogger("streamd.pretrain")

PRETRAIN_METHOD = "data2vec"
STATE_FORMAT = "streamd-pretrain-state"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MaskConfig:
    """Time masking of the student's input, in encoder frames (see :func:`sample_time_masks`)."""

    prob: float = 0.65
    span: int = 10
    min_masks: int = 2

    def __post_init__(self) -> None:
        _req(0 < self.prob <= 1, "prob", f"must be in (0, 1], got {self.prob}")
        _req(self.span >= 1, "span", f"must be >= 1 (encoder frames), got {self.span}")
        _req(self.min_masks >= 0, "min_masks", f"must be >= 0, got {self.min_masks}")


@dataclass(frozen=True)
class EmaConfig:
    """Teacher EMA decay: linear from ``tau0`` to ``tau_end`` over ``tau_n`` updates, then constant."""

    tau0: float = 0.999
    tau_end: float = 0.9999
    tau_n: int = 30000

    def __post_init__(self) -> None:
        _req(0 <= self.tau0 <= 1, "tau0", f"must be in [0, 1], got {self.tau0}")
        _req(self.tau0 <= self.tau_end <= 1, "tau_end", f"must be in [tau0={self.tau0}, 1], got {self.tau_end}")
        _req(self.tau_n >= 1, "tau_n", f"must be >= 1, got {self.tau_n}")


@dataclass(frozen=True)
class TargetConfig:
    """Teacher targets (see :func:`build_targets`)."""

    top_k: int = 8
    instance_norm_layers: bool = True
    norm: str = "none"

    def __post_init__(self) -> None:
        _req(self.top_k >= 1, "top_k", f"must be >= 1, got {self.top_k}")
        _req(self.norm in ("none", "instance", "layer"), "norm",
             f"must be one of ['none', 'instance', 'layer'], got {self.norm!r}")


@dataclass(frozen=True)
class RegressionLossConfig:
    """``beta`` 0: squared error; > 0: smooth L1 with that beta. ``scale`` 0: 1 / sqrt(d_model)."""

    beta: float = 0.0
    scale: float = 0.0

    def __post_init__(self) -> None:
        _req(self.beta >= 0 and math.isfinite(self.beta), "beta", f"must be >= 0 (0 = L2), got {self.beta}")
        _req(self.scale >= 0 and math.isfinite(self.scale), "scale",
             f"must be >= 0 (0 = 1/sqrt(d_model)), got {self.scale}")


def _default_model() -> ModelConfig:
    return ModelConfig(vocab_size=len(default_char_tokens()))


@dataclass(frozen=True)
class PretrainConfig:
    """Everything ``streamd pretrain`` needs (see configs/pretrain.yaml for the meaning of each key).

    ``model``: the encoder and fbank are pretrained; the rest of the model only shapes the placeholder
    prediction network and joiner stored with it (so the checkpoint is a regular one).  ``data``,
    ``optim``, ``spec_augment``, chunking, checkpointing and logging keys mean what they mean in
    :class:`~streamd.train.trainer.TrainConfig` (``data.tokens`` only sizes the placeholder)."""

    exp_dir: str = "exp/pretrain"
    model: ModelConfig = field(default_factory=_default_model)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    spec_augment: SpecAugmentConfig = field(default_factory=lambda: SpecAugmentConfig(enabled=False))
    mask: MaskConfig = field(default_factory=MaskConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    loss: RegressionLossConfig = field(default_factory=RegressionLossConfig)
    chunk_sizes: tuple[int, ...] = (4, 8, 16, -1)
    left_chunks: tuple[int, ...] = (2, 4, -1)
    steps: int = 20000
    checkpoint_every: int = 1000
    keep_last: int = 5
    log_every: int = 50
    valid_every: int = 1000
    seed: int = 0
    device: str = "auto"
    num_threads: int = 0
    resume: bool = False

    def __post_init__(self) -> None:
        _req(self.exp_dir != "", "exp_dir", "must not be empty")
        _req(len(self.data.train) > 0, "data.train", "at least one training manifest is required")
        _req(self.model.encoder.num_features == self.model.fbank.num_mel_bins, "model.encoder.num_features",
             f"must equal model.fbank.num_mel_bins ({self.model.fbank.num_mel_bins}), "
             f"got {self.model.encoder.num_features}")
        _req(len(self.chunk_sizes) > 0, "chunk_sizes", "must list at least one chunk size")
        for i, c in enumerate(self.chunk_sizes):
            _req(c >= 1 or c == -1, f"chunk_sizes[{i}]", f"must be >= 1 or -1 (full context), got {c}")
        _req(len(self.left_chunks) > 0, "left_chunks", "must list at least one value")
        for i, c in enumerate(self.left_chunks):
            _req(c >= 1 or c == -1, f"left_chunks[{i}]", f"must be >= 1 or -1 (unlimited), got {c}")
        for k in ("steps", "checkpoint_every", "keep_last", "log_every"):
            _req(getattr(self, k) >= 1, k, f"must be >= 1, got {getattr(self, k)}")
        _req(self.valid_every >= 0, "valid_every", f"must be >= 0 (0 = never), got {self.valid_every}")
        _req(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"), "device",
             f"must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        _req(self.num_threads >= 0, "num_threads", f"must be >= 0 (0 = torch default), got {self.num_threads}")


def load_pretrain_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                         resume: bool | None = None) -> PretrainConfig:
    """Read a YAML pretraining config and apply ``KEY=VALUE`` overrides (dotted keys, YAML values), as
    :func:`~streamd.train.trainer.load_train_config` does; errors are :class:`ConfigError` naming the key."""
    data: dict = {}
    if path is not None:
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. mask.prob=0.5")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    if resume is not None:
        data["resume"] = resume
    return from_dict(PretrainConfig, data)


# --------------------------------------------------------------------------- data


def _read_audio_manifest(path: str | Path) -> list[Utterance]:
    """Manifest lines -> utterances; ``text`` may be missing or empty (it is not used)."""
    path = Path(path)
    out: list[Utterance] = []
    for n, where, obj, audio in iter_audio_lines(path):
        dur = obj.get("duration")
        if dur is None:
            dur = _header_duration(audio)
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
            raise ValueError(f"{where}: 'duration' must be a number of seconds >= 0, got {dur!r}")
        out.append(Utterance(audio, obj.get("text") or "", float(dur), None, str(path), n))
    return out


class AudioDataset(AsrDataset):
    """:class:`~streamd.train.data.AsrDataset` for untranscribed audio: the same features, feature cache,
    resampling and ``frames`` for bucketing, but no text, tokens or keywords (every example has an empty
    target and KWS target -1), so any manifest works, with or without ``text``.

    Args: as AsrDataset without ``tokens`` and ``keywords``.
    """

    def __init__(self, manifests: Sequence[str | Path], fbank: FbankConfig, cache_features: bool = True,
                 min_duration: float = 0.1, max_duration: float | None = None, repeat: Sequence[int] = ()) -> None:
        # not AsrDataset.__init__: it needs a string text on every line and encodes it with a token table
        if isinstance(manifests, (str, Path)):
            manifests = [manifests]
        if not manifests:
            raise ValueError("AudioDataset needs at least one manifest")
        repeat = tuple(repeat) or (1,) * len(manifests)
        if len(repeat) != len(manifests) or any(isinstance(r, bool) or not isinstance(r, int) or r < 1
                                                for r in repeat):
            raise ValueError(f"repeat must list one integer >= 1 per manifest ({len(manifests)}), got {list(repeat)}")
        self.fbank_cfg = fbank
        self.keywords = ()
        self.cache_features = cache_features
        self._fbank = None
        self._cache_dirs = {}
        tag = f"fbank-{_fbank_hash(fbank)}"  # the training cache: features are shared with `streamd train`
        self.utterances = []
        self.dropped = 0
        for m, times in zip(manifests, repeat):
            self._cache_dirs[str(Path(m))] = Path(m).resolve().parent / tag
            for utt in _read_audio_manifest(m):
                if utt.duration < min_duration or (max_duration is not None and utt.duration > max_duration):
                    self.dropped += 1
                    continue
                self.utterances.extend([utt] * times)
        self._targets = [[] for _ in self.utterances]
        self._kws = [-1] * len(self.utterances)
        fl, fs = fbank.frame_length, fbank.frame_shift
        self.frames = np.array([num_frames(int(round(u.duration * fbank.sample_rate)), fl, fs)
                                for u in self.utterances], dtype=np.int64)


# --------------------------------------------------------------------------- masks, targets, loss


def sample_time_masks(enc_lengths: Tensor, num_frames: int, prob: float, span: int, min_masks: int,
                      generator: torch.Generator) -> Tensor:
    """data2vec / wav2vec 2.0 time masks (fairseq ``compute_mask_indices``, static spans, overlap allowed).

    enc_lengths: (B,) valid encoder frames n_b; num_frames: T' >= max(n_b).
    For utterance b: span L = min(span, n_b), N = n_b - L + 1 candidate starts,
    k = min(N, max(min_masks, floor(prob * n_b / span + u))) with u ~ U[0, 1)
    (so ``prob`` is the expected fraction of frames that *start* a span, times
    ``span``; overlapping spans merge, so less than ``prob`` ends up masked);
    k distinct starts drawn uniformly from the N candidates, each masking
    frames [start, start + L).  Padding frames are never masked; n_b = 0 masks
    nothing.  Random numbers come from ``generator`` (CPU).

    Returns (B, T') bool on the CPU, True = masked.
    """
    ln = enc_lengths.detach().to("cpu", torch.long)
    b = ln.shape[0]
    ar = torch.arange(num_frames)
    width = ln.clamp(max=span)  # (B,) L
    cand = ln - width + 1  # (B,) N
    u = torch.rand(b, generator=generator, dtype=torch.float64)
    k = torch.floor(prob * ln.double() / span + u).long().clamp_min(min_masks)
    k = torch.minimum(k, cand).masked_fill(ln == 0, 0)  # (B,)
    scores = torch.rand(b, num_frames, generator=generator, dtype=torch.float64)
    scores = scores.masked_fill(ar[None, :] >= cand[:, None], 2.0)  # non-candidates rank last
    rank = scores.argsort(dim=1).argsort(dim=1)  # (B, T') rank of each position in a random order
    starts = rank < k[:, None]  # (B, T') k distinct random candidates
    c = F.pad(starts.long().cumsum(1), (1, 0))  # (B, T' + 1): c[:, t + 1] = starts in [0, t]
    lo = (ar[None, :] + 1 - width[:, None]).clamp_min(0)  # (B, T') first start that covers t
    covered = (c[:, 1:] - c.gather(1, lo)) > 0  # a start in [t - L + 1, t]
    return covered & (ar[None, :] < ln[:, None])


def instance_norm(x: Tensor, valid: Tensor, eps: float = 1e-5) -> Tensor:
    """Normalize over time per utterance and channel, on valid frames only.

    x: (..., B, T', D); valid: (B, T') bool.  Each (utterance, channel) gets mean
    0 and (population) variance var / (var + eps) over its valid frames;
    padding frames are 0.  Returns the shape of x.
    """
    m = valid.to(x.dtype)[..., None]  # (B, T', 1)
    n = m.sum(-2, keepdim=True).clamp_min(1.0)  # (B, 1, 1)
    mean = (x * m).sum(-2, keepdim=True) / n  # (..., B, 1, D)
    var = ((x - mean).square() * m).sum(-2, keepdim=True) / n
    return (x - mean) * torch.rsqrt(var + eps) * m


def build_targets(layers: Sequence[Tensor], valid: Tensor, top_k: int, instance_norm_layers: bool = True,
                  norm: str = "none") -> Tensor:
    """data2vec regression targets from the teacher's layer outputs.

    layers: N tensors (B, T', D), first layer first; valid: (B, T') bool.
    The last min(top_k, N) layers, each instance-normalized (:func:`instance_norm`)
    when ``instance_norm_layers``, are averaged; the average is then
    normalized by ``norm``: ``none``, ``instance`` (again over time) or
    ``layer`` (over D per frame, no affine).  Returns (B, T', D) float32,
    0 on padding frames.
    """
    k = min(top_k, len(layers))
    top = torch.stack([t.float() for t in layers[len(layers) - k:]])  # (K, B, T', D)
    if instance_norm_layers:
        top = instance_norm(top, valid)
    y = top.mean(0)  # (B, T', D)
    if norm == "instance":
        y = instance_norm(y, valid)
    elif norm == "layer":
        y = F.layer_norm(y, y.shape[-1:])
    elif norm != "none":
        raise ValueError(f"norm must be none, instance or layer, got {norm!r}")
    return y * valid[..., None].to(y.dtype)


def regression_loss(pred: Tensor, target: Tensor, select: Tensor, beta: float = 0.0, scale: float = 0.0) -> Tensor:
    """data2vec's regression loss averaged over the selected frames.

    pred, target: (B, T', D); select: (B, T') bool (the masked, valid frames).
    Per frame: the squared error summed over D (beta = 0) or smooth L1 with
    ``beta`` summed over D; times ``scale`` (0: 1 / sqrt(D)).  Returns a 0-d
    tensor (0 when nothing is selected).
    """
    if beta == 0:
        per = (pred.float() - target.float()).square().sum(-1)  # (B, T')
    else:
        per = F.smooth_l1_loss(pred.float(), target.float(), reduction="none", beta=beta).sum(-1)
    s = scale if scale > 0 else 1.0 / math.sqrt(pred.shape[-1])
    m = select.to(per.dtype)
    return (per * m).sum() / m.sum().clamp_min(1.0) * s


def masked_variance(x: Tensor, select: Tensor) -> Tensor:
    """Mean over channels of the (population) variance of x: (B, T', D) over the selected frames (B, T');
    0-d.  On the targets this is the collapse check: it goes to 0 if the teacher's output stops varying."""
    m = select.to(x.dtype)[..., None]  # (B, T', 1)
    n = m.sum().clamp_min(1.0)
    mean = (x * m).sum((0, 1)) / n  # (D,)
    return ((x - mean).square() * m).sum((0, 1)).div(n).mean()


def ema_decay(cfg: EmaConfig, updates: int) -> float:
    """Decay of the EMA update that follows ``updates`` earlier updates (0 for the first): ``tau0 +
    (tau_end - tau0) * updates / tau_n`` while updates < tau_n, then ``tau_end`` (fairseq's annealed rate)."""
    if updates >= cfg.tau_n:
        return cfg.tau_end
    return cfg.tau0 + (cfg.tau_end - cfg.tau0) * updates / cfg.tau_n


# --------------------------------------------------------------------------- student and teacher


def _masking_hook(mask: Tensor, emb: Tensor):
    """Forward hook for ``encoder.subsampling``: frames where mask (B, T') is True become emb (D,)."""
    def hook(_module, _inputs, output):
        y, left1, left2 = output  # (B, T', D), subsampling left contexts
        return torch.where(mask[..., None], emb.to(y.dtype), y), left1, left2
    return hook


class Data2VecStudent(nn.Module):
    """The streaming encoder with a learned mask embedding at the input of its Conformer layers and a
    linear regression head (data2vec's ``mask_emb`` and ``final_proj``)."""

    def __init__(self, encoder: StreamingEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        d = encoder.output_dim
        self.mask_emb = nn.Parameter(torch.empty(d).uniform_())
        self.head = nn.Linear(d, d)

    def forward(self, feats: Tensor, lengths: Tensor, mask: Tensor, chunk_size: int,
                left_chunks: int) -> tuple[Tensor, Tensor]:
        """feats: (B, T, F) fbank; lengths: (B,); mask: (B, T') bool (T' = ceil(T / 4)), True = the subsampled
        frame is replaced by the mask embedding.  Returns predictions (B, T', D) and enc_lengths (B,)."""
        handle = self.encoder.subsampling.register_forward_hook(_masking_hook(mask, self.mask_emb))
        try:
            enc, enc_len = self.encoder(feats, lengths, chunk_size=chunk_size, left_chunks=left_chunks)
        finally:
            handle.remove()
        return self.head(enc), enc_len


class EmaTeacher:
    """EMA copy of the student encoder: no gradients, always in eval mode (no dropout)."""

    def __init__(self, encoder: StreamingEncoder) -> None:
        self.model = copy.deepcopy(encoder).eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, student: StreamingEncoder, decay: float) -> None:
        """``p_teacher = decay * p_teacher + (1 - decay) * p_student`` for every parameter; buffers (the
        feature mean/std) are copied."""
        for t, s in zip(self.model.parameters(), student.parameters()):
            t.mul_(decay).add_(s.detach(), alpha=1.0 - decay)
        for t, s in zip(self.model.buffers(), student.buffers()):
            t.copy_(s)

    @torch.no_grad()
    def layers(self, feats: Tensor, lengths: Tensor, chunk_size: int, left_chunks: int) -> tuple[list[Tensor], Tensor]:
        """Unmasked forward: every layer's output, N tensors (B, T', D), and enc_lengths (B,)."""
        _, enc_len, outs = self.model(feats, lengths, chunk_size=chunk_size, left_chunks=left_chunks,
                                      return_layers=True)
        return outs, enc_len


@dataclass
class PretrainParts:
    """0-d tensors of one batch: the loss and the values logged beside it."""

    loss: Tensor
    target_var: Tensor
    pred_var: Tensor
    mask_frac: Tensor


def pretrain_losses(student: Data2VecStudent, teacher: EmaTeacher, feats: Tensor, teacher_feats: Tensor,
                    lengths: Tensor, mask: Tensor, cfg: PretrainConfig, chunk_size: int,
                    left_chunks: int) -> PretrainParts:
    """One data2vec forward.

    feats: (B, T, F) the student's features (SpecAugment-ed if enabled); teacher_feats: (B, T, F) the
    unmasked ones; lengths: (B,); mask: (B, T') bool from :func:`sample_time_masks` on the model's device.
    """
    layers, enc_len = teacher.layers(teacher_feats, lengths, chunk_size, left_chunks)
    valid = torch.arange(mask.shape[1], device=mask.device)[None, :] < enc_len[:, None]  # (B, T')
    tc = cfg.target
    with torch.no_grad():
        target = build_targets(layers, valid, tc.top_k, tc.instance_norm_layers, tc.norm)  # (B, T', D)
    pred, _ = student(feats, lengths, mask, chunk_size, left_chunks)
    select = mask & valid
    loss = regression_loss(pred, target, select, cfg.loss.beta, cfg.loss.scale)
    with torch.no_grad():
        frac = select.sum() / valid.sum().clamp_min(1)
        return PretrainParts(loss, masked_variance(target, select), masked_variance(pred.detach().float(), select),
                             frac.float())


# --------------------------------------------------------------------------- loop


@dataclass
class PretrainStep:
    """Host-side values of one optimizer step."""

    step: int
    loss: float
    target_var: float
    pred_var: float
    mask_frac: float
    grad_norm: float
    lr: float
    ema_decay: float
    chunk_size: int
    left_chunks: int
    batch_size: int
    audio_seconds: float
    skipped: bool


@dataclass
class PretrainResult:
    """What :func:`pretrain` did in this call."""

    step: int
    history: list[PretrainStep]
    valid: list[dict]
    checkpoint: Path | None


def _step_masks(cfg: PretrainConfig, batch: Batch, seed: int, device: torch.device) -> Tensor:
    """(B, T') time mask of a batch, drawn from a generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    t2 = (batch.feats.shape[1] + 3) // 4
    mc = cfg.mask
    return sample_time_masks((batch.feat_lengths.cpu() + 3) // 4, t2, mc.prob, mc.span, mc.min_masks,
                             gen).to(device)


@torch.no_grad()
def evaluate(student: Data2VecStudent, teacher: EmaTeacher, dataset: AudioDataset, cfg: PretrainConfig,
             device: torch.device) -> dict[str, float]:
    """Utterance-weighted mean loss and target variance over ``dataset``, with the model's default chunking
    and fixed masks (batch ``i`` seeded from ``(seed, i)``), so figures of different steps compare."""
    was_training = student.training
    student.eval()
    batches = LengthBucketSampler(dataset.frames, cfg.data.max_frames, shuffle=False).epoch_batches(0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate,
                                         num_workers=cfg.data.num_workers, worker_init_fn=worker_init)
    enc = student.encoder.cfg
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    n = 0
    for i, cpu_batch in enumerate(loader):
        batch = cpu_batch.to(device)
        mask = _step_masks(cfg, cpu_batch, _step_seed(cfg.seed, i, 5), device)
        p = pretrain_losses(student, teacher, batch.feats, batch.feats, batch.feat_lengths, mask, cfg,
                            enc.chunk_size, enc.left_chunks)
        sums += torch.stack([p.loss, p.target_var]).double() * batch.size
        n += batch.size
    student.train(was_training)
    return dict(zip(("loss", "target_var"), (sums / max(n, 1)).tolist()))


def pretrain(cfg: PretrainConfig, stop: Callable[[int], bool] | None = None) -> PretrainResult:
    """Pretrain (or resume, with ``cfg.resume``) until ``cfg.steps``.

    stop: called after every step with the step number; returning True saves a checkpoint and train state
    at that step and returns (``resume: true`` continues exactly from there).
    """
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    try:
        device = resolve_device(cfg.device)
    except RuntimeError as e:
        raise ConfigError(f"device: {e}") from None
    tokens = _load_tokens(cfg)  # only sizes the placeholder prediction network / joiner
    exp = Path(cfg.exp_dir)
    existing = list_checkpoints(exp)
    latest = _latest_complete(exp)
    if existing and not cfg.resume:
        raise ConfigError(f"exp_dir: {exp} holds checkpoints (latest step {existing[-1][0]}); set "
                          "resume: true (or pass --resume) to continue, or choose an empty exp_dir")
    if existing and latest is None:
        raise ConfigError(f"exp_dir: cannot resume, no checkpoint in {exp} has its train_state-<step>.pt; "
                          "choose an empty exp_dir")

    dcfg = cfg.data
    train_set = AudioDataset(dcfg.train, cfg.model.fbank, dcfg.cache_features, dcfg.min_duration,
                             dcfg.max_duration, dcfg.repeat)
    if len(train_set) == 0:
        raise ValueError(f"data.train: no usable utterance in {list(dcfg.train)} ({train_set.dropped} outside "
                         f"[{dcfg.min_duration}, {dcfg.max_duration}] s)")
    valid_sets = {m: AudioDataset([m], cfg.model.fbank, dcfg.cache_features, dcfg.min_duration, dcfg.max_duration)
                  for m in dcfg.valid}
    sampler = LengthBucketSampler(train_set.frames, dcfg.max_frames, seed=cfg.seed, shuffle=True,
                                  bucket_frames=dcfg.bucket_frames)

    torch.manual_seed(cfg.seed)
    model = Transducer(cfg.model)  # the checkpoint's container; only its encoder trains
    student = Data2VecStudent(model.encoder)
    model.to(device)
    student.to(device)
    ocfg = cfg.optim
    opt = torch.optim.AdamW(student.parameters(), lr=ocfg.lr, betas=tuple(ocfg.betas), eps=ocfg.eps,
                            weight_decay=ocfg.weight_decay)
    step, epoch, index = 0, 0, 0
    state: dict | None = None
    exp.mkdir(parents=True, exist_ok=True)
    if cfg.resume and latest is not None:
        ck = torch.load(checkpoint_path(exp, latest), map_location="cpu", weights_only=True)
        diff = _differing_keys(ck["model_config"], to_dict(cfg.model))
        if diff:
            raise ConfigError(f"model: differs from the model in {checkpoint_path(exp, latest)} "
                              f"(keys {', '.join(diff)}); resume needs the same model config")
        state = torch.load(_state_path(exp, latest), map_location=device, weights_only=True)
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"exp_dir: {_state_path(exp, latest)} is not a pretraining state "
                              f"(format {state.get('format')!r}); is {exp} a `streamd train` folder?")
        model.load_state_dict(ck["state_dict"], strict=True)
        student.load_state_dict({**{f"encoder.{k}": v for k, v in model.encoder.state_dict().items()},
                                 **state["student"]}, strict=True)
        opt.load_state_dict(state["optimizer"])
        step, epoch, index = int(state["step"]), int(state["epoch"]), int(state["batch_index"])
        _truncate_log(exp / "log.jsonl", step)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", checkpoint_path(exp, latest), step, epoch, index)
    else:
        rng = np.random.default_rng(cfg.seed)
        n = min(len(train_set), dcfg.stats_utterances)
        idx = np.sort(rng.choice(len(train_set), size=n, replace=False)).tolist()
        mean, std = feature_stats(train_set, idx, dcfg.num_workers)
        model.encoder.feat_mean.copy_(mean.to(device))
        model.encoder.feat_std.copy_(std.to(device))
        log.info("feature stats from %d utterances; encoder %s parameters; %d utterances (%d dropped)",
                 n, f"{StreamingEncoder.param_count(model.encoder):,}", len(train_set), train_set.dropped)
    teacher = EmaTeacher(model.encoder)
    if state is not None:
        teacher.model.load_state_dict(state["teacher"], strict=True)
    (exp / "train.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
    tokens.to_file(exp / "tokens.txt")

    def save(at: int, ep: int, ix: int, rec: PretrainStep | None) -> Path:
        path = checkpoint_path(exp, at)
        info = {"method": PRETRAIN_METHOD, "step": at, "loss": rec.loss if rec else None,
                "target_var": rec.target_var if rec else None, "config": to_dict(cfg)}
        save_checkpoint(path, model, tokens, {"step": at, "epoch": ep, "train_loss": rec.loss if rec else None,
                                              "pretrain": info})
        tmp = _state_path(exp, at).with_suffix(".tmp")
        torch.save({"format": STATE_FORMAT, "step": at, "epoch": ep, "batch_index": ix,
                    "optimizer": opt.state_dict(), "teacher": teacher.model.state_dict(),
                    "student": {k: v for k, v in student.state_dict().items() if not k.startswith("encoder.")}},
                   tmp)
        tmp.replace(_state_path(exp, at))
        for old, p in list_checkpoints(exp)[:-cfg.keep_last]:
            p.unlink(missing_ok=True)
            _state_path(exp, old).unlink(missing_ok=True)
        return path

    result = PretrainResult(step=step, history=[], valid=[], checkpoint=None)
    if step >= cfg.steps:
        log.info("already at step %d >= steps %d; nothing to do", step, cfg.steps)
        return result

    positions = sampler.iter_from(epoch, index)
    loader = torch.utils.data.DataLoader(
        train_set, batch_sampler=(ix for _, _, ix in sampler.iter_from(epoch, index)), collate_fn=collate,
        num_workers=dcfg.num_workers, worker_init_fn=worker_init, pin_memory=device.type == "cuda")
    progress = _Progress(step, cfg.steps)
    log_file = open(exp / "log.jsonl", "a", encoding="utf-8")
    params = list(student.parameters())
    clip = ocfg.grad_clip if ocfg.grad_clip > 0 else float("inf")
    window: list[PretrainStep] = []
    t_window = time.perf_counter()
    student.train()
    sa = cfg.spec_augment
    try:
        for (ep, ix, _), cpu_batch in zip(positions, loader):
            step += 1
            lr = learning_rate(ocfg, step, cfg.steps)
            for g in opt.param_groups:
                g["lr"] = lr
            torch.manual_seed(_step_seed(cfg.seed, step, 0))  # dropout
            pick = random.Random(_step_seed(cfg.seed, step, 1))  # the trainer's chunking draw
            chunk = pick.choice(cfg.chunk_sizes)
            left = pick.choice(cfg.left_chunks) if chunk > 0 else -1
            seconds = float(cpu_batch.num_samples.sum()) / cfg.model.fbank.sample_rate
            batch = cpu_batch.to(device)
            feats = student_feats = batch.feats
            if sa.enabled:  # the trainer's augmentation, with its seeds
                gen = torch.Generator().manual_seed(_step_seed(cfg.seed, step, 2))
                if sa.max_eq_db > 0:  # a channel response: the teacher hears the same channel
                    eq = sample_spectral_eq(feats.shape[0], feats.shape[2], sa.max_eq_db,
                                            torch.Generator().manual_seed(_step_seed(cfg.seed, step, 3)), device)
                    feats = feats + eq[:, None, :]  # (B, T, F) + (B, 1, F)
                # SpecAugment masks are a corruption, so they are the student's only
                masks = sample_spec_augment(cpu_batch.feat_lengths, feats.shape[2], sa.num_time_masks,
                                            sa.max_time_width, sa.max_time_fraction, sa.num_freq_masks,
                                            sa.max_freq_width, gen, device=device)
                student_feats = apply_spec_augment(feats, masks, model.encoder.feat_mean.detach())
            mask = _step_masks(cfg, cpu_batch, _step_seed(cfg.seed, step, 4), device)
            parts = pretrain_losses(student, teacher, student_feats, feats, batch.feat_lengths, mask, cfg, chunk,
                                    left)
            opt.zero_grad(set_to_none=True)
            parts.loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            vals = torch.stack([parts.loss.detach(), parts.target_var, parts.pred_var, parts.mask_frac,
                                norm.detach()]).tolist()
            skipped = not math.isfinite(vals[4])
            decay = ema_decay(cfg.ema, step - 1)
            if skipped:
                log.warning("step %d: non-finite gradient norm, update skipped", step)
            else:
                opt.step()
                teacher.update(model.encoder, decay)
            rec = PretrainStep(step, *vals, lr=lr, ema_decay=decay, chunk_size=chunk, left_chunks=left,
                               batch_size=batch.size, audio_seconds=seconds, skipped=skipped)
            result.history.append(rec)
            window.append(rec)
            line = None
            if step % cfg.log_every == 0 or step == cfg.steps:
                now = time.perf_counter()
                m = {k: sum(getattr(r, k) for r in window) / len(window)
                     for k in ("loss", "target_var", "pred_var", "mask_frac")}
                speed = sum(r.audio_seconds for r in window) / max(now - t_window, 1e-9)
                line = (f"step {step}/{cfg.steps} loss {m['loss']:.4f} target_var {m['target_var']:.4f} "
                        f"pred_var {m['pred_var']:.4f} masked {m['mask_frac']:.2f} ema {decay:.5f} lr {lr:.2e} "
                        f"grad {rec.grad_norm:.2f} epoch {ep} {speed:.1f} audio-s/s")
                if m["target_var"] < 1e-3:
                    log.warning("step %d: target variance %.2e: the teacher may have collapsed", step,
                                m["target_var"])
                log_file.write(json.dumps({"step": step, "epoch": ep, **m, "lr": lr, "ema_decay": decay,
                                           "grad_norm": rec.grad_norm, "audio_s_per_s": speed}) + "\n")
                log_file.flush()
                window, t_window = [], now
            progress.update(line)
            if valid_sets and cfg.valid_every and step % cfg.valid_every == 0:
                t_valid = time.perf_counter()
                per = {name: evaluate(student, teacher, ds, cfg, device) for name, ds in valid_sets.items()}
                total = sum(len(ds) for ds in valid_sets.values())
                v: dict[str, Any] = {"step": step, **{k: sum(per[nm][k] * len(ds) for nm, ds in valid_sets.items())
                                                      / max(total, 1) for k in ("loss", "target_var")}}
                if len(valid_sets) > 1:
                    v["sets"] = per
                t_window += time.perf_counter() - t_valid  # throughput counts training time only
                result.valid.append(v)
                log.info("valid step %d: loss %.4f target_var %.4f", step, v["loss"], v["target_var"])
                log_file.write(json.dumps({"valid": v}) + "\n")
                log_file.flush()
            stopping = stop is not None and stop(step)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps or stopping:
                result.checkpoint = save(step, ep, ix + 1, rec)
            if step >= cfg.steps or stopping:
                break
    finally:
        progress.close()
        log_file.close()
    result.step = step
    return result


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``streamd pretrain --config configs/pretrain.yaml [--resume] [--set KEY=VALUE ...]``."""
    p = argparse.ArgumentParser(prog="streamd pretrain",
                                description="Self-supervised data2vec-style pretraining of the streaming encoder "
                                            "on audio with or without transcripts; fine-tune with "
                                            "`streamd train --set init_from=CHECKPOINT`.")
    p.add_argument("--config", required=True, help="pretraining YAML (see configs/pretrain.yaml)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in exp_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set mask.prob=0.5 (repeatable; YAML values)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_pretrain_config(args.config, args.set, resume=True if args.resume else None)
    except (ConfigError, OSError) as e:
        print(f"streamd pretrain: {e}", file=sys.stderr)
        return 2

    interrupted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(signum, frame):  # first Ctrl-C: finish the step, save, exit; second: abort
            interrupted.set()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log.warning("interrupt: saving a checkpoint after the current step (Ctrl-C again to abort)")
        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        res = pretrain(cfg, stop=lambda _step: interrupted.is_set())
    except (ConfigError, ValueError, FileNotFoundError) as e:
        print(f"streamd pretrain: {e}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    log.info("stopped at step %d; last checkpoint %s", res.step, res.checkpoint)
    return 130 if interrupted.is_set() else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
