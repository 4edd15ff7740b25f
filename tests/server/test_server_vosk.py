"""Vosk-server compatibility: a client playing vosk-server's websocket/test.py, on /vosk and on vosk_port."""

from __future__ import annotations

import asyncio
import json
import wave

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers import random_audio, write_checkpoint
from streamd.feed import transcribe_files
from streamd.config import AppConfig, from_dict
from streamd.engine import Recognizer
from streamd.server.app import App
from helpers import write_wav

TIMEOUT = 30


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ep_ckpt(tmp_path_factory):
    """Random model with sparse output and endpoints (so Vosk 'result' replies occur mid-stream)."""
    return write_checkpoint(tmp_path_factory.mktemp("vosk") / "ep.pt", seed=2, blank_bias=1.0)


def make_app(ckpt, **server) -> App:
    cfg = from_dict(AppConfig, {"server": {"port": 0, "vosk_port": 0, **server}, "engine": {"device": "cpu"}})
    return App(cfg, recognizer=Recognizer.from_checkpoint(ckpt, cfg.engine))


def reference_texts(ckpt, path) -> list[str]:
    rec = Recognizer.from_checkpoint(ckpt, from_dict(AppConfig, {"engine": {"device": "cpu"}}).engine)
    return [e.text for e in transcribe_files(rec, [path])[path] if type(e).__name__ == "Final" and e.text]


async def vosk_test_py(uri, wav_path):
    """What vosk-server's websocket/test.py does, returning every reply it printed."""
    replies = []
    async with connect(uri) as websocket:
        wf = wave.open(wav_path, "rb")
        await websocket.send('{ "config" : { "sample_rate" : %d } }' % (wf.getframerate()))
        buffer_size = int(wf.getframerate() * 0.2)  # 0.2 seconds of audio
        while True:
            data = wf.readframes(buffer_size)
            if len(data) == 0:
                break
            await websocket.send(data)
            replies.append(await websocket.recv())
        await websocket.send('{"eof" : 1}')
        replies.append(await websocket.recv())
        try:
            extra = await asyncio.wait_for(websocket.recv(), 5)
        except ConnectionClosed:
            extra = None
        return replies, extra, websocket.close_code, wf.getnframes()


@pytest.mark.parametrize("where", ["path", "port"])
def test_vosk_test_py_lockstep(ep_ckpt, tmp_path, where):
    wav = write_wav(tmp_path / "a.wav", random_audio(4.0, rate=16000, seed=3), 16000)
    want = reference_texts(ep_ckpt, wav)

    async def body():
        async with make_app(ep_ckpt) as app:
            uri = f"ws://127.0.0.1:{app.port}/vosk" if where == "path" else f"ws://127.0.0.1:{app.vosk_port}"
            return await vosk_test_py(uri, wav)

    replies, extra, code, nframes = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert extra is None and code == 1000  # exactly one message after eof, then a normal close
    objs = [json.loads(r) for r in replies]
    assert len(objs) == -(-nframes // 3200) + 1  # one reply per 0.2 s frame, plus the final
    texts = []
    for o in objs[:-1]:
        assert set(o) in ({"partial"}, {"result", "text"}), o
        if "text" in o and o["text"]:
            texts.append(o["text"])
    final = objs[-1]
    assert set(final) == {"result", "text"}
    for w in final["result"]:
        assert set(w) == {"conf", "start", "end", "word"} and 0 <= w["conf"] <= 1 and w["start"] <= w["end"]
    texts += [final["text"]] if final["text"] else []
    assert texts == want and want  # same segments as the engine decoding the file
    assert any("result" in o for o in objs[:-1])  # an endpoint result arrived mid-stream


def test_vosk_pipelined_and_default_rate(tiny_ckpt, tmp_path):
    """No config (vosk_sample_rate applies), frames sent without waiting: replies stay one per frame, in order."""
    x = random_audio(2.0, rate=8000, seed=9)
    wav = write_wav(tmp_path / "b.wav", x, 8000)
    want = reference_texts(tiny_ckpt, wav)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()

    async def body():
        async with make_app(tiny_ckpt, vosk_sample_rate=8000) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                frames = [pcm[i:i + 1234] for i in range(0, len(pcm), 1234)]
                for f in frames:
                    await ws.send(f)
                await ws.send('{"eof" :1}')
                msgs = []
                try:
                    while True:
                        msgs.append(json.loads(await ws.recv()))
                except ConnectionClosed:
                    pass
                return frames, msgs, ws.close_code

    frames, msgs, code = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    assert len(msgs) == len(frames) + 1 and code == 1000
    assert all("partial" in m or "result" in m for m in msgs[:-1])
    texts = [m["text"] for m in msgs if m.get("text")]
    assert texts == want


def test_vosk_max_alternatives_end_to_end(ep_ckpt, tmp_path):
    """max_alternatives through the daemon: beam-search n-best, distinct texts, best first with its words."""
    x = random_audio(3.0, rate=16000, seed=5)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()

    async def body():
        async with make_app(ep_ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:
                await ws.send('{"config": {"sample_rate": 16000, "max_alternatives": 5}}')
                replies = []
                for i in range(0, len(pcm), 6400):
                    await ws.send(pcm[i:i + 6400])
                    replies.append(json.loads(await ws.recv()))
                await ws.send('{"eof": 1}')
                replies.append(json.loads(await ws.recv()))
                return replies

    replies = asyncio.run(asyncio.wait_for(body(), TIMEOUT))
    results = [r for r in replies if "alternatives" in r]
    assert results and results[-1] is replies[-1]
    assert all(set(r) in ({"partial"}, {"alternatives"}) for r in replies)
    for r in results:
        alts = r["alternatives"]
        texts = [a["text"] for a in alts]
        assert 1 <= len(alts) <= 5 and len(set(texts)) == len(texts)
        assert set(alts[0]) == {"confidence", "text", "result"} and all(set(a) == {"confidence", "text"}
                                                                          for a in alts[1:])
        assert [a["confidence"] for a in alts[1:]] == sorted((a["confidence"] for a in alts[1:]), reverse=True)
    assert any(len(r["alternatives"]) > 1 for r in results)


def test_vosk_errors_close_cleanly(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            async with connect(f"ws://127.0.0.1:{app.vosk_port}/anything") as ws:
                await ws.send('{"config": {"sample_rate": 1000}}')
                msg = json.loads(await ws.recv())
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
            assert msg["code"] == "bad_sample_rate" and "config.sample_rate" in msg["message"]
            assert ws.close_code == 1003
            async with connect(f"ws://127.0.0.1:{app.port}/vosk") as ws:  # the server is fine
                await ws.send(b"\0\0" * 1600)
                assert set(json.loads(await ws.recv())) == {"partial"}
                await ws.send('{"eof" : 1}')
                assert set(json.loads(await ws.recv())) == {"result", "text"}

    asyncio.run(asyncio.wait_for(body(), TIMEOUT))
