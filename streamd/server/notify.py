"""systemd notify protocol (sd_notify) without dependencies.

``Type=notify`` units: the daemon sends ``READY=1`` once the model is
loaded, ``STOPPING=1`` when it starts draining, ``STATUS=...`` lines, and
``WATCHDOG=1`` every half ``WATCHDOG_USEC`` when the unit sets
``WatchdogSec=``.  Messages are datagrams on the AF_UNIX socket named by
``$NOTIFY_SOCKET``; a name starting with ``@`` is an abstract socket (the
``@`` becomes a NUL byte).  Without ``$NOTIFY_SOCKET`` every call is a no-op.
Send failures are logged, never raised: notification is best effort.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Callable, Mapping

__all__ = ["Notifier", "watchdog_interval"]

log = logging.getLogger("streamd.notify")


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when no watchdog is asked for.

    ``WATCHDOG_PID``, when set, must be this process.
    """
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid.strip() != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return value / 2e6 if value > 0 else None


class Notifier:
    """Sends sd_notify datagrams to ``address`` (None: disabled)."""

    def __init__(self, address: str | None):
        self.address = address or None
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Notifier":
        env = os.environ if env is None else env
        return cls(env.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` (e.g. "READY=1", "STATUS=...") as one datagram; True if it was sent."""
        if self.address is None:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.sendto("\n".join(fields).encode(), addr)
            return True
        except OSError as e:
            log.warning("sd_notify to %s failed: %s", self.address, e)
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    async def watchdog_loop(self, interval: float, healthy: Callable[[], bool] = lambda: True) -> None:
        """Ping every ``interval`` seconds while ``healthy()``; a stalled engine stops the pings."""
        while True:
            if healthy():
                self.watchdog()
            else:
                log.error("engine stalled: withholding the systemd watchdog ping")
            await asyncio.sleep(interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
