"""Training loop of the streaming transducer.

One step on a batch of B utterances:

1. SpecAugment masks (filled with the feature mean, i.e. 0 after the
   encoder's normalization);
2. encoder forward under a chunk-causal mask with a chunk size and left
   context drawn from ``chunk_sizes`` / ``left_chunks`` (-1: full context),
   so one model serves every streaming latency;
3. loss = ``loss.rnnt * rnnt_loss`` on the full joiner lattice
   ``joiner(enc_p (B, T', 1, J) + dec_p (B, 1, U+1, J)) -> (B, T', U+1, V)``
   ``+ loss.ctc * ctc_loss`` on the CTC head ``+ loss.kws *
   max_pooling_kws_loss`` on the KWS head; each a batch mean of
   per-utterance losses;
4. AdamW with gradient-norm clipping (a step with a non-finite gradient norm
   is skipped) and a warmup + cosine / Noam / constant learning rate.

Determinism and exact resume: every random choice of step ``s`` (chunk size,
SpecAugment, dropout) is seeded from ``(seed, s)``, and batch lists depend
only on ``(seed, epoch)``.  ``checkpoint-<s>.pt`` holds the weights (streamd
checkpoint format, ``weights_only`` loadable) and ``train_state-<s>.pt`` the
optimizer state and data position, so ``resume: true`` continues exactly
where an interrupted run stopped.  At a fresh start the feature mean/std are
measured on a sample of the training set and stored in the encoder's
``feat_mean`` / ``feat_std`` buffers.

The experiment folder also gets ``train.yaml`` (the resolved config),
``tokens.txt`` and ``log.jsonl`` (one JSON record per log line / validation;
a resume drops the records written after the checkpoint it resumes from, whose
steps it takes again).
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import yaml
from torch import Tensor

from ..device import resolve_device
from ..config import ConfigError, ModelConfig, check_device, load_config, to_dict
from ..tokens import TokenTable
from ..model.checkpoint import CheckpointError, LoadedModel, load_checkpoint, save_checkpoint
from ..model.decoder import grow_context_conv
from ..model.encoder import widen_feedforwards
from ..model.transducer import Transducer
from .average import checkpoint_path, list_checkpoints
from .data import (AsrDataset, Batch, LengthBucketSampler, apply_spec_augment, collate, default_char_tokens,
                   feature_stats, sample_spec_augment, sample_spectral_eq, worker_init)
from .losses import ctc_loss, max_pooling_kws_loss, rnnt_loss

__all__ = ["DataConfig", "OptimConfig", "LossConfig", "SpecAugmentConfig", "RunConfig", "TrainConfig", "config_dict",
           "load_train_config",
           "is_pretrain_checkpoint",
           "LossParts", "compute_losses", "learning_rate", "evaluate", "validate", "StepRecord", "TrainResult", "train"]

log = logging.getLogger("streamd.train")


def _req(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class DataConfig:
    """Corpus and batching. Relative paths are relative to the working directory."""

    train: tuple[str, ...] = ()
    valid: tuple[str, ...] = ()
    tokens: str = ""
    max_frames: int = 12000
    bucket_frames: int = 50
    min_duration: float = 0.1
    max_duration: float = 20.0
    cache_features: bool = True
    num_workers: int = 1
    stats_utterances: int = 300
    repeat: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _req(len(self.repeat) in (0, len(self.train)), "repeat",
             f"must list one count per data.train manifest ({len(self.train)}) or be empty, got {list(self.repeat)}")
        for i, r in enumerate(self.repeat):
            _req(r >= 1, f"repeat[{i}]", f"must be >= 1, got {r}")
        _req(self.max_frames >= 1, "max_frames", f"must be >= 1, got {self.max_frames}")
        _req(self.bucket_frames >= 1, "bucket_frames", f"must be >= 1, got {self.bucket_frames}")
        _req(0 <= self.min_duration < self.max_duration, "max_duration",
             f"need 0 <= min_duration < max_duration, got {self.min_duration}, {self.max_duration}")
        _req(self.num_workers >= 0, "num_workers", f"must be >= 0, got {self.num_workers}")
        _req(self.stats_utterances >= 1, "stats_utterances", f"must be >= 1, got {self.stats_utterances}")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and the learning-rate schedule (see :func:`learning_rate`)."""

    lr: float = 2e-3
    schedule: str = "cosine"
    warmup_steps: int = 500
    min_lr: float = 2e-5
    weight_decay: float = 1e-3
    betas: tuple[float, ...] = (0.9, 0.98)
    eps: float = 1e-8
    grad_clip: float = 5.0

    def __post_init__(self) -> None:
        _req(self.lr > 0 and math.isfinite(self.lr), "lr", f"must be > 0, got {self.lr}")
        _req(self.schedule in ("cosine", "noam", "constant"), "schedule",
             f"must be one of ['cosine', 'noam', 'constant'], got {self.schedule!r}")
        _req(self.warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        _req(0 <= self.min_lr <= self.lr, "min_lr", f"must be in [0, lr={self.lr}], got {self.min_lr}")
        _req(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        _req(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas",
             f"must be two numbers in [0, 1), got {list(self.betas)}")
        _req(self.eps > 0, "eps", f"must be > 0, got {self.eps}")
        _req(self.grad_clip >= 0, "grad_clip", f"must be >= 0 (0 = no clipping), got {self.grad_clip}")


@dataclass(frozen=True)
class LossConfig:
    """Loss weights; ``kws_min_duration`` in encoder frames (see max_pooling_kws_loss)."""

    rnnt: float = 1.0
    ctc: float = 0.2
    kws: float = 0.5
    kws_min_duration: int = 0

    def __post_init__(self) -> None:
        for k in ("rnnt", "ctc", "kws"):
            v = getattr(self, k)
            _req(v >= 0 and math.isfinite(v), k, f"must be >= 0, got {v}")
        _req(self.rnnt + self.ctc + self.kws > 0, "rnnt", "at least one loss weight must be > 0")
        _req(self.kws_min_duration >= 0, "kws_min_duration", f"must be >= 0, got {self.kws_min_duration}")


@dataclass(frozen=True)
class SpecAugmentConfig:
    """Time / frequency masking (training only); widths in fbank frames / mel bins.

    ``max_eq_db`` > 0 also adds a random smooth channel response (tilt up to
    +-max_eq_db dB across the band, see :func:`~streamd.train.data.sample_spectral_eq`)
    to each utterance's log-mel features before masking."""

    enabled: bool = True
    num_time_masks: int = 2
    max_time_width: int = 40
    max_time_fraction: float = 0.15
    num_freq_masks: int = 2
    max_freq_width: int = 15
    max_eq_db: float = 0.0

    def __post_init__(self) -> None:
        _req(self.max_eq_db >= 0, "max_eq_db", f"must be >= 0, got {self.max_eq_db}")
        for k in ("num_time_masks", "max_time_width", "num_freq_masks", "max_freq_width"):
            _req(getattr(self, k) >= 0, k, f"must be >= 0, got {getattr(self, k)}")
        _req(0 <= self.max_time_fraction <= 1, "max_time_fraction",
             f"must be in [0, 1], got {self.max_time_fraction}")


@dataclass(frozen=True)
class RunConfig:
    """The run keys ``streamd train`` and ``streamd pretrain`` share: chunking, steps, checkpoints, logging,
    validation, seed, device, threads, resume (checked by :func:`_check_run`)."""

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


def config_dict(cfg: RunConfig) -> dict:
    """``to_dict(cfg)`` with the command's own keys first and the shared run keys after them (the order of
    the written ``train.yaml`` and of a checkpoint's ``meta``)."""
    d = to_dict(cfg)
    run = [f.name for f in fields(RunConfig)]
    return {**{k: v for k, v in d.items() if k not in run}, **{k: d[k] for k in run}}


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """Everything ``streamd train`` needs (see configs/train.yaml for the meaning of each key)."""

    exp_dir: str = "exp/train"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    init_from: str = ""
    freeze: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _req(self.exp_dir != "", "exp_dir", "must not be empty")
        for i, f in enumerate(self.freeze):
            _req(f.strip() != "", f"freeze[{i}]", "must be a parameter name prefix such as 'decoder', got ''")
        _check_input(self)
        _req(self.loss.ctc == 0 or self.model.ctc_head, "loss.ctc",
             f"weight is {self.loss.ctc} but model.ctc_head is false (set one of them)")
        _req(self.loss.kws == 0 or len(self.model.keywords) > 0, "loss.kws",
             f"weight is {self.loss.kws} but model.keywords is empty (set loss.kws: 0 or add keywords)")
        _check_run(self)


def _check_input(cfg: Any) -> None:
    """The training data and model input keys of a run config (TrainConfig, PretrainConfig)."""
    _req(len(cfg.data.train) > 0, "data.train", "at least one training manifest is required")
    _req(cfg.model.encoder.num_features == cfg.model.fbank.num_mel_bins, "model.encoder.num_features",
         f"must equal model.fbank.num_mel_bins ({cfg.model.fbank.num_mel_bins}), "
         f"got {cfg.model.encoder.num_features}")


def _check_run(cfg: Any) -> None:
    """The chunking, step, device and thread keys of a run config (TrainConfig, PretrainConfig)."""
    _req(len(cfg.chunk_sizes) > 0, "chunk_sizes", "must list at least one chunk size")
    for i, c in enumerate(cfg.chunk_sizes):
        _req(c >= 1 or c == -1, f"chunk_sizes[{i}]", f"must be >= 1 or -1 (full context), got {c}")
    _req(len(cfg.left_chunks) > 0, "left_chunks", "must list at least one value")
    for i, c in enumerate(cfg.left_chunks):
        _req(c >= 1 or c == -1, f"left_chunks[{i}]", f"must be >= 1 or -1 (unlimited), got {c}")
    for k in ("steps", "checkpoint_every", "keep_last", "log_every"):
        _req(getattr(cfg, k) >= 1, k, f"must be >= 1, got {getattr(cfg, k)}")
    _req(cfg.valid_every >= 0, "valid_every", f"must be >= 0 (0 = never), got {cfg.valid_every}")
    check_device(cfg.device)
    _req(cfg.num_threads >= 0, "num_threads", f"must be >= 0 (0 = torch default), got {cfg.num_threads}")


def load_train_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                      resume: bool | None = None) -> TrainConfig:
    """Read a YAML training config, apply ``KEY=VALUE`` overrides (dotted keys, YAML values).

    Unknown keys and bad values raise :class:`ConfigError` naming the key path.
    """
    return load_config(TrainConfig, path, overrides, "optim.lr=0.001", _resume_value(resume))


def _resume_value(resume: bool | None) -> dict:
    """The ``resume`` key a ``--resume`` flag sets (None: the config's own)."""
    return {} if resume is None else {"resume": resume}


# --------------------------------------------------------------------------- loss and schedule


@dataclass
class LossParts:
    """Scalar losses (batch means of per-utterance losses); unused parts are 0."""

    total: Tensor
    rnnt: Tensor
    ctc: Tensor
    kws: Tensor


def compute_losses(model: Transducer, batch: Batch, weights: LossConfig, chunk_size: int,
                   left_chunks: int) -> LossParts:
    """Forward ``batch`` (on the model's device) and return the weighted loss and its parts.

    chunk_size: encoder frames per attention chunk (-1: full context);
    left_chunks: attention left context in chunks (-1: unlimited).
    """
    enc, enc_len = model.encoder(batch.feats, batch.feat_lengths, chunk_size=chunk_size,
                                 left_chunks=left_chunks)  # (B, T', D), (B,)
    heads = model.heads(enc)
    zero = enc.new_zeros(())
    blank = model.blank_id
    rnnt = ctc = kws = zero
    if weights.rnnt > 0:
        dec_p = model.decoder_proj(model.decoder(batch.targets))  # (B, U+1, J)
        logits = model.joiner(heads.enc_p[:, :, None, :], dec_p[:, None, :, :])  # (B, T', U+1, V)
        rnnt = rnnt_loss(logits, batch.targets, enc_len, batch.target_lengths, blank=blank)
    if weights.ctc > 0:
        ctc = ctc_loss(heads.ctc_log_probs, batch.targets, enc_len, batch.target_lengths, blank=blank)
    if weights.kws > 0:
        kws = max_pooling_kws_loss(heads.kws_probs, batch.kws_target, enc_len, weights.kws_min_duration)
    total = weights.rnnt * rnnt + weights.ctc * ctc + weights.kws * kws
    return LossParts(total, rnnt, ctc, kws)


def learning_rate(cfg: OptimConfig, step: int, total_steps: int) -> float:
    """Learning rate of (1-based) ``step``.

    Linear warmup to ``lr`` over ``warmup_steps``, then ``cosine`` decay to
    ``min_lr`` at ``total_steps``, ``noam`` decay ``lr * sqrt(warmup / step)``
    (floored at ``min_lr``), or ``constant``.
    """
    w = cfg.warmup_steps
    if w and step <= w:
        return cfg.lr * step / w
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "noam":
        return max(cfg.min_lr, cfg.lr * math.sqrt(max(w, 1) / step))
    frac = min(1.0, (step - w) / max(1, total_steps - w))
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))


