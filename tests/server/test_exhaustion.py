"""streamd.server.exhaustion: running out of file descriptors is counted and logged once per interval, never a
storm of tracebacks; other loop errors go to the previous handler."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from tests.server.wire import make_app, run

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models on 2 shared cores


def test_resource_errors_are_logged_once_per_interval(tiny_ckpt, caplog):
    caplog.set_level(logging.DEBUG)

    async def body():
        async with make_app(tiny_ckpt) as app:
            app._resource_log.interval = 0.3
            loop = asyncio.get_running_loop()
            for _ in range(500):  # what asyncio reports for every accept() once file descriptors run out
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
            first = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            await asyncio.sleep(0.45)
            second = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            await asyncio.sleep(0.4)
            third = [r.getMessage() for r in caplog.records if r.name == "streamd.server" and r.levelno >= 40]
            loop.call_exception_handler({"message": "something else", "exception": ValueError("x")})
            return first, second, third, app.metrics.render().decode()

    first, second, third, metrics = run(body())
    assert len(first) == 1 and "socket.accept() out of system resource" in first[0] and "LimitNOFILE" in first[0]
    assert len(second) == 2 and second[1].startswith("499 more failures") and third == second
    assert 'streamd_errors_total{code="resource_exhausted"} 500.0' in metrics
    assert not [r for r in caplog.records if r.name == "streamd.server" and r.exc_info]
    assert any(r.name == "asyncio" and "something else" in r.getMessage() for r in caplog.records)
