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

import argparse
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
import yaml
from torch import Tensor

from ..device import resolve_device
from ..config import ConfigError, ModelConfig, from_dict, to_dict
from ..tokens import TokenTable
from ..model.checkpoint import CheckpointError, LoadedModel, load_checkpoint, save_checkpoint
from ..model.decoder import grow_context_conv
from ..model.transducer import Transducer
from .average import checkpoint_path, list_checkpoints
from .data import (AsrDataset, Batch, LengthBucketSampler, apply_spec_augment, collate, default_char_tokens,
                   feature_stats, sample_spec_augment, sample_spectral_eq, worker_init)
from .losses import ctc_loss, max_pooling_kws_loss, rnnt_loss

__all__ = ["DataConfig", "OptimConfig", "LossConfig", "SpecAugmentConfig", "TrainConfig", "load_train_config",
           "is_pretrain_checkpoint",
           "LossParts", "compute_losses", "learning_rate", "evaluate", "validate", "StepRecord", "TrainResult", "train", "main"]

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
class TrainConfig:
    """Everything ``streamd train`` needs (see configs/train.yaml for the meaning of each key)."""

    exp_dir: str = "exp/train"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
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
    init_from: str = ""
    freeze: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _req(self.exp_dir != "", "exp_dir", "must not be empty")
        for i, f in enumerate(self.freeze):
            _req(f.strip() != "", f"freeze[{i}]", "must be a parameter name prefix such as 'decoder', got ''")
        _req(len(self.data.train) > 0, "data.train", "at least one training manifest is required")
        _req(self.model.encoder.num_features == self.model.fbank.num_mel_bins, "model.encoder.num_features",
             f"must equal model.fbank.num_mel_bins ({self.model.fbank.num_mel_bins}), "
             f"got {self.model.encoder.num_features}")
        _req(self.loss.ctc == 0 or self.model.ctc_head, "loss.ctc",
             f"weight is {self.loss.ctc} but model.ctc_head is false (set one of them)")
        _req(self.loss.kws == 0 or len(self.model.keywords) > 0, "loss.kws",
             f"weight is {self.loss.kws} but model.keywords is empty (set loss.kws: 0 or add keywords)")
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


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{'.'.join(parts[:i + 1])}: is not a mapping, cannot set {key}")
        node = nxt
    node[parts[-1]] = value


def load_train_config(path: str | Path | None = None, overrides: Sequence[str] = (),
                      resume: bool | None = None) -> TrainConfig:
    """Read a YAML training config, apply ``KEY=VALUE`` overrides (dotted keys, YAML values).

    Unknown keys and bad values raise :class:`ConfigError` naming the key path.
    """
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
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. optim.lr=0.001")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    if resume is not None:
        data["resume"] = resume
    return from_dict(TrainConfig, data)


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


@torch.no_grad()
def evaluate(model: Transducer, dataset: AsrDataset, max_frames: int, weights: LossConfig,
             device: torch.device, num_workers: int = 0) -> dict[str, float]:
    """Utterance-weighted mean losses over ``dataset`` with the model's default streaming chunking."""
    was_training = model.training
    model.eval()
    batches = LengthBucketSampler(dataset.frames, max_frames, shuffle=False).epoch_batches(0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate,
                                         num_workers=num_workers, worker_init_fn=worker_init)
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
    total = sum(len(ds) for ds in sets.values())
    out: dict[str, Any] = {k: sum(per[name][k] * len(ds) for name, ds in sets.items()) / max(total, 1)
                           for k in ("loss", "rnnt", "ctc", "kws")}
    if len(sets) > 1:
        out["sets"] = per
    return out


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
    grow = (diff == ["decoder"] and _differing_keys(have["decoder"], want["decoder"]) == ["context_size"]
            and want["decoder"]["kind"] == "stateless" and want["decoder"]["context_size"] > have["decoder"]["context_size"])
    if diff and not grow:
        raise ConfigError(f"init_from: model in {cfg.init_from} differs from model: (keys {', '.join(diff)})"
                          + ("; of the decoder only a stateless context_size may change, and only grow"
                             if diff == ["decoder"] else ""))
    if src.tokens.tokens != tokens.tokens:
        raise ConfigError(f"init_from: token table of {cfg.init_from} differs from this run's tokens")
    if grow:
        return _grow_decoder_context(src, cfg.model)
    return src


