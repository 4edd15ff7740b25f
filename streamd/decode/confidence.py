"""Frame confidence measures and word-level aggregation (NeMo's measure bank).

A frame's confidence is a number in [0, 1] computed from the log-softmax
``x = log p`` over the V output tokens (blank included): 1 means the model is
certain (one-hot ``p``), 0 means it knows nothing (uniform ``p``).  The bank
follows NeMo's ``get_confidence_measure_bank`` (Laptev & Ginsburg, "Fast
entropy-based methods of word-level confidence estimation for end-to-end
ASR", 2022), with ``t = alpha > 0`` and ``v = V``:

=====================  ==========================================================
``max_prob``           ``(p_max^t v^t - 1) / (v^t - 1)``
``entropy_gibbs_lin``  ``1 + G / (ln v * v^(1-t))``, ``G = sum p^t ln p``
``entropy_gibbs_exp``  ``(exp(t G) - m) / (1 - m)``, ``m = v^(-t v^(1-t))``
``entropy_tsallis_*``  Tsallis ``H = (1 - sum p^t) / (t - 1)``,
                       ``H_max = (v^(1-t) - 1) / (1 - t)``
``entropy_renyi_*``    Renyi ``H = ln(sum p^t) / (1 - t)``, ``H_max = ln v``
=====================  ==========================================================

with the normalizations ``lin``: ``1 - H / H_max`` and ``exp``:
``(exp(-H) - exp(-H_max)) / (1 - exp(-H_max))``.  At ``alpha == 1`` every
entropy measure is NeMo's Gibbs/Shannon baseline (``lin``: ``1 - H / ln v``,
``exp``: ``(v exp(-H) - 1) / (v - 1)`` with Shannon ``H``), which is also the
``alpha -> 1`` limit of each formula.

The formulas are evaluated in algebraically equal but numerically stable
forms: ``sum p^t - 1`` is accumulated term by term with ``expm1`` so the
Tsallis/Renyi measures stay accurate for alpha close to 1 in float32, and
entries with ``x = -inf`` (p = 0) contribute exactly 0 (never ``0 * inf``).
Results are clamped to [0, 1].  Note NeMo's caveat for the Gibbs measures
with alpha != 1: they are only a proper (monotone, in-range) confidence for
``(ln v + 2 - sqrt(ln^2 v + 4)) / (2 ln v) <= alpha <= (1 + ln(v-1)) / ln(v-1)``
(see :func:`gibbs_alpha_range`); outside it they are computed as NeMo does.

Word confidence aggregates token confidences with :func:`aggregate`.
"""

from __future__ import annotations

import math
import numbers
from functools import partial
from typing import Callable, Sequence

import torch
from torch import Tensor

from streamd.config import ConfidenceConfig

__all__ = [
    "MEASURE_NAMES",
    "AGGREGATIONS",
    "frame_confidence",
    "make_measure",
    "aggregate",
    "gibbs_alpha_range",
]

MEASURE_NAMES: tuple[str, ...] = (
    "max_prob",
    "entropy_gibbs_lin",
    "entropy_gibbs_exp",
    "entropy_tsallis_lin",
    "entropy_tsallis_exp",
    "entropy_renyi_lin",
    "entropy_renyi_exp",
)

AGGREGATIONS: tuple[str, ...] = ("min", "mean", "max", "prod")


# --------------------------------------------------------------------------- helpers
# All take x: (..., V) log-probabilities and reduce over the last dim -> (...).


def _safe(x: Tensor) -> Tensor:
    """Replace -inf by the most negative finite value, so that p * x = 0 * finite = 0."""
    return x.clamp_min(torch.finfo(x.dtype).min)


def _sum_p_pow_minus_one(x: Tensor, t: float) -> Tensor:
    """``sum_i p_i^t - 1`` for t != 1, accurate for t near 1 and for p_i = 0.

    Uses ``sum_i (p_i^t - p_i)`` with each term written without overflow:
    t < 1: ``p^t - p = exp(t x) * (-expm1((1 - t) x))``  (all terms >= 0);
    t > 1: ``p^t - p = exp(x) * expm1((t - 1) x)``       (all terms <= 0).
    """
    if t < 1.0:
        terms = torch.exp(t * x) * -torch.expm1((1.0 - t) * x)
    else:
        terms = torch.exp(x) * torch.expm1((t - 1.0) * x)
    return terms.sum(-1)


def _neg_gibbs(x: Tensor, t: float) -> Tensor:
    """``G = sum_i p_i^t ln p_i`` (<= 0), 0 for entries with p_i = 0."""
    xs = _safe(x)
    return (torch.exp(t * xs) * xs).sum(-1)


def _lin(h: Tensor, h_max: float) -> Tensor:
    return 1.0 - h / h_max


def _exp(h: Tensor, h_max: float) -> Tensor:
    return (torch.exp(-h) - math.exp(-h_max)) / -math.expm1(-h_max)


# --------------------------------------------------------------------------- measures
# Each: (x (..., V), v, t) -> (...), unclamped.


def _max_prob(x: Tensor, v: int, t: float) -> Tensor:
    # (p_max^t v^t - 1) / (v^t - 1); at t == 1 this is NeMo's (v p_max - 1) / (v - 1).
    log_v = math.log(v)
    return torch.expm1(t * (x.amax(-1) + log_v)) / math.expm1(t * log_v)


