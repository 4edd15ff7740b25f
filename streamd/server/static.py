"""The browser page and the static files ``GET /`` serves.

The page (``index.html``, ``app.js``, ``pcm-worklet.js``, ``style.css``) is package data of
``streamd.server`` (the ``web`` folder beside this module, listed in pyproject.toml's package-data), found
with :mod:`importlib.resources`: the installed package has it, wherever and however it is installed, and
nothing outside the package is read for it.  ``server.web_root`` may name another folder instead.

:class:`StaticFiles` maps a request path to a file under its root and never outside it (``..``, encoded
``%2e%2e``, symbolic links leading out, NUL bytes: no file).
"""

from __future__ import annotations

import importlib.resources
import mimetypes
import posixpath
from importlib.abc import Traversable
from pathlib import Path
from urllib.parse import unquote

__all__ = ["WEB_FILES", "default_web_root", "StaticFiles", "content_type"]

WEB_FILES = ("index.html", "app.js", "pcm-worklet.js", "style.css")  # the page, all of it


def default_web_root() -> Traversable:
    """The browser page shipped in the package (``streamd/server/web``): a :class:`~pathlib.Path` for a
    package on the file system (installed or editable), a zip path when it is imported from a zip."""
    return importlib.resources.files(__package__).joinpath("web")


def content_type(name: str) -> str:
    """The Content-Type of a file by its name (UTF-8 for text)."""
    ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
        ctype += "; charset=utf-8"
    return ctype


class StaticFiles:
    """The files under ``root`` (a folder, or any :class:`~importlib.abc.Traversable`) by request path."""

    def __init__(self, root: Traversable | Path):
        self.root = root

    def find(self, path: str) -> Traversable | None:
        """The file ``path`` (a URL path, percent-encoded) names, ``index.html`` for a folder; None when
        there is none under the root."""
        rel = unquote(path).lstrip("/") or "index.html"
        if isinstance(self.root, Path):
            return self._find_path(self.root, rel)
        return self._find_traversable(self.root, rel)

    @staticmethod
    def _find_path(root: Path, rel: str) -> Path | None:
        root = root.resolve()
        if not root.is_dir():
            return None
        try:
            p = (root / rel).resolve()
            if p != root and root not in p.parents:
                return None  # path traversal
            if p.is_dir():
                p = p / "index.html"
            return p if p.is_file() else None
        except (OSError, ValueError):  # e.g. an encoded NUL byte
            return None

    @staticmethod
    def _find_traversable(root: Traversable, rel: str) -> Traversable | None:
        """The same rule inside a zip (no symbolic links there): ``..`` may not climb above the root."""
        if "\0" in rel:
            return None
        norm = posixpath.normpath(rel)
        if norm == ".." or norm.startswith(("../", "/")):
            return None  # path traversal
        try:
            if not root.is_dir():
                return None
            node = root
            for part in norm.split("/"):
                if part not in ("", "."):
                    node = node.joinpath(part)
            if node.is_dir():
                node = node.joinpath("index.html")
            return node if node.is_file() else None
        except (OSError, ValueError):
            return None
