"""streamd.feed: the one loop that feeds audio as live streams (the CLI, ``streamd eval``, benchmarks, tests)."""

import asyncio

import numpy as np
import pytest

from helpers import random_audio, write_wav
from helpers import transcribe_events as _expected
from helpers import write_wav as _write_wav
from streamd import capture
from streamd.capture import MicCapture
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from streamd.feed import feed_streams, transcribe_capture, transcribe_files

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


def _wire(events):
    return [e.to_wire() for e in events]


@pytest.fixture(scope="module")
def rec(tiny_ckpt):
    return Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))


@pytest.fixture()
def files(tmp_path):
    return [(random_audio(1.3, 16000, seed=1), 16000), (random_audio(0.9, 8000, seed=2), 8000),
            (random_audio(0.05, 22050, seed=3), 22050)]


def test_feed_streams_is_transcribe_files(rec, files, tmp_path):
    from streamd.audio.pcm import load_audio

    paths = [write_wav(tmp_path / f"{i}.wav", x, rate) for i, (x, rate) in enumerate(files)]
    by_path = transcribe_files(rec, paths + paths[:1])  # a path given twice is decoded once
    assert list(by_path) == paths
    sids, events = feed_streams(rec, [load_audio(p) for p in paths])
    assert len(set(sids)) == 3 and rec.num_streams == 0
    for p, sid, evs in zip(paths, sids, events):
        assert {e.stream for e in evs} == {sid} and type(evs[-1]).__name__ == "Done"
        assert _wire(evs) == _wire(by_path[p])


def test_each_stream_decodes_as_if_alone(rec, files):
    _, together = feed_streams(rec, files, 0.1)
    for (x, rate), evs in zip(files, together):
        _, (alone,) = feed_streams(rec, [(x, rate)], 0.1)
        assert _wire(evs) == _wire(alone)


def test_per_item_options_and_on_event(rec, files):
    seen = []
    sids, events = feed_streams(rec, files, 0.25, per_item=[{}, {"partials": False}, {}], partials=True,
                                on_event=lambda i, ev: seen.append((i, ev)))
    names = [[type(e).__name__ for e in evs] for evs in events]
    assert "Partial" in names[0] and "Partial" not in names[1]
    assert len(seen) == sum(len(evs) for evs in events)
    for i, evs in enumerate(events):  # every event, in order, with its item's index
        assert [ev for j, ev in seen if j == i] == evs and all(ev.stream == sids[i] for ev in evs)


def test_a_stream_the_engine_closes_is_fed_no_further(rec, files):
    bad = files[0][0].copy()
    bad[2000] = np.nan  # in the second 0.1 s piece
    _, events = feed_streams(rec, [(bad, 16000)] + files[1:], 0.1)
    err = [e for e in events[0] if type(e).__name__ == "Error"]
    assert len(err) == 1 and err[0].code == "bad_audio" and events[0][-1] is err[0]
    _, alone = feed_streams(rec, files[1:], 0.1)
    assert [_wire(e) for e in events[1:]] == [_wire(e) for e in alone]
    assert rec.num_streams == 0


def test_empty_audio_finishes_at_once(rec):
    _, (evs,) = feed_streams(rec, [(np.zeros(0, np.float32), 16000)])
    assert type(evs[-1]).__name__ == "Done"


# ---------------------------------------------------------------------------- a live capture


def _without_backlog(wire: dict) -> dict:
    """A wire event less the partial's ``backlog``, which depends on how the audio was delivered."""
    return {k: v for k, v in wire.items() if k != "backlog"}


@pytest.mark.parametrize("seed, block", [(0, 0.013), (1, 0.05), (2, 0.31)])
def test_transcribe_capture_matches_transcribe_files_for_any_block_size(tmp_path, ckpt, seed, block):
    from streamd.engine import Recognizer

    wav = _write_wav(tmp_path / "in.wav", random_audio(1.0, 16000, seed=seed), 16000)
    want = [e.to_wire() for e in _expected(ckpt, wav) if type(e).__name__ != "Done"]
    rec = Recognizer.from_checkpoint(ckpt)
    cap = MicCapture(source=capture.WavSource(wav, speed=0, block_seconds=block), queue_seconds=100)
    got = []
    asyncio.run(transcribe_capture(rec, cap, got.append))
    # backlog says how the audio was delivered (blocks of `block` s here, the whole file there), so it is the one
    # field allowed to differ; it stays within a block plus a chunk plus the feature window when the loop keeps up
    wire = [e.to_wire() for e in got if type(e).__name__ != "Done"]
    chunk = rec.model.cfg.encoder.chunk_size * rec.frame_shift_s
    assert all(0.0 <= w["backlog"] <= block + chunk + 0.1 for w in wire if w["type"] == "partial")
    assert [_without_backlog(w) for w in wire] == [_without_backlog(w) for w in want]
    assert type(got[-1]).__name__ == "Done" and rec.num_streams == 0
