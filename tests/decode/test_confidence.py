"""Confidence measure bank vs. a straight-from-the-formula reference (NeMo's bank)."""

from __future__ import annotations

import math

import pytest
import torch

from streamd.config import ConfidenceConfig, ConfigError
from streamd.decode.confidence import (
    AGGREGATIONS,
    MEASURE_NAMES,
    aggregate,
    frame_confidence,
    gibbs_alpha_range,
    make_measure,
)

ALPHAS = (0.25, 0.33, 0.5, 1.0, 2.0)
VOCABS = (2, 10, 500)


# --------------------------------------------------------------------------- slow oracle
# NeMo's formulas transcribed literally, plain Python floats over a list of probabilities.


def ref_confidence(p: list[float], name: str, t: float) -> float:
    v = len(p)
    log = lambda q: math.log(q) if q > 0 else -math.inf  # noqa: E731
    plogp = lambda q, a: q**a * log(q) if q > 0 else 0.0  # noqa: E731
    neg_gibbs = sum(plogp(q, 1.0) for q in p)  # sum p ln p
    gibbs_lin_base = 1 + neg_gibbs / math.log(v)
    gibbs_exp_base = (math.exp(neg_gibbs) * v - 1) / (v - 1)
    s = sum(q**t for q in p)  # sum p^t
    g = sum(plogp(q, t) for q in p)  # sum p^t ln p
    if name == "max_prob":
        if t == 1.0:
            r = (max(p) * v - 1) / (v - 1)
        else:
            r = (max(p) ** t * v**t - 1) / (v**t - 1)
    elif name == "entropy_gibbs_lin":
        r = gibbs_lin_base if t == 1.0 else 1 + g / math.log(v) / v ** (1 - t)
    elif name == "entropy_gibbs_exp":
        if t == 1.0:
            r = gibbs_exp_base
        else:
            m = v ** (-t * v ** (1 - t))
            r = (math.exp(g * t) - m) / (1 - m)
    elif name == "entropy_tsallis_lin":
        r = gibbs_lin_base if t == 1.0 else 1 + (1 - s) / (v ** (1 - t) - 1)
    elif name == "entropy_tsallis_exp":
        if t == 1.0:
            r = gibbs_exp_base
        else:
            m = math.exp((1 - v ** (1 - t)) / (1 - t))
            r = (math.exp((1 - s) / (1 - t)) - m) / (1 - m)
    elif name == "entropy_renyi_lin":
        r = gibbs_lin_base if t == 1.0 else 1 + math.log2(s) / (t - 1) / math.log2(v)
    elif name == "entropy_renyi_exp":
        r = gibbs_exp_base if t == 1.0 else (s ** (1 / (t - 1)) * v - 1) / (v - 1)
    else:
        raise AssertionError(name)
    return min(1.0, max(0.0, r))


def random_log_probs(gen: torch.Generator, n: int, v: int) -> torch.Tensor:
    """(n, v) float64 log-softmax of logits with widely varying sharpness."""
    scale = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 12
    logits = torch.randn(n, v, generator=gen, dtype=torch.float64) * scale
    return logits.log_softmax(-1)


def mix(v: int, lam: torch.Tensor) -> torch.Tensor:
    """(N, v) log of (1 - lam) * one_hot(0) + lam * uniform, float64."""
    onehot = torch.zeros(v, dtype=torch.float64)
    onehot[0] = 1.0
    p = (1 - lam)[:, None] * onehot + lam[:, None] / v
    return p.log()


# --------------------------------------------------------------------------- against the oracle