def _step_seed(seed: int, step: int, stream: int) -> int:
    """Independent 63-bit seed for random stream ``stream`` of ``step``."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1, np.uint64)[0] >> np.uint64(1))


# --------------------------------------------------------------------------- loop


@dataclass
class StepRecord:
    """Host-side values of one optimizer step (losses are batch means)."""

    step: int
    loss: float
    rnnt: float
    ctc: float
    kws: float
    grad_norm: float
    lr: float
    chunk_size: int
    left_chunks: int
    batch_size: int
    audio_seconds: float
    skipped: bool


@dataclass
class TrainResult:
    """What :func:`train` did in this call."""

    step: int
    history: list[StepRecord]
    valid: list[dict]
    checkpoint: Path | None


def _state_path(exp_dir: Path, step: int) -> Path:
    return exp_dir / f"train_state-{step}.pt"


def _truncate_log(path: Path, step: int) -> None:
    """Drop the records of ``path`` (log.jsonl) written after ``step``: the steps an interrupted run took past
    its last checkpoint are retrained on resume, so the log keeps one record per step and reads as one run.
    A line the interruption cut short (not valid JSON) goes too."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("valid", rec).get("step", 0) <= step:
            keep.append(line + "\n")
    path.write_text("".join(keep), encoding="utf-8")


