"""Feed audio into one Recognizer as live streams: the loops the CLI, evaluation, benchmarks and tests share.

* :func:`feed_streams`: in-memory audio ``[(samples, rate), ...]`` as concurrent streams, one piece per
  stream between batch steps, like live clients would send it; the one loop behind everything below and
  behind ``streamd eval`` (:mod:`streamd.evaluation`) and ``streamd bench peers``.
* :func:`load_stream_audio`: a file's audio at a rate a stream takes (resampled once where it is not);
* :func:`transcribe_files`: audio files through :func:`feed_streams`, events per path.
* :func:`transcribe_capture`: a live capture (:class:`streamd.capture.MicCapture`) into one stream.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

__all__ = ["feed_streams", "load_stream_audio", "transcribe_files", "transcribe_capture"]


def feed_streams(rec, audio: Sequence[tuple[Any, int]], piece_seconds: float = 0.1,
                 per_item: Sequence[dict] | None = None, on_event: Callable[[int, Any], None] | None = None,
                 on_round: Callable[[float], None] | None = None,
                 **stream_options: Any) -> tuple[list[int], list[list]]:
    """Decode ``audio`` [(samples, rate)] as concurrent streams of ``rec`` (a Recognizer).

    One stream per item, created in order at the item's own rate with ``stream_options`` (``per_item[i]``:
    item ``i``'s options over them).  Then rounds until every stream is finished: each live stream, in item
    order, gets its next ``piece_seconds`` of audio (and is finished after its last piece), then one batch
    step; then everything is drained.  A stream the engine closed on its own (an error) is fed no further.
    ``on_event(i, event)`` sees every event as it comes; ``on_round(seconds)`` the seconds of audio fed so far
    (all items together) after each round's batch step (a progress display).  Returns (stream ids, events per
    item).
    """
    sids = [rec.create_stream(sample_rate=rate, **{**stream_options, **(per_item[i] if per_item else {})})
            for i, (_, rate) in enumerate(audio)]
    index = {sid: i for i, sid in enumerate(sids)}
    events: list[list] = [[] for _ in sids]
    pos = [0] * len(sids)

    def emit(evs) -> None:
        for ev in evs:
            i = index[ev.stream]
            events[i].append(ev)
            if on_event is not None:
                on_event(i, ev)

    live = list(range(len(sids)))
    fed = 0.0
    while live:
        for i in list(live):
            sid = sids[i]
            if not rec.has_stream(sid):
                live.remove(i)
                continue
            x, rate = audio[i]
            n = max(1, int(piece_seconds * rate))
            piece = x[pos[i]: pos[i] + n]
            pos[i] += n
            if piece.size:
                emit(rec.accept_audio(sid, piece))
                fed += piece.size / rate
            if pos[i] >= x.size or not rec.has_stream(sid):
                if rec.has_stream(sid):
                    rec.finish(sid)
                live.remove(i)
        emit(rec.step())
        if on_round is not None:
            on_round(fed)
    emit(rec.drain())
    return sids, events


def load_stream_audio(path: str) -> tuple[Any, int]:
    """A file's audio for :func:`feed_streams`: ``(samples (N,) float32, rate)`` at the file's own rate when a
    live stream may have it (8..48 kHz), else resampled once to 16 kHz (a 96 kHz recording, say).
    AudioError (naming the file) when it cannot be read or is truncated (:func:`streamd.audio.pcm.load_audio`)."""
    from .audio.pcm import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, load_audio
    from .audio.resample import resample

    x, rate = load_audio(path)
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        x, rate = resample(x, rate, 16000), 16000
    return x, rate


def transcribe_files(rec, paths: Sequence[str], piece_seconds: float = 0.1, on_event=None) -> dict[str, list]:
    """Decode files as concurrent streams of ``rec`` (a Recognizer), through :func:`feed_streams`.

    Audio is fed in ``piece_seconds`` pieces at the file's own sample rate (:func:`load_stream_audio`),
    one piece per stream between batch steps, like live clients would; then
    every stream is finished and drained.  Returns path -> list of events
    (a path given twice is decoded once); ``on_event(path, event)`` sees them as they come.
    """
    audio = {}
    for p in paths:
        audio[p] = load_stream_audio(p)
    files = list(audio)
    _, per_file = feed_streams(rec, [audio[p] for p in files], piece_seconds,
                               on_event=None if on_event is None else lambda i, ev: on_event(files[i], ev))
    events: dict[str, list] = {p: [] for p in paths}
    for p, evs in zip(files, per_file):
        events[p] = evs
    return events


async def transcribe_capture(rec: Any, capture: Any, on_event: Callable[[Any], None],
                             **stream_options: Any) -> None:
    """Feed a capture (:class:`streamd.capture.MicCapture`) into one stream of ``rec`` until the capture ends.

    Batch steps run in a worker thread (``asyncio.to_thread``) so that the
    capture keeps queueing meanwhile; the engine is only ever called by one
    thread at a time.  At the end the stream is finished and drained.
    ``on_event`` gets the engine events.  MicError from the capture propagates
    after the audio received so far has been finalized.
    """
    capture.start()
    sid = rec.create_stream(sample_rate=capture.sample_rate, **stream_options)

    def emit(events) -> None:
        for ev in events:
            on_event(ev)

    try:
        async for block in capture.blocks():
            emit(rec.accept_audio(sid, block))
            if not rec.has_stream(sid):
                return
            while rec.pending():
                emit(await asyncio.to_thread(rec.step))
    finally:
        if rec.has_stream(sid):
            rec.finish(sid)
            emit(await asyncio.to_thread(rec.drain))
            rec.close(sid)
