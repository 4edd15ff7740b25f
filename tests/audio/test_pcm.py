"""PCM decoding, file loading and sample-rate validation."""

from __future__ import annotations

import struct
import wave

import numpy as np
import pytest

from streamd.audio import pcm
from streamd.audio.pcm import SUPPORTED_FORMATS, AudioError, check_sample_rate, decode_pcm, load_audio


def _oracle_s16(data: bytes) -> list[float]:
    return [v / 32768.0 for (v,) in struct.iter_unpack("<h", data)]


def test_supported_formats():
    assert SUPPORTED_FORMATS == ("s16le", "f32le")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_s16le_matches_struct_oracle(seed):
    rng = np.random.default_rng(seed)
    ints = rng.integers(-32768, 32768, size=257).astype("<i2")
    ints[:3] = [-32768, 32767, 0]
    data = ints.tobytes()
    for payload in (data, bytearray(data), memoryview(data)):
        x = decode_pcm(payload, "s16le")
        assert x.dtype == np.float32 and x.shape == (257,)
        np.testing.assert_array_equal(x, np.asarray(_oracle_s16(data), dtype=np.float32))
    assert decode_pcm(data, "s16le")[0] == -1.0


def test_f32le_roundtrip_and_clamp():
    vals = np.array([0.0, 0.5, -0.25, 1.0, -1.0, 1.5, -3.0, 999.0], dtype="<f4")
    x = decode_pcm(vals.tobytes(), "f32le")
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, [0.0, 0.5, -0.25, 1.0, -1.0, 1.0, -1.0, 1.0])
    x[0] = 7.0  # result is a writable copy
    # a strided (non-contiguous) memoryview decodes the bytes it views
    raw = (np.arange(8, dtype="<f4") / 10).tobytes()
    interleaved = bytes(b for pair in zip(raw, b"\xff" * len(raw)) for b in pair)
    mv = memoryview(interleaved)[::2]
    assert not mv.contiguous
    np.testing.assert_array_equal(decode_pcm(mv, "f32le"), np.arange(8, dtype="<f4") / 10)


def test_empty_packet():
    for fmt in SUPPORTED_FORMATS:
        x = decode_pcm(b"", fmt)
        assert x.dtype == np.float32 and x.shape == (0,)


def test_unknown_format():
    with pytest.raises(AudioError, match="unknown audio format 'mp3'; supported: s16le, f32le") as e:
        decode_pcm(b"\0\0", "mp3")
    assert e.value.code == "bad_format"
    assert isinstance(e.value, ValueError)


def test_ragged_length_says_both_numbers():
    with pytest.raises(AudioError, match="multiple of 2 bytes per packet, got 3 bytes") as e:
        decode_pcm(b"\0\0\0", "s16le")
    assert e.value.code == "bad_audio"
    with pytest.raises(AudioError, match="multiple of 4 bytes per packet, got 6 bytes"):
        decode_pcm(b"\0" * 6, "f32le")


def test_interleaved_channels_are_averaged():
    frames = np.array([[1000, 3000], [-2000, 0], [32767, -32768]], dtype="<i2")
    x = decode_pcm(frames.tobytes(), "s16le", channels=2)
    assert x.dtype == np.float32 and x.shape == (3,)
    np.testing.assert_array_equal(x, frames.astype(np.float32).mean(axis=1) / 32768)
    mono = np.array([0.25, -0.5], dtype="<f4")
    np.testing.assert_array_equal(decode_pcm(np.repeat(mono, 2).tobytes(), "f32le", channels=2), mono)
    with pytest.raises(AudioError, match="4 bytes .*whole frames.* got 6"):
        decode_pcm(bytes(6), "s16le", channels=2)
    with pytest.raises(AudioError) as e:
        decode_pcm(bytes(4), "s16le", channels=0)
    assert e.value.code == "bad_format"


def test_non_bytes_rejected():
    with pytest.raises(AudioError, match="audio data must be bytes, got str"):
        decode_pcm("abcd", "s16le")


def test_non_finite_f32():
    vals = np.array([0.1, np.nan, 0.2, np.inf, -np.inf], dtype="<f4")
    with pytest.raises(AudioError, match="3 non-finite samples .*first at sample 1") as e:
        decode_pcm(vals.tobytes(), "f32le")
    assert e.value.code == "bad_audio"


def test_absurd_f32():
    vals = np.array([0.1, 0.2, 5000.0, -1e6], dtype="<f4")
    with pytest.raises(AudioError, match=r"absurd sample values .*2 samples, first at sample 2 = 5000"):
        decode_pcm(vals.tobytes(), "f32le")


# ----------------------------------------------------------------------------- sample rate


