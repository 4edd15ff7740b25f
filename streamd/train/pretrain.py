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

import copy
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError, FbankConfig, ModelConfig, load_config
from ..model.encoder import StreamingEncoder
from ..model.transducer import Transducer
from .data import AsrDataset, Batch, Utterance, _header_duration, default_char_tokens
from ..manifest_lines import iter_audio_lines
from .run import (_adamw, _augment, _eval_loader, _measure_feature_stats, _resume, _resume_position, _run_data,
                  _run_steps, _save_step, _start_run, _state_path, _step_seed, _update, _weighted_means,
                  _write_run_files)
from .train_config import (_check_input, _check_run, config_dict, DataConfig, OptimConfig, _req, _resume_value,
                           RunConfig, SpecAugmentConfig)

__all__ = ["MaskConfig", "EmaConfig", "TargetConfig", "RegressionLossConfig", "PretrainConfig",
           "load_pretrain_config", "AudioDataset", "sample_time_masks", "instance_norm", "build_targets",
           "regression_loss", "masked_variance", "ema_decay", "Data2VecStudent", "EmaTeacher", "PretrainParts",
           "pretrain_losses", "PretrainStep", "PretrainResult", "pretrain", "PRETRAIN_METHOD"]

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
class PretrainConfig(RunConfig):
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

    def __post_init__(self) -> None:
        _req(self.exp_dir != "", "exp_dir", "must not be empty")
        _check_input(self)
        _check_run(self)


def load_pretrain_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                         resume: bool | None = None) -> PretrainConfig:
    """Read a YAML pretraining config and apply ``KEY=VALUE`` overrides (dotted keys, YAML values), as
    :func:`~streamd.train.trainer.load_train_config` does; errors are :class:`ConfigError` naming the key."""
    return load_config(PretrainConfig, path, overrides, "mask.prob=0.5", _resume_value(resume))


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
        self._load(manifests, fbank, (), cache_features, min_duration, max_duration, repeat, _read_audio_manifest,
                   lambda utt: ([], -1))  # the training cache: features are shared with `streamd train`


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
    loader = _eval_loader(dataset, cfg.data.max_frames, cfg.data.num_workers)
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


def _models(cfg: PretrainConfig, exp: Path, latest: int | None, device: torch.device, train_set: AudioDataset
            ) -> tuple[Transducer, Data2VecStudent, EmaTeacher, torch.optim.Optimizer, tuple[int, int, int]]:
    """The run's models and optimizer, fresh (the feature statistics measured on ``train_set``) or resumed from
    the latest train state (``cfg.resume``): (checkpoint container, student, EMA teacher, optimizer, (step,
    epoch, batch index) to go on from)."""
    torch.manual_seed(cfg.seed)
    model = Transducer(cfg.model)  # the checkpoint's container; only its encoder trains
    student = Data2VecStudent(model.encoder)
    model.to(device)
    student.to(device)
    opt = _adamw(student.parameters(), cfg.optim)
    step, epoch, index = 0, 0, 0
    state: dict | None = None
    exp.mkdir(parents=True, exist_ok=True)
    if cfg.resume and latest is not None:
        def check_state(st: dict) -> None:
            if st.get("format") != STATE_FORMAT:
                raise ConfigError(f"exp_dir: {_state_path(exp, latest)} is not a pretraining state "
                                  f"(format {st.get('format')!r}); is {exp} a `streamd train` folder?")

        state = _resume(exp, latest, model, cfg.model, device, check_state)
        student.load_state_dict({**{f"encoder.{k}": v for k, v in model.encoder.state_dict().items()},
                                 **state["student"]}, strict=True)
        opt.load_state_dict(state["optimizer"])
        step, epoch, index = _resume_position(state, exp, latest, log)
    else:
        n = _measure_feature_stats(model.encoder, train_set, cfg, device)
        log.info("feature stats from %d utterances; encoder %s parameters; %d utterances (%d dropped)",
                 n, f"{StreamingEncoder.param_count(model.encoder):,}", len(train_set), train_set.dropped)
    teacher = EmaTeacher(model.encoder)
    if state is not None:
        teacher.model.load_state_dict(state["teacher"], strict=True)
    return model, student, teacher, opt, (step, epoch, index)


