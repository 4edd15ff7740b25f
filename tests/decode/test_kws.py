"""KwsDetector against a per-stream, per-keyword, per-frame Python reference."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest
import torch

from streamd.config import ConfigError, KwsConfig
from streamd.decode.kws import MAX_KEYWORD_S, Detection, KwsDetector, KwsState, aligned_span
from streamd.events import Word

SHIFT = 0.04
KWS = ("hey", "stop", "go")


# ---------------------------------------------------------------- slow oracle


def reference(keywords, cfg: KwsConfig, shift: float, tracks, offsets=None):
    """Detections for whole tracks: list of (N_b, K) arrays, one per stream.

    A detection at frame t spans from the start of the latest run of raw scores >= threshold / 2
    (at t or before it), but at most MAX_KEYWORD_S back: from frame t + 1 - span, span the fewest
    frames that last MAX_KEYWORD_S; to the end of frame t."""
    out = []
    w = cfg.smoothing_frames
    span = 1
    while span * shift < MAX_KEYWORD_S - 1e-9:
        span += 1
    for b, track in enumerate(tracks):
        base = 0 if offsets is None else offsets[b]
        events = []
        for k, kw in enumerate(keywords):
            thr = cfg.threshold_for(kw)
            last_fire = None
            run_start = None
            prev_above = False
            for t in range(track.shape[0]):
                x = float(track[t, k])
                if x >= thr / 2 and not prev_above:
                    run_start = t
                prev_above = x >= thr / 2
                win = [float(v) for v in track[max(0, t - w + 1): t + 1, k]]
                sm = sum(win) / len(win)
                ready = last_fire is None or (t - last_fire) * shift >= cfg.refractory_s - 1e-9
                if sm >= thr and ready:
                    last_fire = t
                    start = max(run_start if run_start is not None else t, t + 1 - span)
                    events.append((t, k, Detection(b, kw, sm, (base + start) * shift, (base + t + 1) * shift,
                                                   base + t)))
        out += [d for _, _, d in sorted(events, key=lambda e: (e[0], e[1]))]
    return out


# ---------------------------------------------------------------- helpers


def random_track(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Low noise plus several peaks (some close together), quantized to 1/256 so sums are exact."""
    x = rng.uniform(0.0, 0.15, size=(n, k))
    for j in range(k):
        for _ in range(rng.integers(0, max(2, n // 8))):
            c = rng.integers(0, n)
            width = rng.uniform(0.8, 4.0)
            height = rng.uniform(0.3, 1.0)
            x[:, j] += height * np.exp(-0.5 * ((np.arange(n) - c) / width) ** 2)
    return np.clip(np.round(x * 256) / 256, 0.0, 1.0).astype(np.float32)


def random_splits(rng: random.Random, n: int, max_chunk: int) -> list[int]:
    sizes = []
    while n > 0:
        s = rng.randint(0, min(n, max_chunk))  # zero-length chunks allowed
        sizes.append(s)
        n -= s
    return sizes


def run_chunked(det: KwsDetector, tracks, splits, pad_value=1.0, offsets=None, device="cpu"):
    """Feed each stream its own split; rows of one call have different lengths, padded with pad_value."""
    b = len(tracks)
    k = det.num_keywords
    state = det.init_state(b, device)
    pos = [0] * b
    n_calls = max(len(s) for s in splits)
    dets = []
    for c in range(n_calls):
        lens = [splits[r][c] if c < len(splits[r]) else 0 for r in range(b)]
        t_len = max(lens) + (c % 2)  # sometimes extra padding on every row
        chunk = torch.full((b, t_len, k), pad_value, dtype=torch.float32)
        for r in range(b):
            chunk[r, : lens[r]] = torch.from_numpy(tracks[r][pos[r]: pos[r] + lens[r]])
        base = [0] * b if offsets is None else offsets
        off = torch.tensor([base[r] + pos[r] for r in range(b)], dtype=torch.long)
        state, d = det.step(state, chunk.to(device), torch.tensor(lens).to(device), off.to(device))
        dets += d
        pos = [p + n for p, n in zip(pos, lens)]
    # group per row in time order: a call interleaves rows
    return sorted(dets, key=lambda d: (d.row, d.end, KWS.index(d.keyword) if d.keyword in KWS else 0))


def sort_ref(dets):
    return sorted(dets, key=lambda d: (d.row, d.end, KWS.index(d.keyword)))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_random_chunks(seed):
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    k = 1 + seed % 3
    kws = KWS[:k]
    thresholds = {kws[0]: 0.6} if seed % 2 else {}
    cfg = KwsConfig(threshold=0.5, thresholds=thresholds, smoothing_frames=[1, 3, 5][seed % 3],
                    refractory_s=[0.2, 0.0, 1.0, 0.12][seed % 4])
    det = KwsDetector(kws, cfg, SHIFT)
    b = 1 + seed % 4
    tracks = [random_track(rng, int(rng.integers(20, 120)), k) for _ in range(b)]
    want = sort_ref(reference(kws, cfg, SHIFT, tracks))
    assert want, "test data should produce detections"
    # one call
    got_one = run_chunked(det, tracks, [[len(t)] for t in tracks])
    assert got_one == want
    # several random chunkings, padding that would fire if it leaked
    for max_chunk in (1, 3, 8):
        splits = [random_splits(prng, len(t), max_chunk) for t in tracks]
        assert run_chunked(det, tracks, splits, pad_value=1.0) == want


def ramp_track(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Noise plus gradual rises (linear from ~0 to a peak over 3-40 frames, held 0-30 frames, then a drop),
    as a head whose score grows while the keyword is spoken; quantized to 1/256."""
    x = rng.uniform(0.0, 0.1, size=(n, k))
    for j in range(k):
        t = int(rng.integers(0, 10))
        while t < n:
            rise, hold = int(rng.integers(3, 41)), int(rng.integers(0, 31))
            peak = rng.uniform(0.4, 1.0)
            seg = np.concatenate([np.linspace(0.0, peak, rise), np.full(hold, peak)])[: n - t]
            x[t: t + len(seg), j] = np.maximum(x[t: t + len(seg), j], seg)
            t += len(seg) + int(rng.integers(1, 30))
    return np.clip(np.round(x * 256) / 256, 0.0, 1.0).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
def test_spans_follow_gradual_rises_up_to_max_keyword_s(seed):
    """Scores that rise over many frames: spans are the rise (longer than a frame), clamped to
    MAX_KEYWORD_S before the firing frame (here 20 frames of 0.1 s) when the run is longer."""
    rng = np.random.default_rng(100 + seed)
    prng = random.Random(seed)
    shift = 0.1
    cfg = KwsConfig(threshold=[0.5, 0.7][seed % 2], smoothing_frames=[1, 3][seed // 2],
                    refractory_s=[0.0, 0.5, 1.5, 0.3][seed])
    det = KwsDetector(KWS, cfg, shift)
    assert det.max_span_frames == 20
    tracks = [ramp_track(rng, int(rng.integers(80, 200)), 3) for _ in range(3)]
    want = sort_ref(reference(KWS, cfg, shift, tracks, offsets=[0, 5, 1000]))
    for max_chunk in (1, 4, 9):
        splits = [random_splits(prng, len(t), max_chunk) for t in tracks]
        assert run_chunked(det, tracks, splits, offsets=[0, 5, 1000]) == want
    frames = [round((d.end - d.start) / shift) for d in want]
    assert all(1 <= f <= 20 for f in frames)
    assert sum(f > 1 for f in frames) > len(frames) / 2  # gradual rises give spans longer than a frame
    assert 20 in frames  # and long runs are clamped


def test_padding_nan_is_ignored():
    rng = np.random.default_rng(7)
    cfg = KwsConfig(smoothing_frames=4, refractory_s=0.3)
    det = KwsDetector(KWS, cfg, SHIFT)
    tracks = [random_track(rng, 60, 3) for _ in range(3)]
    splits = [random_splits(random.Random(r), 60, 6) for r in range(3)]
    assert run_chunked(det, tracks, splits, pad_value=float("nan")) == sort_ref(reference(KWS, cfg, SHIFT, tracks))


def test_batch_invariance_and_offsets():
    rng = np.random.default_rng(3)
    cfg = KwsConfig(threshold=0.55, smoothing_frames=2, refractory_s=0.16)
    det = KwsDetector(KWS, cfg, SHIFT)
    tracks = [random_track(rng, 80, 3) for _ in range(4)]
    offsets = [0, 100, 7, 12345]
    splits = [random_splits(random.Random(10 + r), 80, 5) for r in range(4)]
    batched = run_chunked(det, tracks, splits, offsets=offsets)
    single = []
    for r in range(4):
        for d in run_chunked(det, [tracks[r]], [splits[r]], offsets=[offsets[r]]):
            single.append(dataclasses.replace(d, row=r))
    assert batched == single == sort_ref(reference(KWS, cfg, SHIFT, tracks, offsets))


def test_state_select_and_cat():
    rng = np.random.default_rng(11)
    cfg = KwsConfig(smoothing_frames=3, refractory_s=0.2)
    det = KwsDetector(KWS, cfg, SHIFT)
    tracks = [random_track(rng, 50, 3) for _ in range(3)]
    half = 23
    st = det.init_state(3)
    first = torch.from_numpy(np.stack([t[:half] for t in tracks]))
    st, d1 = det.step(st, first, torch.full((3,), half), torch.zeros(3, dtype=torch.long))
    # keep rows 2 and 0, add a fresh stream (track 1 from its start)
    st = KwsState.cat([st.select([2, 0]), det.init_state(1)])
    rest = torch.zeros(3, 50, 3)
    rest[0, : 50 - half] = torch.from_numpy(tracks[2][half:])
    rest[1, : 50 - half] = torch.from_numpy(tracks[0][half:])
    rest[2] = torch.from_numpy(tracks[1])
    st, d2 = det.step(st, rest, torch.tensor([50 - half, 50 - half, 50]), torch.tensor([half, half, 0]))
    ref = reference(KWS, cfg, SHIFT, tracks)
    remap = {0: 1, 2: 0}
    want_tail = sorted((dataclasses.replace(d, row=remap[d.row]) for d in ref
                        if d.row in remap and d.end > half * SHIFT + 1e-9), key=lambda d: (d.row, d.end))
    want_tail += [dataclasses.replace(d, row=2) for d in ref if d.row == 1]
    assert d1 == [d for d in ref if d.end <= half * SHIFT + 1e-9]
    assert want_tail, "test data should produce detections after the split"
    assert sorted(d2, key=lambda d: (d.row, d.end, KWS.index(d.keyword))) == sort_ref(want_tail)


def test_hand_example_exact_values():
    # float64 scores so that 0.6 is exactly the Python float; threshold 0.5 -> half 0.25; refractory 0.12 s = 3 frames; no smoothing
    cfg = KwsConfig(threshold=0.5, smoothing_frames=1, refractory_s=0.12)
    det = KwsDetector(("hey",), cfg, SHIFT)
    raw = [0.0, 0.25, 0.3, 0.5, 0.9, 0.7, 0.6, 0.1, 0.5, 0.0]
    st = det.init_state(1)
    # split so the run (starting at frame 1) begins in the first chunk and fires in the second
    st, d1 = det.step(st, torch.tensor(raw[:3], dtype=torch.float64).view(1, 3, 1), torch.tensor([3]), torch.tensor([0]))
    st, d2 = det.step(st, torch.tensor(raw[3:], dtype=torch.float64).view(1, 7, 1), torch.tensor([7]), torch.tensor([3]))
    assert d1 == []
    # fires at 3 (score 0.5 >= 0.5), frames 4, 5 in refractory, fires again at 6 (3 frames later);
    # frame 8 is a new run but only 2 frames after 6 -> suppressed
    assert d2 == [Detection(0, "hey", 0.5, 1 * SHIFT, 4 * SHIFT, 3), Detection(0, "hey", 0.6, 1 * SHIFT, 7 * SHIFT, 6)]


def test_smoothing_at_stream_start_and_run_before_firing_frame():
    cfg = KwsConfig(threshold=0.5, smoothing_frames=4, refractory_s=10.0)
    det = KwsDetector(("a",), cfg, SHIFT)
    # frame 0 alone: mean 0.8 >= 0.5 -> fires immediately (average over available frames)
    st = det.init_state(1)
    _, d = det.step(st, torch.tensor([0.8, 0.0], dtype=torch.float64).view(1, 2, 1), torch.tensor([2]), torch.tensor([0]))
    assert d == [Detection(0, "a", 0.8, 0.0, SHIFT, 0)]
    # smoothed score reaches the threshold on a frame below threshold/2: the run is the latest one
    raw = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # means at frame 6: (0 + 1 + 1 + 0) / 4 = 0.5
    _, d = det.step(det.init_state(1), torch.tensor(raw, dtype=torch.float64).view(1, 7, 1), torch.tensor([7]), torch.tensor([0]))
    assert d == [Detection(0, "a", 0.5, 4 * SHIFT, 6 * SHIFT, 5)]  # fires at frame 5: (0+0+1+1)/4


def test_refractory_zero_fires_every_frame_and_disabled():
    cfg = KwsConfig(threshold=0.5, refractory_s=0.0)
    det = KwsDetector(("a",), cfg, SHIFT)
    _, d = det.step(det.init_state(1), torch.tensor([0.6, 0.7, 0.2]).view(1, 3, 1), torch.tensor([3]),
                    torch.tensor([0]))
    assert [x.end for x in d] == [SHIFT, 2 * SHIFT]
    off = KwsDetector(("a",), KwsConfig(enabled=False), SHIFT)
    st = off.init_state(2)
    _, d = off.step(st, torch.ones(2, 5, 1), torch.tensor([5, 5]), torch.tensor([0, 0]))
    assert d == []


def test_empty_chunk_and_empty_batch():
    det = KwsDetector(KWS, KwsConfig(), SHIFT)
    st = det.init_state(2)
    st2, d = det.step(st, torch.zeros(2, 0, 3), torch.tensor([0, 0]), torch.tensor([0, 0]))
    assert d == [] and st2 is st
    st0 = det.init_state(0)
    _, d = det.step(st0, torch.zeros(0, 4, 3), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert d == []


def test_input_state_is_not_modified():
    det = KwsDetector(KWS, KwsConfig(smoothing_frames=3), SHIFT)
    st = det.init_state(2)
    before = {f: getattr(st, f).clone() for f in KwsState.__dataclass_fields__}
    det.step(st, torch.rand(2, 4, 3, generator=torch.Generator().manual_seed(0)), torch.tensor([4, 2]),
             torch.tensor([0, 0]))
    for f, v in before.items():
        assert torch.equal(getattr(st, f), v)


def test_errors():
    det = KwsDetector(KWS, KwsConfig(), SHIFT)
    st = det.init_state(2)
    ok_len, ok_off = torch.tensor([2, 2]), torch.tensor([0, 0])
    with pytest.raises(ValueError, match=r"expected K = 3"):
        det.step(st, torch.zeros(2, 2, 2), ok_len, ok_off)
    with pytest.raises(ValueError, match=r"batch size 3 does not match the state's batch size 2"):
        det.step(st, torch.zeros(3, 2, 3), torch.tensor([2, 2, 2]), torch.tensor([0, 0, 0]))
    with pytest.raises(ValueError, match=r"shape \(B, T, K\)"):
        det.step(st, torch.zeros(2, 2), ok_len, ok_off)
    with pytest.raises(ValueError, match=r"lengths: expected an integer tensor of shape \(2,\)"):
        det.step(st, torch.zeros(2, 2, 3), torch.tensor([2.0, 2.0]), ok_off)
    with pytest.raises(ValueError, match=r"lengths: must be in \[0, T=2\], invalid for rows \[1\]"):
        det.step(st, torch.zeros(2, 2, 3), torch.tensor([2, 3]), ok_off)
    with pytest.raises(ValueError, match=r"scores: valid frames must be in \[0, 1\].*rows \[0\]"):
        det.step(st, torch.tensor([[[0.0, 1.5, 0.0]] * 2, [[0.0] * 3] * 2]), ok_len, ok_off)
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        det.step(st, torch.tensor([[[0.0] * 3] * 2, [[float("nan")] * 3] * 2]), ok_len, ok_off)
    st2, _ = det.step(st, torch.zeros(2, 2, 3), ok_len, ok_off)
    with pytest.raises(ValueError, match=r"frame_offset\[1\] = 5: expected 2"):
        det.step(st2, torch.zeros(2, 2, 3), ok_len, torch.tensor([2, 5]))
    with pytest.raises(ConfigError, match=r"kws.thresholds.nope: unknown keyword"):
        KwsDetector(KWS, KwsConfig(thresholds={"nope": 0.3}), SHIFT)
    with pytest.raises(ValueError, match=r"frame_shift_s must be a finite number > 0"):
        KwsDetector(KWS, KwsConfig(), 0.0)
    with pytest.raises(ValueError, match=r"keywords: duplicate"):
        KwsDetector(("a", "a"), KwsConfig(), SHIFT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_reference():
    rng = np.random.default_rng(5)
    cfg = KwsConfig(smoothing_frames=3, refractory_s=0.2)
    det = KwsDetector(KWS, cfg, SHIFT)
    tracks = [random_track(rng, 70, 3) for _ in range(3)]
    splits = [random_splits(random.Random(r), 70, 8) for r in range(3)]
    assert run_chunked(det, tracks, splits, device="cuda") == sort_ref(reference(KWS, cfg, SHIFT, tracks))


def test_refractory_frame_conversion():
    assert KwsDetector(KWS, KwsConfig(refractory_s=1.0), SHIFT).refractory_frames == 25
    assert KwsDetector(KWS, KwsConfig(refractory_s=0.12), SHIFT).refractory_frames == 3
    assert KwsDetector(KWS, KwsConfig(refractory_s=0.05), SHIFT).refractory_frames == 2
    assert math.isclose(KwsDetector(KWS, KwsConfig(), 0.03).frame_shift_s, 0.03)


def test_empty_rows_may_carry_any_frame_offset():
    cfg = KwsConfig(threshold=0.5, refractory_s=0.0)
    det = KwsDetector(("a",), cfg, SHIFT)
    st = det.init_state(2)
    st, _ = det.step(st, torch.zeros(2, 3, 1), torch.tensor([3, 3]), torch.tensor([0, 0]))
    # row 1 has no frames in this chunk: its offset is padding and must not move the expected frame
    st, _ = det.step(st, torch.zeros(2, 2, 1), torch.tensor([2, 0]), torch.tensor([3, 999]))
    st, d = det.step(st, torch.ones(2, 1, 1), torch.tensor([1, 1]), torch.tensor([5, 3]))
    assert d == [Detection(0, "a", 1.0 / 1, 5 * SHIFT, 6 * SHIFT, 5), Detection(1, "a", 1.0, 3 * SHIFT, 4 * SHIFT, 3)]


# ---------------------------------------------------------------- spans from the hypothesis


def ref_aligned_span(keyword, words, earliest_s, fire_end_s, kinds=None):
    """aligned_span from its definition, on the texts: scan every start position, keep the last match
    (kinds: counts of the outcomes "full", "cut" and "none")."""
    kw = " ".join(keyword.casefold().split())
    n = len(kw.split())
    found, kind = None, "none"
    for i, w in enumerate(words):
        if w.start < earliest_s:
            continue
        tail = " ".join(x.word.casefold() for x in words[i:])
        if (tail + " ").startswith(kw + " "):  # the whole keyword, maybe more words after it
            found, kind = (w.start, words[i + n - 1].end), "full"
        elif kw.startswith(tail):  # the hypothesis stops inside the keyword
            found, kind = (w.start, max(words[-1].end, fire_end_s)), "cut"
    if kinds is not None:
        kinds[kind] = kinds.get(kind, 0) + 1
    return found


def random_words(rng: random.Random, vocab, keyword: str) -> list[Word]:
    """0-9 random words from vocab, with the keyword's words planted in a third of the draws;
    times on the frame grid."""
    texts = [rng.choice(vocab) for _ in range(rng.randint(0, 9))]
    if rng.random() < 1 / 3:
        at = rng.randint(0, len(texts))
        texts[at:at] = keyword.split()
    words, t = [], rng.randint(0, 5)
    for text in texts:
        start = t + rng.randint(0, 3)
        t = start + rng.randint(1, 6)
        words.append(Word(text, start * SHIFT, t * SHIFT, 1.0))
    return words


@pytest.mark.parametrize("keyword", ["hey stream", "hey", "Hey  Stream now"])
def test_aligned_span_matches_reference(keyword):
    rng = random.Random(keyword)
    vocab = ["hey", "he", "h", "hey", "stream", "stream", "str", "s", "heyy", "now", "no", "turn"]
    kinds = {}
    for _ in range(3000):
        words = random_words(rng, vocab, keyword)
        earliest, fire_end = rng.randint(-3, 20) * SHIFT, rng.randint(1, 40) * SHIFT
        want = ref_aligned_span(keyword, words, earliest, fire_end, kinds)
        assert aligned_span(keyword, words, earliest, fire_end) == want, (words, earliest, fire_end)
    assert len(kinds) == 3 and min(kinds.values()) > 50, kinds


def test_aligned_span_examples():
    w = [Word("hey", 0.64, 0.76, 1.0), Word("stream", 0.84, 1.2, 1.0), Word("turn", 1.56, 1.76, 1.0),
         Word("hey", 2.0, 2.2, 1.0), Word("st", 2.3, 2.4, 1.0)]
    assert aligned_span("hey stream", w[:3], 0.0, 1.0) == (0.64, 1.2)  # the head fired inside the phrase
    assert aligned_span("hey stream", w[:3], 0.0, 1.48) == (0.64, 1.2)  # or after it
    assert aligned_span("hey stream", w[:3], 0.68, 1.48) is None  # began too long before the firing frame
    # the latest occurrence; the hypothesis stops inside it (the recognizer is behind the head)
    assert aligned_span("hey stream", w, 0.0, 2.6) == (2.0, 2.6)
    assert aligned_span("hey stream", w, 0.0, 2.32) == (2.0, 2.4)
    assert aligned_span("hey stream", w[:4], 0.0, 2.32) == (2.0, 2.32)
    assert aligned_span("HEY Stream", w[:2], 0.0, 1.0) == (0.64, 1.2)
    assert aligned_span("hey stream", [], 0.0, 1.0) is None
    assert aligned_span("hey stream", [Word("hey", 0.1, 0.2, 1.0), Word("there", 0.3, 0.5, 1.0)], 0.0, 1.0) is None
