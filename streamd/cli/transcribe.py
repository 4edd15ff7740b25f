"""``streamd transcribe FILE...``: decode files through the streaming engine exactly as the daemon does
(chunked audio, batched steps, endpointing), all files as concurrent streams of one Recognizer
(:func:`streamd.feed.feed_streams`).

Every file is read and checked before the model loads (a missing, unreadable or truncated file is an error
naming it; the others are still decoded, and the exit status says so at the end).  A file at a rate no live
stream takes (96 kHz, say) is resampled once to 16 kHz (:func:`streamd.feed.load_stream_audio`).  Finals are
printed as they come, one line each with their times; ``--json`` prints every event.  A progress line on
stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from .engine_args import add_engine_args, engine_config_from_args
from ..feed import feed_streams, load_stream_audio
from ..paths import model_arg

__all__ = ["add_parser", "run", "Progress", "final_line"]


def final_line(ev, path: str | None = None) -> str:
    """Plain output of one final: ``[  start-    end] text`` (the times in seconds, as ``streamd mic`` prints
    them), after ``path`` and a tab when several files are decoded together."""
    line = f"[{ev.start:7.2f}-{ev.end:7.2f}] {ev.text}"
    return line if path is None else f"{path}\t{line}"


class Progress:
    """One line on a terminal, rewritten in place: files done, audio seconds decoded, speed (x real time).

    :meth:`update` is called as often as one likes (it redraws at most every ``interval`` seconds);
    :meth:`clear` before anything else is printed on the terminal, :meth:`close` at the end."""

    def __init__(self, out: TextIO, files: int, seconds: float, interval: float = 0.2):
        self.out, self.files, self.seconds, self.interval = out, files, seconds, interval
        self.done, self.fed = 0, 0.0
        self.start = time.monotonic()
        self._drawn = 0.0
        self._shown = False

    def line(self, now: float) -> str:
        wall = max(now - self.start, 1e-9)
        frac = self.fed / self.seconds if self.seconds > 0 else 1.0
        bar = "#" * int(20 * min(frac, 1.0))
        speed = f"  {self.fed / wall:.1f}x real time" if wall >= 1.0 else ""  # not before it means something
        return f"[{bar:20s}] {self.done}/{self.files} files  {self.fed:.1f}/{self.seconds:.1f} s of audio{speed}"

    def update(self, fed: float | None = None, force: bool = False) -> None:
        if fed is not None:
            self.fed = fed
        now = time.monotonic()
        if force or now - self._drawn >= self.interval:
            self._drawn = now
            self.out.write("\r\x1b[2K" + self.line(now))
            self.out.flush()
            self._shown = True

    def file_done(self) -> None:
        self.done += 1
        self.update(force=True)

    def clear(self) -> None:
        if self._shown:
            self.out.write("\r\x1b[2K")
            self.out.flush()
            self._shown = False

    def close(self) -> None:
        self.clear()


def run(args: argparse.Namespace) -> int:
    cfg = engine_config_from_args(args)  # bad flags first
    status = 0
    audio = {}
    for p in dict.fromkeys(args.files):  # each file read and checked before the model loads
        try:
            audio[p] = load_stream_audio(p)
        except (OSError, ValueError) as e:  # AudioError names the file; an OSError may not
            print(f"streamd transcribe: {e if p in str(e) else f'{p}: {e}'}", file=sys.stderr)
            status = 2
    if not audio:
        return status
    from ..engine import Recognizer
    from ..second_pass.calibration import second_pass_for
    from ..second_pass.rescore import pending

    rec = Recognizer.from_checkpoint(model_arg(args.model), cfg)
    files = list(audio)
    several = len(args.files) > 1
    progress = (Progress(sys.stderr, len(files), sum(x.size / rate for x, rate in audio.values()))
                if sys.stderr.isatty() and not args.no_progress else None)

    second = second_pass_for(cfg, rec.calibration is not None)
    same_screen = progress is not None and sys.stdout.isatty()  # lines printed over the progress line

    def on_event(i: int, ev) -> None:
        nonlocal status
        if second is not None and pending(ev):  # in line: a file's final (or wake detection) waits for the second pass
            ev = second.apply_all([ev])[0]
            if not getattr(ev, "stands", True):  # a wake detection the verifier rejected
                return
        path, kind = files[i], type(ev).__name__
        line = None
        if args.json:
            d = ev.to_wire()
            d["file"] = path
            line = json.dumps(d)
        elif kind == "Final" and ev.text:
            line = final_line(ev, path if several else None)
        if kind == "Error":
            status = max(status, 1)
            if progress is not None:
                progress.clear()
            print(f"streamd transcribe: {path}: {ev.code}: {ev.message}", file=sys.stderr)
        if line is not None:
            if same_screen:
                progress.clear()
            print(line, flush=True)
        if progress is not None:
            if kind == "Done":
                progress.file_done()
            elif line is not None and same_screen:
                progress.update(force=True)

    try:
        feed_streams(rec, [audio[p] for p in files], on_event=on_event,
                     on_round=None if progress is None else progress.update)
    finally:
        if progress is not None:
            progress.close()
    return status


def add_parser(sub) -> None:
    t = sub.add_parser("transcribe", help="decode audio files through the streaming engine",
                       description="Decode audio files as concurrent live streams of one engine (the daemon's "
                                   "path). Plain output: one line per final, '[start-end] text' in seconds, "
                                   "after the file name and a tab when several files are given. Exit status: "
                                   "0, 1 if the engine reported an error for a file, 2 if a file could not be "
                                   "read (the others are still decoded).")
    t.add_argument("files", nargs="+", metavar="FILE",
                   help="audio files: WAV, FLAC, OGG... (any format soundfile reads; integer PCM WAV without "
                        "it), any sample rate, channels averaged")
    t.add_argument("--model", help="checkpoint (default: the shipped model)")
    add_engine_args(t)
    t.add_argument("--device", help="compute device of the engine: auto, cpu, cuda or cuda:N")
    t.add_argument("--json", action="store_true", help="one JSON event per line (wire schema + 'file')")
    t.add_argument("--no-progress", action="store_true",
                   help="no progress line on stderr (shown only when stderr is a terminal)")
    t.set_defaults(func=run)
