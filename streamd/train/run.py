"""The run machinery training and pretraining share: the learning-rate schedule, starting or resuming an
experiment folder, the data, the optimizer step (SpecAugment, clipping), checkpoints and their train state,
the step loop with its log."""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import yaml
from torch import Tensor

from ..config import ConfigError, ModelConfig, to_dict
from ..device import resolve_device
from ..model.checkpoint import save_checkpoint
from ..tokens import TokenTable
from .average import checkpoint_path, list_checkpoints
from .data import (AsrDataset, LengthBucketSampler, apply_spec_augment, collate, default_char_tokens, feature_stats,
                   sample_spec_augment, sample_spectral_eq, worker_init)
from .train_config import _req, config_dict, OptimConfig, SpecAugmentConfig, TrainConfig

log = logging.getLogger("streamd.train")


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

def _differing_keys(a: dict, b: dict) -> list[str]:
    """Top-level keys whose values differ between two config dicts (sorted)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


# encoder keys that do not shape its weights: a pretrained encoder may be fine-tuned with other values