def _latest_complete(exp_dir: Path) -> int | None:
    steps = [s for s, _ in list_checkpoints(exp_dir) if _state_path(exp_dir, s).is_file()]
    return steps[-1] if steps else None


def _load_tokens(cfg: TrainConfig) -> TokenTable:
    if cfg.data.tokens:
        tokens = TokenTable.from_file(cfg.data.tokens, blank_id=cfg.model.blank_id)
    else:
        tokens = TokenTable(default_char_tokens(), blank_id=cfg.model.blank_id)
    _req(len(tokens) == cfg.model.vocab_size, "model.vocab_size",
         f"is {cfg.model.vocab_size} but the token table "
         f"({cfg.data.tokens or 'default_char_tokens()'}) has {len(tokens)} tokens")
    return tokens


class _Progress:
    """tqdm bar when installed and stderr is a terminal, else periodic log lines."""

    def __init__(self, start: int, total: int) -> None:
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, line: str | None) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if line:
                self.bar.set_postfix_str(line)
        elif line:
            log.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# The run machinery below is shared by :func:`train` and :func:`streamd.train.pretrain.pretrain`: ``cfg`` is a
# TrainConfig or a PretrainConfig (the keys :func:`_check_run` checks, ``data``, ``optim``, ``spec_augment``,
# ``model``, ``seed``, ``exp_dir``, ``resume``), ``logger`` the calling command's.


