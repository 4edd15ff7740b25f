"""streamd.evaluation (the package): one feeding loop for every decode, a light sets module."""

from pathlib import Path


def test_evaluation_package_layout():
    """Every decode of streamd eval goes through streamd.feed (no second feeding loop), and the sets module
    stays light (no torch) for scripts that only read sets."""
    import subprocess
    import sys

    import streamd.evaluation as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        src = path.read_text(encoding="utf-8")
        assert "accept_audio" not in src and ".step()" not in src, path.name
    code = "import sys, streamd.evaluation.sets; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
