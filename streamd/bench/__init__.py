"""Benchmarks: the library behind ``streamd bench`` (the parsers are in :mod:`streamd.cli.bench`).

* :mod:`.engine`  ``streamd bench engine``: streams in real time through one Recognizer (latency, real-time
  factor, batching gain), the host overhead of a step;
* :mod:`.server`  ``streamd bench server``: a daemon under websocket v1 clients sending audio at real time
  (partial lag per chunk, finals, admission, metrics).

The scripts in the repository's ``bench/`` folder (stress, peers, wake, long files) import these modules.
"""
