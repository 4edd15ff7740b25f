"""Audio front end: PCM decoding, streaming resampling and log-mel features."""

from .fbank import Fbank, FbankStream, inverse_mel_scale, mel_filterbank, mel_scale, num_frames, povey_window
from .pcm import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    SUPPORTED_FORMATS,
    AudioError,
    check_sample_rate,
    decode_pcm,
    load_audio,
)
from .resample import StreamingResampler, resample

__all__ = [
    "AudioError",
    "SUPPORTED_FORMATS",
    "MIN_SAMPLE_RATE",
    "MAX_SAMPLE_RATE",
    "decode_pcm",
    "load_audio",
    "check_sample_rate",
    "StreamingResampler",
    "resample",
    "Fbank",
    "FbankStream",
    "mel_scale",
    "inverse_mel_scale",
    "mel_filterbank",
    "povey_window",
    "num_frames",
]
