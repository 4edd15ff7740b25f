"""One reader of JSON-lines audio manifests, shared by training data, augmentation and noise banks, corpus
import, labeling and evaluation sets (no torch).

Every manifest line is a JSON object with an ``audio`` path (relative to the manifest's folder, or absolute) and
optional keys; blank lines are skipped. Errors name the file and line: ``<what> PATH line N: ...``.
:func:`iter_json_lines` and :func:`resolve_audio` are the rules every reader shares; :func:`iter_audio_lines`
adds the checks of training manifests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["iter_audio_lines", "iter_json_lines", "resolve_audio"]


def iter_json_lines(path: str | os.PathLike, where: Callable[[int], str],
                    bad_json: str = "invalid JSON") -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Yield ``(line number, where(line number), object)`` for each non-blank line of the JSON-lines file
    ``path``, in order. ValueError ``<where>: <bad_json> (<reason>)`` for a line that does not parse, ``<where>:
    expected a JSON object, got <type>`` for one that is not an object."""
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            at = where(n)
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"{at}: {bad_json} ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{at}: expected a JSON object, got {type(obj).__name__}")
            yield n, at, obj


def resolve_audio(root: Path, audio: str) -> str:
    """A manifest line's ``audio``: absolute as it is, else relative to ``root`` (the manifest's folder, resolved)."""
    return audio if os.path.isabs(audio) else str(root / audio)


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
    for n, where, obj in iter_json_lines(path, lambda n: f"{what} {path} line {n}"):
        if not isinstance(obj.get("audio"), str):
            raise ValueError(f"{where}: 'audio' must be a string, got {obj.get('audio')!r}")
        if not isinstance(obj.get("text", ""), str):
            raise ValueError(f"{where}: 'text' must be a string, got {obj.get('text')!r}")
        audio = resolve_audio(root, obj["audio"])
        if not os.path.isfile(audio):
            raise FileNotFoundError(f"{where}: audio file {audio} does not exist")
        yield n, where, obj, audio
