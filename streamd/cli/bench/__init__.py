"""``streamd bench NAME ...``: every benchmark's parser, one module per group (the work is in
:mod:`streamd.bench`, whose functions take plain arguments):

* :mod:`.engine`     ``engine``: streams in real time through one Recognizer, the host overhead of a step;
* :mod:`.server`     ``server``: a daemon under real-time websocket clients;
* :mod:`.stress`     ``stress``: the daemon's stress suite (overload, adversary, faults, fuzz, soak, RSS);
* :mod:`.peers`      ``peers``: one evaluation set through pocketsphinx, streamd and real-speech teachers;
* :mod:`.recordings` ``endpoints``, ``flush-sweep``, ``long-file``, ``second-pass-latency``, ``trim-speech``:
  measurements on recordings from outside the package;
* :mod:`.wake`       ``wake-cost``, ``wake-hey-stream``, ``wake-mycroft``: trained wake models.

docs/benchmarks.md gives each command with its figures; ``bench/*.py`` in the checkout are shims that run
the same commands (``python bench/stress.py ...`` is ``streamd bench stress ...``).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from . import engine, peers, recordings, server, stress, wake

__all__ = ["bench_main", "bench_parser"]


def bench_main(argv: Sequence[str] | None = None) -> int:
    """``streamd bench NAME ...``; returns the exit status."""
    args = bench_parser().parse_args(argv)
    return int(args.run(args) or 0)


def bench_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="streamd bench", description="streamd benchmarks")
    sub = ap.add_subparsers(dest="what", required=True)
    engine.add_parser(sub)
    server.add_parser(sub)
    stress.add_parser(sub)
    peers.add_parser(sub)
    recordings.add_parsers(sub)
    wake.add_parsers(sub)
    return ap
