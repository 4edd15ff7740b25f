"""``streamd mic``, the console app: live results of an in-process engine on a terminal or a pipe.

:func:`run_console` feeds a capture (:mod:`streamd.capture`: a sound card, or a file played as one) into an
in-process :class:`~streamd.engine.Recognizer` (:func:`streamd.feed.transcribe_capture`) and prints the
events with :class:`ConsoleRenderer`, which ``clients/mic_client.py`` shares for a daemon's events.

The capture names (``MicCapture``, ``MicError``, the sources, ``list_devices``...) live in
:mod:`streamd.capture`.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
from typing import Any, TextIO

from .capture import MicCapture, MicError
from .feed import transcribe_capture
from .second_pass.worker import FinalGate, SecondPassWorker

__all__ = ["ConsoleRenderer", "run_console"]


class ConsoleRenderer:
    """Prints wire-schema events (``Event.to_wire()`` dicts) for a terminal or a pipe.

    The partial is one line rewritten in place (``\\r`` + clear line); with ``partials`` False no partial is
    written (a pipe: only finals and wake words, one line each).  Finals
    show per-word confidence: colored words on a TTY (green >= 0.8, yellow >=
    0.5, red below), ``word[0.93]`` otherwise.  Wake words are highlighted.
    """

    def __init__(self, out: TextIO, color: bool | None = None, err: TextIO | None = None, partials: bool = True):
        self.out = out
        self.err = err or sys.stderr
        self.color = out.isatty() if color is None else color
        self.partials = partials
        self._partial_len = 0
        self._partial = ""

    def _clear(self) -> str:
        if not self._partial_len:
            return ""
        n, self._partial_len = self._partial_len, 0
        self._partial = ""
        return "\r\x1b[2K" if self.color else "\r" + " " * n + "\r"

    def _word(self, w: dict) -> str:
        c = float(w.get("conf", 0.0))
        if not self.color:
            return f"{w['word']}[{c:.2f}]"
        code = "32" if c >= 0.8 else "33" if c >= 0.5 else "31"
        return f"\x1b[{code}m{w['word']}\x1b[0m"

    def event(self, ev: dict) -> None:
        kind = ev.get("type")
        if kind == "partial":
            if not self.partials:
                return
            text = ev.get("text", "")
            if text == self._partial:
                return
            line = f"... {text}" if text else ""
            if self.color:  # keep it on one terminal line, or \r cannot rewrite it
                width = max(20, shutil.get_terminal_size().columns - 1)
                if len(line) > width:
                    line = "..." + line[len(line) - width + 3:]
            self.out.write(self._clear() + line)
            self._partial, self._partial_len = text, len(line)
        elif kind == "final":
            if not ev.get("text"):
                self.out.write(self._clear())
            else:
                words = " ".join(self._word(w) for w in ev.get("words", ())) or ev["text"]
                self.out.write(f"{self._clear()}[{ev.get('start', 0):7.2f}-{ev.get('end', 0):7.2f}] {words}\n")
        elif kind == "wake":
            where = f"{ev.get('start', 0):.2f}-{ev.get('end', 0):.2f} s"
            if self.color:
                line = f"\x1b[1;7;35m WAKE {ev['keyword']} \x1b[0m score {ev.get('score', 0):.2f} at {where}"
            else:
                line = f"*** WAKE {ev['keyword']!r} score={ev.get('score', 0):.2f} at {where} ***"
            self.out.write(self._clear() + line + "\n")
        elif kind == "error":
            self.out.write(self._clear())
            self.err.write(f"error: {ev.get('code')}: {ev.get('message')}\n")
            self.err.flush()
        self.out.flush()

    def close(self) -> None:
        self.out.write(self._clear())
        self.out.flush()


def run_console(rec: Any, capture: MicCapture, out: TextIO | None = None, color: bool | None = None,
                partials: bool | None = None, second: Any = None, **stream_options: Any) -> int:
    """``streamd mic``: live results on ``out`` until the source ends or Ctrl-C.  ``partials`` (None: when
    ``out`` is a terminal): the live partial line, rewritten in place; a pipe gets finals and wake words only.

    ``second``: a :class:`~streamd.second_pass.rescore.SecondPass` (or its
    :class:`~streamd.second_pass.process.SecondPassProcess`) run over each final by a worker thread
    (:class:`~streamd.second_pass.worker.SecondPassWorker`), the events after a final waiting behind it.
    Returns 0, 1 if the engine reported an error, 2 on MicError.
    """
    out = out or sys.stdout
    render = ConsoleRenderer(out, color, partials=out.isatty() if partials is None else partials)
    status = 0

    def on_event(ev) -> None:
        nonlocal status
        if type(ev).__name__ == "Error":
            status = 1
        if type(ev).__name__ != "Done":
            render.event(ev.to_wire())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, capture.stop)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
            pass
        routed, worker, gate = on_event, None, None
        if second is not None:
            cfg = second.cfg
            worker = SecondPassWorker(second, cfg.max_queue, cfg.max_batch, cfg.max_wait_s)

            def back(key: Any, final: Any, _seconds: float) -> None:
                loop.call_soon_threadsafe(lambda: [on_event(e) for _, e in gate.resolved(key, final)])

            gate = FinalGate(lambda key, final: worker.submit(key, final, back))

            def routed(ev: Any) -> None:
                for _, e in gate.route(0, ev):
                    on_event(e)
        try:
            await transcribe_capture(rec, capture, routed, **stream_options)
            while gate is not None and gate.waiting(0):  # the last finals' second pass
                await asyncio.sleep(0.02)
        finally:
            if worker is not None:
                worker.close()
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    try:
        asyncio.run(main())
    except MicError as e:
        render.close()
        print(f"streamd mic: {e}", file=sys.stderr)
        return 2
    render.close()
    if capture.overflows:
        print(f"streamd mic: {capture.overflows} audio block(s) dropped (decoding too slow)", file=sys.stderr)
    return status
