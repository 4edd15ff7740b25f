"""Training runs in a test: a tiny model config, a synthetic corpus and a TrainConfig over them."""

from __future__ import annotations

import copy
import json
import wave

import numpy as np


# a model small enough to train for a few steps in a test
TINY_MODEL = {
    "vocab_size": 29, "joiner_dim": 32, "keywords": ["hey stream"],
    "encoder": {"num_features": 20, "d_model": 32, "num_layers": 2, "num_heads": 2, "ff_dim": 64, "conv_kernel": 5,
                "subsampling_channels": 8, "chunk_size": 4, "left_chunks": 2, "dropout": 0.0},
    "decoder": {"dim": 32}, "fbank": {"num_mel_bins": 20},
}


def make_corpus(root, items):
    """items: (text, seconds, keyword) -> manifest with 16 kHz 16-bit WAVs (a distinct tone + noise each)."""
    (root / "wav").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    lines = []
    for i, (text, sec, kw) in enumerate(items):
        t = np.arange(int(sec * 16000)) / 16000
        x = 0.3 * np.sin(2 * np.pi * (250 + 170 * i) * t * (1 + 0.5 * t)) + 0.01 * rng.standard_normal(len(t))
        with wave.open(str(root / "wav" / f"{i}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
        lines.append(json.dumps({"audio": f"wav/{i}.wav", "text": text, "duration": len(t) / 16000, "keyword": kw}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root / "manifest.jsonl"


def tiny_config(exp_dir, manifest, **over):
    """A TrainConfig of a tiny model (TINY_MODEL) for a few steps on ``manifest``; ``over``: keys like
    ``optim__lr`` (``__`` between levels) set over it."""
    from streamd.config import from_dict
    from streamd.train.trainer import TrainConfig

    data = {"exp_dir": str(exp_dir), "model": copy.deepcopy(TINY_MODEL),
            "data": {"train": [str(manifest)], "max_frames": 400, "num_workers": 0},
            "optim": {"lr": 5e-3, "warmup_steps": 3, "schedule": "constant"},
            "chunk_sizes": [2, 4, -1], "left_chunks": [1, -1],
            "steps": 30, "log_every": 10, "checkpoint_every": 100, "num_threads": 1, "seed": 3}
    return from_dict(TrainConfig, set_nested(data, over))


def set_nested(data: dict, over: dict) -> dict:
    """``data`` with ``over``'s values set in place, keys ``a__b__c`` naming nested mappings (created as needed)."""
    for k, v in over.items():
        node = data
        *parents, last = k.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return data
