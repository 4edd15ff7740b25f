"""streamd.capture: the microphone capture (a sound card, or a file or blocks played as one).

No sound card here or in CI.  The capture path is tested with injected
sources (which go through the same callback -> loop -> bounded queue path),
the sounddevice adapter with a fake ``sounddevice`` module (a test double of
the hardware: device table, callback thread, device loss), and the real
PortAudio library for the "no input device" message.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import types

import numpy as np
import pytest

from helpers import random_audio
from helpers import real_portaudio_without_inputs as _real_portaudio_without_inputs
from streamd import capture
from streamd.capture import MicCapture, MicError, ReplaySource
from helpers import write_wav as _write_wav


def _collect(cap: MicCapture) -> list[np.ndarray]:
    async def run():
        return [b async for b in cap.blocks()]

    return asyncio.run(run())


def _blocks(seed: int, n: int, rate: int = 16000) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    return [g.uniform(-1, 1, int(g.integers(1, 3 * rate // 10))).astype(np.float32) for _ in range(n)]


# ---------------------------------------------------------------------------- capture queue


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_blocks_arrive_in_order_and_unchanged(seed):
    blocks = _blocks(seed, 30)
    cap = MicCapture(sample_rate=8000, source=ReplaySource(blocks, speed=0), queue_seconds=100)
    got = _collect(cap)
    assert cap.sample_rate == 8000 and cap.overflows == 0
    assert len(got) == len(blocks)
    for a, b in zip(got, blocks):
        assert a.dtype == np.float32 and a.ndim == 1
        np.testing.assert_array_equal(a, b)


def test_stereo_blocks_are_averaged_to_mono():
    x = np.stack([np.full(160, 0.5, np.float32), np.full(160, -0.25, np.float32)], axis=1)
    got = _collect(MicCapture(source=ReplaySource([x], speed=0)))
    np.testing.assert_allclose(got[0], np.full(160, 0.125, np.float32))


def test_iterable_source_is_paced_in_real_time():
    blocks = [np.zeros(1600, np.float32)] * 3  # 0.3 s at 16 kHz
    loop_t = []

    async def run():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async for _ in MicCapture(source=blocks).blocks():
            loop_t.append(loop.time() - t0)

    asyncio.run(run())
    assert len(loop_t) == 3 and loop_t[-1] >= 0.28


def test_unpaced_file_source_waits_for_a_slow_consumer_and_loses_nothing():
    """--speed 0: the file thread waits for queue room; every block arrives, in order, none dropped."""
    blocks = _blocks(4, 40)
    src = ReplaySource(blocks, speed=0)
    assert src.lossless and not ReplaySource(blocks, speed=1.0).lossless
    cap = MicCapture(sample_rate=16000, block_seconds=0.1, source=src, queue_seconds=0.5)  # 5 blocks

    async def run():
        got = []
        async for b in cap.blocks():
            got.append(b)
            assert cap._queue.qsize() <= cap.max_blocks
            await asyncio.sleep(0.002)  # a consumer slower than the source
        return got

    got = asyncio.run(run())
    assert cap.overflows == 0 and len(got) == len(blocks)
    for a, b in zip(got, blocks):
        np.testing.assert_array_equal(a, b)


def test_full_queue_drops_and_counts_blocks_without_blocking_the_source():
    blocks = _blocks(3, 40)
    src = ReplaySource(blocks, speed=0)
    src.lossless = False  # a source that cannot wait, as a sound card
    cap = MicCapture(sample_rate=16000, block_seconds=0.1, source=src, queue_seconds=0.5)  # 5 blocks

    async def run():
        cap.start()
        await asyncio.to_thread(src._thread.join, 5)  # the source finished without waiting for us
        assert not src._thread.is_alive()
        for _ in range(5):
            await asyncio.sleep(0)
        return [b async for b in cap.blocks()]

    got = asyncio.run(run())
    assert cap.max_blocks == 5
    assert len(got) == 5 and cap.overflows == 35
    for a, b in zip(got, blocks):  # the oldest blocks are kept, later ones dropped
        np.testing.assert_array_equal(a, b)


def test_failing_source_raises_mic_error_with_its_reason():
    def gen():
        yield np.zeros(100, np.float32)
        raise OSError("disk vanished")

    cap = MicCapture(source=ReplaySource(gen(), speed=0, name="test source"))
    with pytest.raises(MicError, match=r"test source failed: OSError: disk vanished"):
        _collect(cap)


def test_bad_block_shape_is_a_clear_error():
    cap = MicCapture(source=ReplaySource([np.zeros((2, 2, 2), np.float32)], speed=0))
    with pytest.raises(MicError, match=r"block 0 must be \(N,\) or \(N, C\) samples, got shape \(2, 2, 2\)"):
        _collect(cap)


def test_silent_source_is_reported_as_lost():
    class Silent:
        sample_rate = 16000

        def start(self, on_block, on_end, sample_rate, blocksize):
            pass

        def stop(self):
            pass

        def __repr__(self):
            return "silent test device"

    with pytest.raises(MicError, match=r"no audio from silent test device for 0.2 s \(device lost"):
        _collect(MicCapture(source=Silent(), stall_seconds=0.2))


def test_stop_ends_the_iteration():
    def endless():
        while True:
            yield np.zeros(160, np.float32)

    cap = MicCapture(source=ReplaySource(endless(), speed=5.0))

    async def run():
        n, queued = 0, None
        async for _ in cap.blocks():
            n += 1
            if n == 3:
                queued = cap._queue.qsize()  # these still come out; nothing after the stop
                cap.stop()
        return n, queued

    n, queued = asyncio.run(run())
    assert n == 3 + queued


@pytest.mark.parametrize("kw, msg", [
    ({"sample_rate": 4000}, "sample_rate must be an integer 8000..48000, got 4000"),
    ({"block_seconds": 0}, "block_seconds must be 0.001..2.0, got 0"),
    ({"queue_seconds": 0.01}, r"queue_seconds \(0.01\) must hold at least one block \(0.1 s\)"),
])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        MicCapture(source=[], **kw)


def test_bad_source_type():
    with pytest.raises(TypeError, match="source must be None, a file path, an AudioSource or an iterable"):
        MicCapture(source=42)


def test_wav_source_plays_the_file_at_its_rate(tmp_path):
    x = random_audio(0.55, 22050, seed=4)
    p = _write_wav(tmp_path / "a.wav", x, 22050)
    cap = MicCapture(sample_rate=22050, source=capture.WavSource(p, speed=0))
    got = _collect(cap)
    assert cap.sample_rate == cap.source_rate == 22050
    assert [b.size for b in got] == [2205] * 5 + [x.size - 5 * 2205]
    np.testing.assert_allclose(np.concatenate(got), x, atol=1e-4)  # 16-bit quantization


@pytest.mark.parametrize("rate, block", [(22050, 0.1), (8000, 0.037), (48000, 0.25)])
def test_sources_at_another_rate_are_resampled_to_the_capture_rate(tmp_path, rate, block):
    from streamd.audio.pcm import load_audio
    from streamd.audio.resample import resample

    p = _write_wav(tmp_path / "a.wav", random_audio(0.7, rate, seed=5), rate)
    cap = MicCapture(sample_rate=16000, source=capture.WavSource(p, speed=0, block_seconds=block))
    got = np.concatenate(_collect(cap))
    assert cap.sample_rate == 16000 and cap.source_rate == rate
    want = resample(load_audio(p)[0], rate, 16000)  # one-shot reference
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_wav_source_missing_file(tmp_path):
    with pytest.raises(MicError, match="no such file"):
        capture.WavSource(tmp_path / "nope.wav")


# ---------------------------------------------------------------------------- sounddevice adapter (fake hardware)


class _Flags:
    def __init__(self, overflow=False):
        self.input_overflow = overflow


def _fake_sounddevice(devices, default_in=-1, rates=None, lose_after=None, blocks=6):
    """A stand-in ``sounddevice`` module: a device table and an InputStream whose thread calls back."""

    class PortAudioError(Exception):
        pass

    sd = types.ModuleType("sounddevice")
    sd.PortAudioError = PortAudioError
    sd.default = types.SimpleNamespace(device=[default_in, -1])
    sd.opened = []

    def query_devices(device=None, kind=None):
        if device is None and kind is None:
            return list(devices)
        if device is None:
            if default_in < 0:
                raise PortAudioError("Error querying device -1")
            return devices[default_in]
        if isinstance(device, str):
            hits = [d for d in devices if device.lower() in d["name"].lower()]
            if len(hits) != 1:
                raise ValueError(f"No input/output device matching {device!r}")
            return hits[0]
        if not 0 <= device < len(devices):
            raise PortAudioError(f"Error querying device {device}")
        return devices[device]

    def check_input_settings(device, channels, dtype, samplerate):
        if rates is not None and samplerate not in rates:
            raise PortAudioError("Invalid sample rate")

    class InputStream:
        def __init__(self, samplerate, blocksize, device, channels, dtype, callback, finished_callback):
            assert channels == 1 and dtype == "float32"
            self.rate, self.blocksize, self.device = samplerate, blocksize, device
            self.callback, self.finished = callback, finished_callback
            self.stopped = threading.Event()
            self.sent = []
            sd.opened.append(self)

        def start(self):
            threading.Thread(target=self._run, daemon=True).start()

        def _run(self):
            g = np.random.default_rng(7)
            n = lose_after if lose_after is not None else blocks
            for i in range(n):
                if self.stopped.is_set():
                    break
                x = g.uniform(-1, 1, (self.blocksize, 1)).astype(np.float32)
                self.sent.append(x[:, 0].copy())
                self.callback(x, self.blocksize, None, _Flags(overflow=i == 1))
                x[:] = 0  # PortAudio reuses its buffer: the capture must have copied
            if lose_after is not None or self.stopped.is_set():
                self.finished()  # stream stopped on its own = device lost
            else:
                self.stopped.wait(5)
                self.finished()

        def abort(self):
            self.stopped.set()

        def close(self):
            pass

    sd.query_devices, sd.check_input_settings, sd.InputStream = query_devices, check_input_settings, InputStream
    sd.query_hostapis = lambda: ({"name": "ALSA"},)
    return sd


def _dev(i, name, ins, rate=48000.0):
    return {"index": i, "name": name, "hostapi": 0, "max_input_channels": ins, "max_output_channels": 2,
            "default_samplerate": rate}


DEVICES = [_dev(0, "HDA Intel PCH: ALC3246 Analog", 2), _dev(1, "HDMI out", 0), _dev(2, "USB Mic", 1, 44100.0)]


def test_list_devices_reports_inputs_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", _fake_sounddevice(DEVICES, default_in=2))
    devs = capture.list_devices()
    assert [d["index"] for d in devs] == [0, 2]
    assert devs[1] == {"index": 2, "name": "USB Mic", "hostapi": "ALSA", "channels": 1,
                       "default_samplerate": 44100.0, "default": True}
    assert "* " in capture.format_devices(devs).splitlines()[1]


def test_device_blocks_flow_through_the_queue_and_stop_cleanly(monkeypatch):
    sd = _fake_sounddevice(DEVICES, default_in=0, blocks=6)
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    cap = MicCapture(sample_rate=16000, block_seconds=0.02)

    async def run():
        got = []
        async for b in cap.blocks():
            got.append(b)
            if len(got) == 6:
                cap.stop()
        return got

    got = asyncio.run(run())
    (stream,) = sd.opened
    assert stream.device == 0 and stream.rate == 16000 and stream.blocksize == 320
    assert len(got) == 6
    for a, b in zip(got, stream.sent):
        np.testing.assert_array_equal(a, b)  # copied before PortAudio reused the buffer
    assert cap.device_overflows == 1 and cap.overflows == 0


def test_device_rate_falls_back_to_the_device_default(monkeypatch):
    sd = _fake_sounddevice(DEVICES, default_in=0, rates={44100}, blocks=2)
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    cap = MicCapture(device="usb", sample_rate=16000, block_seconds=0.1)

    async def run():
        async for _ in cap.blocks():
            cap.stop()

    asyncio.run(run())
    assert sd.opened[0].device == 2 and sd.opened[0].rate == 44100 and sd.opened[0].blocksize == 4410
    assert cap.source_rate == 44100 and cap.sample_rate == 16000  # resampled for the consumer


def test_device_loss_is_a_mic_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", _fake_sounddevice(DEVICES, default_in=0, lose_after=3))
    cap = MicCapture(block_seconds=0.01)
    got = []

    async def run():
        async for b in cap.blocks():
            got.append(b)

    with pytest.raises(MicError, match=r"input device 'HDA Intel PCH: ALC3246 Analog' stopped delivering audio "
                                       r"\(device lost or unplugged\?\)"):
        asyncio.run(run())
    assert len(got) == 3  # the audio before the loss was delivered


@pytest.mark.parametrize("devices, default_in, device, msg", [
    ([], -1, None, "no audio input device found"),
    ([DEVICES[1]], -1, None, "no audio input device found"),
    (DEVICES, -1, None, r"no default input device is set \(Error querying device -1\); see `streamd mic --list-devices`"),
    (DEVICES, 0, 7, r"no audio device 7 \(Error querying device 7\)"),
    (DEVICES, 0, "webcam", r"input device 'webcam': No input/output device matching 'webcam'"),
    (DEVICES, 0, 1, r"audio device 1 \(HDMI out\) has no input channels"),
])
def test_device_selection_errors(monkeypatch, devices, default_in, device, msg):
    monkeypatch.setitem(sys.modules, "sounddevice", _fake_sounddevice(devices, default_in))
    with pytest.raises(MicError, match=msg):
        MicCapture(device)


def test_portaudio_library_missing(monkeypatch, tmp_path):
    (tmp_path / "sounddevice.py").write_text("raise OSError('PortAudio library not found')\n")
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MicError) as e:
        capture.list_devices()
    assert str(e.value).startswith(
        "sounddevice needs the system library libportaudio2 (apt-get install libportaudio2)")


def test_sounddevice_package_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)
    with pytest.raises(MicError, match=r"needs the Python package sounddevice \(pip install 'streamd\[mic\]'\)"):
        MicCapture()


# ---------------------------------------------------------------------------- the real PortAudio library


def test_real_portaudio_no_device_message():
    _real_portaudio_without_inputs()
    with pytest.raises(MicError, match="no audio input device found"):
        MicCapture()
    assert capture.list_devices() == []


# ---------------------------------------------------------------------------- no console


def test_capture_has_no_console_output():
    """The capture module prints nothing and writes to no terminal: messages are MicError texts and log records."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(capture.__file__).read_text(encoding="utf-8"))
    calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "print" not in calls
    streams = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and n.attr in ("stdout", "stderr", "isatty", "get_terminal_size")]
    assert streams == []
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"sys", "shutil", "signal", "mic", "streamd.mic"}
