#!/usr/bin/env python3
"""Stream the microphone to a running streamd daemon and print live results.

    python clients/mic_client.py --url ws://127.0.0.1:8765/v1/stream [--device N|NAME] [--token T]
    python clients/mic_client.py --list-devices
    python clients/mic_client.py --wav FILE      # play a file as if it were the microphone

Capture: a sounddevice ``InputStream`` callback (PortAudio's thread) copies
each block and hands it to the asyncio loop with ``call_soon_threadsafe``
into a bounded queue (never blocking the callback; dropped blocks are
counted).  The sender converts blocks to s16le and sends them as binary
frames after ``{"type": "start", "sample_rate": <capture rate>, "format":
"s16le"}`` and ``ready``.  Ctrl-C (or the end of --wav) sends ``eof``; the
client prints the last final and exits when the server says ``done``.

Output: the partial is rewritten in place; finals show per-word confidence
(colored on a terminal, ``word[0.93]`` otherwise); wake words are
highlighted.  Exit status: 0 normally, 1 on a server error or a lost
connection, 2 when there is no input device or sounddevice/PortAudio is
missing (with a message saying what to install or to use --wav).

Needs ``websockets`` and numpy; ``sounddevice`` (and the system library
libportaudio2) for a real microphone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
import wave

import numpy as np

NO_DEVICE = ("no audio input device found; plug in a microphone, pick one with --device (see --list-devices), "
             "or play a file as the microphone with --wav FILE")


class MicUnavailable(Exception):
    """No usable microphone: the message says why and what to do."""


def _sounddevice():
    try:
        import sounddevice as sd
    except ImportError:
        raise MicUnavailable("needs the Python package sounddevice (pip install sounddevice)") from None
    except OSError as e:
        raise MicUnavailable(f"sounddevice needs the system library libportaudio2 "
                             f"(apt-get install libportaudio2): {e}") from None
    return sd


def input_devices() -> list[dict]:
    sd = _sounddevice()
    return [d for d in sd.query_devices() if d["max_input_channels"] > 0]


class Capture:
    """Blocks of float32 mono samples from a sound card or a WAV file, into an asyncio queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop, block_seconds: float = 0.1, max_blocks: int = 50):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.block_seconds = block_seconds
        self.max_blocks = max_blocks
        self.dropped = 0
        self.rate = 0
        self._stream = None
        self._stop = threading.Event()

    # thread side
    def _push(self, x) -> None:
        try:
            self.loop.call_soon_threadsafe(self._put, x)
        except RuntimeError:  # loop closed
            pass

    # loop side
    def _put(self, x) -> None:
        if x is not None and self.queue.qsize() >= self.max_blocks:
            self.dropped += 1
            return
        self.queue.put_nowait(x)  # None = end of audio

    def open_device(self, device, rate: int) -> None:
        sd = _sounddevice()
        if not input_devices():
            raise MicUnavailable(NO_DEVICE)
        try:
            info = sd.query_devices(device, kind="input") if device is None else sd.query_devices(device)
        except (ValueError, sd.PortAudioError) as e:
            raise MicUnavailable(f"input device {device!r}: {e}; see --list-devices") from None
        if info["max_input_channels"] < 1:
            raise MicUnavailable(f"device {device!r} ({info['name']}) has no input channels; see --list-devices")
        try:
            sd.check_input_settings(device=info["index"], channels=1, dtype="float32", samplerate=rate)
        except Exception:  # noqa: BLE001 - rate not supported: use the device's own
            rate = int(info["default_samplerate"])
        self.rate = rate

        def callback(indata, frames, time_info, status):
            self._push(indata[:, 0].copy())

        def finished():
            if not self._stop.is_set():
                self._push(MicUnavailable(f"input device {info['name']!r} stopped (lost or unplugged?)"))

        try:
            self._stream = sd.InputStream(samplerate=rate, blocksize=int(rate * self.block_seconds),
                                          device=info["index"], channels=1, dtype="float32", callback=callback,
                                          finished_callback=finished)
            self._stream.start()
        except (sd.PortAudioError, ValueError) as e:
            raise MicUnavailable(f"cannot open input device {info['name']!r} at {rate} Hz: {e}") from None

    def open_wav(self, path: str) -> None:
        with wave.open(path, "rb") as w:
            ch, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
        if width != 2:
            raise MicUnavailable(f"{path}: only 16-bit PCM WAV files can be played as the microphone")
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768
        x = x[: len(x) - len(x) % ch].reshape(-1, ch).mean(axis=1)
        self.rate = rate
        step = max(1, int(rate * self.block_seconds))

        def play():  # real-time pace, like a sound card
            t0 = time.monotonic()
            for i in range(0, x.size, step):
                if self._stop.wait(max(0.0, t0 + i / rate - time.monotonic())):
                    break
                self._push(x[i: i + step].copy())
            self._push(None)

        threading.Thread(target=play, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.abort()
            self._stream.close()
            self._stream = None
        self._push(None)


class Printer:
    """Partial in place; finals with per-word confidence; wake words highlighted."""

    def __init__(self, out=sys.stdout, color: bool | None = None):
        self.out = out
        self.color = out.isatty() if color is None else color
        self.partial = 0

    def _clear(self) -> str:
        n, self.partial = self.partial, 0
        return "" if not n else "\r\x1b[2K" if self.color else "\r" + " " * n + "\r"

    def _word(self, w: dict) -> str:
        c = float(w.get("conf", 0))
        if not self.color:
            return f"{w['word']}[{c:.2f}]"
        return f"\x1b[{'32' if c >= 0.8 else '33' if c >= 0.5 else '31'}m{w['word']}\x1b[0m"

    def event(self, m: dict) -> None:
        t = m.get("type")
        if t == "partial":
            line = f"... {m.get('text', '')}"[-200:] if m.get("text") else ""
            self.out.write(self._clear() + line)
            self.partial = len(line)
        elif t == "final" and m.get("text"):
            words = " ".join(self._word(w) for w in m.get("words", ())) or m["text"]
            self.out.write(f"{self._clear()}[{m.get('start', 0):7.2f}-{m.get('end', 0):7.2f}] {words}\n")
        elif t == "wake":
            where = f"{m.get('start', 0):.2f}-{m.get('end', 0):.2f} s"
            line = (f"\x1b[1;7;35m WAKE {m['keyword']} \x1b[0m score {m.get('score', 0):.2f} at {where}"
                    if self.color else f"*** WAKE {m['keyword']!r} score={m.get('score', 0):.2f} at {where} ***")
            self.out.write(self._clear() + line + "\n")
        elif t == "error":
            self.out.write(self._clear())
            print(f"mic_client: server error {m.get('code')}: {m.get('message')}", file=sys.stderr)
        self.out.flush()


async def run(args: argparse.Namespace) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    loop = asyncio.get_running_loop()
    cap = Capture(loop)
    if args.wav:
        cap.open_wav(args.wav)
    else:
        cap.open_device(args.device, args.rate)
    printer = Printer()
    status = 0
    try:
        loop.add_signal_handler(signal.SIGINT, cap.stop)
    except (NotImplementedError, RuntimeError):
        pass
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    try:
        async with connect(args.url, additional_headers=headers, max_size=None, open_timeout=10) as ws:
            start = {"type": "start", "sample_rate": cap.rate, "format": "s16le"}
            if args.method:
                start["method"] = args.method
            await ws.send(json.dumps(start))
            ready = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if ready.get("type") != "ready":
                printer.event(ready)
                return 1
            print(f"mic_client: streaming {cap.rate} Hz to {args.url} (session {ready.get('session')}); "
                  "Ctrl-C to stop", file=sys.stderr)

            async def send() -> None:
                nonlocal status
                while True:
                    x = await cap.queue.get()
                    if isinstance(x, Exception):  # device lost: finish with what was sent
                        print(f"\nmic_client: {x}", file=sys.stderr)
                        status = 1
                        break
                    if x is None:
                        break
                    await ws.send(np.clip(np.round(x * 32768), -32768, 32767).astype("<i2").tobytes())
                await ws.send(json.dumps({"type": "eof"}))

            sender = asyncio.create_task(send())
            try:
                async for raw in ws:
                    if isinstance(raw, str):
                        m = json.loads(raw)
                        printer.event(m)
                        if m.get("type") == "error":
                            status = 1
            finally:
                sender.cancel()
            if ws.close_code != 1000:
                print(f"mic_client: connection closed with code {ws.close_code} {ws.close_reason}", file=sys.stderr)
                status = 1
    except InvalidStatus as e:
        print(f"mic_client: server refused the connection: HTTP {e.response.status_code}", file=sys.stderr)
        return 1
    except (OSError, asyncio.TimeoutError, ConnectionClosed) as e:
        print(f"mic_client: cannot talk to {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        cap.stop()
        printer.out.write(printer._clear())
    if cap.dropped:
        print(f"mic_client: {cap.dropped} audio blocks dropped (network too slow)", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Stream the microphone to a streamd daemon and print live results.")
    ap.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="daemon URL (default %(default)s)")
    ap.add_argument("--device", type=lambda v: int(v) if v.isdigit() else v,
                    help="input device index or name substring (default: the system default)")
    ap.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    ap.add_argument("--wav", metavar="FILE", help="play a 16-bit WAV file in real time instead of the microphone")
    ap.add_argument("--rate", type=int, default=16000, help="capture rate (default 16000; else the device's)")
    ap.add_argument("--method", help="search method (default: the server's)")
    ap.add_argument("--token", help="bearer token")
    args = ap.parse_args(argv)
    try:
        if args.list_devices:
            devs = input_devices()
            if not devs:
                raise MicUnavailable(NO_DEVICE)
            for d in devs:
                print(f"{d['index']:3d}  {d['name']}  ({d['max_input_channels']} ch, {d['default_samplerate']:.0f} Hz)")
            return 0
        return asyncio.run(run(args))
    except MicUnavailable as e:
        print(f"mic_client: {e}", file=sys.stderr)
        return 2
    except (OSError, wave.Error) as e:
        print(f"mic_client: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