def _start_run(cfg: Any) -> tuple[torch.device, TokenTable, Path, int | None]:
    """Threads, device, token table and experiment folder of a run: ``(device, tokens, exp_dir, latest)``,
    ``latest`` the step to resume from (None: a fresh start). ConfigError for a folder that holds checkpoints
    unless resuming, or none of whose checkpoints can be resumed."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    try:
        device = resolve_device(cfg.device)
    except RuntimeError as e:
        raise ConfigError(f"device: {e}") from None
    tokens = _load_tokens(cfg)
    exp = Path(cfg.exp_dir)
    existing = list_checkpoints(exp)
    latest = _latest_complete(exp)
    if existing and not cfg.resume:
        raise ConfigError(f"exp_dir: {exp} holds checkpoints (latest step {existing[-1][0]}); set "
                          "resume: true (or pass --resume) to continue, or choose an empty exp_dir")
    if existing and latest is None:
        raise ConfigError(f"exp_dir: cannot resume, no checkpoint in {exp} has its train_state-<step>.pt "
                          "(optimizer state); choose an empty exp_dir")
    return device, tokens, exp, latest


def _run_data(cfg: Any, dataset: Callable[[Sequence[str], Sequence[int]], AsrDataset]
              ) -> tuple[AsrDataset, dict[str, AsrDataset], LengthBucketSampler]:
    """Training set (``dataset(manifests, repeat)``; ValueError when empty), validation sets by manifest and the
    training batch sampler."""
    dcfg = cfg.data
    train_set = dataset(dcfg.train, dcfg.repeat)
    if len(train_set) == 0:
        raise ValueError(f"data.train: no usable utterance in {list(dcfg.train)} ({train_set.dropped} outside "
                         f"[{dcfg.min_duration}, {dcfg.max_duration}] s)")
    valid_sets = {m: dataset([m], ()) for m in dcfg.valid}
    sampler = LengthBucketSampler(train_set.frames, dcfg.max_frames, seed=cfg.seed, shuffle=True,
                                  bucket_frames=dcfg.bucket_frames)
    return train_set, valid_sets, sampler


def _adamw(params: Any, ocfg: OptimConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=ocfg.lr, betas=tuple(ocfg.betas), eps=ocfg.eps,
                             weight_decay=ocfg.weight_decay)


def _resume(exp: Path, latest: int, model: torch.nn.Module, model_cfg: ModelConfig, device: torch.device,
            check_state: Callable[[dict], None] | None = None) -> dict:
    """Load checkpoint ``latest`` of ``exp`` into ``model`` (ConfigError unless its model config is
    ``model_cfg``) and return its train state (``check_state`` may refuse it first)."""
    ck = torch.load(checkpoint_path(exp, latest), map_location="cpu", weights_only=True)
    diff = _differing_keys(ck["model_config"], to_dict(model_cfg))
    if diff:
        raise ConfigError(f"model: differs from the model in {checkpoint_path(exp, latest)} "
                          f"(keys {', '.join(diff)}); resume needs the same model config")
    state = torch.load(_state_path(exp, latest), map_location=device, weights_only=True)
    if check_state is not None:
        check_state(state)
    model.load_state_dict(ck["state_dict"], strict=True)
    return state


def _resume_position(state: dict, exp: Path, latest: int, logger: logging.Logger) -> tuple[int, int, int]:
    """``(step, epoch, batch index)`` of a resumed train state; drops the log records past its step."""
    step, epoch, index = int(state["step"]), int(state["epoch"]), int(state["batch_index"])
    _truncate_log(exp / "log.jsonl", step)
    logger.info("resumed from %s at step %d (epoch %d, batch %d)", checkpoint_path(exp, latest), step, epoch, index)
    return step, epoch, index


def _measure_feature_stats(encoder: torch.nn.Module, train_set: AsrDataset, cfg: Any, device: torch.device) -> int:
    """Set the encoder's ``feat_mean`` / ``feat_std`` from a seeded sample of the training set; its size."""
    rng = np.random.default_rng(cfg.seed)
    n = min(len(train_set), cfg.data.stats_utterances)
    idx = np.sort(rng.choice(len(train_set), size=n, replace=False)).tolist()
    mean, std = feature_stats(train_set, idx, cfg.data.num_workers)
    encoder.feat_mean.copy_(mean.to(device))
    encoder.feat_std.copy_(std.to(device))
    return n


