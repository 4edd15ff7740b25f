"""streamd.train.trainer: config errors, loss assembly vs a per-utterance loop, overfitting, exact resume, CLI.

Checkpoint averaging (streamd.train.average) is tested in test_average.py."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from streamd.cli.train import train_main as main
from tests.train.corpus import TINY_MODEL, make_corpus, tiny_config
from streamd.config import ConfigError, FbankConfig, ModelConfig, from_dict
from streamd.tokens import TokenTable
from streamd.model.checkpoint import load_checkpoint
from streamd.model.transducer import Transducer
from streamd.train.average import list_checkpoints
from streamd.train.data import Batch, default_char_tokens
from streamd.train.losses import rnnt_loss
from streamd.train.trainer import (LossConfig, OptimConfig, compute_losses, learning_rate, load_train_config,
                                   train)

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- config


def test_shipped_config_loads_and_is_small():
    cfg = load_train_config(REPO / "configs" / "train.yaml")
    n = Transducer(cfg.model).num_params()
    assert 3e6 <= n <= 5e6, n
    assert cfg.model.vocab_size == len(default_char_tokens())
    assert -1 in cfg.chunk_sizes


@pytest.mark.parametrize("over, key", [
    (["optim.lrr=0.1"], r"^optim\.lrr: unknown key"),
    (["model.encoder.d_modell=8"], r"^model\.encoder\.d_modell: unknown key"),
    (["optim.schedule=linear"], r"^optim\.schedule: must be one of"),
    (["steps=0"], r"^steps: must be >= 1"),
    (["chunk_sizes=[4, 0]"], r"^chunk_sizes\[1\]: must be >= 1 or -1"),
    (["loss.ctc=0.5", "model.ctc_head=false"], r"^loss\.ctc: weight is 0.5 but model.ctc_head is false"),
    (["model.keywords=[]"], r"^loss\.kws: .*model.keywords is empty"),
    (["data.train=[]"], r"^data\.train: at least one training manifest"),
    (["data.max_frames=abc"], r"^data\.max_frames: expected an integer"),
    (["model.encoder.num_features=40"],
     r"^model\.encoder\.num_features: must equal fbank\.num_mel_bins \(80\), got 40"),
    (["optim=3"], r"^optim: expected a mapping"),
    (["spec_augment.max_eq_db=-1"], r"^spec_augment\.max_eq_db: must be >= 0"),
    (["nokey"], r"override 'nokey': expected KEY=VALUE"),
    (["data.repeat=[1, 2, 3]"], r"^data\.repeat: must list one count per data\.train manifest \(1\)"),
    (["data.repeat=[0]"], r"^data\.repeat\[0\]: must be >= 1"),
    (["freeze=['']"], r"^freeze\[0\]: must be a parameter name prefix"),
])
def test_config_errors_name_the_key(over, key):
    with pytest.raises(ConfigError, match=key):
        load_train_config(REPO / "configs" / "train.yaml", over)


def test_vocab_mismatch_names_key(tmp_path):
    man = make_corpus(tmp_path / "c", [("a", 0.3, None)])
    cfg = tiny_config(tmp_path / "exp", man, model__vocab_size=30)
    with pytest.raises(ConfigError, match=r"^model\.vocab_size: is 30 but the token table .* has 29 tokens"):
        train(cfg)


def test_learning_rate_schedules():
    c = OptimConfig(lr=1e-3, warmup_steps=10, min_lr=1e-5, schedule="cosine")
    assert learning_rate(c, 5, 100) == pytest.approx(5e-4)
    assert learning_rate(c, 10, 100) == pytest.approx(1e-3)
    assert learning_rate(c, 55, 100) == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.5)
    assert learning_rate(c, 100, 100) == pytest.approx(1e-5)
    n = OptimConfig(lr=1e-3, warmup_steps=10, min_lr=0.0, schedule="noam")
    assert learning_rate(n, 40, 100) == pytest.approx(1e-3 * math.sqrt(10 / 40))
    assert learning_rate(OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), 7, 10) == 1e-3


# --------------------------------------------------------------------------- loss assembly


def reference_rnnt(model, feats, length, tokens, chunk, left):
    """Per-utterance oracle: unpadded encoder pass, lattice built by explicit (t, u) joiner calls."""
    enc, enc_len = model.encoder(feats[None, :length], torch.tensor([length]), chunk_size=chunk, left_chunks=left)
    enc_p = model.heads(enc).enc_p[0]  # (T', J)
    dec_p = model.decoder_proj(model.decoder(tokens[None]))[0]  # (U+1, J)
    lattice = torch.stack([torch.stack([model.joiner(enc_p[t], dec_p[u]) for u in range(dec_p.shape[0])])
                           for t in range(enc_p.shape[0])])  # (T', U+1, V)
    return rnnt_loss(lattice[None], tokens[None], enc_len, torch.tensor([len(tokens)]), reduction="sum")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("chunk,left", [(2, 1), (-1, -1)])
def test_compute_losses_matches_per_utterance_loop(seed, chunk, left):
    torch.manual_seed(seed)
    cfg = from_dict(ModelConfig, TINY_MODEL)
    model = Transducer(cfg).eval()
    lengths = torch.tensor([37, 21, 30])
    toks = [torch.randint(1, 29, (n,)) for n in (5, 2, 0)]
    feats = torch.randn(3, 37, 20)
    targets = torch.zeros(3, 5, dtype=torch.long)
    for i, t in enumerate(toks):
        targets[i, :len(t)] = t
    batch = Batch(feats, lengths, targets, torch.tensor([5, 2, 0]), torch.tensor([0, -1, -1]),
                  lengths * 160)
    w = LossConfig(rnnt=1.0, ctc=0.3, kws=0.7)
    with torch.no_grad():
        parts = compute_losses(model, batch, w, chunk, left)
        ref = sum(reference_rnnt(model, feats[i], int(lengths[i]), toks[i], chunk, left) for i in range(3)) / 3
    torch.testing.assert_close(parts.rnnt, ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(parts.total, parts.rnnt + 0.3 * parts.ctc + 0.7 * parts.kws)
    assert parts.ctc > 0 and parts.kws > 0


# --------------------------------------------------------------------------- training


def test_overfits_two_utterances(tmp_path):
    man = make_corpus(tmp_path / "c", [("hey stream", 0.8, "hey stream"), ("no", 0.6, None)])
    cfg = tiny_config(tmp_path / "exp", man, spec_augment__enabled=False)
    res = train(cfg)
    losses = [r.loss for r in res.history]
    assert len(losses) == 30 and res.step == 30
    assert all(math.isfinite(v) for v in losses)
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    assert last < 0.35 * first, (first, last)
    assert np.mean([r.rnnt for r in res.history[-3:]]) < 0.35 * np.mean([r.rnnt for r in res.history[:3]])
    assert {r.chunk_size for r in res.history} == {2, 4, -1}
    # outputs: a loadable checkpoint with feature stats, tokens, config and a log
    loaded = load_checkpoint(res.checkpoint)
    assert loaded.meta["step"] == 30 and loaded.tokens.tokens == default_char_tokens()
    assert not torch.allclose(loaded.model.encoder.feat_mean, torch.zeros(20))
    assert (tmp_path / "exp" / "train.yaml").is_file() and (tmp_path / "exp" / "tokens.txt").is_file()
    logs = [json.loads(x) for x in (tmp_path / "exp" / "log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in logs] == [10, 20, 30] and logs[0]["audio_s_per_s"] > 0


def test_init_from_fine_tunes_from_a_checkpoint(tmp_path):
    man = make_corpus(tmp_path / "c", [("hey stream", 0.8, "hey stream"), ("no", 0.6, None)])
    src = train(tiny_config(tmp_path / "src", man, spec_augment__enabled=False))
    fresh = train(tiny_config(tmp_path / "fresh", man, spec_augment__enabled=False, steps=2))
    tuned = train(tiny_config(tmp_path / "ft", man, spec_augment__enabled=False, steps=2,
                              init_from=str(src.checkpoint)))
    # starts where the source ended (low loss), not from a random model; feature stats come along
    assert tuned.history[0].loss < 0.5 * fresh.history[0].loss, (tuned.history[0].loss, fresh.history[0].loss)
    assert tuned.history[0].loss < 2.0 * np.mean([r.loss for r in src.history[-3:]])
    a, b = load_checkpoint(src.checkpoint).model.encoder, load_checkpoint(tuned.checkpoint).model.encoder
    assert torch.equal(a.feat_mean, b.feat_mean) and torch.equal(a.feat_std, b.feat_std)
    # a different model, or no such file, is refused naming the key
    with pytest.raises(ConfigError, match=r"^init_from: model in .* differs from model: \(keys joiner_dim\)"):
        train(tiny_config(tmp_path / "x", man, model__joiner_dim=16, init_from=str(src.checkpoint)))
    with pytest.raises(ConfigError, match=r"^init_from: .*no such checkpoint file"):
        train(tiny_config(tmp_path / "y", man, init_from=str(tmp_path / "missing.pt")))
    # the changes allowed: a longer stateless decoder context and wider encoder feed-forwards, starting as the
    # same function (each growth's exactness: tests/model/test_decoder.py, test_encoder.py)
    ff = load_checkpoint(src.checkpoint).model.cfg.encoder.ff_dim
    wide = train(tiny_config(tmp_path / "wide", man, spec_augment__enabled=False, steps=2, model__decoder__context_size=4,
                             model__encoder__ff_dim=ff + 8, init_from=str(src.checkpoint)))
    assert wide.history[0].loss < 2.0 * np.mean([r.loss for r in src.history[-3:]])
    grown = load_checkpoint(wide.checkpoint).model
    assert grown.decoder.conv.weight.shape[-1] == 4 and grown.encoder.layers[0].ff1.w1.weight.shape[0] == ff + 8
    with pytest.raises(ConfigError, match=r"\(keys decoder\); only a stateless decoder's context_size and the "
                                          r"encoder's ff_dim may change, and only grow"):
        train(tiny_config(tmp_path / "z", man, model__decoder__context_size=3, model__encoder__ff_dim=ff + 8,
                          init_from=str(wide.checkpoint)))
    with pytest.raises(ConfigError, match=r"\(keys encoder\)"):
        train(tiny_config(tmp_path / "n", man, model__decoder__context_size=4, model__encoder__ff_dim=ff,
                          init_from=str(wide.checkpoint)))


def test_repeat_lists_a_manifest_n_times(tmp_path):
    from streamd.train.data import AsrDataset

    a = make_corpus(tmp_path / "a", [("yes", 0.4, None), ("no", 0.4, None)])
    b = make_corpus(tmp_path / "b", [("up", 0.4, None)])
    tok = TokenTable(default_char_tokens())
    fb = FbankConfig(num_mel_bins=20)
    ds = AsrDataset([a, b], tok, fb, repeat=(1, 3), cache_features=False)
    assert [u.text for u in ds.utterances] == ["yes", "no", "up", "up", "up"]
    assert len(ds.frames) == 5 and torch.equal(ds[2].feats, ds[4].feats)
    with pytest.raises(ValueError, match="one integer >= 1 per manifest"):
        AsrDataset([a, b], tok, fb, repeat=(1,))


def test_freeze_keeps_named_parameters_fixed(tmp_path):
    man = make_corpus(tmp_path / "c", [("yes", 0.5, None), ("no", 0.5, None)])
    src = train(tiny_config(tmp_path / "src", man, steps=2, spec_augment__enabled=False))
    res = train(tiny_config(tmp_path / "ft", man, steps=3, spec_augment__enabled=False, init_from=str(src.checkpoint),
                            freeze=["decoder", "joiner"]))
    before = load_checkpoint(src.checkpoint).model.state_dict()
    after = load_checkpoint(res.checkpoint).model.state_dict()
    for name in before:
        same = torch.equal(before[name], after[name])
        if name.startswith(("decoder.", "joiner.")):
            assert same, name
        elif name.startswith("encoder.layers"):
            assert not same, name  # the encoder adapted
    with pytest.raises(ConfigError, match=r"^freeze\[0\]: 'decodr' names no parameter \(modules: .*decoder"):
        train(tiny_config(tmp_path / "x", man, steps=1, freeze=["decodr"]))
    with pytest.raises(ConfigError, match="every parameter is frozen"):
        train(tiny_config(tmp_path / "y", man, steps=1, freeze=["encoder", "decoder", "joiner", "ctc", "kws"]))


def test_validation_reports_each_manifest(tmp_path):
    a = make_corpus(tmp_path / "a", [("yes", 0.5, None), ("no", 0.5, None)])
    b = make_corpus(tmp_path / "b", [("up", 0.5, None)])
    res = train(tiny_config(tmp_path / "exp", a, steps=2, valid_every=2, data__valid=[str(a), str(b)]))
    v = res.valid[-1]
    assert set(v["sets"]) == {str(a), str(b)}
    # the top-level figures are the utterance-weighted means of the sets'
    assert v["loss"] == pytest.approx((2 * v["sets"][str(a)]["loss"] + v["sets"][str(b)]["loss"]) / 3)
    logged = [json.loads(x) for x in (tmp_path / "exp" / "log.jsonl").read_text().splitlines()]
    assert logged[-1]["valid"]["sets"][str(b)]["rnnt"] == pytest.approx(v["sets"][str(b)]["rnnt"])
    one = train(tiny_config(tmp_path / "exp1", a, steps=2, valid_every=2, data__valid=[str(a)]))
    assert "sets" not in one.valid[-1] and one.valid[-1]["loss"] == pytest.approx(v["sets"][str(a)]["loss"])


def test_resume_continues_exactly(tmp_path):
    items = [("hey stream", 0.5, "hey stream"), ("on", 0.3, None), ("off now", 0.45, None),
             ("yes", 0.25, None), ("hey stream stop", 0.6, "hey stream"), ("no", 0.35, None)]
    man = make_corpus(tmp_path / "c", items)
    over = dict(steps=7, checkpoint_every=2, keep_last=2, log_every=1, optim__schedule="cosine",
                model__encoder__dropout=0.1, data__max_frames=120, spec_augment__max_eq_db=6.0)
    full = train(tiny_config(tmp_path / "a", man, **over))
    assert {r.batch_size for r in full.history} != {6}  # several batches per epoch: resume lands mid-epoch

    part = train(tiny_config(tmp_path / "b", man, **over), stop=lambda s: s == 3)
    assert part.step == 3 and [s for s, _ in list_checkpoints(tmp_path / "b")] == [2, 3]
    with pytest.raises(ConfigError, match=r"^exp_dir: .* holds checkpoints \(latest step 3\); set resume"):
        train(tiny_config(tmp_path / "b", man, **over))
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "checkpoint-5.pt").write_bytes((tmp_path / "b" / "checkpoint-3.pt").read_bytes())
    with pytest.raises(ConfigError, match=r"^exp_dir: cannot resume, no checkpoint .* train_state"):
        train(tiny_config(tmp_path / "w", man, resume=True, **over))
    with open(tmp_path / "b" / "log.jsonl", "a") as f:  # an interrupted run logged past its last checkpoint
        f.write(json.dumps({"step": 4, "loss": 1.0}) + "\n" + json.dumps({"valid": {"step": 4}}) + "\n" +
                '{"step": 5, "lo')  # ... and was killed in the middle of a line
    rest = train(tiny_config(tmp_path / "b", man, resume=True, **over))
    assert [r.step for r in rest.history] == [4, 5, 6, 7]

    def logged(exp):
        return [(r["step"], r["loss"]) if "step" in r else ("valid", r["valid"]["step"])
                for r in map(json.loads, (exp / "log.jsonl").read_text().splitlines())]
    assert logged(tmp_path / "b") == logged(tmp_path / "a")  # the log reads as one run
    for a, b in zip(full.history[3:], rest.history):
        assert (a.loss, a.rnnt, a.ctc, a.kws, a.chunk_size, a.batch_size) == \
               (b.loss, b.rnnt, b.ctc, b.kws, b.chunk_size, b.batch_size)
    wa, wb = load_checkpoint(full.checkpoint).model.state_dict(), load_checkpoint(rest.checkpoint).model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert [s for s, _ in list_checkpoints(tmp_path / "b")] == [6, 7]  # keep_last
    assert sorted(p.name for p in (tmp_path / "b").glob("train_state-*.pt")) == ["train_state-6.pt",
                                                                                   "train_state-7.pt"]
    # resuming a finished run does nothing; a different model config is refused
    assert train(tiny_config(tmp_path / "b", man, resume=True, **over)).history == []
    with pytest.raises(ConfigError, match=r"^model: differs .* \(keys joiner_dim\)"):
        train(tiny_config(tmp_path / "b", man, resume=True, model__joiner_dim=16, **{**over, "steps": 9}))


def test_cli_main(tmp_path, capsys):
    man = make_corpus(tmp_path / "c", [("hi", 0.3, None)])
    cfg = yaml.safe_load((REPO / "configs" / "train.yaml").read_text())
    cfg.update({"exp_dir": str(tmp_path / "exp"), "model": copy.deepcopy(TINY_MODEL), "steps": 2, "log_every": 1,
                "num_threads": 1})
    cfg["data"].update({"train": [str(man)], "valid": [str(man)], "num_workers": 1})
    cfg["valid_every"] = 2
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["--config", str(path)]) == 0
    assert [s for s, _ in list_checkpoints(tmp_path / "exp")] == [2]
    assert main(["--config", str(path), "--set", "steps=3", "--resume"]) == 0
    assert [s for s, _ in list_checkpoints(tmp_path / "exp")] == [2, 3]
    valid = [json.loads(x)["valid"] for x in (tmp_path / "exp" / "log.jsonl").read_text().splitlines()
             if "valid" in x]
    assert len(valid) == 1 and valid[0]["step"] == 2 and math.isfinite(valid[0]["loss"])
    assert main(["--config", str(path), "--set", "optim.lr=-1"]) == 2
    assert "optim.lr: must be > 0" in capsys.readouterr().err


def test_written_config_keeps_the_command_keys_first():
    """train.yaml and the checkpoint meta list the command's own keys first, then the shared run keys."""
    import dataclasses

    from streamd.train.trainer import DataConfig, LossConfig, RunConfig, TrainConfig, config_dict

    d = config_dict(TrainConfig(data=DataConfig(train=("x.jsonl",)), loss=LossConfig(kws=0.0)))
    run = [f.name for f in dataclasses.fields(RunConfig)]
    keys = list(d)
    assert keys[0] == "exp_dir" and keys[-len(run):] == run
    assert set(keys) == {f.name for f in dataclasses.fields(TrainConfig)}
