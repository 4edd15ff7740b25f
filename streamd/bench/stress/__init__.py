"""``streamd bench stress``: the stress suite of ``streamd serve``: loopback only, bounded in time, not in CI.

    streamd bench stress                                 # every scenario (~15 min on 2 cores)
    streamd bench stress --scenarios capacity,overload   # some of them
    streamd bench stress --capacity 96 --scenarios overload,adversary   # skip the search

Each scenario starts the daemon as a subprocess (``python -m streamd serve --config TMP.yaml``; its log
goes to ``--out-dir``), drives it from this process with the load generator of ``streamd bench server``
(:mod:`streamd.bench.server`: v1 clients sending 100 ms packets at real time, partial lag per chunk),
samples its RSS and file descriptors from /proc, and at the end prints one table and writes one JSON file.

Scenarios (the issue's targets in brackets; docs/benchmarks.md "Overload" has the figures):

* ``baseline``  one greedy stream alone: the victim's unloaded partial lag.  The victim (here and below) is a
  process of its own, as another user's client is; ``--shared-victim`` runs it in this process's event loop
  beside the load instead (how it was measured before 2026-12-03 16:00: its partials then also waited for
  this loop, busy with hundreds of load clients).  ``--light-lane N`` sets ``limits.light_lane`` (0: one
  engine) in every configured daemon, for A/B runs; ``--engine-thread`` sets ``server.engine_process: false``
  (the main engine in a worker thread of the daemon's process, as before 2026-12-05) likewise, and
  ``--engine-nice N`` ``server.engine_nice``, ``--engine-policy P`` ``server.engine_policy``, ``--eager-encoder``
  ``engine.trace_encoder: false``, ``--max-load X`` ``limits.max_load``; ``--daemon-nice N``
  starts every daemon under ``nice -n N`` (systemd's ``Nice=``; a daemon started at 0 asks for ``server.nice``,
  -5, itself, which root gets), ``--no-nice-rights`` without ``CAP_SYS_NICE`` (as a user who may not raise its
  priority: the daemon then runs at 0); ``--busy-cores N`` keeps N busy loops (another
  tenant of the host, at ``--busy-nice``) running through every scenario; ``--own-sessions`` starts the
  daemons, the victim and the busy loops each in a session of their own (with the kernel's autogroups, each a
  scheduling group, as a service or another terminal is) instead of this process's.
* ``capacity``  capacity search with admission off (``limits.max_load: 0``): the most real-time greedy
  streams (p95 partial lag <= one chunk, no growth), doubling then bisecting.
* ``default``   out of the box (no config file): 32 real-time greedy streams [all real time, >= 32].
* ``overload``  2x, 5x (three identical rounds) and 10x the capacity offered at once, with a victim stream
  from another address (127.0.0.2); refused clients retry after ``retry_after`` until the load window
  closes [accepted p95 <= 1 s, victim p95 <= 2x unloaded, no accepted audio lost, every refusal a 1013
  with a reason, full capacity within 5 s after the load, RSS after 3 rounds within 10 % of the first].
* ``adversary`` the victim, then one client (127.0.0.3) opening 60 ``modified_beam`` beam-64 streams at
  3.9x real time [victim p95 <= 2x unloaded].
* ``faults``    TCP aborts mid-stream, slowloris handshakes, trickling streams, clients that never read,
  then SIGTERM under load [documented behaviour, every stream ends with done or an error].
* ``fuzz``      random v1 / Vosk / Wyoming (when the daemon has it) sessions and raw HTTP requests with
  header variants [0 failures in >= 1,000 cases: no 500, no hang, no traceback, an error code and its
  close code for every refusal].
* ``soak``      half the capacity for a few minutes, RSS / fds / p95 sampled every 10 s [flat].
* ``rss``       three 5x rounds each with the glibc defaults and with the systemd unit's allocator
  settings (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``): idle RSS after each round.

* ``connections`` (only when named: ``--scenarios connections``) the null engine (``streamd serve
  --null-engine``): the most real-time v1 clients one daemon carries (p95 partial lag <= 100 ms, no audio
  lost), trials of ``--connections`` clients from ``--crowd-processes`` lean load generators
  (:mod:`.crowd`), and the daemon's CPU per connection-frame; ``--front-processes N`` runs it with
  ``server.front_processes: N`` [>= 2,000 streams on 2 cores; docs/benchmarks.md "Connections"].

Every daemon log is searched for ``Traceback`` [none].

Rooms: :mod:`.daemon` (the daemon under test), :mod:`.clients` (sessions, load, victim), :mod:`.context` (the
run's settings and shared readers), :mod:`.scenarios`, :mod:`.faults`, :mod:`.fuzz`, :mod:`.crowd` and
:mod:`.connections` (the connections scenario), :mod:`.run` (the run and
its table; the parser is :mod:`streamd.cli.bench.stress`).
"""

from __future__ import annotations

from .context import hist_quantile, refusal_reason
from .run import SCENARIOS, StressOptions, run_stress, table

__all__ = ["SCENARIOS", "StressOptions", "run_stress", "table", "hist_quantile", "refusal_reason"]
