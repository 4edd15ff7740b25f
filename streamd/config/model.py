"""Feature and model sections: ``FbankConfig``, ``EncoderConfig``, ``DecoderConfig``, ``ModelConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import _check, _one_of, _positive


@dataclass(frozen=True)
class FbankConfig:
    """Log-mel filterbank front end (Kaldi-like, no dither: deterministic)."""

    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    preemphasis: float = 0.97
    low_freq: float = 20.0
    high_freq: float = 7600.0
    log_floor: float = 1e-10

    def __post_init__(self) -> None:
        _check(self.sample_rate == 16000, "sample_rate", f"the model runs at 16000 Hz, got {self.sample_rate}")
        _check(8 <= self.num_mel_bins <= 256, "num_mel_bins", f"must be 8..256, got {self.num_mel_bins}")
        _positive(self.frame_length_ms, "frame_length_ms")
        _positive(self.frame_shift_ms, "frame_shift_ms")
        _check(self.frame_shift_ms <= self.frame_length_ms, "frame_shift_ms", "must be <= frame_length_ms")
        _check(0.0 <= self.preemphasis < 1.0, "preemphasis", f"must be in [0, 1), got {self.preemphasis}")
        _check(0 <= self.low_freq < self.high_freq <= self.sample_rate / 2, "high_freq",
               f"need 0 <= low_freq < high_freq <= {self.sample_rate / 2}, got {self.low_freq}, {self.high_freq}")
        _positive(self.log_floor, "log_floor")

    @property
    def frame_length(self) -> int:
        """Window length in samples (400 at 16 kHz / 25 ms)."""
        return int(round(self.sample_rate * self.frame_length_ms / 1000))

    @property
    def frame_shift(self) -> int:
        """Hop in samples (160 at 16 kHz / 10 ms)."""
        return int(round(self.sample_rate * self.frame_shift_ms / 1000))


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class EncoderConfig:
    """Streaming Conformer encoder: causal conv subsampling x4, chunked attention.

    ``chunk_size`` is in encoder frames (after subsampling, 40 ms each at a 10 ms
    fbank shift); ``left_chunks`` bounds the attention left context in chunks.
    """

    num_features: int = 80
    d_model: int = 144
    num_layers: int = 8
    num_heads: int = 4
    ff_dim: int = 576
    conv_kernel: int = 15
    subsampling_channels: int = 32
    chunk_size: int = 8
    left_chunks: int = 4
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("num_features", "d_model", "num_layers", "num_heads", "ff_dim", "conv_kernel",
                     "subsampling_channels", "chunk_size", "left_chunks"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v > 0, name, f"must be a positive integer, got {v!r}")
        _check(self.d_model % self.num_heads == 0, "d_model",
               f"must be divisible by num_heads ({self.num_heads}), got {self.d_model}")
        _check((self.d_model // self.num_heads) % 2 == 0, "d_model",
               "d_model / num_heads must be even (rotary position embedding)")
        _check(self.conv_kernel >= 2, "conv_kernel", f"must be >= 2, got {self.conv_kernel}")
        _check(0.0 <= self.dropout < 1.0, "dropout", f"must be in [0, 1), got {self.dropout}")

    @property
    def left_context(self) -> int:
        """Attention left context in encoder frames."""
        return self.left_chunks * self.chunk_size


@dataclass(frozen=True)
class DecoderConfig:
    """Prediction network: ``stateless`` (icefall, context_size tokens) or ``lstm``."""

    kind: str = "stateless"
    dim: int = 256
    context_size: int = 2
    num_layers: int = 1

    def __post_init__(self) -> None:
        _one_of(self.kind, ("stateless", "lstm"), "kind")
        _check(self.dim > 0, "dim", f"must be > 0, got {self.dim}")
        _check(self.context_size >= 1, "context_size", f"must be >= 1, got {self.context_size}")
        _check(self.num_layers >= 1, "num_layers", f"must be >= 1, got {self.num_layers}")


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild the network; stored in every checkpoint."""

    vocab_size: int = 32
    blank_id: int = 0
    joiner_dim: int = 256
    ctc_head: bool = True
    keywords: tuple[str, ...] = ()
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    fbank: FbankConfig = field(default_factory=FbankConfig)

    def __post_init__(self) -> None:
        _check(self.vocab_size >= 2, "vocab_size", f"must be >= 2, got {self.vocab_size}")
        _check(0 <= self.blank_id < self.vocab_size, "blank_id", f"must be in [0, vocab_size), got {self.blank_id}")
        _check(self.joiner_dim > 0, "joiner_dim", f"must be > 0, got {self.joiner_dim}")
        _check(len(set(self.keywords)) == len(self.keywords), "keywords", "duplicate keyword")
        _check(self.encoder.num_features == self.fbank.num_mel_bins, "encoder.num_features",
               f"must equal fbank.num_mel_bins ({self.fbank.num_mel_bins}), got {self.encoder.num_features}")
        for i, k in enumerate(self.keywords):
            _check(isinstance(k, str) and k.strip() == k and k != "", f"keywords[{i}]", f"bad keyword {k!r}")

    @property
    def frame_shift_s(self) -> float:
        """Duration of one encoder output frame in seconds (subsampling x4)."""
        return 4 * self.fbank.frame_shift_ms / 1000.0