def _grow_decoder_context(src: LoadedModel, mcfg: ModelConfig) -> LoadedModel:
    """``src`` rebuilt with ``mcfg``'s longer stateless decoder context (same function; see grow_context_conv)."""
    model = Transducer(mcfg)
    sd = src.model.state_dict()
    sd["decoder.conv.weight"] = grow_context_conv(sd.get("decoder.conv.weight"), model.decoder.conv.weight.shape)
    model.load_state_dict(sd, strict=True)
    log.info("init_from: decoder context grown from %d to %d tokens (new positions start at zero weight)",
             src.model.cfg.decoder.context_size, mcfg.decoder.context_size)
    return LoadedModel(model=model, tokens=src.tokens, meta=src.meta, path=src.path)


def train(cfg: TrainConfig, stop: Callable[[int], bool] | None = None) -> TrainResult:
    """Train (or resume, with ``cfg.resume``) until ``cfg.steps``.

    stop: called after every step with the step number; returning True saves
    a checkpoint and train state at that step and returns (an orderly
    interruption: ``resume: true`` continues exactly from there).
    """
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
    init = _load_init(cfg, tokens) if cfg.init_from and latest is None else None

    dcfg = cfg.data
    train_set = AsrDataset(dcfg.train, tokens, cfg.model.fbank, cfg.model.keywords, dcfg.cache_features,
                           dcfg.min_duration, dcfg.max_duration, dcfg.repeat)
    if len(train_set) == 0:
        raise ValueError(f"data.train: no usable utterance in {list(dcfg.train)} ({train_set.dropped} outside "
                         f"[{dcfg.min_duration}, {dcfg.max_duration}] s)")
    valid_sets = {m: AsrDataset([m], tokens, cfg.model.fbank, cfg.model.keywords, dcfg.cache_features,
                                dcfg.min_duration, dcfg.max_duration) for m in dcfg.valid}
    sampler = LengthBucketSampler(train_set.frames, dcfg.max_frames, seed=cfg.seed, shuffle=True,
                                  bucket_frames=dcfg.bucket_frames)

    torch.manual_seed(cfg.seed)
    model = Transducer(cfg.model).to(device)
    trainable = _apply_freeze(model, cfg.freeze)
    ocfg = cfg.optim
    opt = torch.optim.AdamW(trainable, lr=ocfg.lr, betas=tuple(ocfg.betas), eps=ocfg.eps,
                            weight_decay=ocfg.weight_decay)
    step, epoch, index = 0, 0, 0
    exp.mkdir(parents=True, exist_ok=True)
    if cfg.resume and latest is not None:
        ck = torch.load(checkpoint_path(exp, latest), map_location="cpu", weights_only=True)
        diff = _differing_keys(ck["model_config"], to_dict(cfg.model))
        if diff:
            raise ConfigError(f"model: differs from the model in {checkpoint_path(exp, latest)} "
                              f"(keys {', '.join(diff)}); resume needs the same model config")
        model.load_state_dict(ck["state_dict"], strict=True)
        st = torch.load(_state_path(exp, latest), map_location=device, weights_only=True)
        opt.load_state_dict(st["optimizer"])
        step, epoch, index = int(st["step"]), int(st["epoch"]), int(st["batch_index"])
        _truncate_log(exp / "log.jsonl", step)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", checkpoint_path(exp, latest), step, epoch, index)
    elif init is not None:
        if is_pretrain_checkpoint(init.meta):  # encoder (and its feature stats) only; the rest starts fresh
            model.encoder.load_state_dict(init.model.encoder.state_dict(), strict=True)
        else:
            model.load_state_dict(init.model.state_dict(), strict=True)
        log.info("initialized %sfrom %s (its step %s); %s parameters; %d training utterances (%d dropped)",
                 "the encoder (pretrained) " if is_pretrain_checkpoint(init.meta) else "", cfg.init_from,
                 init.meta.get("step", "?"), f"{model.num_params():,}", len(train_set), train_set.dropped)
    else:
        rng = np.random.default_rng(cfg.seed)
        n = min(len(train_set), dcfg.stats_utterances)
        idx = np.sort(rng.choice(len(train_set), size=n, replace=False)).tolist()
        mean, std = feature_stats(train_set, idx, dcfg.num_workers)
        model.encoder.feat_mean.copy_(mean.to(device))
        model.encoder.feat_std.copy_(std.to(device))
        log.info("feature stats from %d utterances; %s parameters; %d training utterances (%d dropped)",
                 n, f"{model.num_params():,}", len(train_set), train_set.dropped)
    (exp / "train.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
    tokens.to_file(exp / "tokens.txt")

    def save(at: int, ep: int, ix: int, recent: float | None) -> Path:
        path = checkpoint_path(exp, at)
        save_checkpoint(path, model, tokens, {"step": at, "epoch": ep, "train_loss": recent,
                                              "train_config": to_dict(cfg)})
        tmp = _state_path(exp, at).with_suffix(".tmp")
        torch.save({"format": "streamd-train-state", "step": at, "epoch": ep, "batch_index": ix,
                    "optimizer": opt.state_dict()}, tmp)
        tmp.replace(_state_path(exp, at))
        for old, p in list_checkpoints(exp)[:-cfg.keep_last]:
            p.unlink(missing_ok=True)
            _state_path(exp, old).unlink(missing_ok=True)
        return path

    result = TrainResult(step=step, history=[], valid=[], checkpoint=None)
    if step >= cfg.steps:
        log.info("already at step %d >= steps %d; nothing to do", step, cfg.steps)
        return result

    positions = sampler.iter_from(epoch, index)
    loader = torch.utils.data.DataLoader(
        train_set, batch_sampler=(ix for _, _, ix in sampler.iter_from(epoch, index)), collate_fn=collate,
        num_workers=dcfg.num_workers, worker_init_fn=worker_init, pin_memory=device.type == "cuda")
    progress = _Progress(step, cfg.steps)
    log_file = open(exp / "log.jsonl", "a", encoding="utf-8")
    params = trainable
    clip = ocfg.grad_clip if ocfg.grad_clip > 0 else float("inf")
    window: list[StepRecord] = []
    t_window = time.perf_counter()
    model.train()
    try:
        for (ep, ix, _), cpu_batch in zip(positions, loader):
            step += 1
            lr = learning_rate(ocfg, step, cfg.steps)
            for g in opt.param_groups:
                g["lr"] = lr
            torch.manual_seed(_step_seed(cfg.seed, step, 0))  # dropout
            pick = random.Random(_step_seed(cfg.seed, step, 1))
            chunk = pick.choice(cfg.chunk_sizes)
            left = pick.choice(cfg.left_chunks) if chunk > 0 else -1
            seconds = float(cpu_batch.num_samples.sum()) / cfg.model.fbank.sample_rate
            batch = cpu_batch.to(device)
            sa = cfg.spec_augment
            if sa.enabled:
                gen = torch.Generator().manual_seed(_step_seed(cfg.seed, step, 2))
                if sa.max_eq_db > 0:
                    eq = sample_spectral_eq(batch.feats.shape[0], batch.feats.shape[2], sa.max_eq_db,
                                            torch.Generator().manual_seed(_step_seed(cfg.seed, step, 3)), device)
                    batch.feats = batch.feats + eq[:, None, :]  # (B, T, F) + (B, 1, F)
                masks = sample_spec_augment(cpu_batch.feat_lengths, batch.feats.shape[2], sa.num_time_masks,
                                            sa.max_time_width, sa.max_time_fraction, sa.num_freq_masks,
                                            sa.max_freq_width, gen, device=device)
                batch.feats = apply_spec_augment(batch.feats, masks, model.encoder.feat_mean.detach())
            parts = compute_losses(model, batch, cfg.loss, chunk, left)
            opt.zero_grad(set_to_none=True)
            parts.total.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            vals = torch.stack([parts.total, parts.rnnt, parts.ctc, parts.kws, norm]).detach().tolist()
            skipped = not math.isfinite(vals[4])
            if skipped:
                log.warning("step %d: non-finite gradient norm, update skipped", step)
            else:
                opt.step()
            rec = StepRecord(step, *vals, lr=lr, chunk_size=chunk, left_chunks=left, batch_size=batch.size,
                             audio_seconds=seconds, skipped=skipped)
            result.history.append(rec)
            window.append(rec)
            next_pos = (ep, ix + 1)
            line = None
            if step % cfg.log_every == 0 or step == cfg.steps:
                now = time.perf_counter()
                m = {k: sum(getattr(r, k) for r in window) / len(window) for k in ("loss", "rnnt", "ctc", "kws")}
                speed = sum(r.audio_seconds for r in window) / max(now - t_window, 1e-9)
                line = (f"step {step}/{cfg.steps} loss {m['loss']:.3f} (rnnt {m['rnnt']:.3f} ctc {m['ctc']:.3f} "
                        f"kws {m['kws']:.3f}) lr {lr:.2e} grad {rec.grad_norm:.2f} epoch {ep} "
                        f"{speed:.1f} audio-s/s")
                log_file.write(json.dumps({"step": step, "epoch": ep, **m, "lr": lr, "grad_norm": rec.grad_norm,
                                           "audio_s_per_s": speed}) + "\n")
                log_file.flush()
                window, t_window = [], now
            progress.update(line)
            if valid_sets and cfg.valid_every and step % cfg.valid_every == 0:
                t_valid = time.perf_counter()
                v = {"step": step, **validate(model, valid_sets, dcfg.max_frames, cfg.loss, device,
                                              dcfg.num_workers)}
                t_window += time.perf_counter() - t_valid  # throughput counts training time only
                result.valid.append(v)
                log.info("valid step %d: loss %.3f (rnnt %.3f ctc %.3f kws %.3f)", step, v["loss"], v["rnnt"],
                         v["ctc"], v["kws"])
                for name, sv in v.get("sets", {}).items():
                    log.info("  %s: loss %.3f (rnnt %.3f ctc %.3f kws %.3f)", name, sv["loss"], sv["rnnt"], sv["ctc"],
                             sv["kws"])
                log_file.write(json.dumps({"valid": v}) + "\n")
                log_file.flush()
            stopping = stop is not None and stop(step)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps or stopping:
                result.checkpoint = save(step, next_pos[0], next_pos[1], rec.loss)
            if step >= cfg.steps or stopping:
                break
    finally:
        progress.close()
        log_file.close()
    result.step = step
    return result


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``streamd train --config configs/train.yaml [--resume] [--set KEY=VALUE ...]``."""
    p = argparse.ArgumentParser(prog="streamd train", description="Train a streaming transducer.")
    p.add_argument("--config", required=True, help="training YAML (see configs/train.yaml)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in exp_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set optim.lr=0.001 (repeatable; YAML values)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_train_config(args.config, args.set, resume=True if args.resume else None)
    except (ConfigError, OSError) as e:
        print(f"streamd train: {e}", file=sys.stderr)
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
        res = train(cfg, stop=lambda _step: interrupted.is_set())
    except ConfigError as e:
        print(f"streamd train: {e}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    log.info("stopped at step %d; last checkpoint %s", res.step, res.checkpoint)
    return 130 if interrupted.is_set() else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