def _gibbs_lin(x: Tensor, v: int, t: float) -> Tensor:
    # t == 1 gives the baseline 1 + sum p ln p / ln v.
    return 1.0 + _neg_gibbs(x, t) / (math.log(v) * v ** (1.0 - t))


def _gibbs_exp(x: Tensor, v: int, t: float) -> Tensor:
    if t == 1.0:
        return _exp(-_neg_gibbs(x, 1.0), math.log(v))
    m = v ** (-t * v ** (1.0 - t))
    return (torch.exp(t * _neg_gibbs(x, t)) - m) / (1.0 - m)


def _shannon(x: Tensor) -> Tensor:
    return -_neg_gibbs(x, 1.0)


def _tsallis(x: Tensor, v: int, t: float) -> tuple[Tensor, float]:
    h = _sum_p_pow_minus_one(x, t) / (1.0 - t)
    h_max = math.expm1((1.0 - t) * math.log(v)) / (1.0 - t)
    return h, h_max


def _renyi(x: Tensor, v: int, t: float) -> tuple[Tensor, float]:
    h = torch.log1p(_sum_p_pow_minus_one(x, t)) / (1.0 - t)
    return h, math.log(v)


def _entropy_measure(entropy: Callable, norm: Callable) -> Callable[[Tensor, int, float], Tensor]:
    def measure(x: Tensor, v: int, t: float) -> Tensor:
        if t == 1.0:  # NeMo's Gibbs/Shannon baseline
            return norm(_shannon(x), math.log(v))
        h, h_max = entropy(x, v, t)
        return norm(h, h_max)

    return measure


_BANK: dict[str, Callable[[Tensor, int, float], Tensor]] = {
    "max_prob": _max_prob,
    "entropy_gibbs_lin": _gibbs_lin,
    "entropy_gibbs_exp": _gibbs_exp,
    "entropy_tsallis_lin": _entropy_measure(_tsallis, _lin),
    "entropy_tsallis_exp": _entropy_measure(_tsallis, _exp),
    "entropy_renyi_lin": _entropy_measure(_renyi, _lin),
    "entropy_renyi_exp": _entropy_measure(_renyi, _exp),
}
assert tuple(_BANK) == MEASURE_NAMES


# --------------------------------------------------------------------------- public API


def frame_confidence(log_probs: Tensor, name: str, alpha: float) -> Tensor:
    """Confidence of each frame's output distribution.

    Args:
        log_probs: (..., V) log-softmax over the V output tokens (blank
            included), any float dtype and device; ``-inf`` entries (p = 0)
            are allowed.  V >= 2.  Half precision is computed in float32.
        name: one of :data:`MEASURE_NAMES`.
        alpha: the measure's alpha (> 0); 1 gives the Gibbs/Shannon forms.

    Returns:
        (...) confidence in [0, 1] (1 = certain), float32 or float64, on
        ``log_probs.device``.  NaN inputs give NaN.
    """
    if name not in _BANK:
        raise ValueError(f"unknown confidence measure {name!r}; expected one of {list(MEASURE_NAMES)}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"confidence alpha must be a finite number > 0, got {alpha!r}")
    if not isinstance(log_probs, Tensor) or not log_probs.is_floating_point():
        got = getattr(log_probs, "dtype", type(log_probs).__name__)
        raise ValueError(f"log_probs must be a floating-point tensor, got {got}")
    if log_probs.dim() == 0 or log_probs.shape[-1] < 2:
        raise ValueError(f"log_probs must have shape (..., V) with V >= 2, got {tuple(log_probs.shape)}")
    x = log_probs if log_probs.dtype in (torch.float32, torch.float64) else log_probs.float()
    return _BANK[name](x, x.shape[-1], float(alpha)).clamp(0.0, 1.0)


def make_measure(cfg: ConfidenceConfig) -> Callable[[Tensor], Tensor]:
    """``f(log_probs (..., V)) -> (...)`` for ``cfg.name`` and ``cfg.alpha`` (V taken from the input)."""
    if not isinstance(cfg, ConfidenceConfig):
        raise TypeError(f"make_measure expects a ConfidenceConfig, got {type(cfg).__name__}")
    return partial(frame_confidence, name=cfg.name, alpha=cfg.alpha)


def gibbs_alpha_range(v: int) -> tuple[float, float]:
    """NeMo's admissible alpha interval for the Gibbs measures with V = ``v`` tokens."""
    if v < 2:
        raise ValueError(f"vocabulary size must be >= 2, got {v}")
    lv = math.log(v)
    lo = (lv + 2 - math.sqrt(lv * lv + 4)) / (2 * lv)
    hi = math.inf if v == 2 else (1 + math.log(v - 1)) / math.log(v - 1)
    return lo, hi


def aggregate(values: Sequence[float], how: str) -> float:
    """Aggregate token confidences into one word confidence (NeMo semantics).

    ``min`` / ``max`` / ``mean`` (arithmetic) / ``prod`` (product).  An empty
    ``values`` raises ValueError: a word always has at least one token, and
    no aggregation has a meaningful value for zero tokens.
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown confidence aggregation {how!r}; expected one of {list(AGGREGATIONS)}")
    vals = list(map(float, values))
    if not vals:
        raise ValueError(f"cannot aggregate ({how}) an empty sequence of confidences")
    if how == "min":
        return min(vals)
    if how == "max":
        return max(vals)
    if how == "mean":
        return math.fsum(vals) / len(vals)
    return math.prod(vals)
