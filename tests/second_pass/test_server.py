"""The daemon with a second pass (a test double of the model): v1 finals carry the second pass's text with
"pass": 2 and the first pass's text, a client may opt out, Vosk results carry it too, overload keeps the first
pass and says so, and the metrics count the outcomes."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect

from fakes import FakeRecognizer
from helpers import random_audio
from tests.server.wire import app_config, drain, http_get, pcm16, run
from streamd.engine import Recognizer
from streamd.second_pass.rescore import SecondPass
from streamd.server.app import App

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make(ckpt, model, **second):
    """A daemon with the test double as its second pass, hearing the segments as they are (warp 1); no capacity
    admission (``limits.max_load`` 0): on a busy machine the tiny model's measured steps would refuse the
    overload test's third stream before its second pass could."""
    cfg = app_config(engine={"second_pass": {"model": "fake", "warp": 1.0, **second}}, limits={"max_load": 0})
    rec = Recognizer.from_checkpoint(ckpt, cfg.engine)
    return App(cfg, recognizer=rec, second_pass=SecondPass(model, cfg.engine.second_pass))


async def v1(port, start, audio: bytes):
    async with connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
        await ws.send(json.dumps({"type": "start", **start}))
        for i in range(0, len(audio), 6400):
            await ws.send(audio[i:i + 6400])
        await ws.send('{"type": "eof"}')
        return await drain(ws)


def test_v1_finals_carry_the_second_pass_and_a_client_may_opt_out(tiny_ckpt):
    model = FakeRecognizer("Hello, world.")
    audio = pcm16(random_audio(1.5, seed=3))

    async def body():
        async with make(tiny_ckpt, model) as app:
            msgs = await v1(app.port, {}, audio)
            assert msgs[0]["type"] == "ready" and msgs[0]["model"]["second_pass"] == "fake"
            kinds = [m["type"] for m in msgs[1:]]
            assert kinds[-2:] == ["final", "done"]
            fin = msgs[-2]
            assert (fin["pass"], fin["second_pass"], fin["text"]) == (2, "done", "hello world")
            assert isinstance(fin["first_pass_text"], str) and [w["word"] for w in fin["words"]] == ["hello", "world"]
            assert all(fin["start"] <= w["start"] <= w["end"] <= fin["end"] for w in fin["words"])
            assert model.calls and abs(model.calls[-1] - 1.5 * 16000) <= 640
            off = await v1(app.port, {"second_pass": False}, audio)
            assert off[-2]["type"] == "final" and off[-2]["pass"] == 1 and "second_pass" not in off[-2]
            assert off[-2]["text"] == fin["first_pass_text"]  # the first pass is the same either way
            bad = await v1(app.port, {"second_pass": "yes"}, b"")
            assert bad[-1]["type"] == "error" and "second_pass must be true or false" in bad[-1]["message"]
            _, _, body_ = await http_get(app.port, "/metrics")
            assert 'streamd_second_pass_finals_total{outcome="done"} 1.0' in body_.decode()

    run(body())


def test_vosk_results_carry_the_second_pass(tiny_ckpt):
    model = FakeRecognizer("Turn on the lights.")

    async def body():
        async with make(tiny_ckpt, model) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 16000}}))
                await ws.send(pcm16(random_audio(1.2, seed=5)))
                await ws.recv()
                await ws.send('{"eof" : 1}')
                msgs = await drain(ws)
            results = [m for m in msgs if "text" in m]
            assert results and results[-1]["text"] == "turn on the lights"

    run(body())


def test_overload_keeps_the_first_pass_and_says_so(tiny_ckpt):
    import threading

    model = FakeRecognizer("never said")
    model.gate = threading.Event()  # the worker is stuck in the model: the queue (1) fills
    audio = pcm16(random_audio(1.0, seed=4))

    async def body():
        async with make(tiny_ckpt, model, max_queue=1, max_batch=1) as app:
            import asyncio

            first = asyncio.ensure_future(v1(app.port, {}, audio))  # taken by the worker, waits in the model
            second = asyncio.ensure_future(v1(app.port, {}, audio))  # queued
            await asyncio.sleep(0.5)
            third = await v1(app.port, {}, audio)  # refused: the first pass at once
            fin = third[-2]
            assert (fin["pass"], fin["second_pass"]) == (1, "skipped_overload")
            assert fin["text"] == fin["first_pass_text"]
            model.gate.set()
            a, b = await first, await second
            assert {m[-2]["second_pass"] for m in (a, b)} <= {"done", "skipped_overload"}
            assert [m[-1]["type"] for m in (a, b)] == ["done", "done"]  # no final lost

    run(body())
