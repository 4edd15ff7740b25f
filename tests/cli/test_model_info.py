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


def test_model_info_prints_nested_meta_readably(tiny_ckpt, tmp_path, capsys):
    """Nested meta as dotted keys, a list of mappings one line per item, a long entry summarized (--json has
    it whole): never a raw dict."""
    from streamd.model.checkpoint import copy_with_meta

    meta = {"fit": {"sets": [{"set": "a.jsonl", "words": 3}], "heldout": {"auc": 0.894244}},
            "train_config": {f"k{i}": i for i in range(40)}, "from": ["x.pt", "y.pt"]}
    copy_with_meta(tiny_ckpt, tmp_path / "m.pt", meta)
    assert main(["model-info", str(tmp_path / "m.pt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "meta.fit.sets[0]: set=a.jsonl, words=3" in lines and "meta.fit.heldout.auc: 0.8942" in lines
    assert "meta.from: x.pt, y.pt" in lines
    assert "meta.train_config: 40 values (k0, k1, k2, k3, k4, k5, ...; --json shows them)" in lines
    assert not any("{" in line for line in lines)
    assert main(["model-info", str(tmp_path / "m.pt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"] == meta
