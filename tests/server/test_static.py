"""streamd.server.static: request paths map to files under the root and never outside it (``..``, encoded
``%2e%2e``, symbolic links leading out, NUL bytes), in a folder or a zip; the browser page is package data: it
is in the wheel, the installed package finds it with importlib.resources (from a folder or straight from the
zip), and the daemon serves it at ``GET /`` without reading anything outside the package."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import streamd
import streamd.server
from tests.server.wire import http_get, make_app
from streamd.config import AppConfig
from streamd.server.static import WEB_FILES, StaticFiles, content_type, default_web_root

ROOT = Path(streamd.__file__).resolve().parents[1]  # the checkout: pyproject.toml, README.md, streamd/
PACKAGE_WEB = Path(streamd.server.__file__).resolve().parent / "web"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_page_lives_in_the_package():
    root = default_web_root()
    assert isinstance(root, Path) and root.resolve() == PACKAGE_WEB  # importlib.resources: the package's own
    assert sorted(p.name for p in PACKAGE_WEB.iterdir()) == sorted(WEB_FILES)
    index = (PACKAGE_WEB / "index.html").read_text(encoding="utf-8")
    app_js = (PACKAGE_WEB / "app.js").read_text(encoding="utf-8")
    # everything the page loads is one of its own files, by a relative name (no path outside the package)
    assert 'href="style.css"' in index and 'src="app.js"' in index and 'addModule("pcm-worklet.js")' in app_js
    assert AppConfig().server.web_root == ""  # the default: this folder


def test_static_lookup_inside_a_zip(tmp_path):
    """The same rule for a package imported from a zip (no file system path): the page, folders to their
    index.html, nothing above the root."""
    z = tmp_path / "page.zip"
    with zipfile.ZipFile(z, "w") as f:
        for name in WEB_FILES:
            f.write(PACKAGE_WEB / name, f"pkg/web/{name}")
        f.writestr("pkg/web/sub/index.html", "<p>sub</p>")
        f.writestr("pkg/secret.txt", "nope")
    files = StaticFiles(zipfile.Path(z, "pkg/web/"))
    assert files.find("/").read_bytes() == (PACKAGE_WEB / "index.html").read_bytes()
    assert files.find("/app.js").read_bytes() == (PACKAGE_WEB / "app.js").read_bytes()
    assert files.find("/sub").read_bytes() == b"<p>sub</p>" and files.find("/sub/../style.css") is not None
    for path in ("/missing.css", "/../secret.txt", "/%2e%2e/secret.txt", "/sub/../../secret.txt", "/a%00b", "/.."):
        assert files.find(path) is None, path
    assert StaticFiles(zipfile.Path(z, "nothing/")).find("/") is None
    assert content_type("app.js").startswith(("application/javascript", "text/javascript"))
    assert content_type("index.html") == "text/html; charset=utf-8" and content_type("x.bin") == \
        "application/octet-stream"


CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import streamd
from streamd.server.app import App
from streamd.server.static import WEB_FILES, default_web_root
from streamd.config import AppConfig
app = App(AppConfig(), tokens=())
try:
    found = {n: app.static.find("/" + n).read_bytes().decode() for n in WEB_FILES}
    found["/"] = app.static.find("/").read_bytes().decode()
finally:
    app.executor.shutdown()
print(json.dumps({"package": streamd.__file__, "root": str(default_web_root()), "type": type(app.web_root).__name__,
                  "files": found}))
"""


