"""Every benchmark is a ``streamd bench NAME`` command, and each ``bench/NAME.py`` shim of the checkout runs one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamd.cli.bench import bench_main, bench_parser

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _commands() -> set[str]:
    sub = next(a for a in bench_parser()._actions if a.dest == "what")
    return set(sub.choices)


def test_every_shim_runs_a_bench_command():
    shims = sorted(BENCH.glob("*.py"))
    assert len(shims) >= 10
    commands = _commands()
    for shim in shims:
        text = shim.read_text(encoding="utf-8")
        (name,) = re.findall(r'bench_main\(\["([a-z-]+)", \*sys\.argv\[1:\]\]\)', text)
        assert name in commands and name.replace("-", "_") == shim.stem, shim
        assert "def " not in text, f"{shim}: a shim holds no logic"


@pytest.mark.parametrize("name", sorted({"engine", "server", "stress", "peers", "endpoints", "flush-sweep",
                                         "long-file", "second-pass-latency", "trim-speech", "wake-cost",
                                         "wake-hey-stream", "wake-mycroft"}))
def test_each_command_has_its_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        bench_main([name, "--help"])
    assert e.value.code == 0 and f"streamd bench {name}" in capsys.readouterr().out


def test_a_shim_from_the_checkout_prints_the_commands_help():
    p = subprocess.run([sys.executable, str(BENCH / "trim_speech.py"), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "usage: streamd bench trim-speech" in p.stdout


@pytest.mark.parametrize("flag, want, batches", [([], None, None), (["--int8", "false"], False, None),
                                                  (["--int8", "true", "--max-batch", "1", "4"], True, [1, 4])])
def test_second_pass_latency_passes_int8_and_max_batch_through(monkeypatch, capsys, flag, want, batches):
    import streamd.bench.second_pass_latency as spl

    seen = {}
    monkeypatch.setattr(spl, "second_pass_latency", lambda *args: seen.setdefault("args", args) and {})
    assert bench_main(["second-pass-latency", "--set", "x.jsonl", "--second-pass", "moonshine-base", *flag]) == 0
    assert seen["args"][0:2] == ("x.jsonl", "moonshine-base")
    assert seen["args"][-2] is want and seen["args"][-1] == batches