@pytest.mark.parametrize("rate", [8000, 11025, 16000, 44100, 48000, np.int32(22050)])
def test_check_sample_rate_ok(rate):
    out = check_sample_rate(rate)
    assert out == int(rate) and type(out) is int


def test_check_sample_rate_bad():
    with pytest.raises(AudioError, match=r"^sample_rate must be 8000\.\.48000, got 5$") as e:
        check_sample_rate(5)
    assert e.value.code == "bad_sample_rate"
    for bad in (7999, 48001, -16000, 0):
        with pytest.raises(AudioError, match=f"got {bad}$"):
            check_sample_rate(bad)
    for bad in (16000.0, "16000", True, None):
        with pytest.raises(AudioError, match="must be an integer") as e:
            check_sample_rate(bad)
        assert e.value.code == "bad_sample_rate"


# ----------------------------------------------------------------------------- files


def _write_wav(path, frames: np.ndarray, rate: int, width: int = 2) -> None:
    """frames: (N, C) int array already scaled to the sample width."""
    dtype = {1: np.uint8, 2: "<i2", 3: None, 4: "<i4"}[width]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        if width == 3:
            raw = b"".join(int(v).to_bytes(3, "little", signed=True) for v in frames.reshape(-1))
        else:
            raw = frames.astype(dtype).tobytes()
        w.writeframes(raw)


@pytest.fixture(params=["soundfile", "wave"])
def backend(request, monkeypatch):
    if request.param == "soundfile":
        pytest.importorskip("soundfile")
    else:
        monkeypatch.setattr(pcm, "_soundfile", lambda: None)
    return request.param


def test_load_mono_and_stereo(tmp_path, backend):
    rng = np.random.default_rng(0)
    st = rng.integers(-20000, 20000, size=(1000, 2))
    _write_wav(tmp_path / "st.wav", st, 22050)
    x, rate = load_audio(tmp_path / "st.wav")
    assert rate == 22050 and x.dtype == np.float32 and x.shape == (1000,)
    np.testing.assert_allclose(x, st.mean(axis=1) / 32768.0, atol=1e-6)

    mono = rng.integers(-32768, 32768, size=(321, 1))
    _write_wav(tmp_path / "mono.wav", mono, 8000)
    x, rate = load_audio(str(tmp_path / "mono.wav"))
    assert rate == 8000
    np.testing.assert_array_equal(x, mono[:, 0].astype(np.float32) / 32768.0)


def test_load_empty_wav(tmp_path, backend):
    _write_wav(tmp_path / "e.wav", np.zeros((0, 1), dtype=np.int16), 16000)
    x, rate = load_audio(tmp_path / "e.wav")
    assert rate == 16000 and x.shape == (0,) and x.dtype == np.float32


def test_load_errors(tmp_path, backend):
    with pytest.raises(AudioError, match="no such file") as e:
        load_audio(tmp_path / "missing.wav")
    assert e.value.code == "bad_audio"
    (tmp_path / "junk.wav").write_bytes(b"this is not audio at all" * 10)
    with pytest.raises(AudioError, match="cannot read audio file .*junk.wav"):
        load_audio(tmp_path / "junk.wav")


def test_wave_fallback_unsupported_width(tmp_path, monkeypatch):
    monkeypatch.setattr(pcm, "_soundfile", lambda: None)
    _write_wav(tmp_path / "w24.wav", np.zeros((10, 1), dtype=np.int64), 16000, width=3)
    with pytest.raises(AudioError, match="24-bit WAV is not supported without the soundfile package"):
        load_audio(tmp_path / "w24.wav")


def test_a_truncated_wav_is_an_error_naming_the_file(tmp_path):
    """A WAV whose data chunk announces more bytes than the file holds is refused (both readers would decode
    what is there without a word); a streaming writer's "length unknown" header is read as it is."""
    from streamd.audio.pcm import wav_truncation

    path = tmp_path / "full.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.arange(1600, dtype="<i2").tobytes())
    full = path.read_bytes()
    assert wav_truncation(path) is None and load_audio(path)[0].size == 1600
    cut = tmp_path / "cut.wav"
    cut.write_bytes(full[:-1000])
    with pytest.raises(AudioError, match=r"cut\.wav.*truncated WAV: its header announces 3200 bytes of audio, "
                                         r"the file holds 2200"):
        load_audio(cut)
    stream = tmp_path / "stream.wav"
    i = full.index(b"data")
    stream.write_bytes(full[:i + 4] + struct.pack("<I", 0xFFFFFFFF) + full[i + 8:-1000])
    assert wav_truncation(stream) is None
    (tmp_path / "text.txt").write_bytes(b"not audio")
    assert wav_truncation(tmp_path / "text.txt") is None