def test_the_wheel_carries_the_page_and_the_installed_package_serves_it(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("needs setuptools to build the wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "streamd", src / "streamd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--disable-pip-version-check", "-q", "-w", str(dist), str(src)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = dist.glob("streamd-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for name in WEB_FILES:
            assert z.read(f"streamd/server/web/{name}") == (PACKAGE_WEB / name).read_bytes(), name
        z.extractall(tmp_path / "site")
    assert {"streamd/assets/default.pt", "streamd/server/static.py", "streamd/server/app.py"} <= names
    assert not [n for n in names if n.startswith(("clients/", "tests/"))]

    want = {n: (PACKAGE_WEB / n).read_text(encoding="utf-8") for n in WEB_FILES}
    want["/"] = want["index.html"]
    # installed (unpacked on sys.path), then straight from the wheel (zipimport: no file system path at all)
    for where, kind in ((tmp_path / "site", "PosixPath"), (wheel, "Path")):
        r = subprocess.run([sys.executable, "-c", CHECK, str(where)], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["package"].startswith(str(where)), got["package"]  # that copy, not the checkout
        assert got["root"].startswith(str(where)) and got["type"] == kind, got
        assert got["files"] == want


def test_the_daemon_serves_the_packaged_page(tiny_ckpt):
    async def body():
        async with make_app(tiny_ckpt) as app:
            assert app.static.find("/") is not None and Path(app.web_root).resolve() == PACKAGE_WEB
            return {p: await http_get(app.port, p) for p in ("/", "/index.html", "/app.js", "/pcm-worklet.js",
                                                             "/style.css", "/nope.js", "/../pyproject.toml")}

    got = asyncio.run(body())
    for path, name in (("/", "index.html"), ("/index.html", "index.html"), ("/app.js", "app.js"),
                       ("/pcm-worklet.js", "pcm-worklet.js"), ("/style.css", "style.css")):
        status, headers, data = got[path]
        assert status == 200 and data == (PACKAGE_WEB / name).read_bytes(), path
        assert headers["content-type"] == content_type(name), path
    assert got["/nope.js"][0] == 404 and got["/../pyproject.toml"][0] == 404


# --------------------------------------------------------------------------- path rules on a folder


@pytest.fixture
def site(tmp_path):
    """A web root with a page, a folder with and one without index.html, and a secret beside the root."""
    root = tmp_path / "web"
    (root / "docs").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "index.html").write_text("<p>home</p>")
    (root / "docs" / "index.html").write_text("<p>docs</p>")
    (root / "docs" / "a b.txt").write_text("spaced")
    (tmp_path / "secret.txt").write_text("nope")
    return root


def test_paths_map_to_files_under_the_root(site):
    files = StaticFiles(site)
    assert files.find("/").read_text() == files.find("").read_text() == "<p>home</p>"
    assert files.find("/docs").read_text() == files.find("/docs/").read_text() == "<p>docs</p>"
    assert files.find("/docs/a%20b.txt").read_text() == "spaced"  # percent-encoded
    assert files.find("/docs/../index.html").read_text() == "<p>home</p>"  # ".." inside the root is fine
    assert files.find("/./docs/./index.html") is not None
    assert files.find("/empty") is None  # a folder without index.html
    assert files.find("/missing.html") is None


@pytest.mark.parametrize("path", ["/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt",
                                  "/docs/../../secret.txt", "/..%2fsecret.txt", "/a%00b", "/index.html%00.txt", "/..",
                                  "//../secret.txt"])
def test_nothing_outside_the_root(site, path):
    assert StaticFiles(site).find(path) is None


def test_symbolic_links_leading_out_are_refused(site, tmp_path):
    os.symlink(tmp_path / "secret.txt", site / "link.txt")
    os.symlink(tmp_path, site / "up")
    os.symlink(site / "docs" / "index.html", site / "inside.html")
    files = StaticFiles(site)
    assert files.find("/link.txt") is None and files.find("/up/secret.txt") is None
    assert files.find("/inside.html").read_text() == "<p>docs</p>"  # a link that stays inside is served


def test_a_missing_root_serves_nothing(tmp_path):
    assert StaticFiles(tmp_path / "nowhere").find("/") is None
    (tmp_path / "file").write_text("x")
    assert StaticFiles(tmp_path / "file").find("/") is None


@pytest.mark.parametrize("name, ctype", [("index.html", "text/html; charset=utf-8"),
                                         ("style.css", "text/css; charset=utf-8"),
                                         ("data.json", "application/json; charset=utf-8"), ("x.png", "image/png"),
                                         ("noext", "application/octet-stream")])
def test_content_types(name, ctype):
    assert content_type(name) == ctype


def test_the_daemon_logs_where_its_page_is_and_the_page_says_what_to_say(tiny_ckpt, caplog):
    caplog.set_level("INFO", logger="streamd.server")

    async def body():
        async with make_app(tiny_ckpt) as app:
            status, _, page = await http_get(app.port, "/")
            return app.port, status, page

    port, status, page = asyncio.run(asyncio.wait_for(body(), 60))
    assert any(r.getMessage().startswith(f"page: http://127.0.0.1:{port}/ (") for r in caplog.records)
    assert status == 200 and b'id="hint"' in page and b"hey stream" in page  # the empty box's hint
    js = (default_web_root() / "app.js").read_text()
    assert 'hideHint()' in js  # the first words replace it
