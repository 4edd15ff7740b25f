"""streamd.server.wsconn: the daemon's websocket connection hands every complete message to its sink in order
(those the library queued before the sink first, fragmented ones reassembled), holds and releases reading
without losing or reordering a message, closes a connection whose text is not UTF-8 with 1007 as ``recv()``
does, and writes a message at once when it can."""

from __future__ import annotations

import asyncio
import struct

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

from streamd.bench.stress.crowd import client_frame
from streamd.server.wsconn import DirectConnection
from tests.server.wire import raw_client, run, until


async def _server(handler):
    return await serve(handler, "127.0.0.1", 0, create_connection=DirectConnection, compression=None)


def test_messages_reach_the_sink_in_order_queued_ones_first():
    async def body():
        got, early = [], asyncio.Event()

        async def handler(ws):
            await early.wait()
            await asyncio.sleep(0.1)  # the early messages wait in the library's queue
            ws.set_sink(got.append)
            await ws.wait_closed()

        async with await _server(handler) as srv:
            port = srv.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
                await ws.send("a")
                await ws.send(b"b")
                await ws.send(["x", "y", "z"])  # one text message in three fragments
                early.set()
                await until(lambda: len(got) == 3)
                await ws.send(b"late")
                await ws.send([b"1", b"2"])
                await ws.send("é")
                await until(lambda: len(got) == 6)
        assert got == ["a", b"b", "xyz", b"late", b"12", "é"]

    run(body())


def test_hold_and_release_keep_every_message_in_order():
    async def body():
        got, held = [], asyncio.Event()

        async def handler(ws):
            def sink(msg):
                got.append(msg)
                if msg == "stop":  # the first of a burst: the rest waits
                    ws.hold()
                    held.set()

            ws.set_sink(sink)
            await held.wait()
            await asyncio.sleep(0.2)
            assert got == ["stop"] and ws.holding
            ws.release()
            await ws.wait_closed()

        async with await _server(handler) as srv:
            port = srv.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
                for m in ("stop", "after1", b"after2", "after3"):
                    await ws.send(m)
                await until(lambda: len(got) == 4)
        assert got == ["stop", "after1", b"after2", "after3"]

    run(body())


def test_text_that_is_not_utf8_closes_with_1007():
    async def body():
        got = []

        async def handler(ws):
            ws.set_sink(got.append)
            await ws.wait_closed()

        async with await _server(handler) as srv:
            port = srv.sockets[0].getsockname()[1]
            reader, writer = await raw_client(port)
            writer.write(client_frame(1, b"ok") + client_frame(1, b"\xff\xfe"))
            head = await asyncio.wait_for(reader.readexactly(2), 5)
            assert head[0] & 0x0F == 8  # a close frame
            payload = await reader.readexactly(head[1] & 0x7F)
            assert struct.unpack("!H", payload[:2])[0] == 1007
            writer.close()
        assert got == ["ok"]

    run(body())


def test_write_now_sends_at_once_while_open():
    async def body():
        conns = []

        async def handler(ws):
            conns.append(ws)
            ws.set_sink(lambda msg: ws.write_now(f"echo {msg}"))
            await ws.wait_closed()

        async with await _server(handler) as srv:
            port = srv.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
                await ws.send("one")
                assert await asyncio.wait_for(ws.recv(), 5) == "echo one"
            await until(lambda: conns and conns[0].state.name == "CLOSED")
            assert conns[0].write_now("too late") is False  # not open: the caller's usual path

    run(body())
