"""Endpointer: sherpa-onnx rule semantics, boundaries and frame-shift conversions."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from streamd.config import EndpointConfig
from streamd.decode.endpoint import Endpointer, seconds_to_frames

SHIFT = 0.04


def reference(cfg: EndpointConfig, shift: float, trailing: int, segment: int, decoded: int):
    """sherpa-onnx style check in seconds (with the same tiny tolerance for decimal durations)."""
    if not cfg.enabled:
        return None
    eps = 1e-9 * shift
    silence, length = trailing * shift, segment * shift
    if silence + eps >= cfg.rule1_trailing_silence:
        return "rule1"
    if decoded > 0 and silence + eps >= cfg.rule2_trailing_silence:
        return "rule2"
    if length + eps >= cfg.rule3_max_utterance:
        return "rule3"
    return None


def test_default_rules_in_frames():
    ep = Endpointer(EndpointConfig(), SHIFT)
    assert (ep.rule1_frames, ep.rule2_frames, ep.rule3_frames) == (60, 15, 500)


def test_default_boundaries():
    ep = Endpointer(EndpointConfig(), SHIFT)
    cases = [
        # (trailing, segment, decoded) -> rule
        ((59, 59, 0), None), ((60, 60, 0), "rule1"), ((60, 100, 5), "rule1"),  # rule1 first even if decoded
        ((14, 100, 3), None), ((15, 100, 3), "rule2"), ((15, 100, 0), None), ((59, 100, 0), None),
        ((0, 499, 9), None), ((0, 500, 9), "rule3"), ((0, 500, 0), "rule3"), ((14, 600, 1), "rule3"),
        ((15, 600, 1), "rule2"), ((0, 0, 0), None),
    ]
    args = list(zip(*(c for c, _ in cases)))
    assert ep.check(*args) == [r for _, r in cases]


@pytest.mark.parametrize("shift,frames", [(0.04, (60, 15, 500)), (0.03, (80, 20, 667)), (0.06, (40, 10, 334)),
                                          (0.01, (240, 60, 2000)), (0.08, (30, 8, 250))])
def test_frame_shift_conversions(shift, frames):
    ep = Endpointer(EndpointConfig(), shift)
    assert (ep.rule1_frames, ep.rule2_frames, ep.rule3_frames) == frames
    r1, r2, r3 = frames
    assert ep.check([r1 - 1, r1], [r1 - 1, r1], [0, 0]) == [None, "rule1"]
    assert ep.check([r2 - 1, r2], [r3 - 1, r3 - 1], [1, 1]) == [None, "rule2"]
    assert ep.check([0, 0], [r3 - 1, r3], [1, 1]) == [None, "rule3"]


def test_seconds_to_frames():
    assert seconds_to_frames(1.2, 0.04) == 30  # 1.2 / 0.04 = 29.999999999999996
    assert seconds_to_frames(2.4, 0.04) == 60
    assert seconds_to_frames(0.14, 0.02) == 7  # 0.14 / 0.02 = 7.000000000000001 must not become 8
    assert seconds_to_frames(1.1, 0.1) == 11
    assert seconds_to_frames(0.05, 0.04) == 2  # 1 frame is too short, 2 frames reach it
    assert seconds_to_frames(0.0, 0.04) == 0
    with pytest.raises(ValueError, match="duration must be a finite number >= 0"):
        seconds_to_frames(-1.0, 0.04)


@pytest.mark.parametrize("seed", range(4))
def test_matches_reference_random(seed):
    rng = random.Random(seed)
    cfg = EndpointConfig(rule1_trailing_silence=rng.choice([2.4, 1.0, 0.5, 0.13]),
                         rule2_trailing_silence=rng.choice([1.2, 0.4, 0.08, 3.0]),
                         rule3_max_utterance=rng.choice([20.0, 2.0, 0.9]))
    shift = rng.choice([0.04, 0.03, 0.02, 0.06])
    ep = Endpointer(cfg, shift)
    # draw around each rule's boundary so that every outcome occurs
    near = [seconds_to_frames(x, shift) for x in (cfg.rule1_trailing_silence, cfg.rule2_trailing_silence,
                                                   cfg.rule3_max_utterance)]
    seg = [max(0, rng.choice(near) + rng.randint(-2, 2)) for _ in range(300)]
    tr = [min(s, max(0, rng.choice(near) + rng.randint(-2, 2))) if rng.random() < 0.8 else 0 for s in seg]
    dec = [rng.choice([0, 0, 1, 7]) for _ in seg]
    want = [reference(cfg, shift, t, s, d) for t, s, d in zip(tr, seg, dec)]
    reachable = {"rule1", "rule3", None} | ({"rule2"} if ep.rule2_frames < ep.rule1_frames else set())
    assert set(want) == reachable, "random cases should exercise every reachable outcome"
    assert ep.check(tr, seg, dec) == want
    assert ep.check(torch.tensor(tr), torch.tensor(seg), torch.tensor(dec, dtype=torch.int32)) == want
    assert ep.check(torch.tensor(tr), seg, dec) == want  # mixed inputs
    assert ep.check_arrays(np.array(tr), np.array(seg), np.array(dec, dtype=np.int32)) == want


def test_custom_rules_and_disabled():
    cfg = EndpointConfig(rule1_trailing_silence=0.4, rule2_trailing_silence=0.8, rule3_max_utterance=1.0)
    ep = Endpointer(cfg, SHIFT)
    # rule2 longer than rule1: rule1 always wins first
    assert ep.check([10, 20], [10, 20], [1, 1]) == ["rule1", "rule1"]
    assert ep.check([9], [25], [1]) == ["rule3"]
    off = Endpointer(EndpointConfig(enabled=False), SHIFT)
    assert off.check([1000, 0], [1000, 10_000], [1, 1]) == [None, None]
    assert off.check_arrays(np.array([1000, 0]), np.array([1000, 10_000]), np.array([1, 1])) == [None, None]
    assert ep.check([], [], []) == []
    assert ep.check_arrays(*(np.zeros(0, np.int64),) * 3) == []


def test_errors():
    ep = Endpointer(EndpointConfig(), SHIFT)
    with pytest.raises(ValueError, match=r"same length B, got 2, 1, 2"):
        ep.check([0, 0], [0], [0, 0])
    with pytest.raises(ValueError, match=r"trailing_blank_frames\[1\] = 5 exceeds segment_frames\[1\] = 4"):
        ep.check([0, 5], [3, 4], [0, 0])
    with pytest.raises(ValueError, match=r"segment_frames\[0\]: must be >= 0, got -1"):
        ep.check([0], [-1], [0])
    with pytest.raises(ValueError, match=r"decoded_tokens\[0\]: expected an integer, got 1.5"):
        ep.check([0], [1], [1.5])
    with pytest.raises(ValueError, match=r"segment_frames: expected an integer tensor, got dtype torch.float32"):
        ep.check(torch.tensor([0]), torch.tensor([1.0]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"trailing_blank_frames: expected a 1-D tensor"):
        ep.check(torch.zeros(1, 1, dtype=torch.long), [1], [0])
    with pytest.raises(ValueError, match=r"decoded_tokens\[1\]: must be >= 0"):
        ep.check(torch.tensor([0, 0]), torch.tensor([1, 1]), torch.tensor([0, -2]))
    a = np.array
    with pytest.raises(ValueError, match=r"same length B, got 2, 1, 2"):
        ep.check_arrays(a([0, 0]), a([0]), a([0, 0]))
    with pytest.raises(ValueError, match=r"trailing_blank_frames\[1\] = 5 exceeds segment_frames\[1\] = 4"):
        ep.check_arrays(a([0, 5]), a([3, 4]), a([0, 0]))
    with pytest.raises(ValueError, match=r"decoded_tokens\[1\]: must be >= 0, got -2"):
        ep.check_arrays(a([0, 0]), a([1, 1]), a([0, -2]))
    with pytest.raises(ValueError, match=r"segment_frames: expected a 1-D integer numpy array"):
        ep.check_arrays(a([0]), a([1.0]), a([0]))
    with pytest.raises(ValueError, match=r"frame_shift_s must be a finite number > 0"):
        Endpointer(EndpointConfig(), -0.04)
    with pytest.raises(TypeError, match=r"cfg: expected an EndpointConfig"):
        Endpointer({"enabled": True}, SHIFT)
