"""Training data: manifests, feature cache, bucketing sampler, collate, SpecAugment (vs loop oracles)."""

import json
import math

import numpy as np
import pytest
import torch

from helpers import write_wav
from streamd.audio.fbank import Fbank
from streamd.audio.pcm import load_audio
from streamd.audio.resample import resample
from streamd.config import FbankConfig
from streamd.tokens import TokenTable
from streamd.train.data import (AsrDataset, LengthBucketSampler, SpecAugmentMasks, apply_spec_augment, collate,
                                default_char_tokens, feature_stats, read_manifest, sample_spec_augment,
                                sample_spectral_eq)

FB = FbankConfig(num_mel_bins=20)
TOKENS = TokenTable(default_char_tokens())


def make_corpus(root, items, rate=16000, with_duration=True):
    """items: list of (text, seconds, keyword or None) -> manifest path; audio = tone + noise."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "wav").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for i, (text, sec, kw) in enumerate(items):
        t = np.arange(int(sec * rate)) / rate
        x = 0.3 * np.sin(2 * np.pi * (300 + 150 * i) * t) + 0.01 * rng.standard_normal(len(t))
        write_wav(root / "wav" / f"{i}.wav", x, rate)
        entry = {"audio": f"wav/{i}.wav", "text": text, "voice": "test", "keyword": kw}
        if with_duration:
            entry["duration"] = len(t) / rate
        lines.append(json.dumps(entry))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root / "manifest.jsonl"


def test_default_tokens():
    toks = default_char_tokens()
    assert len(toks) == 29 and toks[0] == "<blk>" and toks[1] == " " and toks[-1] == "'"
    assert TOKENS.encode("it's a b") == [toks.index(c) for c in "it's a b"]


def test_dataset_features_targets_and_cache(tmp_path):
    man = make_corpus(tmp_path / "c", [("hey stream", 0.5, "hey stream"), ("no", 0.3, None)])
    ds = AsrDataset([str(man.parent) + "/./" + man.name], TOKENS, FB, keywords=("hey stream",))
    assert len(ds) == 2
    ex = ds[0]
    x, rate = load_audio(tmp_path / "c" / "wav" / "0.wav")
    ref = Fbank(FB)(torch.from_numpy(x)[None])[0]
    torch.testing.assert_close(ex.feats, ref)
    assert ex.tokens.tolist() == TOKENS.encode("hey stream") and ex.kws == 0 and ex.num_samples == len(x)
    assert ds[1].kws == -1
    assert ds.frames.tolist() == [Fbank(FB).num_frames(8000), Fbank(FB).num_frames(4800)]
    cached = list((tmp_path / "c").glob("fbank-*/wav/*.pt"))
    assert len(cached) == 2
    # the cache is used: tamper with it (same audio size/mtime) and the tampered value comes back
    obj = torch.load(cached[0], weights_only=True)
    obj["feats"] = obj["feats"] + 1.0
    torch.save(obj, cached[0])
    name = cached[0].name.removesuffix(".pt")
    idx = 0 if name == "0.wav" else 1
    assert torch.equal(ds[idx].feats, obj["feats"])
    # no cache: recomputed
    ds2 = AsrDataset([man], TOKENS, FB, keywords=("hey stream",), cache_features=False)
    torch.testing.assert_close(ds2[0].feats, ref)


def test_resampled_audio_and_header_duration(tmp_path):
    man = make_corpus(tmp_path / "c", [("ab", 0.4, None)], rate=8000, with_duration=False)
    ds = AsrDataset([man], TOKENS, FB, cache_features=False)
    x, rate = load_audio(tmp_path / "c" / "wav" / "0.wav")
    assert rate == 8000 and ds.utterances[0].duration == pytest.approx(0.4)
    y = resample(x, 8000, 16000)
    torch.testing.assert_close(ds[0].feats, Fbank(FB)(torch.from_numpy(y)[None])[0])
    assert ds[0].num_samples == len(y)


def test_manifest_errors(tmp_path):
    man = make_corpus(tmp_path / "c", [("ok", 0.3, None)])
    bad = tmp_path / "c" / "bad.jsonl"
    bad.write_text('{"audio": "wav/0.wav", "text": "ok"}\n{"audio": "wav/0.wav"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: 'text' must be a string"):
        read_manifest(bad)
    bad.write_text('{"audio": "wav/missing.wav", "text": "ok"}\n')
    with pytest.raises(FileNotFoundError, match="line 1: audio file .*missing.wav does not exist"):
        read_manifest(bad)
    bad.write_text('{"audio": "wav/0.wav", "text": "ok"\n')
    with pytest.raises(ValueError, match="line 1: invalid JSON"):
        read_manifest(bad)
    bad.write_text('{"audio": "wav/0.wav", "text": "route 66"}\n')
    with pytest.raises(ValueError, match=r"line 1: cannot encode text 'route 66'.*\['6'\]"):
        AsrDataset([bad], TOKENS, FB)
    bad.write_text('{"audio": "wav/0.wav", "text": "ok", "keyword": "hello"}\n')
    with pytest.raises(ValueError, match="keyword 'hello' is not one of the model's keywords"):
        AsrDataset([bad], TOKENS, FB, keywords=("hey stream",))
    assert len(AsrDataset([man], TOKENS, FB, max_duration=0.2)) == 0


def test_collate_pads():
    from streamd.train.data import Example

    exs = [Example(torch.randn(5, 3), torch.tensor([3, 4]), -1, 900),
           Example(torch.randn(2, 3), torch.tensor([5, 6, 7]), 1, 400)]
    b = collate(exs)
    assert b.feats.shape == (2, 5, 3) and b.targets.shape == (2, 3)
    assert b.feat_lengths.tolist() == [5, 2] and b.target_lengths.tolist() == [2, 3]
    assert torch.equal(b.feats[1, :2], exs[1].feats) and (b.feats[1, 2:] == 0).all()
    assert b.targets.tolist() == [[3, 4, 0], [5, 6, 7]]
    assert b.kws_target.tolist() == [-1, 1] and b.num_samples.tolist() == [900, 400]


def test_feature_stats_matches_concatenation(tmp_path):
    man = make_corpus(tmp_path / "c", [("a", 0.3, None), ("b", 0.5, None), ("c", 0.2, None)])
    ds = AsrDataset([man], TOKENS, FB)
    mean, std = feature_stats(ds, [0, 2])
    allf = torch.cat([ds[0].feats, ds[2].feats]).double()
    torch.testing.assert_close(mean, allf.mean(0).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(std, allf.std(0, unbiased=False).float(), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- sampler


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_frames", [50, 300, 2000])
def test_bucket_sampler_properties(seed, max_frames):
    rng = np.random.default_rng(seed)
    frames = rng.integers(10, 400, size=57)
    s = LengthBucketSampler(frames, max_frames, seed=seed, bucket_frames=30)
    for epoch in range(3):
        batches = s.epoch_batches(epoch)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(57))  # every utterance exactly once
        for b in batches:
            assert len(b) == 1 or len(b) * frames[b].max() <= max_frames
        assert batches == s.epoch_batches(epoch)  # deterministic
    if max_frames == 2000:
        assert s.epoch_batches(0) != s.epoch_batches(1)  # reshuffled per epoch
    # resuming mid-epoch yields the same continuation
    it = s.iter_from(0, 0)
    seq = [next(it) for _ in range(len(s.epoch_batches(0)) + 3)]
    it2 = s.iter_from(*seq[2][:2])
    assert [next(it2) for _ in range(len(seq) - 2)] == seq[2:]


def test_bucket_sampler_errors():
    with pytest.raises(ValueError, match="max_frames must be >= 1"):
        LengthBucketSampler([3, 4], 0)
    with pytest.raises(ValueError, match="non-empty"):
        LengthBucketSampler([], 10)


# --------------------------------------------------------------------------- SpecAugment


def spec_augment_reference(feats, masks, fill):
    """Loop oracle: write fill into every masked row / column of every utterance."""
    out = feats.clone()
    for b in range(feats.shape[0]):
        for s, w in zip(masks.time_start[b].tolist(), masks.time_width[b].tolist()):
            out[b, s:s + w, :] = fill
        for s, w in zip(masks.freq_start[b].tolist(), masks.freq_width[b].tolist()):
            out[b, :, s:s + w] = fill[s:s + w]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("batch", [1, 4])
def test_spec_augment_matches_reference(seed, batch):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 60, (batch,), generator=g)
    feats = torch.randn(batch, 64, 20, generator=g)
    fill = torch.randn(20, generator=g)
    masks = sample_spec_augment(lengths, 20, 3, 12, 0.3, 2, 6, g)
    assert ((masks.time_start + masks.time_width) <= lengths[:, None]).all()
    assert (masks.time_width <= torch.minimum(torch.tensor(12), (lengths * 0.3).floor().long())[:, None]).all()
    assert ((masks.freq_start + masks.freq_width) <= 20).all() and (masks.freq_width <= 6).all()
    torch.testing.assert_close(apply_spec_augment(feats, masks, fill), spec_augment_reference(feats, masks, fill))


def test_spec_augment_deterministic_and_masks_something():
    lengths = torch.tensor([200, 150])
    a = sample_spec_augment(lengths, 80, 2, 40, 0.2, 2, 15, torch.Generator().manual_seed(5))
    b = sample_spec_augment(lengths, 80, 2, 40, 0.2, 2, 15, torch.Generator().manual_seed(5))
    assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in SpecAugmentMasks.__dataclass_fields__)
    assert a.time_width.sum() > 0 and a.freq_width.sum() > 0


def test_spectral_eq_matches_formula_and_is_bounded():
    g = torch.Generator().manual_seed(3)
    eq = sample_spectral_eq(5, 80, 6.0, g)
    assert eq.shape == (5, 80) and eq.dtype == torch.float32
    again = sample_spectral_eq(5, 80, 6.0, torch.Generator().manual_seed(3))
    assert torch.equal(eq, again)
    # oracle: redraw the same coefficients and evaluate the curve bin by bin
    coef = torch.rand(5, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 - 1
    for b in range(5):
        a, c1, c2 = (coef[b] * torch.tensor([6.0, 3.0, 1.5], dtype=torch.float64)).tolist()
        for k in range(80):
            u = k / 79
            db = a * (u - 0.5) + c1 * math.cos(math.pi * u) + c2 * math.cos(2 * math.pi * u)
            assert abs(float(eq[b, k]) - db * math.log(10) / 10) < 1e-5
    assert eq.abs().max() <= 1.25 * 6.0 * math.log(10) / 10 + 1e-6
    assert eq.std(dim=1).min() > 0  # each utterance gets a non-flat curve
    assert torch.equal(sample_spectral_eq(2, 80, 0.0, g), torch.zeros(2, 80))
    with pytest.raises(ValueError, match="max_db"):
        sample_spectral_eq(2, 80, -1.0, g)
