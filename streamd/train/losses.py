"""Training losses: RNN-T (transducer), CTC and wake-word max-pooling.

RNN-T (Graves 2012), pure PyTorch
---------------------------------
``logits[b, t, u]`` is the joint-network output after ``u`` target tokens at
encoder frame ``t``.  After a log-softmax over the vocabulary we keep two
lattices:

* ``blank_lp[b, t, u] = log p(blank | t, u)``            (B, T, U+1)
* ``label_lp[b, t, u] = log p(targets[b, u] | t, u)``    (B, T, U)

A path starts at (0, 0); a blank moves (t, u) -> (t+1, u), a label moves
(t, u) -> (t, u+1); it ends with the blank emitted at (T_b-1, U_b).  The
forward variable

    alpha[t, u] = logaddexp(alpha[t-1, u] + blank_lp[t-1, u],
                            alpha[t, u-1] + label_lp[t, u-1])

is computed with a Python loop over T only.  Within one row the recursion
over u is linear in the probability domain and unrolls to

    alpha[t, u] = Y[t, u] + logcumsumexp_{k<=u}(alpha[t-1, k] + blank_lp[t-1, k] - Y[t, k])

with ``Y[t, u] = sum_{j<u} label_lp[t, j]`` (a cumsum), so each row is one
vectorised ``logcumsumexp`` over u for all utterances at once.  Row 0 is just
``alpha[0, u] = Y[0, u]`` (only label moves reach it), so no ``-inf`` ever
enters the recursion.  Lattice log-probs are floored at ``LOG_PROB_FLOOR``
(a ``-inf`` from a masked vocabulary entry would otherwise give
``-inf - -inf = nan`` in ``Y[t, u] - Y[t, k]``); ``exp(LOG_PROB_FLOOR)`` is
zero even in float64, so this changes nothing finite.  Half-precision inputs
are computed in float32.  Lattice entries beyond an utterance's own lengths
are replaced by 0 with ``torch.where``, so padding (even non-finite) has no
effect on the loss nor on the gradient of valid entries.
The loss of utterance b is ``-(alpha[T_b-1, U_b] + blank_lp[T_b-1, U_b])``;
autograd provides the gradient.

Reductions (all losses here): ``"none"`` -> (B,) per-utterance losses,
``"sum"`` -> their sum, ``"mean"`` -> their mean over the batch (NOT divided
by target lengths; this differs from ``torch.nn.functional.ctc_loss``'s
``"mean"``).

Input checks (shapes, length ranges, token ranges) synchronise with the host
once per call, never per frame.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LOG_PROB_FLOOR",
    "REDUCTIONS",
    "rnnt_lattice_log_probs",
    "rnnt_loss",
    "rnnt_loss_simple_lattice",
    "ctc_loss",
    "max_pooling_kws_loss",
]

LOG_PROB_FLOOR = -1000.0
REDUCTIONS = ("mean", "sum", "none")


# --------------------------------------------------------------------------- checks
def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")


def _reduce(losses: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.mean()


def _check_lengths(name: str, lengths: Tensor, batch: int, lo: int, hi: int, hi_name: str) -> None:
    if not isinstance(lengths, Tensor) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got {getattr(lengths, 'dtype', type(lengths))}")
    if lengths.shape != (batch,):
        raise ValueError(f"{name} must have shape ({batch},) (batch size), got {tuple(lengths.shape)}")
    if batch and bool(((lengths < lo) | (lengths > hi)).any()):
        raise ValueError(f"{name} must lie in [{lo}, {hi}] ({hi_name}), got {lengths.tolist()}")


def _check_blank(blank: int, vocab: int) -> None:
    if not 0 <= blank < vocab:
        raise ValueError(f"blank must be in [0, {vocab}) (vocabulary size), got {blank}")


def _check_targets(targets: Tensor, target_lengths: Tensor, vocab: int, blank: int) -> Tensor:
    """Check the valid part of targets (B, U); return it with padding replaced.

    Returns (B, U) int64 where positions ``u >= target_lengths[b]`` hold a
    harmless in-range, non-blank id.
    """
    if targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise ValueError(f"targets must be an integer tensor, got {targets.dtype}")
    valid = torch.arange(targets.shape[1], device=targets.device) < target_lengths[:, None]
    bad_range = valid & ((targets < 0) | (targets >= vocab))
    if bool(bad_range.any()):
        b, u = (int(i) for i in bad_range.nonzero()[0])
        raise ValueError(
            f"targets[{b}, {u}] = {int(targets[b, u])} is out of the vocabulary range [0, {vocab})"
        )
    is_blank = valid & (targets == blank)
    if bool(is_blank.any()):
        b, u = (int(i) for i in is_blank.nonzero()[0])
        raise ValueError(f"targets[{b}, {u}] is the blank id {blank}; targets must not contain blank")
    filler = (blank + 1) % vocab
    return torch.where(valid, targets.long(), torch.full_like(targets, filler, dtype=torch.long))


# --------------------------------------------------------------------------- RNN-T
def rnnt_lattice_log_probs(logits: Tensor, targets: Tensor, blank: int = 0) -> tuple[Tensor, Tensor]:
    """Blank and next-label log-probabilities of the RNN-T lattice.

    Args:
        logits: (B, T, U+1, V) joint outputs; ``logits[b, t, u]`` after u
            target tokens at frame t (unnormalised).
        targets: (B, U) int64 target token ids; every entry must be in
            [0, V) (padding must already be replaced by a valid id).
        blank: blank token id.

    Returns:
        blank_lp: (B, T, U+1) ``log p(blank | t, u)``.
        label_lp: (B, T, U) ``log p(targets[b, u] | t, u)``.

    Computed as ``logits - logsumexp(logits, V)`` (a log-softmax) on the
    gathered entries only, so the full (B, T, U+1, V) log-softmax is never
    stored for backward.  Half-precision logits are normalised in float32.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    B, T, U1, _ = logits.shape
    norm = torch.logsumexp(logits, dim=-1)  # (B, T, U+1)
    blank_lp = logits[..., blank] - norm
    index = targets[:, None, :, None].expand(B, T, U1 - 1, 1)
    label_lp = logits[:, :, : U1 - 1, :].gather(-1, index).squeeze(-1) - norm[:, :, : U1 - 1]
    return blank_lp, label_lp


