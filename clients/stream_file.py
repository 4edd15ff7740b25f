#!/usr/bin/env python3
"""Stream audio files to a streamd daemon (v1 websocket protocol); print results and latency.

    python clients/stream_file.py audio.wav --url ws://127.0.0.1:8765/v1/stream
    python clients/stream_file.py *.wav --json --concurrency 8 --repeat 4   # load generator

Per connection: ``{"type": "start", "sample_rate": <the file's rate>, "format":
"s16le", ...}``, wait for ``ready``, send the samples in ``--chunk-ms`` binary
frames (at real-time pace with ``--realtime``, ``--speed X`` times real time,
or as fast as the server decodes them: it stops reading a connection whose
audio is more than 5 s ahead of its decoding, docs/protocol.md "Flow
control"), then ``{"type": "eof"}``, and read events until ``done`` and the
close.  A stream the server refuses for now (``overloaded``, ``loading``,
...) is retried after its ``retry_after``, up to ``--retries`` times (10)
before any audio is sent.  ``--hotwords`` / ``--wake-words`` (comma-separated
phrases) go into the start message; ``--cafile`` / ``--insecure`` for a
``wss://`` server with a certificate of its own.  ``--concurrency N`` runs N connections at once over
the jobs (the files, ``--repeat`` times; at least N jobs, cycling over the
files).

Latency, per job:

* partial latency: the time from sending the frame that held the last
  sample a partial needed to receiving that partial.  A partial covers the
  audio up to its ``end`` field when the server sends one; otherwise the
  count is used: the engine sends one partial per decoded chunk, so the k-th
  covers the first ``k * chunk_seconds`` (from the ``ready`` message), plus
  15 ms (the last fbank window reaches that far).  Only measured when audio
  is paced at most at real time (``--realtime`` or ``--speed`` <= 1: faster
  than that the server works through a backlog and "latency" is queueing),
  and dropped when fewer partials came than chunks were sent (the server
  coalesces partials a client has not read yet, which breaks the count).
* finalize latency: from sending ``eof`` to the last ``final``; done latency:
  to ``done``.
* wake latency (paced as above): from sending the frame that held a ``wake``
  event's ``end`` (the keyword's last sample) to receiving the event; with a
  verifier (``--verify-wake`` on the server) it includes the 0.5 s of audio
  the verifier waits for.

Output: finals as text (the partial rewritten in place on a terminal when one
stream runs at a time), or ``--json``: every server message as one JSON line
with a ``file`` field (and ``job`` when files repeat), then one ``stats`` line
per job.  A summary goes to stderr.  Exit status 1 if any job failed (error
event, connection failure, close code other than 1000), 2 for usage errors.

A thin command-line user of :mod:`streamd.client` (connection, start options,
reading and pacing the files, events); what is its own is the output and the
latency measurement.  Runs from a checkout without installing streamd (it
finds the package next to this folder) or with streamd installed; needs
``websockets`` (>= 13) and numpy, not torch.  Files are read as
``streamd.client.FileSource`` reads them: integer PCM WAV with the standard
library; FLAC, OGG, float or 24-bit WAV with soundfile (``pip install
soundfile``; without it such a file is refused with that advice).  The
summary's "x real time" is the audio of the streams that succeeded over the
wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    from streamd.client import Client, ClientError, FileSource
except ImportError:  # a checkout without streamd installed: the package is next to this folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from streamd.client import Client, ClientError, FileSource

FBANK_LOOKAHEAD_S = 0.015  # a 25 ms window every 10 ms: the frame at t needs audio up to t + 15 ms


@dataclass
class JobResult:
    """What one connection measured (times in seconds)."""

    file: str
    job: int
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    partial_latencies: list[float] = field(default_factory=list)
    finalize_latency: float | None = None
    done_latency: float | None = None
    finals: list[str] = field(default_factory=list)
    error: str | None = None
    partials: int = 0
    latency_note: str | None = None  # why partial latency was not measured
    retried: int = 0  # refusals (overloaded, ...) and connection failures retried before ready
    wakes: int = 0
    wake_latencies: list[float] = field(default_factory=list)

    def stats(self) -> dict:
        lat = sorted(self.partial_latencies)
        d = {"type": "stats", "file": self.file, "job": self.job, "ok": self.error is None,
             "audio_seconds": round(self.audio_seconds, 3), "wall_seconds": round(self.wall_seconds, 3),
             "partials": self.partials, "partials_measured": len(lat),
             "partial_latency_median": _r(statistics.median(lat)) if lat else None,
             "partial_latency_p95": _r(_pct(lat, 95)) if lat else None,
             "partial_latency_max": _r(lat[-1]) if lat else None,
             "finalize_latency": _r(self.finalize_latency), "done_latency": _r(self.done_latency),
             "text": " ".join(t for t in self.finals if t), "retried": self.retried, "wakes": self.wakes,
             "wake_latency_median": _r(statistics.median(self.wake_latencies)) if self.wake_latencies else None,
             "wake_latency_max": _r(max(self.wake_latencies)) if self.wake_latencies else None}
        if self.latency_note:
            d["latency_note"] = self.latency_note
        if self.error:
            d["error"] = self.error
        return d


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(round(q / 100 * (len(sorted_values) - 1))))]


class Printer:
    """Writes events: JSON lines, or text with an in-place partial when only one stream is live."""

    def __init__(self, json_mode: bool, label: bool, live_partials: bool, out=None):
        self.json = json_mode
        self.label = label  # prefix finals with the file name
        self.live = live_partials
        self.out = out or sys.stdout
        self._partial = 0

    def _clear(self) -> None:
        if self._partial:
            self.out.write("\r\x1b[2K")
            self._partial = 0

    def message(self, res: JobResult, msg: dict, show_job: bool) -> None:
        if self.json:
            d = dict(msg, file=res.file)
            if show_job:
                d["job"] = res.job
            self.out.write(json.dumps(d) + "\n")
        else:
            kind = msg.get("type")
            if kind == "partial" and self.live:
                self._clear()
                line = msg.get("text", "")[-200:]
                self.out.write(line)
                self._partial = len(line)
            elif kind == "final" and msg.get("text"):
                self._clear()
                self.out.write(f"{res.file}: {msg['text']}\n" if self.label else msg["text"] + "\n")
            elif kind == "wake":
                self._clear()
                self.out.write(f"{res.file + ': ' if self.label else ''}*** wake {msg.get('keyword')!r} "
                               f"score={msg.get('score')} at {msg.get('start')}-{msg.get('end')} s ***\n")
        self.out.flush()


async def stream_job(args: argparse.Namespace, client: Client, source: FileSource, job: int,
                     printer: Printer, show_job: bool) -> JobResult:
    """One connection: start, ready, audio frames, eof, events until done and the close."""
    path, rate = source.path, source.sample_rate
    total = len(source.data) // source.width  # samples in the file
    res = JobResult(path, job, audio_seconds=total / rate)
    paced = args.realtime or 0 < args.speed <= 1
    chunk_s = None
    t0 = time.perf_counter()
    options = {"partials": not args.no_partials, "method": args.method, "beam": args.beam}
    for name in ("hotwords", "wake_words"):
        phrases = getattr(args, name)
        if phrases is not None:
            options[name] = [p.strip() for p in phrases.split(",") if p.strip()]
    stream = client.stream(source, **options)
    try:
        async for msg in stream.messages():
            now = time.perf_counter()
            printer.message(res, msg, show_job)
            kind = msg.get("type")
            if kind == "ready":
                chunk_s = stream.ready.chunk_seconds
            elif kind == "partial":
                res.partials += 1
                covered = msg.get("end") if isinstance(msg.get("end"), (int, float)) else (
                    res.partials * chunk_s if chunk_s else None)
                if paced and covered is not None:
                    need = math.ceil((covered + FBANK_LOOKAHEAD_S) * rate)
                    i = bisect.bisect_left(stream.sent, need, key=lambda frame: frame[1])
                    if need <= total and i < len(stream.sent):
                        res.partial_latencies.append(now - stream.sent[i][0])
            elif kind == "wake":
                res.wakes += 1
                end = msg.get("end")
                if paced and isinstance(end, (int, float)):  # from sending the keyword's last sample
                    i = bisect.bisect_left(stream.sent, math.ceil(end * rate), key=lambda frame: frame[1])
                    if i < len(stream.sent):
                        res.wake_latencies.append(now - stream.sent[i][0])
            elif kind == "final":
                res.finals.append(msg.get("text", ""))
                if stream.eof_at is not None:
                    res.finalize_latency = now - stream.eof_at
            elif kind == "error":
                res.error = f"{msg.get('code')}: {msg.get('message')}"
            elif kind == "done" and stream.eof_at is not None:
                res.done_latency = now - stream.eof_at
    except ClientError as e:
        if res.error is None:
            res.error = str(e)
    if stream.ready is not None:
        if not paced:
            res.latency_note = "not paced at real time (use --realtime): partial latency not measured"
        elif not chunk_s and not res.partial_latencies:
            res.latency_note = "the ready message has no model.chunk_seconds: partial latency not measured"
        elif chunk_s and res.partials < res.audio_seconds / chunk_s - 2:
            res.partial_latencies.clear()
            res.latency_note = (f"{res.partials} partials for {res.audio_seconds / chunk_s:.0f} chunks: the "
                                "server coalesced some, partial latency not measured")
        if stream.close_code != 1000 and res.error is None:
            res.error = f"connection closed with code {stream.close_code} {stream.close_reason}".strip()
    res.wall_seconds = time.perf_counter() - t0
    res.retried = max(0, stream.attempts - 1)
    return res


async def run(args: argparse.Namespace) -> list[JobResult]:
    speed = 1.0 if args.realtime else args.speed
    sources = {p: FileSource(p, chunk_seconds=args.chunk_ms / 1000, speed=speed) for p in dict.fromkeys(args.files)}
    n_jobs = max(len(args.files) * args.repeat, args.concurrency)
    jobs = [(i, args.files[i % len(args.files)]) for i in range(n_jobs)]
    show_job = n_jobs > len(set(args.files))
    live = args.concurrency == 1 and sys.stdout.isatty() and not args.json
    printer = Printer(args.json, label=n_jobs > 1, live_partials=live)
    results: list[JobResult] = []
    queue: asyncio.Queue = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)

    async def worker(client: Client) -> None:
        while not queue.empty():
            i, p = queue.get_nowait()
            r = await stream_job(args, client, sources[p], i, printer, show_job)
            results.append(r)
            if args.json:
                printer.out.write(json.dumps(r.stats()) + "\n")
                printer.out.flush()

    async with Client(args.url, args.token, retries=args.retries, open_timeout=args.timeout,
                      ready_timeout=args.timeout, connect_options=tls_options(args)) as client:
        await asyncio.gather(*(worker(client) for _ in range(min(args.concurrency, n_jobs))))
    return sorted(results, key=lambda r: r.job)


def tls_options(args: argparse.Namespace) -> dict:
    """``ssl=`` for a ``wss://`` URL: the system's CAs, ``--cafile``'s, or no verification (``--insecure``)."""
    if not args.url.startswith("wss://") or not (args.cafile or args.insecure):
        return {}
    import ssl

    ctx = ssl.create_default_context(cafile=args.cafile)
    if args.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return {"ssl": ctx}


