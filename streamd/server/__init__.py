"""The streamd daemon: websocket server (v1 and Vosk protocols), Wyoming, HTTP probes, metrics, sd_notify.

Modules, by purpose, from the bottom up (a module imports only those above it in this list):

* :mod:`.guard`     sans-I/O request checks before any stream (repeated headers, Host allow-list), log rate limit;
* :mod:`.auth`      sans-I/O tokens (``auth.tokens``, ``auth.token_file``), bearer token, Origin allow-list;
* :mod:`.states`    session states as data: enums and their tables of allowed transitions;
* :mod:`.protocol`  sans-I/O v1 protocol session, error/close codes, limits (token bucket, minimum rate);
* :mod:`.vosk`      sans-I/O Vosk-compatible session (lock-step replies);
* :mod:`.wyoming`   sans-I/O Wyoming session (Home Assistant: describe, transcribe, detect);
* :mod:`.admission` sans-I/O admission by capacity and cost, fair share of bursts, per-client quotas;
* :mod:`.drain`     sans-I/O drain decisions under load (which streams the grace period can finish);
* :mod:`.commands`  the typed engine commands transports submit (open, audio, samples, reset, finish, close);
* :mod:`.runner`    the engine side: the runner that owns the Recognizer (one worker thread), the batching task;
* :mod:`.null_engine` the Recognizer's serving interface with instant empty results (benchmarks, tests: no model);
* :mod:`.lane`      engine runners in child processes of their own (the main engine, the light lane);
* :mod:`.outbox`    a client's bounded queue of outgoing messages;
* :mod:`.conn`      websocket connections and the daemon's microphone stream (event loop);
* :mod:`.wyoming_io` the Wyoming TCP transport on ``server.wyoming_port`` (the ``wyoming`` package's framing);
* :mod:`.settings`  configuration resolution (file, environment, flags), TLS context, check-config checks;
* :mod:`.static`    the browser page (package data ``streamd/server/web``) and static file lookup;
* :mod:`.metrics`   Prometheus metrics (one registry per server);
* :mod:`.notify`    systemd notify protocol;
* :mod:`.exhaustion` out of file descriptors: counted, logged once per interval;
* :mod:`.front_link` the link between a front process and the engine process (batches of records);
* :mod:`.front`     a front process (``server.front_processes`` > 1): connections and HTTP routes, fed to the
  engine process over its link;
* :mod:`.fronts`    the engine process's side of the front processes: started, fed, watched, drained;
* :mod:`.app`       the App: listeners, HTTP routes, routing of engine results, lifecycle;
* :mod:`.serve`     the ``streamd serve`` / ``streamd check-config`` commands.

This package imports nothing heavy at import time; the ``streamd serve`` and ``streamd check-config``
parsers are in :mod:`streamd.cli.serve`, which imports :mod:`.serve` when the command runs (so
``websockets`` stays an optional dependency of the other commands).  docs/protocol.md is the wire
reference.
"""

