"""Every third-party module the code imports is declared in pyproject.toml, and imports where it is installed.

The code's imports are read from the source (streamd/, clients/, bench/: ``import`` statements at any depth,
and the module names given to ``streamd.second_pass.models._need``), so an import inside a function counts as well.  Two checks:

* each top-level package belongs to a distribution that pyproject.toml declares (core or an extra);
* each module the code imports (``lhotse.kaldi``, not only ``lhotse``), where its top-level package is
  installed, imports in a fresh interpreter: a package that imports something it does not declare (lhotse
  1.33 and urllib3) fails here on a clean environment, as it would for a user.  ``.ci/run`` runs the suite
  in a virtual environment of its own (no system site-packages), so this is checked on a clean install.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("streamd", "clients", "bench")

# import name -> distribution, for packages that may not be installed here (installed ones are looked up)
KNOWN = {"yaml": "pyyaml", "piper": "piper-tts", "sklearn": "scikit-learn"}

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def code_imports() -> dict[str, set[str]]:
    """Third-party modules the code imports (dotted names) -> the files that import them."""
    found: dict[str, set[str]] = {}
    for top in SOURCES:
        for f in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_need"
                      and node.args and isinstance(node.args[0], ast.Constant)):
                    names = [node.args[0].value]
                else:
                    continue
                for name in names:
                    first = name.split(".")[0]
                    if first == "streamd" or first in sys.stdlib_module_names:
                        continue
                    found.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    return found


def declared() -> set[str]:
    """Distributions pyproject.toml declares: core dependencies and every extra's (normalized names)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        reqs = list(project["dependencies"]) + [r for rs in project["optional-dependencies"].values() for r in rs]
    else:
        reqs = re.findall(r'"([A-Za-z0-9][A-Za-z0-9._-]*)[^"]*"', text.split("[project.optional-dependencies]")[1]
                          .split("\n[")[0] + text.split("dependencies = [")[1].split("]")[0])
    return {_norm(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs}


def test_every_imported_package_is_declared():
    dists = importlib.metadata.packages_distributions()
    have = declared()
    missing = {}
    for name, files in code_imports().items():
        top = name.split(".")[0]
        candidates = {_norm(d) for d in dists.get(top, [])} or {_norm(KNOWN.get(top, top))}
        if not candidates & have:
            missing[top] = sorted(files)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


PROBE = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_every_imported_module_imports_where_its_package_is_installed():
    """A module whose package is installed but that fails to import (its own undeclared dependency missing,
    say) is what a user would meet; one whose package is not installed belongs to an extra not installed."""
    names = sorted(n for n in code_imports() if importlib.util.find_spec(n.split(".")[0]) is not None)
    if not names:
        pytest.skip("none of the optional packages is installed")
    r = subprocess.run([sys.executable, "-c", PROBE, *names], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    failed = json.loads(r.stdout.strip().splitlines()[-1])
    # sounddevice raises OSError without the PortAudio library (a system package: tests that need it skip)
    failed = {k: v for k, v in failed.items() if not (k == "sounddevice" and v.startswith("OSError"))}
    assert not failed, (f"installed but not importable: {failed} (an environment installed before pyproject.toml "
                        "last changed: pip install -e \".[all,test]\" again)")
