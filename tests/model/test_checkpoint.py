"""Checkpoint format: round trip, strict keys, clear errors, weights_only loading."""

import pytest
import torch

from helpers import CHARS, tiny_model
from streamd.tokens import TokenTable
from streamd.model.checkpoint import CheckpointError, copy_with_meta, load_checkpoint, save_checkpoint


def test_round_trip(tmp_path):
    m = tiny_model(seed=1, kind="lstm")
    p = tmp_path / "m.pt"
    save_checkpoint(p, m, TokenTable(CHARS), meta={"steps": 12})
    lm = load_checkpoint(p)
    assert lm.meta == {"steps": 12} and lm.tokens.tokens == CHARS and lm.model.cfg == m.cfg
    for k, v in m.state_dict().items():
        assert torch.equal(v, lm.model.state_dict()[k]), k
    assert not lm.model.training


def test_half_storage(tmp_path):
    m = tiny_model(seed=2)
    save_checkpoint(tmp_path / "h.pt", m, TokenTable(CHARS), half=True)
    lm = load_checkpoint(tmp_path / "h.pt")
    w = lm.model.encoder.layers[0].attn.qkv.weight
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, m.encoder.layers[0].attn.qkv.weight, atol=1e-3, rtol=1e-3)


def test_copy_with_meta_keeps_the_stored_weights_and_carries_a_calibration(tmp_path):
    """A calibration (plain dict in meta) survives weights_only loading; float16 weights stay float16."""
    from streamd.decode.calibration import Calibration

    save_checkpoint(tmp_path / "h.pt", tiny_model(seed=2), TokenTable(CHARS), meta={"name": "x"}, half=True)
    cal = Calibration((0.0, 0.4, 1.0), (0.1, 0.6, 0.95), "entropy_tsallis_exp", 0.33, "min", words=9)
    copy_with_meta(tmp_path / "h.pt", tmp_path / "c.pt", {"name": "x", "calibration": cal.to_dict()})
    src, dst = (torch.load(tmp_path / n, weights_only=True) for n in ("h.pt", "c.pt"))
    assert dst["meta"] == {"name": "x", "calibration": cal.to_dict()}
    assert {k: v for k, v in dst.items() if k != "meta"}.keys() == {k for k in src if k != "meta"}
    for k, v in src["state_dict"].items():
        assert v.dtype == dst["state_dict"][k].dtype and torch.equal(v, dst["state_dict"][k]), k
    assert Calibration.from_dict(load_checkpoint(tmp_path / "c.pt").meta["calibration"]) == cal
    copy_with_meta(tmp_path / "c.pt", tmp_path / "c.pt", {})  # in place
    assert load_checkpoint(tmp_path / "c.pt").meta == {} and not (tmp_path / "c.pt.tmp").exists()
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        copy_with_meta(tmp_path / "none.pt", tmp_path / "d.pt", {})


def _raw(tmp_path):
    p = tmp_path / "m.pt"
    save_checkpoint(p, tiny_model(), TokenTable(CHARS))
    return p, torch.load(p, weights_only=True)


def test_unknown_config_key(tmp_path):
    p, obj = _raw(tmp_path)
    obj["model_config"]["encoder"]["colour"] = 3
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match=r"model_config\.encoder\.colour: unknown key"):
        load_checkpoint(p)


def test_missing_and_unknown_weights(tmp_path):
    p, obj = _raw(tmp_path)
    del obj["state_dict"]["joiner.out.bias"]
    obj["state_dict"]["extra.weight"] = torch.zeros(2)
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match=r"missing weights: joiner\.out\.bias; unknown weights: extra\.weight"):
        load_checkpoint(p)


def test_wrong_shape_and_vocab(tmp_path):
    p, obj = _raw(tmp_path)
    obj["state_dict"]["joiner.out.bias"] = torch.zeros(3)
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match=r"joiner\.out\.bias has shape \(3,\)"):
        load_checkpoint(p)
    p, obj = _raw(tmp_path)
    obj["tokens"] = obj["tokens"][:-1]
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match="28 tokens but model_config.vocab_size = 29"):
        load_checkpoint(p)


def test_not_a_checkpoint(tmp_path):
    p = tmp_path / "x.pt"
    torch.save({"hello": 1}, p)
    with pytest.raises(CheckpointError, match="not a streamd checkpoint"):
        load_checkpoint(p)
    p.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a loadable checkpoint"):
        load_checkpoint(p)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "none.pt")


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_arbitrary_objects_refused(tmp_path):
    """weights_only=True: a pickle that would run code is rejected, not executed."""
    p, obj = _raw(tmp_path)
    obj["meta"] = {"x": Evil()}
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match="not a loadable checkpoint"):
        load_checkpoint(p)
