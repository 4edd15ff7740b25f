"""Checkpoint format: round trip, strict keys, clear errors, weights_only loading."""

import pytest
import torch

from helpers import CHARS, tiny_model
from streamd.decode.tokens import TokenTable
from streamd.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


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