def summary(results: list[JobResult], wall: float) -> str:
    lines = []
    for r in results:
        s = r.stats()
        lat = (f"partial latency median {s['partial_latency_median'] * 1000:.0f} ms, p95 "
               f"{s['partial_latency_p95'] * 1000:.0f} ms (n={s['partials_measured']})"
               if s["partials_measured"] else "no partial latency")
        fin = f"finalize {r.finalize_latency * 1000:.0f} ms" if r.finalize_latency is not None else "no final"
        status = f"ERROR {r.error}" if r.error else "ok"
        if r.retried:
            status += f" after {r.retried} retries"
        wake = (f"; {r.wakes} wake event(s), latency max {s['wake_latency_max'] * 1000:.0f} ms"
                if r.wake_latencies else f"; {r.wakes} wake event(s)" if r.wakes else "")
        lines.append(f"{r.file}[{r.job}]: {status}; audio {r.audio_seconds:.2f} s in {r.wall_seconds:.2f} s; "
                     f"{lat}; {fin}{wake}")
    if len(results) > 1:
        lat = sorted(x for r in results for x in r.partial_latencies)
        fin = sorted(r.finalize_latency for r in results if r.finalize_latency is not None)
        audio = sum(r.audio_seconds for r in results if r.error is None)  # what was transcribed
        retried = sum(r.retried for r in results)
        line = (f"total: {len(results)} streams, {sum(r.error is not None for r in results)} failed"
                f"{f', {retried} retries' if retried else ''}, {audio:.1f} s of audio transcribed in {wall:.2f} s "
                f"({audio / max(wall, 1e-9):.1f}x real time)")
        if lat:
            line += (f"; partial latency median {statistics.median(lat) * 1000:.0f} ms, "
                     f"p95 {_pct(lat, 95) * 1000:.0f} ms")
        if fin:
            line += f"; finalize median {statistics.median(fin) * 1000:.0f} ms, p95 {_pct(fin, 95) * 1000:.0f} ms"
        wl = sorted(x for r in results for x in r.wake_latencies)
        if wl:
            line += f"; wake latency median {statistics.median(wl) * 1000:.0f} ms, max {wl[-1] * 1000:.0f} ms"
        lines.append(line)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Stream audio files to a streamd daemon and print results/latency.")
    ap.add_argument("files", nargs="+", metavar="FILE", help="audio files (WAV; any rate 8-48 kHz)")
    ap.add_argument("--url", default="ws://127.0.0.1:8765/v1/stream", help="daemon URL (default %(default)s)")
    ap.add_argument("--realtime", action="store_true", help="send at real-time pace (like a live source)")
    ap.add_argument("--speed", type=float, default=0.0,
                    help="send at SPEED x real time (0: as fast as possible, the default)")
    ap.add_argument("--json", action="store_true", help="JSON lines: every server message + 'file', then stats")
    ap.add_argument("--concurrency", type=int, default=1, help="connections at once (cycling over the files)")
    ap.add_argument("--repeat", type=int, default=1, help="stream each file this many times in total")
    ap.add_argument("--chunk-ms", type=float, default=100.0, help="audio per binary frame (default 100 ms)")
    ap.add_argument("--method", help="search method (greedy, modified_beam, ...; default: the server's)")
    ap.add_argument("--beam", type=int, help="beam size for beam searches")
    ap.add_argument("--no-partials", action="store_true", help="ask the server for finals only")
    ap.add_argument("--token", help="bearer token (Authorization header)")
    ap.add_argument("--timeout", type=float, default=10.0, help="connect / ready timeout in seconds")
    ap.add_argument("--retries", type=int, default=10,
                    help="retry a stream the server refuses for now (overloaded, too_many_streams, loading, "
                         "shutting_down: after its retry_after) or cannot be reached, up to N times before any "
                         "audio is sent (default %(default)s; 0: report refusals as failures)")
    ap.add_argument("--hotwords", metavar="LIST", help="phrases to favour, comma-separated (needs modified_beam)")
    ap.add_argument("--wake-words", dest="wake_words", metavar="LIST",
                    help="runtime wake words, comma-separated (e.g. \"computer,hey jarvis\")")
    ap.add_argument("--cafile", help="wss://: trust the CA certificates in this PEM file (e.g. a self-signed one)")
    ap.add_argument("--insecure", action="store_true", help="wss://: do not verify the server's certificate")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.concurrency < 1 or args.repeat < 1:
        ap.error("--concurrency and --repeat must be >= 1")
    if args.retries < 0:
        ap.error("--retries must be >= 0")
    if args.cafile and not os.path.isfile(args.cafile):
        ap.error(f"--cafile {args.cafile}: no such file")
    if not args.chunk_ms > 0 or args.speed < 0:
        ap.error("--chunk-ms must be > 0 and --speed >= 0")
    if not args.url.startswith(("ws://", "wss://")):
        ap.error(f"--url must start with ws:// or wss://, got {args.url!r}")
    for p in args.files:
        if not os.path.isfile(p):
            print(f"stream_file: {p}: no such file", file=sys.stderr)
            return 2
    if importlib.util.find_spec("websockets") is None:
        print("stream_file: needs the websockets package (pip install websockets)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        results = asyncio.run(run(args))
    except (ValueError, RuntimeError, OSError) as e:  # unreadable audio
        print(f"stream_file: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(summary(results, time.perf_counter() - t0), file=sys.stderr)
    for r in results:
        if r.error:
            print(f"stream_file: {r.file}: {r.error}", file=sys.stderr)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
