"""streamd.cli.model_info: ``streamd model-info PATH`` through main() (text and JSON, a stored calibration)."""

import json

from streamd.cli import main


def test_model_info(tiny_ckpt, capsys):
    assert main(["model-info", tiny_ckpt]) == 0
    out = capsys.readouterr().out
    assert "parameters:" in out and "hey stream" in out
    assert main(["model-info", tiny_ckpt, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tokens"] == 29 and info["model_config"]["encoder"]["chunk_size"] == 4


def test_model_info_summarizes_a_calibration(tiny_ckpt, tmp_path, capsys):
    from streamd.decode.calibration import Calibration
    from streamd.model.checkpoint import copy_with_meta

    cal = Calibration((0.1, 0.5), (0.2, 0.9), "max_prob", 1.0, "mean", words=40)
    copy_with_meta(tiny_ckpt, tmp_path / "c.pt", {"calibration": cal.to_dict()})
    assert main(["model-info", str(tmp_path / "c.pt")]) == 0
    assert "meta.calibration: isotonic, 2 knots, for max_prob alpha 1.0 mean, exclude_blank true (fitted on 40 words)" \
        in capsys.readouterr().out
