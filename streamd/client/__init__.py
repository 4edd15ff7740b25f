"""Python client for the streamd daemon's v1 websocket protocol (``/v1/stream``, docs/protocol.md).

::

    from streamd.client import Client, FileSource, MicSource
    from streamd.events import Final, Partial

    async with Client("ws://127.0.0.1:8765/v1/stream", token=None) as c:
        async for ev in c.stream("audio.wav", method="modified_beam"):     # a path: FileSource
            if isinstance(ev, Final):
                print(ev.text, [(w.word, w.conf) for w in ev.words])

    events = transcribe_file("ws://127.0.0.1:8765/v1/stream", "audio.wav")   # the same, blocking

One :meth:`Client.stream` is one connection, that is one stream: ``start``, ``ready``, the audio as binary
frames, ``eof``, then the server's events until ``done`` and the close.  Events are the engine's own
dataclasses (:mod:`streamd.events`: ``Partial``, ``Final``, ``WakeWord``, ``Error``, ``Done``), rebuilt
with ``from_wire``; the ``ready`` message is :attr:`Stream.ready` (:class:`Ready`).  A server ``error``
is yielded as an :class:`~streamd.events.Error` event and ends the stream; not reaching the server, an
HTTP refusal or a connection lost before ``done`` raise :class:`ClientError` subclasses.  With
``retries``, the refusals whose close code says "try again later" (1013: ``too_many_streams``,
``overloaded``, ``loading``, ...) or "going away" (1001: ``shutting_down``, a daemon draining for a
restart), HTTP 502/503/504 (a load balancer with no backend) and connection failures are retried
before any audio is sent, after the refusal's ``retry_after`` when it has one; the source is read
only after ``ready``.

Sources: a file path or :class:`FileSource` (WAV through :func:`streamd.audio.pcm.load_audio`: the
stdlib ``wave`` module, or soundfile when installed; sent at the file's own rate, the server resamples
any rate 8-48 kHz), :class:`PcmSource` (raw ``s16le`` / ``f32le`` bytes, a binary file object, or an
iterable or async iterable of byte chunks), :class:`MicSource` (the microphone through
:mod:`streamd.capture`, sounddevice optional).  Anything with ``sample_rate``, ``format`` and an async
``chunks()`` generator of PCM bytes (optionally ``open()`` and ``stop()``) is a source too.

Stream options are the start message's fields (:data:`STREAM_OPTIONS`, from the server's
:data:`~streamd.wire.START_FIELDS`): ``method``, ``beam``, ``partials``, ``keywords``,
``endpointing``, ``wake_words``, ``hotwords`` (None or absent: the server's default), and
``sample_rate`` / ``format`` for raw PCM.  Their values are checked by the server (an ``error`` event).

Needs ``websockets`` (>= 13) and numpy; it imports neither torch nor the server's I/O modules.

Rooms: :mod:`.messages` (options, retry rules, errors, ``ready``), :mod:`.sources` (audio sources),
:mod:`.stream` (a stream, the client, the blocking helpers); every name is exported here.
"""

from __future__ import annotations

from .messages import (DEFAULT_URL, RETRY_CODES, STREAM_OPTIONS, ClientError, ConnectError, ConnectionLost, Ready,
                       StreamError, final_text, to_s16le)
from .sources import FileSource, MicSource, PcmSource, as_source
from .stream import Client, Stream, transcribe, transcribe_file

__all__ = ["Client", "Stream", "Ready", "FileSource", "PcmSource", "MicSource", "ClientError", "ConnectError",
           "ConnectionLost", "StreamError", "transcribe", "transcribe_file", "final_text", "to_s16le",
           "STREAM_OPTIONS", "RETRY_CODES", "DEFAULT_URL"]
