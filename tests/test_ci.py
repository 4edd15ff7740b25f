"""The CI entry point runs the README's test command (command 2 of its quick start), that command ends with
pytest's summary line, and the README's Python example compiles."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    quick = re.search(r"&& (python3 -m pytest[^\n`]*)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert quick, "README quick start has no pytest command"
    return quick.group(1).strip()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1].strip() == _readme_test_command()
    # every step of command 2, in order, as the last lines of .ci/run
    command = re.search(r"^(python3 -m venv [^\n]*&& python3 -m pytest[^\n`]*)$",
                        (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    assert command, "README quick start has no command 2 (venv, installs, pytest)"
    steps = command.group(1).split(" && ")
    assert [line.strip() for line in ci[-len(steps):]] == steps


def test_the_readme_python_example_compiles():
    import ast

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks
    for b in blocks:
        ast.parse(b)  # a SyntaxError (an `async with` outside a function, say) fails here


def test_the_test_command_ends_with_its_summary_line(tmp_path):
    # the project's pytest options (pyproject.toml) plus the README's flags: "-q" twice would drop the summary
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n", encoding="utf-8")
    args = _readme_test_command().split()[3:]  # after "python3 -m pytest"
    out = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-c",
                          str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(tmp_path / "test_one.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^1 passed", out.stdout.strip().splitlines()[-1]), out.stdout
