"""A test double of a second-pass model (the :class:`streamd.second_pass.models.WordRecognizer` interface)."""

from __future__ import annotations

import threading

import numpy as np

from streamd.second_pass.models import Recognized, RecognizedWord


class FakeRecognizer:
    """Says ``text`` for any audio of at least ``min_samples``; dates its words (``times``) 0.3 s apart or not.

    ``calls``: the sample counts it was given; ``gate``: when set, each call waits for it (tests of overload);
    ``fail``: raise instead of answering."""

    name = "fake"
    aggregation = "min"

    def __init__(self, text: str = "Hello, world 3.", times: bool = False, window_s: float = 30.0,
                 prob: float = 0.8, min_samples: int = 1):
        self.text, self.times, self.window_s, self.prob, self.min_samples = text, times, window_s, prob, min_samples
        self.calls: list[int] = []
        self.hotwords: list[tuple[str, ...]] = []
        self.gate: threading.Event | None = None
        self.fail = False

    def recognize(self, audio: np.ndarray, hotwords=()) -> Recognized:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise RuntimeError("model broke")
        assert audio.dtype == np.float32 and audio.ndim == 1
        self.calls.append(int(audio.size))
        self.hotwords.append(tuple(hotwords))
        if audio.size < self.min_samples:
            return Recognized("")
        words = tuple(RecognizedWord(w, self.prob, 0.3 * i if self.times else None,
                                     0.3 * i + 0.2 if self.times else None) for i, w in enumerate(self.text.split()))
        return Recognized(self.text, words)


FOLDER_TEXT = "Hello, world 3."


class DyingRecognizer(FakeRecognizer):
    """A FakeRecognizer whose process exits when given exactly ``DIE_SAMPLES`` samples (a crash in native code)."""

    DIE_SAMPLES = 8000

    def recognize(self, audio: np.ndarray, hotwords=()) -> Recognized:
        if audio.size == self.DIE_SAMPLES:
            import os
            os._exit(3)
        return super().recognize(audio, hotwords)


def make_second_pass(cfg, hotwords=(), first_calibrated=False):
    """A SecondPass over a DyingRecognizer (a factory a child process can import: SecondPassProcess tests)."""
    from streamd.second_pass.rescore import SecondPass
    if cfg.model.endswith("missing"):
        raise ValueError(f"no such model: {cfg.model}")
    return SecondPass(DyingRecognizer(FOLDER_TEXT), cfg, None, hotwords, first_calibrated)


class GapRecognizer:
    """A second-pass double that scores texts (a wake verifier): its rival gap is ``gap(audio)`` nats;
    ``heard``: (rival text, or the texts a rival function gives for its own text "something", samples)."""

    name = "gap-model"
    aggregation = "min"
    scores_rivals = True
    window_s = 30.0

    def __init__(self, gap=lambda audio: 0.0):
        self.gap = gap
        self.heard: list[tuple[str, np.ndarray]] = []

    def recognize(self, audio: np.ndarray, hotwords=(), context=None, rival=None) -> Recognized:
        self.heard.append((rival if rival is None or isinstance(rival, str) else tuple(rival("something")),
                           np.array(audio)))
        return Recognized("something", rival_gap=None if rival is None else float(self.gap(audio)))


def _long_enough(audio: np.ndarray) -> float:
    return 0.0 if audio.size >= 8000 else -20.0


def make_verifier(cfg, hotwords=(), first_calibrated=False):
    """A SecondPass over a GapRecognizer that verifies clips of at least 0.5 s (a child process's factory)."""
    from streamd.second_pass.rescore import SecondPass
    return SecondPass(GapRecognizer(_long_enough), cfg, None, hotwords, first_calibrated)
