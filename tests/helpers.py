"""Test helpers every area uses: tiny random models and checkpoints, synthetic audio and WAV files (no trained
model needed), JSON lines, capture and engine references.

The helpers of one area live next to its tests: the slow search references in ``tests/decode/refs.py``, the
daemon's wire-test clients in ``tests/server/wire.py``, evaluation sets in ``tests/evaluation/sets.py``, the
tiny training runs in ``tests/train/corpus.py``."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from streamd.config import DecoderConfig, EncoderConfig, FbankConfig, ModelConfig
from streamd.tokens import TokenTable
from streamd.model.checkpoint import save_checkpoint
from streamd.model.transducer import Transducer

# the checkout: configs/, pyproject.toml, README.md, streamd/
ROOT = Path(__file__).resolve().parents[1]

CHARS = ("<blk>", " ") + tuple("abcdefghijklmnopqrstuvwxyz'")
# a small bpe table's pieces: word starts ("▁turn"), the bare "▁" word boundary and some single letters
PIECES = ["<blk>", "<unk>", "▁", "▁turn", "▁on", "▁the", "▁li", "ghts", "s", "▁t", "ur", "n", "o", "h", "e",
          "l", "i", "g", "t", "▁a", "▁b", "b", "a", "y"]


def tiny_model(seed: int = 0, kind: str = "stateless", keywords=("hey stream",), chunk_size: int = 4,
               left_chunks: int = 2, ctc: bool = True, blank_bias: float = 0.0) -> Transducer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=len(CHARS), blank_id=0, joiner_dim=32, ctc_head=ctc, keywords=tuple(keywords),
        encoder=EncoderConfig(num_features=80, d_model=32, num_layers=2, num_heads=4, ff_dim=64, conv_kernel=5,
                              subsampling_channels=8, chunk_size=chunk_size, left_chunks=left_chunks, dropout=0.0),
        decoder=decoder_config(kind, 32))
    model = Transducer(cfg).eval()
    with torch.no_grad():
        model.encoder.feat_mean.fill_(-8.0)
        model.encoder.feat_std.fill_(4.0)
        model.joiner.out.weight.mul_(3.0)
        model.joiner.out.bias[0] += blank_bias
        if model.ctc is not None:
            model.ctc.weight.mul_(3.0)
            model.ctc.bias[0] += blank_bias
    return model


def write_checkpoint(path, **kw) -> str:
    save_checkpoint(path, tiny_model(**kw), TokenTable(CHARS), meta={"name": "tiny-random"})
    return str(path)


def random_audio(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Speech-like test signal: random tones and noise bursts, float32 in [-1, 1]."""
    g = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    x = np.zeros(n, dtype=np.float64)
    for _ in range(6):
        f = g.uniform(150, min(3500, rate / 2 - 100))
        on = g.uniform(0, seconds)
        env = np.exp(-((t - on) ** 2) / (2 * g.uniform(0.05, 0.3) ** 2))
        x += g.uniform(0.05, 0.3) * env * np.sin(2 * np.pi * f * t)
    x += 0.01 * g.standard_normal(n)
    return np.clip(x, -1, 1).astype(np.float32)


def decoder_config(kind: str, dim: int) -> DecoderConfig:
    """kind: "lstm", "stateless" (context 2) or "stateless-N" (context N)."""
    kind, _, context = kind.partition("-")
    return DecoderConfig(kind=kind, dim=dim, context_size=int(context or 2))


def make_model(vocab=7, kind="stateless", seed=0, joiner_dim=16, keywords=(), ctc=True, scale=2.0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab, blank_id=0, joiner_dim=joiner_dim, ctc_head=ctc, keywords=tuple(keywords),
        encoder=EncoderConfig(num_features=20, d_model=16, num_layers=1, num_heads=2, ff_dim=32, conv_kernel=3,
                              subsampling_channels=4, chunk_size=4, left_chunks=2, dropout=0.0),
        decoder=decoder_config(kind, 12), fbank=FbankConfig(num_mel_bins=20))
    m = Transducer(cfg).eval()
    with torch.no_grad():  # sharper distributions so searches actually disagree / emit
        m.joiner.out.weight.mul_(scale)
    return m


def speechlike(rng: np.random.Generator, seconds: float, rate: int = 16000) -> np.ndarray:
    """Harmonic signal with a wandering pitch (120 +- 30 Hz) and a syllable-rate (4 Hz) envelope, plus a
    faint noise floor: (round(seconds * rate),) float32, for augmentation tests that need voiced audio."""
    n = int(seconds * rate)
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * np.arange(n) / rate)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 15))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n) / rate)
    return (0.2 * x * env + 0.01 * rng.standard_normal(n)).astype(np.float32)


def write_wav(path, x, rate=16000, channels=1):
    """Write a 16-bit PCM WAV file and return its path as a string.

    x: float samples in [-1, 1] ((N,) mono, or (N * channels,) interleaved), or s16le bytes written as they are."""
    import wave

    pcm = x if isinstance(x, (bytes, bytearray)) else (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return str(path)


# --------------------------------------------------------------------------- capture and engine references


def real_portaudio_without_inputs():
    """Skip the calling test unless the real PortAudio library is usable and sees no input device."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        pytest.skip(f"sounddevice/PortAudio not usable here ({e}); CI installs libportaudio2")
    if any(d["max_input_channels"] > 0 for d in sd.query_devices()):
        pytest.skip("this machine has an audio input device")


def transcribe_events(ckpt, wav):
    """The events ``streamd.feed.transcribe_files`` gives for one file with a fresh recognizer on ``ckpt``."""
    from streamd.feed import transcribe_files
    from streamd.engine import Recognizer

    return transcribe_files(Recognizer.from_checkpoint(ckpt), [wav])[wav]


# --------------------------------------------------------------------------- data files


def write_jsonl(path, rows):
    """Write ``rows`` (dicts) as JSON lines to ``path``; returns the path as a string."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# --------------------------------------------------------------------------- speech synthesis


def _tts_engine_available(engine: str) -> bool:
    from streamd.train.tts import engine_available

    return engine_available(engine)


# marks the tests that synthesize speech with espeak-ng (CI installs it)
needs_espeak = pytest.mark.skipif(not _tts_engine_available("espeak"),
                                  reason="espeak-ng is not installed (apt-get install espeak-ng)")


# --------------------------------------------------------------------------- the streaming reference


@torch.no_grad()
def offline_heads(rec, x):
    """The reference for streaming: the whole utterance's fbank (the signal, then the engine's end-of-stream
    flush), one encoder forward under the chunk mask, the heads.  Returns (HeadOutputs, enc_len (1,))."""
    from streamd.audio.fbank import Fbank, FbankStream

    fs = FbankStream(rec.model.cfg.fbank)
    fs.accept(x)
    fs.accept(rec.tail_padding)
    fs.finish()
    n = fs.frames_ready()
    feats = Fbank(rec.model.cfg.fbank)(torch.from_numpy(fs.take(n))[None])
    enc, enc_len = rec.model.encoder(feats, torch.tensor([n]))
    return rec.model.heads(enc), enc_len
