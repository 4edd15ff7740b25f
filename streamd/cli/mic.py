"""``streamd mic``: live transcription of the microphone (or of ``--wav FILE`` played as the microphone)
in-process: a capture (:mod:`streamd.capture`) shown by the console app (:func:`streamd.mic.run_console`)."""

from __future__ import annotations

import argparse
import sys

from ..engine_args import add_engine_args, engine_config_from_args
from ..paths import model_arg

__all__ = ["add_parser", "run", "WAV_HINT"]

# what `streamd mic` (not the daemon, which has no --wav) adds to a capture error
WAV_HINT = "; or play an audio file as the microphone: streamd mic --wav FILE"


def _input_device(v: str) -> int | str:
    """``--mic-device``: a PortAudio index or a name substring."""
    return int(v) if v.lstrip("-").isdigit() else v


def _devices(args: argparse.Namespace) -> tuple[int | str | None, str | None]:
    """(input device, compute device) from ``--mic-device`` / ``--device`` / the deprecated spellings.

    ``--device`` is the compute device, as in every command; a value that names no compute device (an index
    or a name: ``mic --device 3``, the old meaning) is still taken as the input device, with a warning, as is
    ``--compute-device`` for the compute device."""
    from ..config import ConfigError, check_device

    compute, device = args.compute_device, args.device
    if compute is not None:
        print("streamd mic: --compute-device is deprecated; use --device (the compute device, as in every "
              "command)", file=sys.stderr)
    if device is not None:
        try:
            check_device(device)
            compute = device
        except ConfigError:
            print(f"streamd mic: --device {device}: an input device there is deprecated; use --mic-device "
                  f"{device} (--device is the compute device: auto, cpu, cuda or cuda:N)", file=sys.stderr)
            if args.input_device is None:
                return _input_device(device), compute
    return args.input_device, compute


def run(args: argparse.Namespace) -> int:
    """Live transcription of the microphone (or of --wav FILE played as the microphone) in-process."""
    from ..capture import NO_INPUT_DEVICE, MicCapture, MicError, WavSource, format_devices, list_devices

    input_device, compute = _devices(args)
    try:
        if args.list_devices:
            devices = list_devices()
            print(format_devices(devices), file=sys.stdout if devices else sys.stderr)
            return 0 if devices else 2
        source = None
        if args.wav:
            source = WavSource(args.wav, speed=args.speed)
        capture = MicCapture(input_device, sample_rate=args.rate, source=source)
    except MicError as e:
        print(f"streamd mic: {e}{WAV_HINT if str(e) == NO_INPUT_DEVICE else ''}", file=sys.stderr)
        return 2
    from ..engine import Recognizer
    from ..mic import run_console

    ns = argparse.Namespace(**{**vars(args), "device": compute})
    from ..second_pass.process import second_pass_runner

    cfg = engine_config_from_args(ns)
    rec = Recognizer.from_checkpoint(model_arg(args.model), cfg)
    rec.warm_up()  # live audio: one-off costs (the encoder's recording) before the first word, as the daemon
    second = second_pass_runner(cfg, rec.calibration is not None)
    auto = {"auto": None, "always": True, "never": False}
    return run_console(rec, capture, color=auto[args.color], partials=auto[args.partials], second=second)


def add_parser(sub) -> None:
    c = sub.add_parser("mic", help="live transcription of the microphone in-process")
    c.add_argument("--mic-device", dest="input_device", metavar="N|NAME", type=_input_device,
                   help="input device: PortAudio index or name substring (default: the system default input; "
                        "as serve's --mic-device)")
    c.add_argument("--list-devices", action="store_true", help="list input devices and exit")
    c.add_argument("--wav", metavar="FILE", help="play FILE as if it were the microphone (no sound card needed)")
    c.add_argument("--speed", type=float, default=1.0, help="--wav playback speed (1 = real time, 0 = no pacing)")
    c.add_argument("--rate", type=int, default=16000, help="capture sample rate in Hz (default 16000)")
    c.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(c)
    c.add_argument("--device", help="compute device of the engine: auto, cpu, cuda or cuda:N (an input device "
                                    "here is the deprecated spelling of --mic-device)")
    c.add_argument("--compute-device", help=argparse.SUPPRESS)  # deprecated: --device
    c.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colored words by confidence (auto: when stdout is a terminal)")
    c.add_argument("--partials", choices=("auto", "always", "never"), default="auto",
                   help="the live partial line, rewritten in place (auto: when stdout is a terminal; a pipe "
                        "gets one line per final and wake word)")
    c.set_defaults(func=run)