def pretrain(cfg: PretrainConfig, stop: Callable[[int], bool] | None = None) -> PretrainResult:
    """Pretrain (or resume, with ``cfg.resume``) until ``cfg.steps``.

    stop: called after every step with the step number; returning True saves a checkpoint and train state
    at that step and returns (``resume: true`` continues exactly from there).
    """
    device, tokens, exp, latest = _start_run(cfg)  # tokens only size the placeholder prediction network / joiner

    dcfg = cfg.data
    train_set, valid_sets, sampler = _run_data(cfg, lambda manifests, repeat: AudioDataset(
        manifests, cfg.model.fbank, dcfg.cache_features, dcfg.min_duration, dcfg.max_duration, repeat))

    model, student, teacher, opt, (step, epoch, index) = _models(cfg, exp, latest, device, train_set)
    ocfg = cfg.optim
    _write_run_files(exp, cfg, tokens)

    def save(at: int, ep: int, ix: int, rec: PretrainStep | None) -> Path:
        info = {"method": PRETRAIN_METHOD, "step": at, "loss": rec.loss if rec else None,
                "target_var": rec.target_var if rec else None, "config": config_dict(cfg)}
        return _save_step(exp, at, model, tokens, {"step": at, "epoch": ep, "train_loss": rec.loss if rec else None,
                                                   "pretrain": info},
                          {"format": STATE_FORMAT, "step": at, "epoch": ep, "batch_index": ix,
                           "optimizer": opt.state_dict(), "teacher": teacher.model.state_dict(),
                           "student": {k: v for k, v in student.state_dict().items()
                                       if not k.startswith("encoder.")}}, cfg.keep_last)

    params = list(student.parameters())

    def take_step(step: int, cpu_batch: Batch, lr: float, chunk: int, left: int, seconds: float) -> PretrainStep:
        batch = cpu_batch.to(device)
        # the trainer's augmentation, with its seeds: the teacher hears the same channel response, the
        # SpecAugment masks are a corruption, so they are the student's only
        feats, student_feats = _augment(batch.feats, cpu_batch.feat_lengths, cfg.spec_augment, cfg.seed, step,
                                        model.encoder.feat_mean.detach(), device)
        mask = _step_masks(cfg, cpu_batch, _step_seed(cfg.seed, step, 4), device)
        parts = pretrain_losses(student, teacher, student_feats, feats, batch.feat_lengths, mask, cfg, chunk, left)
        decay = ema_decay(cfg.ema, step - 1)
        vals, skipped = _update(opt, parts.loss, params, ocfg.grad_clip,
                                [parts.loss, parts.target_var, parts.pred_var, parts.mask_frac], step, log)
        if not skipped:
            teacher.update(model.encoder, decay)
        return PretrainStep(step, *vals, lr=lr, ema_decay=decay, chunk_size=chunk, left_chunks=left,
                            batch_size=batch.size, audio_seconds=seconds, skipped=skipped)

    def log_line(rec: PretrainStep, ep: int, m: dict[str, float], speed: float) -> tuple[str, dict]:
        if m["target_var"] < 1e-3:
            log.warning("step %d: target variance %.2e: the teacher may have collapsed", rec.step, m["target_var"])
        return (f"step {rec.step}/{cfg.steps} loss {m['loss']:.4f} target_var {m['target_var']:.4f} "
                f"pred_var {m['pred_var']:.4f} masked {m['mask_frac']:.2f} ema {rec.ema_decay:.5f} "
                f"lr {rec.lr:.2e} grad {rec.grad_norm:.2f} epoch {ep} {speed:.1f} audio-s/s",
                {"step": rec.step, "epoch": ep, **m, "lr": rec.lr, "ema_decay": rec.ema_decay,
                 "grad_norm": rec.grad_norm, "audio_s_per_s": speed})

    def validate_sets() -> dict[str, Any]:
        per = {name: evaluate(student, teacher, ds, cfg, device) for name, ds in valid_sets.items()}
        return _weighted_means(per, valid_sets, ("loss", "target_var"))

    def report_valid(v: dict[str, Any]) -> None:
        log.info("valid step %d: loss %.4f target_var %.4f", v["step"], v["loss"], v["target_var"])

    student.train()
    return _run_steps(cfg, PretrainResult(step=step, history=[], valid=[], checkpoint=None), (step, epoch, index),
                      train_set, sampler, valid_sets, device, opt, ("loss", "target_var", "pred_var", "mask_frac"),
                      take_step, log_line, validate_sets, report_valid, save, stop, log)
