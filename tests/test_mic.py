"""streamd.mic: the console app's output (``ConsoleRenderer``: partials rewritten in place, finals with
per-word confidence, wake words) and its one home for names (the capture is streamd.capture's: tests in
tests/test_capture.py; ``streamd mic`` itself: tests/cli/test_mic.py)."""

from __future__ import annotations

import io

from streamd.mic import ConsoleRenderer


# ---------------------------------------------------------------------------- console output


def _renderer(color):
    out, err = io.StringIO(), io.StringIO()
    return ConsoleRenderer(out, color=color, err=err), out, err


FINAL = {"type": "final", "segment": 0, "text": "turn on it", "start": 0.0, "end": 1.5,
         "words": [{"word": "turn", "start": 0.1, "end": 0.3, "conf": 0.93},
                   {"word": "on", "start": 0.3, "end": 0.5, "conf": 0.6},
                   {"word": "it", "start": 0.5, "end": 0.6, "conf": 0.2}]}


def test_console_plain_output():
    r, out, err = _renderer(False)
    r.event({"type": "partial", "text": "turn"})
    r.event({"type": "partial", "text": "turn"})  # unchanged: not rewritten
    r.event({"type": "partial", "text": "turn o"})
    r.event(FINAL)
    r.event({"type": "wake", "keyword": "hey stream", "score": 0.971, "start": 2.0, "end": 2.4})
    r.event({"type": "error", "code": "bad_audio", "message": "boom"})
    r.close()
    assert out.getvalue() == ("... turn" + "\r" + " " * 8 + "\r" + "... turn o" + "\r" + " " * 10 + "\r"
                              + "[   0.00-   1.50] turn[0.93] on[0.60] it[0.20]\n"
                              + "*** WAKE 'hey stream' score=0.97 at 2.00-2.40 s ***\n")
    assert err.getvalue() == "error: bad_audio: boom\n"


def test_console_tty_output_colors_words_by_confidence():
    r, out, _ = _renderer(True)
    r.event({"type": "partial", "text": "turn"})
    r.event(FINAL)
    r.event({"type": "wake", "keyword": "hey stream", "score": 0.5, "start": 2.0, "end": 2.4})
    assert out.getvalue() == ("... turn\r\x1b[2K[   0.00-   1.50] \x1b[32mturn\x1b[0m \x1b[33mon\x1b[0m "
                              "\x1b[31mit\x1b[0m\n\x1b[1;7;35m WAKE hey stream \x1b[0m score 0.50 at 2.00-2.40 s\n")


def test_console_empty_final_only_clears_the_partial():
    r, out, _ = _renderer(False)
    r.event({"type": "partial", "text": "a"})
    r.event({"type": "final", "text": "", "words": []})
    assert out.getvalue() == "... a\r     \r"


def test_console_app_does_not_reexport_capture():
    """One home per name: the capture lives in ``streamd.capture`` only, the console app imports what it uses."""
    from streamd import mic

    assert mic.__all__ == ["ConsoleRenderer", "run_console"]
    for name in ("ReplaySource", "WavSource", "DeviceSource", "list_devices", "format_devices", "NO_INPUT_DEVICE"):
        assert not hasattr(mic, name), name


def test_console_without_partials_writes_whole_lines_only():
    """partials=False (streamd mic into a pipe): no partial, no carriage return, one line per final."""
    out, err = io.StringIO(), io.StringIO()
    r = ConsoleRenderer(out, color=False, err=err, partials=False)
    r.event({"type": "partial", "text": "turn"})
    r.event(FINAL)
    r.close()
    assert out.getvalue() == "[   0.00-   1.50] turn[0.93] on[0.60] it[0.20]\n"