@pytest.mark.parametrize("name", MEASURE_NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_on_random_distributions(name: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for v in VOCABS:
        x64 = random_log_probs(gen, 6, v)
        for t in ALPHAS + (0.1, 1.0 - 1e-4, 1.0 + 1e-4, 3.0):
            want = torch.tensor([ref_confidence(row.exp().tolist(), name, t) for row in x64], dtype=torch.float64)
            got64 = frame_confidence(x64, name, t)
            got32 = frame_confidence(x64.float(), name, t)
            assert got64.dtype == torch.float64 and got32.dtype == torch.float32
            torch.testing.assert_close(got64, want, atol=1e-9, rtol=1e-7, msg=f"{name} v={v} t={t}")
            torch.testing.assert_close(got32.double(), want, atol=2e-5, rtol=0, msg=f"{name} v={v} t={t} fp32")


@pytest.mark.parametrize("name", MEASURE_NAMES)
def test_batched_shapes_and_half_precision(name: str) -> None:
    gen = torch.Generator().manual_seed(5)
    x = random_log_probs(gen, 3 * 4 * 2, 10).reshape(3, 4, 2, 10)
    full = frame_confidence(x, name, 0.5)
    assert full.shape == (3, 4, 2)
    # each element equals the measure of its own row
    rows = frame_confidence(x.reshape(-1, 10), name, 0.5).reshape(3, 4, 2)
    torch.testing.assert_close(full, rows)
    half = frame_confidence(x.to(torch.bfloat16), name, 0.5)
    assert half.dtype == torch.float32 and half.shape == (3, 4, 2)
    assert frame_confidence(x[0, 0, 0], name, 0.5).shape == ()


@pytest.mark.parametrize("name", MEASURE_NAMES)
def test_device_agnostic(name: str) -> None:
    # meta tensors carry no data: any hard-coded CPU tensor in the math would fail here.
    x = torch.empty(2, 3, 7, device="meta")
    for t in (0.5, 1.0, 2.0):
        out = frame_confidence(x, name, t)
        assert out.device.type == "meta" and out.shape == (2, 3)
    if torch.cuda.is_available():
        gen = torch.Generator().manual_seed(0)
        xc = random_log_probs(gen, 4, 10).float()
        torch.testing.assert_close(frame_confidence(xc.cuda(), name, 0.33).cpu(), frame_confidence(xc, name, 0.33))


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("name", MEASURE_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_is_zero_and_one_hot_is_one(name: str, dtype: torch.dtype) -> None:
    for v in VOCABS:
        for t in ALPHAS:
            uniform = torch.full((v,), -math.log(v), dtype=dtype)
            onehot = torch.full((v,), -math.inf, dtype=dtype)
            onehot[3 % v] = 0.0
            # near one-hot: p = (1 - (v-1) eps, eps, ..., eps); eps tiny enough that eps^alpha is too
            eps = 1e-37 if dtype == torch.float32 else 1e-100
            near = torch.full((v,), math.log(eps), dtype=dtype)
            near[0] = math.log1p(-(v - 1) * eps)
            assert frame_confidence(uniform, name, t).item() == pytest.approx(0.0, abs=1e-5), (v, t)
            c1 = frame_confidence(onehot, name, t)
            assert c1.item() == pytest.approx(1.0, abs=1e-6), (v, t, c1)  # -inf entries: no NaN
            assert frame_confidence(near, name, t).item() == pytest.approx(1.0, abs=1e-4), (v, t)


@pytest.mark.parametrize("name", MEASURE_NAMES)
def test_monotone_from_one_hot_to_uniform(name: str) -> None:
    lam = torch.linspace(0, 1, 101, dtype=torch.float64)
    for v in VOCABS:
        x = mix(v, lam)
        for t in ALPHAS:
            for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
                c = frame_confidence(x.to(dtype), name, t)
                assert (c.diff() <= tol).all(), (v, t, dtype, c.diff().max().item())
                assert ((c >= 0) & (c <= 1)).all()
                assert c[0].item() == pytest.approx(1.0, abs=1e-5) and c[-1].item() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("name", MEASURE_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_alpha_one_limit(name: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(11)
    for v in VOCABS:
        x = random_log_probs(gen, 8, v).to(dtype)
        base = frame_confidence(x, name, 1.0)
        for t in (1.0 - 1e-4, 1.0 + 1e-4):
            torch.testing.assert_close(frame_confidence(x, name, t), base, atol=2e-3, rtol=0, msg=f"v={v} t={t}")


def test_alpha_one_closed_forms() -> None:
    gen = torch.Generator().manual_seed(3)
    for v in VOCABS:
        x = random_log_probs(gen, 5, v)
        p = x.exp()
        entropy = -(p * x).sum(-1)
        torch.testing.assert_close(frame_confidence(x, "entropy_gibbs_lin", 1.0), 1 - entropy / math.log(v))
        pmax = p.max(-1).values
        torch.testing.assert_close(frame_confidence(x, "max_prob", 1.0), (v * pmax - 1) / (v - 1))
        # every entropy type collapses to the Gibbs baseline at alpha = 1
        for norm in ("lin", "exp"):
            g = frame_confidence(x, f"entropy_gibbs_{norm}", 1.0)
            for kind in ("tsallis", "renyi"):
                torch.testing.assert_close(frame_confidence(x, f"entropy_{kind}_{norm}", 1.0), g)


def test_gibbs_alpha_range() -> None:
    lo, hi = gibbs_alpha_range(500)
    assert 0.13 < lo < 0.14 and 1.16 < hi < 1.17
    assert gibbs_alpha_range(2)[1] == math.inf
    with pytest.raises(ValueError, match="vocabulary size"):
        gibbs_alpha_range(1)


# --------------------------------------------------------------------------- config and errors


def test_make_measure_uses_config() -> None:
    gen = torch.Generator().manual_seed(4)
    x = random_log_probs(gen, 4, 10)
    cfg = ConfidenceConfig(measure="entropy", entropy_type="renyi", entropy_norm="lin", alpha=0.5)
    assert cfg.name == "entropy_renyi_lin"
    torch.testing.assert_close(make_measure(cfg)(x), frame_confidence(x, "entropy_renyi_lin", 0.5))
    mp = make_measure(ConfidenceConfig(measure="max_prob", alpha=1.0))
    torch.testing.assert_close(mp(x), frame_confidence(x, "max_prob", 1.0))
    with pytest.raises(TypeError, match="ConfidenceConfig"):
        make_measure({"measure": "max_prob"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"alpha": -1}, "alpha"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": math.inf}, "alpha"),
        ({"measure": "margin"}, "measure"),
        ({"entropy_type": "shannon"}, "entropy_type"),
        ({"entropy_norm": "log"}, "entropy_norm"),
        ({"aggregation": "median"}, "aggregation"),
    ],
)
def test_config_validation(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ConfidenceConfig(**kwargs)


def test_frame_confidence_errors() -> None:
    x = torch.zeros(3, 4).log_softmax(-1)
    with pytest.raises(ValueError, match="unknown confidence measure 'entropy_foo'"):
        frame_confidence(x, "entropy_foo", 0.5)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="alpha"):
            frame_confidence(x, "max_prob", bad)
    with pytest.raises(ValueError, match="V >= 2"):
        frame_confidence(torch.zeros(3, 1), "max_prob", 1.0)
    with pytest.raises(ValueError, match="V >= 2"):
        frame_confidence(torch.tensor(0.0), "max_prob", 1.0)
    with pytest.raises(ValueError, match="floating-point"):
        frame_confidence(torch.zeros(3, 4, dtype=torch.long), "max_prob", 1.0)


# --------------------------------------------------------------------------- aggregation


def test_aggregate() -> None:
    vals = [0.9, 0.5, 0.8]
    assert aggregate(vals, "min") == 0.5
    assert aggregate(vals, "max") == 0.9
    assert aggregate(vals, "mean") == pytest.approx(2.2 / 3)
    assert aggregate(vals, "prod") == pytest.approx(0.9 * 0.5 * 0.8)
    assert aggregate((0.7,), "prod") == pytest.approx(0.7)
    assert set(AGGREGATIONS) == {"min", "mean", "max", "prod"}
    gen = torch.Generator().manual_seed(9)
    for _ in range(5):
        v = torch.rand(int(torch.randint(1, 9, (1,), generator=gen)), generator=gen, dtype=torch.float64).tolist()
        assert aggregate(v, "mean") == pytest.approx(sum(v) / len(v))
        assert aggregate(v, "prod") == pytest.approx(math.prod(v))
        assert aggregate(v, "min") <= aggregate(v, "mean") <= aggregate(v, "max")


def test_aggregate_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        aggregate([], "min")
    with pytest.raises(ValueError, match="'median'"):
        aggregate([0.5], "median")
