"""SecondPassProcess: the second pass in a child process gives what the in-process SecondPass gives, keeps the
first pass when its child dies (and starts a new one), and refuses to start with the loader's error."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from streamd.config import EngineConfig, SecondPassConfig
from streamd.events import Final, Word
from streamd.second_pass.process import SecondPassProcess, second_pass_runner
from streamd.second_pass.rescore import SecondPass

import fakes  # noqa: F401  (tests/second_pass on sys.path via conftest)


def pending(text="hallo wold", seconds=1.0):
    audio = (np.sin(np.arange(int(seconds * 16000)) / 9) * 8000).astype(np.int16)
    words = (Word("hallo", 0.2, 0.5, 0.4), Word("wold", 0.6, 0.9, 0.3))
    return Final(1, 0, text, words, 0.0, seconds, first_pass_text=text, second_pass="pending", audio=audio)


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "fake-model"


def start(cfg, **kw):
    return SecondPassProcess(cfg, factory=fakes.make_second_pass, start_timeout_s=120, **kw)


def test_the_child_gives_what_the_in_process_second_pass_gives(folder):
    cfg = EngineConfig(second_pass=SecondPassConfig(model=str(folder), calibrated=False, warp=1.0))
    proc = start(cfg)
    try:
        inline = SecondPass(fakes.FakeRecognizer(fakes.FOLDER_TEXT), cfg.second_pass)
        finals = [pending(), pending(text="")]
        assert proc.apply_all(finals) == inline.apply_all(finals)
        assert proc.apply(pending()).second_pass == "done"
    finally:
        proc.close()


def test_a_dead_child_keeps_the_first_pass_and_is_replaced(folder):
    cfg = EngineConfig(second_pass=SecondPassConfig(model=str(folder), calibrated=False, warp=1.0))
    proc = start(cfg)
    try:
        first = proc.pid
        crash = pending(seconds=fakes.DyingRecognizer.DIE_SAMPLES / 16000)
        out = proc.apply_all([crash, pending()])  # the child dies on the first: both keep the first pass
        assert [f.second_pass for f in out] == ["failed", "failed"] and out[0].text == "hallo wold"
        assert all(f.pass_no == 1 and f.audio is None for f in out)
        assert proc.apply(pending()).second_pass == "done" and proc.pid not in (None, first)  # a new child
        os.kill(proc.pid, signal.SIGKILL)  # killed between calls
        proc._proc.join(10)
        assert proc.apply(pending()).second_pass == "done"
    finally:
        proc.close()


def test_the_child_outlives_a_ctrl_c_the_parent_handles(folder):
    """Ctrl-C in a terminal reaches the whole process group: the daemon drains, so the child must go on."""
    proc = start(EngineConfig(second_pass=SecondPassConfig(model=str(folder), calibrated=False, warp=1.0)))
    try:
        pid = proc.pid
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        assert proc.apply(pending()).second_pass == "done" and proc.pid == pid
    finally:
        proc.close()


def test_a_model_that_cannot_load_is_refused_at_start(tmp_path):
    cfg = EngineConfig(second_pass=SecondPassConfig(model=str(tmp_path / "missing"), calibrated=False))
    with pytest.raises(RuntimeError, match="second pass: "):
        start(cfg)


def test_the_worker_setting(folder):
    assert second_pass_runner(EngineConfig()) is None  # off
    assert SecondPassConfig().worker == "process"
    with pytest.raises(ValueError, match="worker"):
        SecondPassConfig(model=str(folder), worker="fork")


def test_the_child_verifies_wake_detections_and_says_its_model_scores_texts(folder):
    from streamd.events import WakeCheck, WakeWord
    cfg = EngineConfig(second_pass=SecondPassConfig(model=str(folder), calibrated=False, warp=1.0))
    plain = start(cfg)
    assert not plain.scores_texts  # the dying double scores no texts
    plain.close()
    proc = SecondPassProcess(cfg, factory=fakes.make_verifier, start_timeout_s=120)
    try:
        assert proc.scores_texts

        def wake(n, standalone=True):
            return WakeWord(1, "hey jarvis", 0.2, 1.0, 1.3, "pending",
                            check=WakeCheck(np.zeros(n, np.float32), -8.0, standalone))
        out = proc.apply_all([wake(8000), wake(4000), pending(text="")])
        assert [e.verification for e in out[:2]] == ["verified", "rejected"] and out[0].verifier_gap == 0.0
        assert out[2].second_pass == "skipped_no_speech"
    finally:
        proc.close()
