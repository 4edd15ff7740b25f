"""streamd.server.commands: a closed vocabulary of frozen commands, each naming its stream by key, and each
doing what it says when the engine runner applies it."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest

from helpers import random_audio
from tests.server.wire import pcm16
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from streamd.events import Final, Partial
from streamd.server.commands import (CloseStream, Command, FeedPcm, FeedSamples, FinishStream, OpenStream,
                                     ResetStream)
from streamd.server.runner import EngineRunner

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ALL = (OpenStream, FeedPcm, FeedSamples, ResetStream, FinishStream, CloseStream)


def test_the_vocabulary_is_closed_and_typed():
    assert typing.get_args(Command) == ALL
    assert [c.op for c in ALL] == ["open", "audio", "samples", "reset", "finish", "close"]
    for c in ALL:
        fields = [f.name for f in dataclasses.fields(c)]
        assert fields[0] == "key" and "op" not in fields  # op is the class's name for logs, not data
        assert c.__dataclass_params__.frozen


def test_defaults_values_and_immutability():
    a, b = OpenStream(1), OpenStream(1)
    assert a == b and a.options == {} and a.client is None and a.options is not b.options
    assert FeedPcm(2, b"\0\0", "s16le") == FeedPcm(2, b"\0\0", "s16le", ack=False) != FeedPcm(2, b"\0\0", "s16le", True)
    assert ResetStream(3) != ResetStream(4) and FinishStream(3) == FinishStream(3) and CloseStream(5).op == "close"
    x = np.zeros(4, np.float32)
    s = FeedSamples(6, x)
    assert s == s and s != FeedSamples(6, x)  # arrays have no truth value: samples compare by identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.key = 2  # type: ignore[misc]


def test_each_command_does_what_it_says(tiny_ckpt):
    runner = EngineRunner(Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu")), max_steps=100)
    x = random_audio(1.0, seed=4)
    res = runner.cycle([OpenStream(1, {"sample_rate": 16000, "partials": True}), OpenStream(2, {}),
                        FeedSamples(1, x), FeedPcm(2, pcm16(x), "s16le", ack=True), ResetStream(1)])
    assert res.opened == [(1, None), (2, None)] and res.acks == {2: 1}
    events = [(k, e) for k, e in res.events]
    while res.pending:
        res = runner.cycle([])
        events += res.events
    finals = [e for k, e in events if k == 1 and isinstance(e, Final)]
    assert [f.reason for f in finals] == ["reset"]  # reset closes the open segment
    assert any(isinstance(e, Partial) for k, e in events if k == 2)
    res = runner.cycle([FinishStream(1), CloseStream(2)])
    while res.pending:
        res = runner.cycle([])
    ends = [type(e).__name__ for k, e in res.events if k == 1]
    assert ends[-1] == "Done" and not [e for k, e in res.events if k == 2]  # closed: nothing more for key 2
    assert runner.rec.num_streams == 0
    assert runner.cycle([FeedPcm(2, pcm16(x), "s16le"), ResetStream(2), FinishStream(2)]).events == []  # gone: no-ops
