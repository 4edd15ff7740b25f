"""streamd.server.notify: the systemd notify protocol (datagrams on a path or an abstract socket, the watchdog
loop and interval, best effort without a socket)."""

from __future__ import annotations

import asyncio
import os
import socket

from streamd.server.notify import Notifier, watchdog_interval


def test_notifier_datagrams(tmp_path):
    path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(2)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abstract.bind(f"\0streamd-notify-{os.getpid()}")
    abstract.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": path})
        assert n.enabled and n.ready("model loaded")
        assert srv.recv(100) == b"READY=1\nSTATUS=model loaded"
        assert n.stopping() and srv.recv(100) == b"STOPPING=1"
        assert n.watchdog() and srv.recv(100) == b"WATCHDOG=1"
        n.close()
        a = Notifier(f"@streamd-notify-{os.getpid()}")
        assert a.status("hello") and abstract.recv(100) == b"STATUS=hello"

        abstract.setblocking(False)

        def received():
            out = []
            while True:
                try:
                    out.append(abstract.recv(100))
                except BlockingIOError:
                    return out

        async def pings():  # watchdog loop: pings while healthy, none while stalled
            healthy = [True]
            task = asyncio.create_task(a.watchdog_loop(0.02, lambda: healthy[0]))
            await asyncio.sleep(0.1)
            healthy[0] = False
            assert len(received()) >= 2
            await asyncio.sleep(0.05)
            received()
            await asyncio.sleep(0.1)
            task.cancel()
            assert received() == []

        asyncio.run(pings())
        a.close()
        assert not Notifier.from_env({}).enabled and not Notifier(None).ready()
        assert not Notifier(str(tmp_path / "missing.sock")).ready()  # best effort: logged, not raised
    finally:
        srv.close()
        abstract.close()
    assert watchdog_interval({"WATCHDOG_USEC": "3000000"}) == 1.5
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}) is None  # not our pid
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}) == 1.5
    assert watchdog_interval({}) is None and watchdog_interval({"WATCHDOG_USEC": "x"}) is None
