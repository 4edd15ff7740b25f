"""streamd.scoring.reliability: reliability diagrams (PNG) of word confidence, and the matplotlib install hint."""

import sys

import pytest

from streamd.scoring.metrics import ReliabilityBins, reliability
from streamd.scoring.reliability import plot_reliability, require_matplotlib

pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'streamd[train]')")

PNG = b"\x89PNG\r\n\x1a\n"


def test_plot_writes_a_png_with_any_number_of_curves(tmp_path):
    raw = reliability([True, False, True, True, False], [0.9, 0.2, 0.7, 0.95, 0.6])
    empty = ReliabilityBins((0, 0), (None, None), (None, None))  # no words: drawn, labelled as such
    path = plot_reliability(tmp_path / "deep" / "rel.png", [("raw", raw), ("calibrated", raw), ("none", empty)],
                            "dev set\nmax_prob")
    assert path == tmp_path / "deep" / "rel.png" and path.read_bytes()[:8] == PNG
    one = plot_reliability(str(tmp_path / "one.png"), [("raw", raw)], "t")
    assert one.read_bytes()[:8] == PNG


def test_no_curves_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no curves to draw"):
        plot_reliability(tmp_path / "x.png", [], "t")
    assert not (tmp_path / "x.png").exists()


def test_missing_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    require_matplotlib()  # installed here: nothing happens
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(RuntimeError, match=r"needs matplotlib: pip install 'streamd\[train\]'"):
        require_matplotlib()
    with pytest.raises(RuntimeError, match="needs matplotlib"):
        plot_reliability(tmp_path / "x.png", [("raw", reliability([True], [0.5]))], "t")
