"""streamd.cli (the package: the ``streamd`` dispatcher and ``python -m``): the version, the delegated
commands, the entry points.  Each command's module has its own file here (test_transcribe.py, ...)."""

import pytest

from streamd.cli import main


def test_delegated_commands_have_help(capsys):
    for name in ("train", "average", "calibrate", "eval"):
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        assert f"usage: streamd {name}" in capsys.readouterr().out


def test_version(capsys):
    from importlib.metadata import version

    import streamd

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamd {streamd.__version__}"
    assert version("streamd") == streamd.__version__  # the package metadata reads the same constant


def test_every_delegated_module_has_a_main():
    import importlib
    import importlib.util

    from streamd.cli import DELEGATED

    for name, (module, function, _) in DELEGATED.items():
        assert importlib.util.find_spec(module) is not None, name
        assert callable(getattr(importlib.import_module(module), function)), name
    from streamd.cli.evaluate import eval_main

    assert callable(eval_main)


@pytest.mark.parametrize("module", ["streamd", "streamd.cli"])
def test_python_m_entry_points(module):
    """``python -m streamd`` and ``python -m streamd.cli`` are both the ``streamd`` command."""
    import subprocess
    import sys

    import streamd

    r = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"streamd {streamd.__version__}"
    r = subprocess.run([sys.executable, "-m", module, "transcribe"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "usage: streamd transcribe" in r.stderr
