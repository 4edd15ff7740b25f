"""``streamd bench long-file``: one long recording through a running daemon by every kind of client, against
``streamd transcribe``.

    streamd bench long-file long.wav [--url ws://127.0.0.1:8765] [--vosk-url ws://127.0.0.1:2700]
                                     [--pid DAEMON_PID] [--skip-offline]

Runs, one after the other, each as fast as it can send (no real-time pacing):

* ``offline``: ``python -m streamd transcribe --json FILE`` (the reference: the engine on the whole file);
* ``stream_file``: ``python clients/stream_file.py --json FILE`` (from the checkout) (v1 websocket, 0.1 s frames);
* ``transcribe_file``: :func:`streamd.client.transcribe_file` (the client library, v1);
* ``vosk_lockstep``: a client written as vosk-server's ``websocket/test.py`` is: ``{"config":
  {"sample_rate": R}}``, then 8000-byte frames, each followed by waiting for its reply, then ``{"eof": 1}``
  and the final result.

Per client: wall time, speed (audio seconds / wall seconds), how it ended, and whether its finals equal the
offline ones (v1: the text and the start / end times of every final; Vosk: the words of all ``result``
replies and of the final result, joined, equal the offline finals' words).  With ``--pid``, the daemon's
RSS (that process and its children, from /proc) before and after each client.  Needs the daemon to run
with the same engine settings as ``streamd transcribe`` (the defaults).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from ..audio.pcm import load_audio
from ..client import transcribe_file
from ..events import Final

__all__ = ["bench_long_file"]

ROOT = Path(__file__).resolve().parents[2]  # the checkout (clients/stream_file.py)


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and its child processes (kB, from /proc)."""
    pids = {pid}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:  # the parent pid
            pids.add(int(stat.parent.name))
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def wire_finals(lines: list[dict]) -> list[tuple[str, float, float]]:
    return [(m["text"], round(m["start"], 2), round(m["end"], 2)) for m in lines if m.get("type") == "final"]


def offline(path: str) -> tuple[list[tuple[str, float, float]], str]:
    out = subprocess.run([sys.executable, "-m", "streamd", "transcribe", "--json", path], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return wire_finals([json.loads(line) for line in out.splitlines() if line.strip()]), "ok"


def stream_file(path: str, url: str) -> tuple[list[tuple[str, float, float]], str]:
    p = subprocess.run([sys.executable, str(ROOT / "clients" / "stream_file.py"), "--json", "--url",
                        f"{url}/v1/stream", path], capture_output=True, text=True)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    errors = [m for m in lines if m.get("type") == "error"]
    return wire_finals(lines), "ok" if p.returncode == 0 and not errors else f"exit {p.returncode} {errors[:1]}"


def library(path: str, url: str) -> tuple[list[tuple[str, float, float]], str]:
    events = transcribe_file(f"{url}/v1/stream", path)
    return [(e.text, round(e.start, 2), round(e.end, 2)) for e in events if isinstance(e, Final)], "ok"


async def vosk_lockstep(path: str, url: str) -> tuple[list[str], str]:
    from websockets.asyncio.client import connect

    from ..client import to_s16le

    x, rate = load_audio(path)
    pcm = to_s16le(x)
    words: list[str] = []
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"config": {"sample_rate": rate}}))
        for i in range(0, len(pcm), 8000):
            await ws.send(pcm[i:i + 8000])
            reply = json.loads(await ws.recv())
            if "text" in reply:
                words += reply["text"].split()
        await ws.send('{"eof" : 1}')
        final = json.loads(await ws.recv())
        words += final.get("text", "").split()
        await ws.wait_closed()
        how = "ok" if ws.close_code == 1000 else f"closed {ws.close_code} {ws.close_reason}"
    return words, how


def bench_long_file(path: str, url: str = "ws://127.0.0.1:8765", vosk_url: str | None = None,
                    pid: int | None = None, skip_offline: bool = False) -> int:
    """Every client in turn, one printed line each; returns 0 when every one ended well with equal finals."""
    x, rate = load_audio(path)
    seconds = x.shape[-1] / rate
    print(f"{path}: {seconds:.2f} s at {rate} Hz")
    ref = None
    if not skip_offline:
        t0 = time.perf_counter()
        ref, _ = offline(path)
        print(f"{'offline':16} {time.perf_counter() - t0:7.2f} s  {len(ref)} finals (streamd transcribe, "
              f"model load included)")
    runs = [("stream_file", lambda: stream_file(path, url)),
            ("transcribe_file", lambda: library(path, url)),
            ("vosk_lockstep", lambda: asyncio.run(vosk_lockstep(path, vosk_url or f"{url}/vosk")))]
    ok = True
    for name, fn in runs:
        before = rss_kb(pid) if pid else None
        t0 = time.perf_counter()
        got, how = fn()
        wall = time.perf_counter() - t0
        after = rss_kb(pid) if pid else None
        if ref is None:
            same = "n/a"
        elif name == "vosk_lockstep":
            same = got == [w for t, _, _ in ref for w in t.split()]
        else:
            same = got == ref
        ok &= how == "ok" and same is not False
        mem = f"  daemon RSS {before / 1024:.0f} -> {after / 1024:.0f} MB" if pid else ""
        print(f"{name:16} {wall:7.2f} s  {seconds / wall:5.1f}x real time  {how}  finals equal: {same}{mem}")
    return 0 if ok else 1