def _write_run_files(exp: Path, cfg: Any, tokens: TokenTable) -> None:
    """``train.yaml`` (the resolved config) and ``tokens.txt`` of the experiment folder."""
    (exp / "train.yaml").write_text(yaml.safe_dump(config_dict(cfg), sort_keys=False), encoding="utf-8")
    tokens.to_file(exp / "tokens.txt")


def _save_step(exp: Path, at: int, model: torch.nn.Module, tokens: TokenTable, meta: dict, state: dict,
               keep_last: int) -> Path:
    """Checkpoint and train state of step ``at`` (the state written atomically), then only the last
    ``keep_last`` of each kept; the checkpoint's path."""
    path = checkpoint_path(exp, at)
    save_checkpoint(path, model, tokens, meta)
    tmp = _state_path(exp, at).with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(_state_path(exp, at))
    for old, p in list_checkpoints(exp)[:-keep_last]:
        p.unlink(missing_ok=True)
        _state_path(exp, old).unlink(missing_ok=True)
    return path


def _eval_loader(dataset: AsrDataset, max_frames: int, num_workers: int) -> torch.utils.data.DataLoader:
    """``dataset`` in length buckets, in order (validation)."""
    batches = LengthBucketSampler(dataset.frames, max_frames, shuffle=False).epoch_batches(0)
    return torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate,
                                       num_workers=num_workers, worker_init_fn=worker_init)


def _start_step(opt: torch.optim.Optimizer, cfg: Any, step: int) -> tuple[float, int, int]:
    """Set step ``step``'s learning rate and dropout seed and draw its chunking: ``(lr, chunk, left)``."""
    lr = learning_rate(cfg.optim, step, cfg.steps)
    for g in opt.param_groups:
        g["lr"] = lr
    torch.manual_seed(_step_seed(cfg.seed, step, 0))  # dropout
    pick = random.Random(_step_seed(cfg.seed, step, 1))
    chunk = pick.choice(cfg.chunk_sizes)
    left = pick.choice(cfg.left_chunks) if chunk > 0 else -1
    return lr, chunk, left


def _augment(feats: Tensor, feat_lengths: Tensor, sa: SpecAugmentConfig, seed: int, step: int, fill: Tensor,
             device: torch.device) -> tuple[Tensor, Tensor]:
    """Step ``step``'s augmentation of ``feats`` (B, T, F): ``(with the random channel response, with the
    SpecAugment masks too)``, masked frames and bins set to ``fill``; both ``feats`` when disabled."""
    if not sa.enabled:
        return feats, feats
    gen = torch.Generator().manual_seed(_step_seed(seed, step, 2))
    if sa.max_eq_db > 0:
        eq = sample_spectral_eq(feats.shape[0], feats.shape[2], sa.max_eq_db,
                                torch.Generator().manual_seed(_step_seed(seed, step, 3)), device)
        feats = feats + eq[:, None, :]  # (B, T, F) + (B, 1, F)
    masks = sample_spec_augment(feat_lengths, feats.shape[2], sa.num_time_masks, sa.max_time_width,
                                sa.max_time_fraction, sa.num_freq_masks, sa.max_freq_width, gen, device=device)
    return feats, apply_spec_augment(feats, masks, fill)


def _update(opt: torch.optim.Optimizer, loss: Tensor, params: Sequence[torch.nn.Parameter], grad_clip: float,
            values: Sequence[Tensor], step: int, logger: logging.Logger) -> tuple[list[float], bool]:
    """Backward ``loss``, clip the gradient norm at ``grad_clip`` (0: no clipping) and step (skipped when the
    norm is not finite): ``(values + [norm] as floats, skipped)``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    vals = torch.stack([*values, norm]).detach().tolist()
    skipped = not math.isfinite(vals[-1])
    if skipped:
        logger.warning("step %d: non-finite gradient norm, update skipped", step)
    else:
        opt.step()
    return vals, skipped


def _weighted_means(per: dict[str, dict[str, float]], sets: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """Utterance-weighted means of ``keys`` over the sets' results ``per`` and, with more than one set, each
    one's under ``sets``."""
    total = sum(len(ds) for ds in sets.values())
    out: dict[str, Any] = {k: sum(per[name][k] * len(ds) for name, ds in sets.items()) / max(total, 1) for k in keys}
    if len(sets) > 1:
        out["sets"] = per
    return out


