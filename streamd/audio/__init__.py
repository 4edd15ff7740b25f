"""Audio front end: PCM decoding, streaming resampling and log-mel features.

:mod:`.pcm` and :mod:`.resample` need only numpy and are imported here; :mod:`.fbank` (torch) is imported on
first use of one of its names, so that light users (``streamd.client``, the wire protocol) do not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .pcm import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    SUPPORTED_FORMATS,
    AudioError,
    check_sample_rate,
    decode_pcm,
    load_audio,
    wav_truncation,
)
from .pcm import __all__ as _PCM_NAMES
from .resample import StreamingResampler, resample

_FBANK_NAMES = ("Fbank", "FbankStream", "mel_scale", "inverse_mel_scale", "mel_filterbank", "povey_window",
                "num_frames")

__all__ = [*_PCM_NAMES, "StreamingResampler", "resample", *_FBANK_NAMES]


def __getattr__(name: str) -> Any:
    """The torch-backed feature names (and the ``fbank`` submodule), imported on first use."""
    if name in _FBANK_NAMES or name == "fbank":
        module = importlib.import_module(".fbank", __name__)
        return module if name == "fbank" else getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
