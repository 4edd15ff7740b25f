"""Benchmarks: the library behind ``streamd bench`` (the parser is :mod:`streamd.cli.bench`).

* :mod:`.engine`  ``streamd bench engine``: streams in real time through one Recognizer (latency, real-time
  factor, batching gain), the host overhead of a step;
* :mod:`.server`  ``streamd bench server``: a daemon under websocket v1 clients sending audio at real time
  (partial lag per chunk, finals, admission, metrics); its clients also drive ``bench/stress.py``.

The repository's ``bench/`` folder holds the scripts that measure with data or programs from outside the
package (run from the repository root; docs/benchmarks.md gives each command and its figures):

* ``stress.py``               the daemon's stress suite (overload, slow readers, soak; loopback only);
* ``peers.py``                one evaluation set through pocketsphinx, streamd and real-speech teachers;
* ``long_file.py``            one long recording through a running daemon by every kind of client;
* ``endpoints.py``            endpoints at real pauses (prompts joined with silent gaps);
* ``flush_sweep.py``          the end-of-stream flush, swept through ``streamd eval``'s decoding;
* ``second_pass_latency.py``  latency of finals with the second pass on concurrent real-time streams;
* ``trim_speech.py``          an evaluation set's clips cut tight to their speech;
* ``wake_cost.py``, ``wake_hey_stream.py``, ``wake_mycroft.py``  trained wake models: step cost, against the
  KWS head, on Mycroft's recordings;
* ``gpu.sh``                  the prepared run for a CUDA machine.
"""
