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

The configuration is :mod:`.train_config`, the run machinery training shares with pretraining
(:mod:`streamd.train.pretrain`) is :mod:`.run`; this module holds the losses, validation, the model's
initialization (pretrained encoder, grown or widened checkpoints) and :func:`train`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from ..config import ConfigError, ModelConfig, to_dict
from ..model.checkpoint import CheckpointError, LoadedModel, load_checkpoint
from ..model.decoder import grow_context_conv
from ..model.encoder import widen_feedforwards
from ..model.transducer import Transducer
from ..tokens import TokenTable
from .data import AsrDataset, Batch
from .losses import ctc_loss, max_pooling_kws_loss, rnnt_loss
from .run import (_adamw, _augment, _differing_keys, _eval_loader, learning_rate, _measure_feature_stats, _resume,
                  _resume_position, _run_data, _run_steps, _save_step, _start_run, StepRecord, TrainResult, _update,
                  _weighted_means, _write_run_files)
from .train_config import (DataConfig, LossConfig, OptimConfig, RunConfig, SpecAugmentConfig, TrainConfig,
                           config_dict, load_train_config)

__all__ = ["DataConfig", "OptimConfig", "LossConfig", "SpecAugmentConfig", "RunConfig", "TrainConfig", "config_dict",
           "load_train_config",
           "is_pretrain_checkpoint",
           "LossParts", "compute_losses", "learning_rate", "evaluate", "validate", "StepRecord", "TrainResult", "train"]

log = logging.getLogger("streamd.train")


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
