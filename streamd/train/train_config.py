"""The training run's configuration: data, optimizer, loss, SpecAugment and run sections (``RunConfig``,
shared with pretraining), ``TrainConfig``, and reading it from YAML with overrides."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from ..config import ConfigError, ModelConfig, check_device, load_config, to_dict


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
    """The training data keys of a run config (TrainConfig, PretrainConfig); the model's own keys (e.g. its
    input width against its front end) are checked by :class:`~streamd.config.ModelConfig`."""
    _req(len(cfg.data.train) > 0, "data.train", "at least one training manifest is required")


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
