"""One reader of JSON-lines audio manifests, shared by training data, augmentation and noise banks (no torch).

Every manifest line is a JSON object with an ``audio`` path (relative to the manifest's folder, or absolute) and
optional keys; blank lines are skipped. Errors name the file and line: ``<what> PATH line N: ...``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

__all__ = ["iter_audio_lines"]


def iter_audio_lines(path: str | os.PathLike, what: str = "manifest") -> Iterator[tuple[int, str, dict, str]]:
    """Yield ``(line number, where, line object, absolute audio path)`` for each line of ``path``, in order.

    ``where`` is ``"<what> PATH line N"`` for the caller's own errors about other keys. Raises
    FileNotFoundError for a missing manifest or audio file, ValueError for a line that is not an object with
    a string ``audio`` or whose ``text`` (when present) is not a string.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path}: no such file")
    root = path.resolve().parent
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{what} {path} line {n}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            if not isinstance(obj.get("audio"), str):
                raise ValueError(f"{where}: 'audio' must be a string, got {obj.get('audio')!r}")
            if not isinstance(obj.get("text", ""), str):
                raise ValueError(f"{where}: 'text' must be a string, got {obj.get('text')!r}")
            audio = obj["audio"] if os.path.isabs(obj["audio"]) else str(root / obj["audio"])
            if not os.path.isfile(audio):
                raise FileNotFoundError(f"{where}: audio file {audio} does not exist")
            yield n, where, obj, audio