def rnnt_loss_simple_lattice(
    blank_lp: Tensor,
    label_lp: Tensor,
    logit_lengths: Tensor,
    target_lengths: Tensor,
    reduction: str = "mean",
) -> Tensor:
    """RNN-T negative log-likelihood from precomputed lattice log-probs.

    Args:
        blank_lp: (B, T, U+1) float ``log p(blank | t, u)``.
        label_lp: (B, T, U) float ``log p(y_{u+1} | t, u)``, the log-prob of
            emitting target token u (0-based) at frame t after u tokens.
        logit_lengths: (B,) integer number of valid frames T_b, 1 <= T_b <= T.
        target_lengths: (B,) integer number of target tokens U_b, 0 <= U_b <= U.
        reduction: "none" -> (B,) losses, "sum", or "mean" (batch mean).

    Entries with ``t >= T_b`` or beyond ``U_b`` are ignored (forward and
    gradient).  See the module docstring for the recursion.
    """
    _check_reduction(reduction)
    if blank_lp.dim() != 3 or label_lp.dim() != 3:
        raise ValueError(
            f"blank_lp must be (B, T, U+1) and label_lp (B, T, U), got {tuple(blank_lp.shape)} "
            f"and {tuple(label_lp.shape)}"
        )
    B, T, U1 = blank_lp.shape
    if label_lp.shape != (B, T, U1 - 1):
        raise ValueError(
            f"label_lp must have shape (B, T, U) = {(B, T, U1 - 1)} to match blank_lp "
            f"{tuple(blank_lp.shape)}, got {tuple(label_lp.shape)}"
        )
    if T == 0:
        raise ValueError("the lattice has no frames (T = 0); every utterance needs >= 1 frame")
    _check_lengths("logit_lengths", logit_lengths, B, 1, T, "T")
    _check_lengths("target_lengths", target_lengths, B, 0, U1 - 1, "U")
    if blank_lp.dtype in (torch.float16, torch.bfloat16):
        blank_lp, label_lp = blank_lp.float(), label_lp.float()

    dev = blank_lp.device
    t_idx = torch.arange(T, device=dev)[None, :, None]
    u_idx = torch.arange(U1, device=dev)[None, None, :]
    t_len = logit_lengths.to(dev).long()[:, None, None]
    u_len = target_lengths.to(dev).long()[:, None, None]
    zero = blank_lp.new_zeros(())
    blank_lp = torch.where((t_idx < t_len) & (u_idx <= u_len), blank_lp, zero)
    blank_lp = blank_lp.clamp(min=LOG_PROB_FLOOR)
    label_lp = torch.where((t_idx < t_len) & (u_idx[..., :-1] < u_len), label_lp, zero)
    label_lp = label_lp.clamp(min=LOG_PROB_FLOOR)

    # Y[b, t, u] = sum_{j<u} label_lp[b, t, j]               (B, T, U+1)
    y = torch.cat([label_lp.new_zeros(B, T, 1), label_lp.cumsum(dim=2)], dim=2)
    rows = [y[:, 0]]  # alpha[:, 0, u] = Y[:, 0, u]
    for t in range(1, T):
        stay = rows[-1] + blank_lp[:, t - 1]  # (B, U+1) arrive at row t by a blank
        rows.append(y[:, t] + torch.logcumsumexp(stay - y[:, t], dim=1))
    alpha = torch.stack(rows, dim=1)  # (B, T, U+1)

    last_t = logit_lengths.to(dev).long() - 1
    batch = torch.arange(B, device=dev)
    end = target_lengths.to(dev).long()
    losses = -(alpha[batch, last_t, end] + blank_lp[batch, last_t, end])
    return _reduce(losses, reduction)


