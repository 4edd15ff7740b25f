#!/usr/bin/env python3
"""Stream the microphone to a running streamd daemon and print live results.

    python clients/mic_client.py --url ws://127.0.0.1:8765/v1/stream [--device N|NAME] [--token T]
    python clients/mic_client.py --list-devices
    python clients/mic_client.py --wav FILE      # play a file as if it were the microphone

A thin command-line user of :mod:`streamd.client`: ``MicSource`` captures
(``streamd.capture``: a sounddevice callback hands each block to the event loop
through a bounded queue, never blocking PortAudio's thread; dropped blocks are
counted), ``Client.stream`` sends it as s16le after ``start`` / ``ready``, and
the events are printed by ``streamd.mic.ConsoleRenderer`` (the same output as
``streamd mic``).  Ctrl-C (or the end of --wav) sends ``eof``; the client
prints the last final and exits when the server says ``done``.

Output: the partial is rewritten in place; finals show per-word confidence
(colored on a terminal, ``word[0.93]`` otherwise); wake words are
highlighted.  Exit status: 0 normally, 1 on a server error or a lost
connection, 2 when there is no input device or sounddevice/PortAudio is
missing (with a message saying what to install or to use --wav).

Runs from a checkout without installing streamd (it finds the package next to
this folder) or with streamd installed; needs ``websockets`` and numpy, not
torch; ``sounddevice`` (and the system library libportaudio2) for a real
microphone.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

try:
    from streamd import capture, mic
    from streamd.client import Client, ClientError, MicSource
except ImportError:  # a checkout without streamd installed: the package is next to this folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from streamd import capture, mic
    from streamd.client import Client, ClientError, MicSource

HINT = "; or play a file as the microphone with --wav FILE (input devices: --list-devices)"


async def run(args: argparse.Namespace) -> int:
    source = MicSource(args.device, sample_rate=args.rate, file=args.wav)
    partials = {"auto": sys.stdout.isatty(), "always": True, "never": False}[args.partials]
    render = mic.ConsoleRenderer(sys.stdout, partials=partials)  # auto: a pipe gets finals and wake words only
    status = 0
    async with Client(args.url, args.token) as client:
        stream = client.stream(source, method=args.method)
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, stream.stop)
        except (NotImplementedError, RuntimeError):
            pass
        try:
            async for ev in stream.messages():
                if ev.get("type") == "ready":
                    print(f"mic_client: streaming {source.sample_rate} Hz to {args.url} (session "
                          f"{ev.get('session')}); Ctrl-C to stop", file=sys.stderr)
                    continue
                render.event(ev)
                if ev.get("type") == "error":
                    status = 1
        except capture.MicError as e:
            if stream.ready is None:  # the device could not be opened: exit status 2
                raise
            render.close()  # the device went away: the stream was finished with what was sent
            print(f"mic_client: {e}", file=sys.stderr)
            return 1
        except ClientError as e:
            render.close()
            print(f"mic_client: {e}", file=sys.stderr)
            return 1
        finally:
            render.close()
            source.stop()
    if stream.ready is not None and stream.close_code != 1000:
        print(f"mic_client: connection closed with code {stream.close_code} {stream.close_reason}", file=sys.stderr)
        status = 1
    if source.dropped:
        print(f"mic_client: {source.dropped} audio blocks dropped (network too slow)", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Stream the microphone to a streamd daemon and print live results.")
    ap.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="daemon URL (default %(default)s)")
    ap.add_argument("--device", type=lambda v: int(v) if v.isdigit() else v,
                    help="input device index or name substring (default: the system default)")
    ap.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    ap.add_argument("--wav", metavar="FILE", help="play an audio file in real time instead of the microphone")
    ap.add_argument("--rate", type=int, default=16000, help="capture rate (default 16000; else the device's)")
    ap.add_argument("--method", help="search method (default: the server's)")
    ap.add_argument("--token", help="bearer token")
    ap.add_argument("--partials", choices=("auto", "always", "never"), default="auto",
                    help="the live partial line, rewritten in place (auto: when stdout is a terminal)")
    args = ap.parse_args(argv)
    try:
        if args.list_devices:
            devices = capture.list_devices()
            if not devices:
                raise capture.MicError(capture.NO_INPUT_DEVICE)
            print(capture.format_devices(devices))
            return 0
        return asyncio.run(run(args))
    except capture.MicError as e:
        print(f"mic_client: {e}{HINT}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # e.g. an unreadable --wav file, a bad --rate
        print(f"mic_client: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
