#!/usr/bin/env python3
"""``python bench/wake_mycroft.py ARGS...`` is ``streamd bench wake-mycroft ARGS...``
(from a checkout, without installing it; the parser is :mod:`streamd.cli.bench`, the work :mod:`streamd.bench`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamd.cli.bench import bench_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench_main(["wake-mycroft", *sys.argv[1:]]))