def rnnt_loss(
    logits: Tensor,
    targets: Tensor,
    logit_lengths: Tensor,
    target_lengths: Tensor,
    blank: int = 0,
    reduction: str = "mean",
) -> Tensor:
    """RNN-T negative log-likelihood summed over all alignments.

    Args:
        logits: (B, T, U+1, V) float joint outputs (unnormalised; log-softmax
            over V is applied inside). ``logits[b, t, u]`` is the output after
            u target tokens at encoder frame t.
        targets: (B, U) integer target token ids; entries ``u < target_lengths[b]``
            must be in [0, V) and != blank, the rest is padding (any value).
        logit_lengths: (B,) integer valid frames T_b per utterance, 1 <= T_b <= T.
        target_lengths: (B,) integer target tokens U_b per utterance, 0 <= U_b <= U.
        blank: blank token id in [0, V).
        reduction: "none" -> (B,) per-utterance losses; "sum"; "mean" = mean
            over the batch of per-utterance losses (not length-normalised).

    Returns:
        Scalar loss, or (B,) per-utterance losses for ``reduction="none"``.
    """
    _check_reduction(reduction)
    if logits.dim() != 4:
        raise ValueError(f"logits must be (B, T, U+1, V), got shape {tuple(logits.shape)}")
    if not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be a floating-point tensor, got {logits.dtype}")
    B, T, U1, V = logits.shape
    if targets.dim() != 2 or targets.shape != (B, U1 - 1):
        raise ValueError(
            f"targets must have shape (B, U) = {(B, U1 - 1)} for logits {tuple(logits.shape)}, "
            f"got {tuple(targets.shape)}"
        )
    _check_blank(blank, V)
    _check_lengths("target_lengths", target_lengths, B, 0, U1 - 1, "U")
    targets = _check_targets(targets.to(logits.device), target_lengths.to(logits.device), V, blank)
    blank_lp, label_lp = rnnt_lattice_log_probs(logits, targets, blank)
    return rnnt_loss_simple_lattice(blank_lp, label_lp, logit_lengths, target_lengths, reduction)


