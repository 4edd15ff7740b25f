"""streamd.cli.mic: ``streamd mic`` without a sound card (a clear message and exit status 2) and with
``--wav FILE`` played as the microphone (it prints what ``transcribe_files`` decodes from the same file)."""

from __future__ import annotations

import pytest

from helpers import random_audio
from helpers import real_portaudio_without_inputs as _real_portaudio_without_inputs
from helpers import transcribe_events as _expected
from helpers import write_wav as _write_wav


def _strip_partials(text: str) -> list[str]:
    """Lines of the plain output without the in-place partial rewrites."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.rsplit("\r", 1)[-1]]


def test_cli_no_device_exits_2_with_a_clear_message(capsys):
    _real_portaudio_without_inputs()
    from streamd.cli import main

    assert main(["mic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamd mic: no audio input device found") and "--wav FILE" in err
    assert main(["mic", "--list-devices"]) == 2
    assert "no audio input device found" in capsys.readouterr().err


@pytest.mark.parametrize("rate, seed", [(16000, 0), (22050, 1)])
def test_cli_mic_wav_prints_what_the_engine_decodes(tmp_path, capsys, ckpt, rate, seed):
    from streamd.cli import main

    wav = _write_wav(tmp_path / "in.wav", random_audio(1.2, rate, seed=seed), rate)
    expected = _expected(ckpt, wav)
    want = []
    for ev in expected:
        name = type(ev).__name__
        if name == "Final" and ev.text:
            want.append(f"[{ev.start:7.2f}-{ev.end:7.2f}] " + " ".join(f"{w.word}[{round(w.conf, 3):.2f}]"
                                                                      for w in ev.words))
        elif name == "WakeWord":
            want.append(f"*** WAKE {ev.keyword!r} score={round(ev.score, 3):.2f} at "
                        f"{round(ev.start, 2):.2f}-{round(ev.end, 2):.2f} s ***")
    assert any(line.startswith("[") for line in want), "the test model should decode something"
    assert main(["mic", "--model", ckpt, "--wav", wav, "--speed", "0", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == want and "\r" not in out  # not a terminal: no partial lines rewritten in place
    assert main(["mic", "--model", ckpt, "--wav", wav, "--speed", "0", "--color", "never", "--partials",
                 "always"]) == 0
    out = capsys.readouterr().out
    assert _strip_partials(out) == want
    partials = [e.text for e in expected if type(e).__name__ == "Partial" and e.text]
    assert f"... {partials[0]}" in out  # live partials were shown


def test_mic_device_names(capsys):
    """--mic-device is the input device and --device the compute device, as in serve; the old spellings
    (--device N|NAME for the input, --compute-device) still work, with a warning."""
    from streamd.cli import build_parser
    from streamd.cli.mic import _devices

    def devices(*argv):
        return _devices(build_parser().parse_args(["mic", *argv]))

    assert devices("--mic-device", "3", "--device", "cpu") == (3, "cpu")
    assert devices("--mic-device", "USB Audio") == ("USB Audio", None)
    assert capsys.readouterr().err == ""
    assert devices("--device", "2") == (2, None)
    assert devices("--device", "USB", "--compute-device", "cuda:1") == ("USB", "cuda:1")
    err = capsys.readouterr().err
    assert "use --mic-device 2" in err and "--compute-device is deprecated; use --device" in err
