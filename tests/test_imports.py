"""The package's import order: no module imports in a circle (module-level or inside functions), and only
``streamd.__main__`` imports the command-line front end.  Imports under ``if TYPE_CHECKING:`` never run and
do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import streamd

ROOT = Path(streamd.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = ("streamd",) + p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _runtime_imports(tree: ast.AST):
    """Import nodes that can run: everything but the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and "streamd.engine_args" in graph["streamd.cli"]  # the graph is read at all
    assert _cycles(graph) == []


def test_only_main_imports_the_cli():
    graph = import_graph()
    assert sorted(m for m, deps in graph.items() if "streamd.cli" in deps) == ["streamd.__main__"]


def test_the_checker_sees_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_model_room_does_not_import_the_searches():
    """Rooms from the ground up: config, events, tokens, audio -> model -> decode -> engine -> server / CLI."""
    graph = import_graph()
    for mod, deps in graph.items():
        if mod.startswith("streamd.model"):
            assert not {d for d in deps if d.startswith(("streamd.decode", "streamd.engine", "streamd.server",
                                                          "streamd.train"))}, mod
