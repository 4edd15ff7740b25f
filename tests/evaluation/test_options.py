"""streamd.evaluation.options: what ``streamd eval`` does besides decoding, and its checks."""

import dataclasses

import pytest

from streamd.audio.pcm import AudioError
from streamd.evaluation.options import BANK_ALPHAS, DEFAULT_THRESHOLDS, EvalOptions


def test_defaults():
    o = EvalOptions()
    assert (o.resample_to, o.batch_streams, o.rtf_single, o.piece_seconds, o.limit) == (None, 16, False, 0.1, None)
    assert o.alphas == BANK_ALPHAS == (0.25, 0.33, 0.5, 1.0)
    assert o.thresholds == DEFAULT_THRESHOLDS and o.second_pass_batch == 1
    assert DEFAULT_THRESHOLDS[0] == 0.05 and DEFAULT_THRESHOLDS[-1] == 0.99 and len(DEFAULT_THRESHOLDS) == 95
    assert all(round(b - a, 2) == 0.01 for a, b in zip(DEFAULT_THRESHOLDS, DEFAULT_THRESHOLDS[1:]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.limit = 3  # type: ignore[misc]


def test_valid_settings_are_kept():
    o = EvalOptions(resample_to=8000, batch_streams=1, rtf_single=True, piece_seconds=10, limit=1, alphas=(2.0,),
                    thresholds=(0.5,))
    assert (o.resample_to, o.batch_streams, o.piece_seconds, o.limit, o.alphas, o.thresholds) == \
        (8000, 1, 10, 1, (2.0,), (0.5,))


@pytest.mark.parametrize("kw, msg", [
    ({"batch_streams": 0}, "batch_streams must be an integer >= 1, got 0"),
    ({"batch_streams": True}, "batch_streams must be an integer >= 1, got True"),
    ({"batch_streams": 2.0}, "batch_streams must be an integer >= 1, got 2.0"),
    ({"piece_seconds": 0}, r"piece_seconds must be in \(0, 10\], got 0"),
    ({"piece_seconds": 10.5}, r"piece_seconds must be in \(0, 10\]"),
    ({"piece_seconds": float("nan")}, r"piece_seconds must be in \(0, 10\]"),
    ({"limit": 0}, "limit must be an integer >= 1, got 0"),
    ({"limit": False}, "limit must be an integer >= 1, got False"),
    ({"second_pass_batch": 0}, "second_pass_batch must be an integer >= 1, got 0"),
    ({"second_pass_batch": True}, "second_pass_batch must be an integer >= 1, got True"),
    ({"alphas": ()}, "alphas must be numbers > 0"),
    ({"alphas": (0.5, 0.0)}, "alphas must be numbers > 0"),
    ({"thresholds": ()}, r"thresholds must be in \(0, 1\)"),
    ({"thresholds": (0.5, 1.0)}, r"thresholds must be in \(0, 1\)"),
    ({"thresholds": (0.0,)}, r"thresholds must be in \(0, 1\)"),
])
def test_bad_settings_name_the_option(kw, msg):
    with pytest.raises(ValueError, match=msg):
        EvalOptions(**kw)


@pytest.mark.parametrize("rate", [4000, 96000, 16000.5])
def test_resample_to_must_be_a_supported_rate(rate):
    with pytest.raises(AudioError):
        EvalOptions(resample_to=rate)