def _run_steps(cfg: Any, result: Any, position: tuple[int, int, int], train_set: AsrDataset,
               sampler: LengthBucketSampler, valid_sets: dict[str, AsrDataset], device: torch.device,
               opt: torch.optim.Optimizer, keys: Sequence[str], take_step: Callable[..., Any],
               log_line: Callable[[Any, int, dict[str, float], float], tuple[str, dict]],
               validate_sets: Callable[[], dict[str, Any]], report_valid: Callable[[dict[str, Any]], None],
               save: Callable[[int, int, int, Any], Path], stop: Callable[[int], bool] | None,
               logger: logging.Logger) -> Any:
    """The step loop of a run from data position ``(step, epoch, batch index)`` to ``cfg.steps``, into ``result``
    (``history``, ``valid``, ``checkpoint``, ``step``).

    Per step: learning rate, seeds and chunking (:func:`_start_step`), then ``take_step(step, cpu_batch, lr,
    chunk, left, audio_seconds)`` -> its record (with ``audio_seconds`` and the ``keys``); every ``log_every``
    steps ``log_line(record, epoch, means of keys over the window, audio-s/s)`` -> (progress line, log.jsonl
    record); every ``valid_every`` steps ``validate_sets()`` -> the validation figures, logged by
    ``report_valid({"step": step, ...})`` and in log.jsonl; ``save(step, epoch, next batch index, record)`` at
    checkpoints, the last step and when ``stop(step)`` says so (then the loop ends)."""
    step, epoch, index = position
    if step >= cfg.steps:
        logger.info("already at step %d >= steps %d; nothing to do", step, cfg.steps)
        return result
    positions = sampler.iter_from(epoch, index)
    loader = torch.utils.data.DataLoader(
        train_set, batch_sampler=(ix for _, _, ix in sampler.iter_from(epoch, index)), collate_fn=collate,
        num_workers=cfg.data.num_workers, worker_init_fn=worker_init, pin_memory=device.type == "cuda")
    progress = _Progress(step, cfg.steps)
    log_file = open(Path(cfg.exp_dir) / "log.jsonl", "a", encoding="utf-8")

    def write(record: dict) -> None:
        log_file.write(json.dumps(record) + "\n")
        log_file.flush()

    window: list[Any] = []
    t_window = time.perf_counter()
    try:
        for (ep, ix, _), cpu_batch in zip(positions, loader):
            step += 1
            seconds = float(cpu_batch.num_samples.sum()) / cfg.model.fbank.sample_rate
            rec = take_step(step, cpu_batch, *_start_step(opt, cfg, step), seconds)
            result.history.append(rec)
            window.append(rec)
            line = None
            if step % cfg.log_every == 0 or step == cfg.steps:
                now = time.perf_counter()
                m = {k: sum(getattr(r, k) for r in window) / len(window) for k in keys}
                speed = sum(r.audio_seconds for r in window) / max(now - t_window, 1e-9)
                line, record = log_line(rec, ep, m, speed)
                write(record)
                window, t_window = [], now
            progress.update(line)
            if valid_sets and cfg.valid_every and step % cfg.valid_every == 0:
                t_valid = time.perf_counter()
                v = {"step": step, **validate_sets()}
                t_window += time.perf_counter() - t_valid  # throughput counts training time only
                result.valid.append(v)
                report_valid(v)
                write({"valid": v})
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


@torch.no_grad()
def evaluate(model: Transducer, dataset: AsrDataset, max_frames: int, weights: LossConfig,
             device: torch.device, num_workers: int = 0) -> dict[str, float]:
    """Utterance-weighted mean losses over ``dataset`` with the model's default streaming chunking."""
    was_training = model.training
    model.eval()
    loader = _eval_loader(dataset, max_frames, num_workers)
    enc_cfg = model.cfg.encoder
    sums = torch.zeros(4, dtype=torch.float64, device=device)
    n = 0
    for batch in loader:
        batch = batch.to(device)
        p = compute_losses(model, batch, weights, enc_cfg.chunk_size, enc_cfg.left_chunks)
        sums += torch.stack([p.total, p.rnnt, p.ctc, p.kws]).double() * batch.size
        n += batch.size
    model.train(was_training)
    vals = (sums / max(n, 1)).tolist()
    return dict(zip(("loss", "rnnt", "ctc", "kws"), vals))


def validate(model: Transducer, sets: dict[str, AsrDataset], max_frames: int, weights: LossConfig,
             device: torch.device, num_workers: int = 0) -> dict[str, Any]:
    """:func:`evaluate` on each validation manifest: the utterance-weighted means over all of them (``loss``,
    ``rnnt``, ``ctc``, ``kws``) and, with more than one manifest, each one's under ``sets`` (by its path), so a
    mix of synthetic and real validation data shows where a change helps."""
    per = {name: evaluate(model, ds, max_frames, weights, device, num_workers) for name, ds in sets.items()}
    return _weighted_means(per, sets, ("loss", "rnnt", "ctc", "kws"))


def _apply_freeze(model: Transducer, prefixes: Sequence[str]) -> list[torch.nn.Parameter]:
    """Freeze every parameter whose name starts with one of ``prefixes`` (e.g. ``decoder``, ``joiner``: adapt
    the encoder with the prediction network fixed); returns the trainable parameters. A prefix that names no
    parameter is a :class:`ConfigError` listing the top-level modules."""
    names = [n for n, _ in model.named_parameters()]
    for i, pre in enumerate(prefixes):
        if not any(n == pre or n.startswith(pre + ".") for n in names):
            tops = sorted({n.split(".")[0] for n in names})
            raise ConfigError(f"freeze[{i}]: {pre!r} names no parameter (modules: {', '.join(tops)})")
    trainable = []
    for n, p in model.named_parameters():
        frozen = any(n == pre or n.startswith(pre + ".") for pre in prefixes)
        p.requires_grad_(not frozen)
        if not frozen:
            trainable.append(p)
    if not trainable:
        raise ConfigError("freeze: every parameter is frozen; nothing would train")
    if prefixes:
        log.info("frozen: %s (%d of %d parameters train)", ", ".join(prefixes), sum(p.numel() for p in trainable),
                 sum(p.numel() for p in model.parameters()))
    return trainable


