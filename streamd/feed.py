"""Decode audio files as live streams of one Recognizer: the loop the CLI, evaluation and tests share."""

from __future__ import annotations

from typing import Sequence

__all__ = ["transcribe_files"]


def transcribe_files(rec, paths: Sequence[str], piece_seconds: float = 0.1, on_event=None) -> dict[str, list]:
    """Decode files as concurrent streams of ``rec`` (a Recognizer).

    Audio is fed in ``piece_seconds`` pieces at the file's own sample rate,
    one piece per stream between batch steps, like live clients would; then
    every stream is finished and drained.  Returns path -> list of events.
    """
    from .audio.pcm import load_audio

    audio = {}
    for p in paths:
        x, rate = load_audio(p)
        audio[p] = (x, rate)
    sids = {}
    for p, (x, rate) in audio.items():
        sids[rec.create_stream(sample_rate=rate)] = p
    events: dict[str, list] = {p: [] for p in paths}
    pos = {sid: 0 for sid in sids}

    def emit(evs):
        for ev in evs:
            p = sids[ev.stream]
            events[p].append(ev)
            if on_event is not None:
                on_event(p, ev)

    live = set(sids)
    while live:
        for sid in list(live):
            x, rate = audio[sids[sid]]
            n = max(1, int(piece_seconds * rate))
            piece = x[pos[sid]: pos[sid] + n]
            pos[sid] += n
            if piece.size:
                emit(rec.accept_audio(sid, piece))
            if pos[sid] >= x.size and rec.has_stream(sid):
                rec.finish(sid)
                live.discard(sid)
            elif not rec.has_stream(sid):
                live.discard(sid)
        emit(rec.step())
    emit(rec.drain())
    return events