# --------------------------------------------------------------------------- CTC
def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Tensor,
    target_lengths: Tensor,
    blank: int = 0,
    reduction: str = "mean",
) -> Tensor:
    """CTC negative log-likelihood, batch-first wrapper of ``F.ctc_loss``.

    Args:
        log_probs: (B, T, V) float log-softmax outputs over the vocabulary
            (batch first; transposed to torch's (T, B, V) inside).
        targets: (B, U) integer padded targets; entries ``u < target_lengths[b]``
            must be in [0, V) and != blank, the rest is padding (any value).
        input_lengths: (B,) integer valid frames per utterance, 0..T.
        target_lengths: (B,) integer target tokens per utterance, 0..U.
        blank: blank token id.
        reduction: "none" -> (B,); "sum"; "mean" = mean over the batch of
            per-utterance losses (unlike torch, NOT divided by target lengths).

    ``zero_infinity=True``: an impossible alignment (too few frames) gives
    loss 0 and zero gradient instead of inf.

    Note (torch behaviour): the backward of ``F.ctc_loss`` assumes
    ``log_probs = log_softmax(x)``; it is correct end-to-end w.r.t. ``x``,
    not as a gradient w.r.t. arbitrary unnormalised ``log_probs``.
    """
    _check_reduction(reduction)
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, T, V), got shape {tuple(log_probs.shape)}")
    B, T, V = log_probs.shape
    if targets.dim() != 2 or targets.shape[0] != B:
        raise ValueError(f"targets must have shape (B, U) with B = {B}, got {tuple(targets.shape)}")
    _check_blank(blank, V)
    _check_lengths("input_lengths", input_lengths, B, 0, T, "T")
    _check_lengths("target_lengths", target_lengths, B, 0, targets.shape[1], "U")
    dev = log_probs.device
    targets = _check_targets(targets.to(dev), target_lengths.to(dev), V, blank)
    losses = F.ctc_loss(
        log_probs.transpose(0, 1),
        targets,
        input_lengths.to(dev).long(),
        target_lengths.to(dev).long(),
        blank=blank,
        reduction="none",
        zero_infinity=True,
    )
    return _reduce(losses, reduction)


# --------------------------------------------------------------------------- wake word
def max_pooling_kws_loss(
    probs: Tensor,
    target: Tensor,
    lengths: Tensor,
    min_duration: int = 0,
    reduction: str = "mean",
) -> Tensor:
    """Max-pooling wake-word loss (as wekws ``max_pooling_loss``), vectorised.

    Args:
        probs: (B, T, K) float per-frame sigmoid posteriors of K keywords.
        target: (B,) integer keyword index of each utterance in [0, K), or -1
            for an utterance without keyword.
        lengths: (B,) integer valid frames per utterance, 0..T.
        min_duration: frames ``t < min_duration`` are not candidates for the
            target keyword's max (a keyword cannot end that early).
        reduction: "none" -> (B,); "sum"; "mean" (batch mean, as wekws).

    Per utterance, summed over keywords k:
      * k == target: ``-log(clamp(max_{valid t >= min_duration} p[t, k], 1e-8))``
        (no candidate frame -> ``-log(1e-8)``);
      * otherwise: ``-log(clamp(min_{valid t} 1 - p[t, k], 1e-8))``
        (no valid frame -> 0).
    """
    _check_reduction(reduction)
    if probs.dim() != 3 or not probs.dtype.is_floating_point:
        raise ValueError(f"probs must be a float (B, T, K) tensor, got {probs.dtype} {tuple(probs.shape)}")
    B, T, K = probs.shape
    if min_duration < 0:
        raise ValueError(f"min_duration must be >= 0, got {min_duration}")
    if target.shape != (B,) or target.dtype.is_floating_point or target.dtype == torch.bool:
        raise ValueError(f"target must be an integer tensor of shape ({B},), got {target.dtype} {tuple(target.shape)}")
    _check_lengths("lengths", lengths, B, 0, T, "T")
    dev = probs.device
    target = target.to(dev).long()
    if B and bool(((target < -1) | (target >= K)).any()):
        raise ValueError(f"target must be in [-1, {K - 1}] (-1 = no keyword), got {target.tolist()}")

    t_idx = torch.arange(T, device=dev)[None, :, None]  # (1, T, 1)
    valid = t_idx < lengths.to(dev).long()[:, None, None]  # (B, T, 1)
    candidate = valid & (t_idx >= min_duration)
    pos = probs.masked_fill(~candidate, 0.0).clamp(1e-8, 1.0).amax(dim=1)  # (B, K)
    neg = (1.0 - probs).masked_fill(~valid, 1.0).clamp(1e-8, 1.0).amin(dim=1)  # (B, K)
    is_target = torch.arange(K, device=dev)[None, :] == target[:, None]  # (B, K)
    losses = torch.where(is_target, -pos.log(), -neg.log()).sum(dim=1)
    return _reduce(losses, reduction)
