"""What ``streamd eval`` does besides decoding: :class:`EvalOptions` and its defaults."""

from __future__ import annotations

from dataclasses import dataclass

from streamd.audio.pcm import check_sample_rate

__all__ = ["EvalOptions", "BANK_ALPHAS", "DEFAULT_THRESHOLDS"]

BANK_ALPHAS: tuple[float, ...] = (0.25, 0.33, 0.5, 1.0)
DEFAULT_THRESHOLDS: tuple[float, ...] = tuple(round(i / 100, 2) for i in range(5, 100))


@dataclass(frozen=True)
class EvalOptions:
    """What ``streamd eval`` does besides decoding (see the CLI flags)."""

    resample_to: int | None = None
    batch_streams: int = 16
    rtf_single: bool = False
    piece_seconds: float = 0.1
    limit: int | None = None
    alphas: tuple[float, ...] = BANK_ALPHAS
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    second_pass_batch: int = 1

    def __post_init__(self) -> None:
        if self.resample_to is not None:
            check_sample_rate(self.resample_to)
        if isinstance(self.batch_streams, bool) or not isinstance(self.batch_streams, int) or self.batch_streams < 1:
            raise ValueError(f"batch_streams must be an integer >= 1, got {self.batch_streams!r}")
        if not 0 < self.piece_seconds <= 10:
            raise ValueError(f"piece_seconds must be in (0, 10], got {self.piece_seconds!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ValueError(f"limit must be an integer >= 1, got {self.limit!r}")
        if (isinstance(self.second_pass_batch, bool) or not isinstance(self.second_pass_batch, int)
                or self.second_pass_batch < 1):
            raise ValueError(f"second_pass_batch must be an integer >= 1, got {self.second_pass_batch!r}")
        if not self.alphas or any(not a > 0 for a in self.alphas):
            raise ValueError(f"alphas must be numbers > 0, got {self.alphas!r}")
        if not self.thresholds or any(not 0 < t < 1 for t in self.thresholds):
            raise ValueError(f"thresholds must be in (0, 1), got {self.thresholds!r}")
