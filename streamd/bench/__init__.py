"""Benchmarks: every ``streamd bench NAME`` (the parsers are :mod:`streamd.cli.bench`; these functions take
plain arguments; docs/benchmarks.md gives each command and its figures).

* :mod:`.engine`  ``engine``: streams in real time through one Recognizer (latency, real-time factor, batching
  gain), the host overhead of a step;
* :mod:`.server`  ``server``: a daemon under websocket v1 clients sending audio at real time (partial lag per
  chunk, finals, admission, metrics); its clients also drive the stress suite;
* :mod:`.stress`  ``stress``: the daemon's stress suite (overload, adversary, faults, fuzz, soak, RSS; loopback
  daemons in subprocesses);
* :mod:`.peers`   ``peers``: one evaluation set through pocketsphinx, streamd and real-speech teachers;
* :mod:`.long_file`  ``long-file``: one long recording through a running daemon by every kind of client;
* :mod:`.endpoints`  ``endpoints``: endpoints at real pauses (prompts joined with silent gaps);
* :mod:`.flush_sweep`  ``flush-sweep``: the end-of-stream flush, swept through ``streamd eval``'s decoding;
* :mod:`.second_pass_latency`  ``second-pass-latency``: finals with the second pass on concurrent real-time
  streams;
* :mod:`.trim_speech`  ``trim-speech``: an evaluation set's clips cut tight to their speech;
* :mod:`.wake`  ``wake-cost``, ``wake-hey-stream``; :mod:`.wake_mycroft` ``wake-mycroft``: trained wake
  models: step cost, against the KWS head, on Mycroft's recordings.

The sets most of them read live outside the package (``../shared`` beside a checkout, or ``$STREAMD_SHARED``:
:func:`streamd.paths.shared_root`). The repository's ``bench/`` folder holds ``gpu.sh``, the prepared run for
a CUDA machine, and one shim per command (``python bench/stress.py ARGS`` is ``streamd bench stress ARGS``).
"""
