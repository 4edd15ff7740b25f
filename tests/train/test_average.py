"""streamd.train.average: checkpoint averaging (plain and weighted), its refusals and its CLI."""

import re

import pytest
import torch

from streamd.config import DecoderConfig, EncoderConfig, FbankConfig, ModelConfig
from streamd.tokens import TokenTable
from streamd.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from streamd.model.transducer import Transducer
from streamd.train.average import average_checkpoints, list_checkpoints, write_averaged_checkpoint
from streamd.cli.train import average_main
from streamd.train.data import default_char_tokens


def _tiny_model(seed, **cfg_over):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=29, joiner_dim=16, keywords=("hey stream",),
                      encoder=EncoderConfig(num_features=20, d_model=16, num_layers=1, num_heads=2, ff_dim=32,
                                            conv_kernel=3, subsampling_channels=4, **cfg_over),
                      decoder=DecoderConfig(dim=12), fbank=FbankConfig(num_mel_bins=20))
    m = Transducer(cfg)
    with torch.no_grad():
        m.encoder.feat_mean.normal_()
    return m


def test_average_two_checkpoints(tmp_path):
    tokens = TokenTable(default_char_tokens())
    a, b = _tiny_model(0), _tiny_model(1)
    save_checkpoint(tmp_path / "checkpoint-1.pt", a, tokens, {"step": 1})
    save_checkpoint(tmp_path / "checkpoint-2.pt", b, tokens, {"step": 2})
    paths = [p for _, p in list_checkpoints(tmp_path)]
    avg = average_checkpoints(paths)
    sa, sb = a.state_dict(), b.state_dict()
    assert set(avg) == set(sa)
    for k in sa:
        torch.testing.assert_close(avg[k], (sa[k] + sb[k]) / 2, rtol=0, atol=1e-7)
    out = write_averaged_checkpoint(paths, tmp_path / "avg.pt")
    loaded = load_checkpoint(out)
    assert loaded.meta["step"] == 2 and loaded.meta["averaged_from"] == [str(p) for p in paths]
    for k, v in loaded.model.state_dict().items():
        torch.testing.assert_close(v, avg[k])
    assert average_checkpoints(paths[:1])["joiner.out.weight"].equal(sa["joiner.out.weight"])


def test_weighted_average_interpolates_checkpoints(tmp_path):
    """WiSE-FT interpolation: weights (1, 3) give 0.25 a + 0.75 b, written out per tensor; equal weights are the
    plain mean; bad weights are refused naming the option; the CLI records the normalized weights in meta."""
    tokens = TokenTable(default_char_tokens())
    a, b = _tiny_model(0), _tiny_model(1)
    pa, pb = tmp_path / "a.pt", tmp_path / "b.pt"
    save_checkpoint(pa, a, tokens, {"step": 1})
    save_checkpoint(pb, b, tokens, {"step": 2})
    sa, sb = a.state_dict(), b.state_dict()
    got = average_checkpoints([pa, pb], weights=[1.0, 3.0])
    for k in sa:
        if sa[k].is_floating_point():
            torch.testing.assert_close(got[k], (0.25 * sa[k].double() + 0.75 * sb[k].double()).to(sa[k].dtype),
                                       rtol=0, atol=0)
        else:
            assert got[k].equal(sa[k])
    plain = average_checkpoints([pa, pb])
    assert all(torch.equal(average_checkpoints([pa, pb], weights=[2, 2])[k], plain[k]) for k in plain)
    for bad, msg in [([1.0], "1 given for 2"), ([1.0, 0.0], "> 0"), ([1.0, float("nan")], "> 0"),
                     ([1.0, float("inf")], "> 0")]:
        with pytest.raises(ValueError, match=rf"weights: .*{re.escape(msg)}"):
            average_checkpoints([pa, pb], weights=bad)
    assert average_main([str(pa), str(pb), "--weights", "0.3", "0.7", "--out", str(tmp_path / "w.pt")]) == 0
    loaded = load_checkpoint(tmp_path / "w.pt")
    assert loaded.meta["averaged_weights"] == pytest.approx([0.3, 0.7])
    torch.testing.assert_close(loaded.model.state_dict()["joiner.out.weight"],
                               0.3 * sa["joiner.out.weight"] + 0.7 * sb["joiner.out.weight"], rtol=0, atol=1e-6)
    assert average_main(["--exp-dir", str(tmp_path), "--weights", "1", "--out", str(tmp_path / "x.pt")]) == 2


def test_average_refuses_different_models(tmp_path):
    tokens = TokenTable(default_char_tokens())
    save_checkpoint(tmp_path / "x.pt", _tiny_model(0), tokens)
    save_checkpoint(tmp_path / "y.pt", _tiny_model(0, chunk_size=2), tokens)
    with pytest.raises(CheckpointError, match=r"y.pt: model_config differs from .*x.pt"):
        average_checkpoints([tmp_path / "x.pt", tmp_path / "y.pt"])
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        average_checkpoints([tmp_path / "x.pt", tmp_path / "missing.pt"])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def test_average_cli(tmp_path, capsys):
    tokens = TokenTable(default_char_tokens())
    models = [_tiny_model(s) for s in range(3)]
    for s, m in enumerate(models):
        save_checkpoint(tmp_path / f"checkpoint-{s + 1}.pt", m, tokens, {"step": s + 1})
    assert average_main(["--exp-dir", str(tmp_path), "--last", "2", "--out", str(tmp_path / "avg.pt")]) == 0
    w = load_checkpoint(tmp_path / "avg.pt").model.state_dict()
    ref = {k: (models[1].state_dict()[k] + models[2].state_dict()[k]) / 2 for k in w}
    assert all(torch.allclose(w[k], ref[k], atol=1e-7) for k in w)
    assert average_main([str(tmp_path / "checkpoint-1.pt"), "--exp-dir", str(tmp_path), "--out", "x.pt"]) == 2
    assert "either checkpoint files or --exp-dir" in capsys.readouterr().err
