"""``streamd bench stress``: the parser (the work is :mod:`streamd.bench.stress`)."""

from __future__ import annotations

import argparse
import asyncio

from ...config import ENGINE_POLICIES

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stress", help="the daemon's stress suite: capacity, overload, adversary, faults, fuzz, soak, "
                                      "RSS (loopback daemons in subprocesses; ~15 min on 2 cores); connections "
                                      "(the null engine) when named")
    p.add_argument("--model", help="checkpoint (default: the shipped model)")
    p.add_argument("--scenarios", default="", help="comma-separated, in order (default: every scenario but connections)")
    p.add_argument("--seconds", type=float, default=12.0, help="audio seconds per load stream")
    p.add_argument("--capacity", type=int, help="skip the search: real-time greedy streams of this machine")
    p.add_argument("--victim-p95-ms", type=float, help="skip the baseline: the victim's unloaded p95")
    p.add_argument("--audio", nargs="*", help="WAV files (default: the package's six sample recordings)")
    p.add_argument("--out-dir", default="bench-out/stress", help="daemon logs and configs")
    p.add_argument("--json", help="result file (default: OUT_DIR/stress.json)")
    p.add_argument("--rounds", help="the overload scenario's rounds, e.g. 10x,10x,10x (default: 2x, 5x three "
                                     "times, 10x)")
    p.add_argument("--light-lane", type=float, help="limits.light_lane of every configured daemon (0: one lane)")
    p.add_argument("--engine-thread", action="store_true",
                    help="server.engine_process: false in every configured daemon (the engine in a thread)")
    p.add_argument("--engine-nice", type=int, help="server.engine_nice of every configured daemon")
    p.add_argument("--max-load", type=float,
                    help="limits.max_load of every configured daemon that admits by capacity (A/B runs)")
    p.add_argument("--eager-encoder", action="store_true",
                    help="engine.trace_encoder: false in every configured daemon (A/B against the traced default)")
    p.add_argument("--engine-policy", choices=ENGINE_POLICIES,
                    help="server.engine_policy of every configured daemon")
    p.add_argument("--busy-cores", type=int, default=0,
                    help="keep N busy loops running through every scenario (another process on the host)")
    p.add_argument("--busy-nice", type=int, default=0, help="the busy loops' nice value (0..19)")
    p.add_argument("--daemon-nice", type=int, default=0,
                    help="start every daemon under `nice -n N` (as systemd's Nice= would; negative: needs root)")
    p.add_argument("--no-nice-rights", action="store_true",
                    help="start every daemon without CAP_SYS_NICE (setpriv), as a user without the right to raise "
                         "its priority: server.nice (-5) is refused and the daemon runs at nice 0")
    p.add_argument("--own-sessions", action="store_true",
                    help="start every daemon, the victim and the busy loops in a session of their own (as a "
                         "service or another terminal is; with the kernel's autogroup scheduling each session "
                         "shares the CPU as one group) instead of this process's session")
    p.add_argument("--shared-victim", action="store_true",
                    help="run the victim in this process's event loop beside the load instead of a process of "
                         "its own")
    p.add_argument("--connections", help="the connections scenario's trials: clients, ascending, comma-separated "
                                          "(default 250,500,1000,2000,3000)")
    p.add_argument("--front-processes", type=int, help="server.front_processes of the connections scenario's daemon")
    p.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="server.event_loop of the connections scenario's daemon (default asyncio)")
    p.add_argument("--crowd-processes", type=int, default=2,
                   help="the connections scenario's load generator processes (default 2)")
    p.add_argument("--victim", metavar="URL", help=argparse.SUPPRESS)  # internal: be the victim process
    p.add_argument("--crowd", metavar="URL", help=argparse.SUPPRESS)  # internal: be one load generator process
    p.add_argument("--crowd-clients", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--crowd-seed", type=int, default=0, help=argparse.SUPPRESS)
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from ...bench.stress import StressOptions, run_stress

    names = tuple(n.strip() for n in args.scenarios.split(",") if n.strip())
    o = StressOptions(scenarios=names, model=args.model, seconds=args.seconds, capacity=args.capacity,
                      victim_p95_ms=args.victim_p95_ms, audio=tuple(args.audio or ()), out_dir=args.out_dir,
                      json=args.json, rounds=args.rounds, light_lane=args.light_lane,
                      engine_thread=args.engine_thread, engine_nice=args.engine_nice, max_load=args.max_load,
                      eager_encoder=args.eager_encoder, engine_policy=args.engine_policy,
                      busy_cores=args.busy_cores, busy_nice=args.busy_nice, daemon_nice=args.daemon_nice,
                      no_nice_rights=args.no_nice_rights, own_sessions=args.own_sessions,
                      shared_victim=args.shared_victim, victim=args.victim,
                      connections=tuple(int(x) for x in (args.connections or "").split(",") if x.strip()),
                      front_processes=args.front_processes, event_loop=args.event_loop,
                      crowd_processes=args.crowd_processes,
                      crowd=args.crowd, crowd_clients=args.crowd_clients, crowd_seed=args.crowd_seed)
    return asyncio.run(run_stress(o))