def _differing_keys(a: dict, b: dict) -> list[str]:
    """Top-level keys whose values differ between two config dicts (sorted)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


# encoder keys that do not shape its weights: a pretrained encoder may be fine-tuned with other values
_PRETRAIN_FREE_ENCODER_KEYS = ("chunk_size", "left_chunks", "dropout")


def is_pretrain_checkpoint(meta: dict) -> bool:
    """True for a ``streamd pretrain`` checkpoint (its meta holds a ``pretrain`` mapping): only its encoder
    (with its feature mean/std) is meant to be reused; its prediction network and joiner are placeholders."""
    return isinstance(meta.get("pretrain"), dict)


def _check_pretrained_encoder(src: LoadedModel, cfg: TrainConfig) -> None:
    """Refuse (naming the keys) a pretrained encoder whose architecture or fbank differs from ``cfg.model``."""
    have, want = to_dict(src.model.cfg), to_dict(cfg.model)
    diff = [f"model.fbank.{k}" for k in _differing_keys(have["fbank"], want["fbank"])]
    diff += [f"model.encoder.{k}" for k in _differing_keys(have["encoder"], want["encoder"])
             if k not in _PRETRAIN_FREE_ENCODER_KEYS]
    if diff:
        got = "; ".join(f"{k}: {_dotted(have, k)!r} there, {_dotted(want, k)!r} here" for k in diff)
        raise ConfigError(f"init_from: the pretrained encoder in {cfg.init_from} differs from this model ({got}); "
                          "only encoder chunk_size, left_chunks and dropout may change")


def _dotted(d: dict, key: str) -> Any:
    for part in key.split(".")[1:]:
        d = d[part]
    return d


def _load_init(cfg: TrainConfig, tokens: TokenTable) -> LoadedModel:
    """The ``init_from`` checkpoint, refused (naming the key) unless its model and tokens match ``cfg``
    (for a pretrain checkpoint: its encoder and fbank only, see :func:`is_pretrain_checkpoint`)."""
    try:
        src = load_checkpoint(cfg.init_from)
    except CheckpointError as e:
        raise ConfigError(f"init_from: {e}") from None
    if is_pretrain_checkpoint(src.meta):
        _check_pretrained_encoder(src, cfg)
        return src
    have, want = to_dict(src.model.cfg), to_dict(cfg.model)
    diff = _differing_keys(have, want)
    grow_context = ("decoder" in diff and _differing_keys(have["decoder"], want["decoder"]) == ["context_size"]
                    and want["decoder"]["kind"] == "stateless"
                    and want["decoder"]["context_size"] > have["decoder"]["context_size"])
    grow_ff = ("encoder" in diff and _differing_keys(have["encoder"], want["encoder"]) == ["ff_dim"]
               and want["encoder"]["ff_dim"] > have["encoder"]["ff_dim"])
    left = [k for k in diff if not (k == "decoder" and grow_context or k == "encoder" and grow_ff)]
    if left:
        raise ConfigError(f"init_from: model in {cfg.init_from} differs from model: (keys {', '.join(left)})"
                          "; only a stateless decoder's context_size and the encoder's ff_dim may change, "
                          "and only grow")
    if src.tokens.tokens != tokens.tokens:
        raise ConfigError(f"init_from: token table of {cfg.init_from} differs from this run's tokens")
    if grow_context or grow_ff:
        return _grown(src, cfg.model, grow_ff, cfg.seed)
    return src


def _grown(src: LoadedModel, mcfg: ModelConfig, widen: bool, seed: int) -> LoadedModel:
    """``src`` rebuilt with ``mcfg``'s longer stateless decoder context (:func:`grow_context_conv`) and / or
    wider encoder feed-forwards (:func:`widen_feedforwards`, its new units drawn with ``seed``): the same
    function, more room to learn."""
    model = Transducer(mcfg)
    sd = src.model.state_dict()
    old_ctx, old_ff = src.model.cfg.decoder.context_size, src.model.cfg.encoder.ff_dim
    if mcfg.decoder.context_size != old_ctx:
        sd["decoder.conv.weight"] = grow_context_conv(sd.get("decoder.conv.weight"), model.decoder.conv.weight.shape)
        log.info("init_from: decoder context grown from %d to %d tokens (new positions start at zero weight)",
                 old_ctx, mcfg.decoder.context_size)
    if widen:
        sd = widen_feedforwards(sd, mcfg.encoder.ff_dim, torch.Generator().manual_seed(seed))
        log.info("init_from: encoder feed-forwards widened from %d to %d units (new units start at zero output "
                 "weight)", old_ff, mcfg.encoder.ff_dim)
    model.load_state_dict(sd, strict=True)
    return LoadedModel(model=model, tokens=src.tokens, meta=src.meta, path=src.path)


def train(cfg: TrainConfig, stop: Callable[[int], bool] | None = None) -> TrainResult:
    """Train (or resume, with ``cfg.resume``) until ``cfg.steps``.

    stop: called after every step with the step number; returning True saves
    a checkpoint and train state at that step and returns (an orderly
    interruption: ``resume: true`` continues exactly from there).
    """
    device, tokens, exp, latest = _start_run(cfg)
    init = _load_init(cfg, tokens) if cfg.init_from and latest is None else None

    dcfg = cfg.data
    train_set, valid_sets, sampler = _run_data(cfg, lambda manifests, repeat: AsrDataset(
        manifests, tokens, cfg.model.fbank, cfg.model.keywords, dcfg.cache_features, dcfg.min_duration,
        dcfg.max_duration, repeat))

    torch.manual_seed(cfg.seed)
    model = Transducer(cfg.model).to(device)
    trainable = _apply_freeze(model, cfg.freeze)
    ocfg = cfg.optim
    opt = _adamw(trainable, ocfg)
    step, epoch, index = 0, 0, 0
    exp.mkdir(parents=True, exist_ok=True)
    if cfg.resume and latest is not None:
        st = _resume(exp, latest, model, cfg.model, device)
        opt.load_state_dict(st["optimizer"])
        step, epoch, index = _resume_position(st, exp, latest, log)
    elif init is not None:
        if is_pretrain_checkpoint(init.meta):  # encoder (and its feature stats) only; the rest starts fresh
            model.encoder.load_state_dict(init.model.encoder.state_dict(), strict=True)
        else:
            model.load_state_dict(init.model.state_dict(), strict=True)
        log.info("initialized %sfrom %s (its step %s); %s parameters; %d training utterances (%d dropped)",
                 "the encoder (pretrained) " if is_pretrain_checkpoint(init.meta) else "", cfg.init_from,
                 init.meta.get("step", "?"), f"{model.num_params():,}", len(train_set), train_set.dropped)
    else:
        n = _measure_feature_stats(model.encoder, train_set, cfg, device)
        log.info("feature stats from %d utterances; %s parameters; %d training utterances (%d dropped)",
                 n, f"{model.num_params():,}", len(train_set), train_set.dropped)
    _write_run_files(exp, cfg, tokens)

    def save(at: int, ep: int, ix: int, recent: float | None) -> Path:
        return _save_step(exp, at, model, tokens, {"step": at, "epoch": ep, "train_loss": recent,
                                                   "train_config": config_dict(cfg)},
                          {"format": "streamd-train-state", "step": at, "epoch": ep, "batch_index": ix,
                           "optimizer": opt.state_dict()}, cfg.keep_last)

    def take_step(step: int, cpu_batch: Batch, lr: float, chunk: int, left: int, seconds: float) -> StepRecord:
        batch = cpu_batch.to(device)
        _, batch.feats = _augment(batch.feats, cpu_batch.feat_lengths, cfg.spec_augment, cfg.seed, step,
                                  model.encoder.feat_mean.detach(), device)
        parts = compute_losses(model, batch, cfg.loss, chunk, left)
        vals, skipped = _update(opt, parts.total, trainable, ocfg.grad_clip,
                                [parts.total, parts.rnnt, parts.ctc, parts.kws], step, log)
        return StepRecord(step, *vals, lr=lr, chunk_size=chunk, left_chunks=left, batch_size=batch.size,
                          audio_seconds=seconds, skipped=skipped)

    def log_line(rec: StepRecord, ep: int, m: dict[str, float], speed: float) -> tuple[str, dict]:
        return (f"step {rec.step}/{cfg.steps} loss {m['loss']:.3f} (rnnt {m['rnnt']:.3f} ctc {m['ctc']:.3f} "
                f"kws {m['kws']:.3f}) lr {rec.lr:.2e} grad {rec.grad_norm:.2f} epoch {ep} {speed:.1f} audio-s/s",
                {"step": rec.step, "epoch": ep, **m, "lr": rec.lr, "grad_norm": rec.grad_norm,
                 "audio_s_per_s": speed})

    def report_valid(v: dict[str, Any]) -> None:
        log.info("valid step %d: loss %.3f (rnnt %.3f ctc %.3f kws %.3f)", v["step"], v["loss"], v["rnnt"],
                 v["ctc"], v["kws"])
        for name, sv in v.get("sets", {}).items():
            log.info("  %s: loss %.3f (rnnt %.3f ctc %.3f kws %.3f)", name, sv["loss"], sv["rnnt"], sv["ctc"],
                     sv["kws"])

    model.train()
    return _run_steps(cfg, TrainResult(step=step, history=[], valid=[], checkpoint=None), (step, epoch, index),
                      train_set, sampler, valid_sets, device, opt, ("loss", "rnnt", "ctc", "kws"), take_step,
                      log_line, lambda: validate(model, valid_sets, dcfg.max_frames, cfg.loss, device,
                                                 dcfg.num_workers),
                      report_valid, lambda at, ep, ix, rec: save(at, ep, ix, rec.loss), stop, log)
