"""``streamd mic`` with a second pass (a test double of the model): the console shows the second pass's final,
the worker thread runs it, and every final arrives (the last one's second pass is waited for)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fakes import FakeRecognizer
from helpers import random_audio
from streamd.capture import MicCapture, ReplaySource
from streamd.config import EngineConfig, SecondPassConfig
from streamd.engine import Recognizer
from streamd.mic import run_console
from streamd.second_pass.rescore import SecondPass

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_mic_console_prints_the_second_pass(ckpt):
    cfg = EngineConfig(device="cpu", second_pass=SecondPassConfig(model="fake"))
    rec = Recognizer.from_checkpoint(ckpt, cfg)
    x = random_audio(2.0, seed=1).astype(np.float32)
    blocks = [x[i:i + 1600] for i in range(0, x.size, 1600)]
    capture = MicCapture(sample_rate=16000, source=ReplaySource(blocks, 16000, speed=0))
    model = FakeRecognizer("Open the door.")
    out = io.StringIO()
    assert run_console(rec, capture, out=out, color=False, second=SecondPass(model, cfg.second_pass)) == 0
    assert "] open[0.80] the[0.80] door[0.80]" in out.getvalue() and model.calls  # the final line: pass 2
