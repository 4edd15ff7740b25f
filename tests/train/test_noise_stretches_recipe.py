"""recipes/default/noise_stretches.py: long stretches of real noise with empty transcripts (the recipe's script).

Tiny fixture: constant-level clips, so each stretch's samples show which clips went in and at what gain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "default" / "noise_stretches.py"
LEVELS = (0.01, 0.02, 0.04, 0.08)  # clip k is a square wave of amplitude LEVELS[k]


def _bank(tmp_path: Path) -> Path:
    lines = []
    for k, level in enumerate(LEVELS):
        x = np.where(np.arange(16000) % 40 < 20, level, -level).astype(np.float32)
        sf.write(tmp_path / f"c{k}.wav", x, 16000, subtype="FLOAT")
        lines.append(json.dumps({"audio": str(tmp_path / f"c{k}.wav"), "text": "", "noise": True}))
    path = tmp_path / "noise.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(tmp_path: Path, *args: str) -> list[dict]:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(SCRIPT), str(_bank(tmp_path)), "--out", str(out), "--count", "6",
                        "--min-clips", "2", "--max-clips", "3", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def _levels(entry: dict) -> set[float]:
    """The sample magnitudes that fill at least a quarter second (a clip at its gain; fades and gaps do not)."""
    x, rate = sf.read(entry["audio"], dtype="float32")
    assert rate == 16000 and x.size / rate == pytest.approx(entry["duration"], abs=1e-3)
    values, counts = np.unique(np.round(np.abs(x[x != 0]), 3), return_counts=True)
    return {round(float(v), 3) for v, c in zip(values, counts) if c >= 4000}


def test_stretches_have_empty_transcripts_and_gains_in_the_range(tmp_path):
    rows = _run(tmp_path, "--gain-db", "6", "6")
    assert len(rows) == 6 and all(r["text"] == "" and r["noise"] is True for r in rows)
    g = 10 ** (6 / 20)
    plain = {round(level * g, 3) for level in LEVELS}
    for r in rows:  # each clip in it at exactly +6 dB
        assert _levels(r) and _levels(r) <= plain, (_levels(r), plain)


def test_every_and_offset_keep_only_their_clips(tmp_path):
    rows = _run(tmp_path, "--gain-db", "0", "0", "--every", "2", "--offset", "1", "--seed", "3")
    seen = set().union(*(_levels(r) for r in rows))
    assert seen and seen <= {LEVELS[1], LEVELS[3]}, seen


def test_bad_options_are_refused(tmp_path):
    bank = _bank(tmp_path)
    for args in (["--gain-db", "6", "0"], ["--every", "2", "--offset", "2"], ["--every", "0"]):
        r = subprocess.run([sys.executable, str(SCRIPT), str(bank), "--out", str(tmp_path / "o"), *args],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "need --gain-db" in r.stderr, args
