"""Recognizer: language-model fusion (the checkpoint's own LM, errors naming the setting) and a Final's
distinct alternatives."""

from __future__ import annotations

import pytest
import torch

from helpers import random_audio, write_checkpoint
from streamd.audio.fbank import Fbank, FbankStream
from streamd.config import DecodingConfig, EndpointConfig, EngineConfig
from streamd.engine import Recognizer
from streamd.events import Final
from tests.engine.feeding import final_tokens, run_one


def _lm_for(ckpt_path, tokens, out_path, order=3):
    """An n-gram over the checkpoint's tokens from a few sentences, written to out_path."""
    from streamd.decode.lm import build_ngram, save_lm
    from streamd.tokens import TokenTable
    table = TokenTable.from_lines(tokens)
    text = ["turn on the lights", "set a timer", "hey stream", "turn off the lights", "what time is it"]
    save_lm(build_ngram([table.encode(t) for t in text], len(table), table.blank_id, order, 1, table.to_lines()),
            out_path)
    return str(out_path)


def test_lm_auto_next_to_model_streaming_equals_offline(tmp_path):
    from helpers import CHARS
    from streamd.engine import lm_path_for
    ckpt = write_checkpoint(tmp_path / "m.pt")
    _lm_for(ckpt, CHARS, lm_path_for(ckpt))
    cfg = EngineConfig(device="cpu", endpoint=EndpointConfig(enabled=False))
    rec = Recognizer.from_checkpoint(ckpt, cfg)
    assert rec.lm is not None and rec.model_info["lm"]["path"].endswith("m.lm.pt")
    assert rec.searches["modified_beam"].lm is rec.searches["modified_beam"].lm  # built once
    x = random_audio(2.0, seed=4)
    ev = run_one(rec, x, 3, method="modified_beam", beam=4)
    # offline: the whole utterance through the same fused search, ranked as a complete segment
    fs = FbankStream(rec.model.cfg.fbank)
    fs.accept(x)
    fs.finish()
    n = fs.frames_ready()
    with torch.no_grad():
        feats = Fbank(rec.model.cfg.fbank)(torch.from_numpy(fs.take(n))[None])
        enc, enc_len = rec.model.encoder(feats, torch.tensor([n]))
        search = rec.searches["modified_beam"]
        st = search.step(search.init_state(torch.tensor([4])), rec.model.heads(enc).enc_p, enc_len,
                         torch.zeros(1, dtype=torch.long))
    assert final_tokens(ev) == list(search.best(st, final=True)[0].tokens)
    plain = Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu", decoding=DecodingConfig(lm="none")))
    assert plain.lm is None and plain.model_info["lm"] is None


def test_lm_errors_name_the_setting(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m.pt")
    other = _lm_for(ckpt, ("<blk>", " ") + tuple("abcdefghijklmnopqrstuvwxyz"), tmp_path / "other.lm.pt")
    with pytest.raises(ValueError, match="decoding.lm: .*another token table"):
        Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu", decoding=DecodingConfig(lm=other)))
    with pytest.raises(ValueError, match="decoding.lm: .*no such language model file"):
        Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu", decoding=DecodingConfig(lm=str(tmp_path / "no"))))
    assert Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu")).lm is None  # auto, no file: no LM


def test_distinct_alternatives_reference():
    from streamd.engine import distinct_alternatives

    nb = [("four percent", -1.0), ("four percent", -1.5), ("for percent", -2.0), ("", -2.2),
          ("four percent t", -3.0), ("for percent", -1.8)]
    assert distinct_alternatives("four percent", nb) == (("for percent", "four percent t"), (-1.0, -1.8, -3.0))
    # the best text missing from the n-best: its score is the top one there
    assert distinct_alternatives("x", [("a", -2.0), ("b", -1.0)]) == (("b", "a"), (-1.0, -1.0, -2.0))
    assert distinct_alternatives("a", [("a", -1.0)]) == ((), (-1.0,))


@pytest.mark.parametrize("method", ["modified_beam", "beam"])
def test_final_alternatives_are_distinct_other_texts_in_score_order(tiny_ckpt, method):
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(endpoint=EndpointConfig(enabled=False)))
    seen = 0
    for seed in range(6):
        x = random_audio(1.5, seed=seed)
        finals = [e for e in run_one(rec, x, seed, method=method, beam=8) if isinstance(e, Final)]
        for f in finals:
            assert len(f.scores) == 1 + len(f.alternatives)
            assert f.text not in f.alternatives and "" not in f.alternatives
            assert len(set(f.alternatives)) == len(f.alternatives)
            assert list(f.scores[1:]) == sorted(f.scores[1:], reverse=True)
            seen += len(f.alternatives)
            assert f.to_wire().get("alternatives", []) == list(f.alternatives)
    assert seen > 0  # the random model's beams do hold other texts
