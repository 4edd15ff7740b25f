"""The package's import order: no module imports in a circle (module-level or inside functions), and only
``streamd.__main__`` imports the command-line front end, the leaf of the order: every argparse parser is in
``streamd.cli`` and no library module imports argparse or the CLI.  Imports under ``if TYPE_CHECKING:`` never
run and do not count; nor do those under ``if __name__ == "__main__":``, which run only when the module is
the program (``python -m MODULE``), an entry point as ``streamd.__main__`` is."""

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


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``."""
    return (isinstance(test, ast.Compare) and getattr(test.left, "id", None) == "__name__"
            and len(test.comparators) == 1 and getattr(test.comparators[0], "value", None) == "__main__")


def _runtime_imports(tree: ast.AST):
    """Import nodes that run when the module is imported: everything but the bodies of ``if TYPE_CHECKING:``
    and ``if __name__ == "__main__":``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                                         or _is_main_guard(node.test)):
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
    assert len(graph) > 50 and "streamd.cli.engine_args" in graph["streamd.cli"]  # the graph is read at all
    assert _cycles(graph) == []


def test_only_main_imports_the_cli():
    graph = import_graph()
    assert sorted(m for m, deps in graph.items() if "streamd.cli" in deps) == ["streamd.__main__"]


def _imports_of(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports at run time (``argparse``, ``streamd``, ...)."""
    out = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_every_parser_is_in_the_cli():
    """The command line is the leaf: library modules take plain arguments; argparse is the CLI's alone."""
    owners = sorted(m for m, p in _modules().items()
                    if not _within(m, "streamd.cli") and "argparse" in _imports_of(p))
    assert owners == []


def test_the_parser_checker_sees_argparse(tmp_path):
    lib = tmp_path / "lib.py"
    lib.write_text("import json\nfrom argparse import ArgumentParser\nif __name__ == '__main__':\n    import sys\n")
    assert _imports_of(lib) == {"json", "argparse"}
    script = tmp_path / "script.py"
    script.write_text("if __name__ == '__main__':\n    import argparse\n")
    assert _imports_of(script) == set()


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


GROUND = ("streamd.options", "streamd.config", "streamd.events", "streamd.tokens", "streamd.paths", "streamd.wire",
          "streamd.manifest_lines", "streamd.audio", "streamd.text")
RUNTIME = ("streamd.model", "streamd.decode", "streamd.engine", "streamd.feed", "streamd.server",
           "streamd.second_pass", "streamd.capture", "streamd.mic", "streamd.client")
# (importer, imported): packages that may never import the other, whichever way a change would like to
FORBIDDEN = (
    [(g, r) for g in GROUND for r in RUNTIME + ("streamd.scoring", "streamd.train", "streamd.evaluation")]
    + [(r, up) for r in RUNTIME for up in ("streamd.scoring", "streamd.train", "streamd.evaluation", "streamd.bench")]
    + [("streamd.client", "streamd.server"), ("streamd.server", "streamd.client")]
    + [("streamd.scoring", up) for up in ("streamd.train", "streamd.evaluation", "streamd.server")]
    + [("streamd.evaluation", "streamd.train")]  # training's calibration fits on an evaluation's decode
    + [(room, "streamd.bench") for room in ("streamd.scoring", "streamd.train", "streamd.evaluation")]
    + [("streamd.bench", "streamd.train")]  # benchmarks measure through evaluation and the runtime, train nothing
    + [(room, "streamd.cli") for room in GROUND + RUNTIME + ("streamd.scoring", "streamd.train", "streamd.evaluation",
                                                              "streamd.bench")]  # the CLI is the leaf
)


def test_stream_options_are_the_bottom_floor():
    """:mod:`streamd.options` (the search methods' table, the ranges, a stream's options) imports nothing of
    streamd: the configuration, the audio front end and every protocol read it."""
    graph = import_graph()
    assert graph["streamd.options"] == set()
    assert "streamd.options" in graph["streamd.config"] and "streamd.options" in graph["streamd.audio.pcm"]


def _within(mod: str, room: str) -> bool:
    return mod == room or mod.startswith(room + ".")


def test_package_order():
    """The rooms' order: the ground floor (stream options, config, events, tokens, wire vocabulary, manifests,
    audio, text) imports no room above it; the runtime (model, searches, engine, server, second pass, client) imports no
    measuring, training or evaluation code; client and server share only the wire vocabulary; what training
    and evaluation both need is in :mod:`streamd.scoring`, below both, and evaluation imports no training
    code (training's calibration decodes through evaluation: the one direction); the benchmarks import no
    training code and only the command line imports them; nothing imports the command
    line (:mod:`streamd.cli`, the leaf) but ``streamd.__main__``."""
    assert _violations(import_graph()) == []


def _violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((mod, dep) for mod, deps in graph.items() for dep in deps
                  for low, high in FORBIDDEN if _within(mod, low) and _within(dep, high))


def test_the_order_checker_sees_a_wrong_way_import():
    graph = {"streamd.config": {"streamd.server.guard"}, "streamd.evaluation.wer": {"streamd.scoring.metrics"},
             "streamd.client": {"streamd.wire"}, "streamd.configuration": {"streamd.server"}}
    assert _violations(graph) == [("streamd.config", "streamd.server.guard")]  # a prefix is a whole room
    assert _violations({"streamd.train.lm": {"streamd.cli.engine_args"}, "streamd.cli.train": {"streamd.train.lm"}}
                       ) == [("streamd.train.lm", "streamd.cli.engine_args")]
