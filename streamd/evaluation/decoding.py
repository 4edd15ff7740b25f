"""Running the recognizer over a set's audio, the way ``streamd eval`` scores it.

Every decode goes through :func:`streamd.feed.feed_streams` (concurrent streams, one piece each between batch
steps, endpointing on), ``batch_streams`` files at a time:

* :func:`timed_decode`: the plain engine, exactly as served, timed (the RTF);
* :func:`record_decode`: the recording engine (:mod:`streamd.scoring.recording`): per file the final words with
  their tokens' bank values, and the KWS score tracks.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from streamd.engine import Recognizer
from streamd.events import Event, Final, WakeWord, Word
from streamd.feed import feed_streams
from streamd.scoring.recording import KwsTrackRecorder, MeasureBank, tagged_words

__all__ = ["Decoded", "finals", "timed_decode", "record_decode"]


@dataclass
class Decoded:
    """One file's outcome: plain run (text, words, wake events, errors) and recording run."""

    text: str = ""
    words: list[Word] = dataclasses.field(default_factory=list)
    wakes: list[WakeWord] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    rec_text: str = ""
    rec_words: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)  # (word, (tokens, M) values)
    track: np.ndarray | None = None


def finals(events: Sequence[Event]) -> list[Final]:
    """The non-empty Finals of a stream's events: the hypothesis is their text joined."""
    return [e for e in events if isinstance(e, Final) and e.text]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_decode(rec: Recognizer, audio: Sequence[tuple[np.ndarray, int]], per_group: int,
                 piece_seconds: float) -> tuple[list[list[Event]], float]:
    """Decode ``audio`` ``per_group`` files at a time; (events per file, decode wall time in seconds)."""
    events: list[list[Event]] = []
    wall = 0.0
    for g in range(0, len(audio), per_group):
        _sync(rec.device)
        t0 = time.perf_counter()
        _, evs = feed_streams(rec, audio[g:g + per_group], piece_seconds)
        _sync(rec.device)
        wall += time.perf_counter() - t0
        events += evs
    return events, wall


def record_decode(rec: Recognizer, bank: MeasureBank, recorder: KwsTrackRecorder,
                  audio: Sequence[tuple[np.ndarray, int]], out: Sequence[Decoded], batch_streams: int,
                  piece_seconds: float, keywords: bool, track_width: int) -> None:
    """The recording decode into ``out``: per file the final words with their tokens' bank values, and KWS tracks.

    ``rec`` is the recording recognizer of ``bank`` and ``recorder``.  Streams run without the wake-word
    detector (``keywords=False``): the tracks (``keywords``: recorded, ``(frames, track_width)`` each) come
    from the KWS head's scores that the recorder observes.
    """
    recorder.enabled = keywords
    try:
        for g in range(0, len(audio), batch_streams):
            bank.reset()
            sids, evs = feed_streams(rec, audio[g:g + batch_streams], piece_seconds, partials=False,
                                     keywords=False)
            fins = [finals(e) for e in evs]
            words = [[w for f in fs for w in tagged_words(f, rec.tokens, rec.frame_shift_s, bank)]
                     for fs in fins]  # per file
            vals = bank.lookup([t for ws in words for w in ws for t in w.tags])
            tracks = recorder.take_tracks()
            pos = 0
            for i, (sid, fs, ws) in enumerate(zip(sids, fins, words)):
                d = out[g + i]
                d.rec_text = " ".join(f.text for f in fs)
                for w in ws:
                    d.rec_words.append((w.word, vals[pos:pos + len(w.tags)]))
                    pos += len(w.tags)
                if keywords:
                    d.track = tracks.get(sid, np.zeros((0, track_width)))
    finally:
        recorder.enabled = False
        recorder.take_tracks()  # drop anything left by a failed run
        bank.reset()
