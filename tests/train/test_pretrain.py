"""data2vec-style pretraining: EMA and its schedule, targets vs a per-layer loop, mask statistics vs their
definition, a tiny run that learns without collapsing, exact resume, init_from into `streamd train`, config errors."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import torch.nn.functional as F
import yaml

from helpers import random_audio, speechlike
from streamd.cli import main as cli_main
from streamd.cli.train import pretrain_main as main
from streamd.config import ConfigError, EncoderConfig, from_dict
from streamd.model.checkpoint import load_checkpoint
from streamd.model.encoder import StreamingEncoder
from streamd.model.transducer import Transducer
from streamd.train.average import list_checkpoints, write_averaged_checkpoint
from streamd.train.pretrain import (AudioDataset, EmaConfig, EmaTeacher, PretrainConfig, build_targets, ema_decay,
                                    instance_norm, load_pretrain_config, pretrain, regression_loss,
                                    sample_time_masks)
from streamd.train.trainer import is_pretrain_checkpoint, load_train_config, train
from tests.train.corpus import TINY_MODEL, make_corpus, set_nested, tiny_config

REPO = Path(__file__).resolve().parents[2]


def tiny_pretrain_config(exp_dir, manifest, **over) -> PretrainConfig:
    """A tiny model (TINY_MODEL of test_trainer), a few utterances per batch; ``a__b=v`` sets key a.b."""
    data = {"exp_dir": str(exp_dir), "model": copy.deepcopy(TINY_MODEL),
            "data": {"train": [str(manifest)], "max_frames": 500, "num_workers": 0},
            "optim": {"lr": 1e-2, "warmup_steps": 3, "schedule": "constant"},
            "mask": {"span": 4}, "ema": {"tau0": 0.999, "tau_end": 0.9999, "tau_n": 100},
            "chunk_sizes": [2, 4, -1], "left_chunks": [1, -1],
            "steps": 10, "log_every": 10, "checkpoint_every": 100, "num_threads": 1, "seed": 3}
    return from_dict(PretrainConfig, set_nested(data, over))


def audio_corpus(root: Path, seconds, seed=0) -> Path:
    """FLAC/WAV files of speech-like signals and tone bursts via soundfile; the manifest has lines with a text,
    with an empty text and with no text at all (pretraining reads none of them)."""
    (root / "audio").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i, sec in enumerate(seconds):
        x = speechlike(rng, sec) if i % 2 else random_audio(sec, seed=seed + i)
        name = f"audio/{i}.{'flac' if i % 3 == 0 else 'wav'}"
        soundfile.write(root / name, x, 16000)
        line = {"audio": name, "duration": len(x) / 16000}
        if i % 3 == 1:
            line["text"] = "some words"
        elif i % 3 == 2:
            line["text"] = ""
        lines.append(json.dumps(line))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root / "manifest.jsonl"


# --------------------------------------------------------------------------- EMA


def test_ema_decay_schedule_matches_written_out_reference():
    cfg = EmaConfig(tau0=0.9, tau_end=0.99, tau_n=10)
    # linear from tau0 at 0 earlier updates to tau_end at tau_n, then constant
    expected = [0.9, 0.909, 0.918, 0.927, 0.936, 0.945, 0.954, 0.963, 0.972, 0.981, 0.99, 0.99, 0.99]
    assert [ema_decay(cfg, k) for k in range(13)] == pytest.approx(expected, abs=1e-12)
    assert ema_decay(EmaConfig(), 0) == 0.999 and ema_decay(EmaConfig(), 10**6) == 0.9999
    assert ema_decay(EmaConfig(), 15000) == pytest.approx(0.99945)


def test_ema_update_matches_written_out_reference():
    torch.manual_seed(0)
    enc_cfg = EncoderConfig(num_features=20, d_model=16, num_layers=2, num_heads=2, ff_dim=32, conv_kernel=3,
                            subsampling_channels=4, dropout=0.1)
    student = StreamingEncoder(enc_cfg)
    teacher = EmaTeacher(student)
    assert not teacher.model.training and not any(p.requires_grad for p in teacher.model.parameters())
    with torch.no_grad():
        for p in student.parameters():
            p.add_(torch.randn_like(p))  # the student moved (an optimizer step)
        student.feat_mean.normal_()
    before = {k: v.clone() for k, v in teacher.model.state_dict().items()}
    s = student.state_dict()
    for decay in (0.9, 0.999):
        teacher.update(student, decay)
        for k, v in teacher.model.state_dict().items():
            if k in ("feat_mean", "feat_std"):  # buffers: copied
                ref = s[k]
            else:
                ref = decay * before[k] + (1 - decay) * s[k]
            torch.testing.assert_close(v, ref, rtol=1e-6, atol=1e-7)
        before = {k: v.clone() for k, v in teacher.model.state_dict().items()}
    assert teacher.model.layers[0].ff1.w1.weight.data_ptr() != student.layers[0].ff1.w1.weight.data_ptr()


# --------------------------------------------------------------------------- targets


def reference_targets(layers, lengths, top_k, inorm_layers, norm, eps=1e-5):
    """Per utterance, per layer: the definition written out with unpadded tensors."""
    out = torch.zeros_like(layers[0])
    for b, n in enumerate(lengths):
        chosen = layers[-top_k:] if top_k < len(layers) else layers
        acc = []
        for layer in chosen:
            x = layer[b, :n]  # (n, D)
            if inorm_layers:
                x = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps)
            acc.append(x)
        y = sum(acc) / len(acc)
        if norm == "instance":
            y = (y - y.mean(0)) / torch.sqrt(y.var(0, unbiased=False) + eps)
        elif norm == "layer":
            y = (y - y.mean(1, keepdim=True)) / torch.sqrt(y.var(1, unbiased=False, keepdim=True) + eps)
        out[b, :n] = y
    return out


@pytest.mark.parametrize("num_layers,top_k", [(10, 8), (3, 8), (4, 1)])
@pytest.mark.parametrize("inorm,norm", [(True, "none"), (True, "instance"), (True, "layer"), (False, "none")])
def test_targets_match_a_per_layer_loop(num_layers, top_k, inorm, norm):
    g = torch.Generator().manual_seed(num_layers * 10 + top_k)
    lengths = [13, 7, 1, 10]
    layers = [torch.randn(4, 13, 6, generator=g) * (i + 1) + i for i in range(num_layers)]
    for x in layers:  # padding frames hold garbage that must not count
        for b, n in enumerate(lengths):
            x[b, n:] = 1e4
    valid = torch.arange(13)[None, :] < torch.tensor(lengths)[:, None]
    got = build_targets(layers, valid, top_k, inorm, norm)
    torch.testing.assert_close(got, reference_targets(layers, lengths, top_k, inorm, norm), rtol=1e-5, atol=1e-5)
    assert got.shape == (4, 13, 6) and torch.all(got[~valid] == 0)
    if inorm and norm != "layer":  # each channel has mean 0 over an utterance's valid frames
        assert got[0, :13].mean(0).abs().max() < 1e-5


def test_encoder_layer_outputs_and_default_unchanged():
    torch.manual_seed(1)
    enc = StreamingEncoder(EncoderConfig(num_features=20, d_model=16, num_layers=3, num_heads=2, ff_dim=32,
                                         conv_kernel=3, subsampling_channels=4, dropout=0.0)).eval()
    x, lengths = torch.randn(2, 37, 20), torch.tensor([37, 20])
    with torch.no_grad():
        plain = enc(x, lengths, chunk_size=2, left_chunks=1)
        y, ln, outs = enc(x, lengths, chunk_size=2, left_chunks=1, return_layers=True)
    assert len(plain) == 2 and torch.equal(plain[0], y) and torch.equal(plain[1], ln)
    assert len(outs) == 3 and outs[-1] is y and all(o.shape == (2, 10, 16) for o in outs)


def test_instance_norm_and_regression_loss_definitions():
    x = torch.randn(2, 5, 3)
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    y = instance_norm(x, valid)
    assert torch.all(y[0, 3:] == 0)
    torch.testing.assert_close(y[0, :3].var(0, unbiased=False), torch.ones(3), atol=1e-3, rtol=0)
    pred, target = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    sel = torch.tensor([[1, 0, 1, 0, 0], [0, 0, 0, 0, 1]], dtype=torch.bool)
    frames = [(0, 0), (0, 2), (1, 4)]
    l2 = sum(((pred[b, t] - target[b, t]) ** 2).sum() for b, t in frames) / 3 / math.sqrt(4)
    torch.testing.assert_close(regression_loss(pred, target, sel), l2)
    sl1 = sum(F.smooth_l1_loss(pred[b, t], target[b, t], reduction="sum", beta=0.5) for b, t in frames) / 3 * 2.0
    torch.testing.assert_close(regression_loss(pred, target, sel, beta=0.5, scale=2.0), sl1)
    assert regression_loss(pred, target, torch.zeros_like(sel)) == 0


# --------------------------------------------------------------------------- masks


def expected_mask_stats(n, span, prob, min_masks):
    """Exact E[masked frames] and E[masked runs] of one utterance of n frames from the definition: k distinct
    starts uniform among N = n - L + 1, k = max(min_masks, floor(prob n / span + u)) capped at N."""
    L = min(span, n)
    N = n - L + 1
    x = prob * n / span
    ks = {math.floor(x): 1 - (x - math.floor(x)), math.floor(x) + 1: x - math.floor(x)}

    def none_start_in(a, b, k):  # P(no start in positions [a, b] of the N candidates)
        a, b = max(a, 0), min(b, N - 1)
        m = max(0, b - a + 1)
        return math.comb(N - m, k) / math.comb(N, k)

    cov = runs = 0.0
    for k0, pk in ks.items():
        if pk == 0:
            continue
        k = min(N, max(min_masks, k0))
        for t in range(n):
            p_cov = 1 - none_start_in(t - L + 1, t, k)
            cov += pk * p_cov
            if t == 0:
                runs += pk * p_cov
            else:  # t covered and t - 1 not: P(t-1 free) - P(t-1 and t free)
                runs += pk * (none_start_in(t - L, t - 1, k) - none_start_in(t - L, t, k))
    return cov, runs


def run_lengths(row):
    out, cur = [], 0
    for v in row.tolist() + [False]:
        if v:
            cur += 1
        elif cur:
            out.append(cur)
            cur = 0
    return out


@pytest.mark.parametrize("n,span,prob,min_masks", [(173, 10, 0.65, 2), (60, 10, 0.65, 2), (90, 4, 0.3, 0)])
def test_mask_statistics_match_the_definition(n, span, prob, min_masks):
    draws, t_max = 3000, n + 7
    gen = torch.Generator().manual_seed(n)
    lengths = torch.full((draws,), n)
    mask = sample_time_masks(lengths, t_max, prob, span, min_masks, gen)
    assert mask.shape == (draws, t_max) and mask.dtype == torch.bool
    assert not mask[:, n:].any()  # padding is never masked
    e_cov, e_runs = expected_mask_stats(n, span, prob, min_masks)
    frac = mask.sum(1).double() / n
    assert abs(frac.mean().item() - e_cov / n) < 4 * frac.std().item() / math.sqrt(draws) + 1e-3, \
        (frac.mean().item(), e_cov / n)
    runs = [r for row in mask[:300] for r in run_lengths(row)]
    assert min(runs) >= span  # spans are whole; overlapping ones merge
    total_runs = sum(len(run_lengths(row)) for row in mask)
    mean_run = mask.sum().item() / total_runs
    assert mean_run == pytest.approx(e_cov / e_runs, rel=0.03), (mean_run, e_cov / e_runs)
    # fairseq's count of starts: floor(prob * n / span + u), at least min_masks
    assert frac.mean().item() <= prob + 1e-9


def test_masks_of_short_and_mixed_lengths():
    gen = torch.Generator().manual_seed(0)
    mask = sample_time_masks(torch.tensor([5, 0, 30, 12]), 30, 0.65, 10, 2, gen)
    assert mask[0, :5].all() and not mask[0, 5:].any()  # shorter than a span: masked whole
    assert not mask[1].any()
    assert not mask[3, 12:].any() and mask[3].sum() >= 10
    a = sample_time_masks(torch.tensor([30, 12]), 30, 0.65, 10, 2, torch.Generator().manual_seed(7))
    b = sample_time_masks(torch.tensor([30, 12]), 30, 0.65, 10, 2, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# --------------------------------------------------------------------------- training


def test_loss_falls_and_targets_do_not_collapse(tmp_path):
    man = audio_corpus(tmp_path / "c", [0.8 + 0.15 * i for i in range(6)])
    assert len(AudioDataset([man], from_dict(PretrainConfig, {"data": {"train": [str(man)]}}).model.fbank)) == 6
    cfg = tiny_pretrain_config(tmp_path / "exp", man, steps=80, log_every=20)
    res = pretrain(cfg)
    h = res.history
    assert res.step == 80 and len(h) == 80 and all(math.isfinite(r.loss) for r in h)
    first, last = np.mean([r.loss for r in h[:10]]), np.mean([r.loss for r in h[-10:]])
    assert last < 0.8 * first, (first, last)
    # beyond the variance level: the student predicts the masked frames, not just the targets' mean
    ratio = np.mean([r.loss / (math.sqrt(32) * r.target_var) for r in h[-10:]])
    assert ratio < 0.9, ratio
    assert min(r.target_var for r in h) > 0.3  # no collapse
    assert {r.chunk_size for r in h} == {2, 4, -1}
    assert 0.3 < np.mean([r.mask_frac for r in h]) < 0.75
    assert [r.ema_decay for r in h[:3]] == pytest.approx([ema_decay(cfg.ema, k) for k in range(3)])
    logs = [json.loads(x) for x in (tmp_path / "exp" / "log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in logs] == [20, 40, 60, 80]
    assert all(x["target_var"] > 0.3 and "loss" in x and x["audio_s_per_s"] > 0 for x in logs)
    # a regular checkpoint, marked as pretraining, with the measured feature stats
    ck = load_checkpoint(res.checkpoint)
    assert is_pretrain_checkpoint(ck.meta) and ck.meta["pretrain"]["method"] == "data2vec"
    assert ck.meta["step"] == 80 and not torch.allclose(ck.model.encoder.feat_mean, torch.zeros(20))


def test_resume_is_exact(tmp_path):
    man = audio_corpus(tmp_path / "c", [0.3, 0.5, 0.45, 0.25, 0.6, 0.35, 0.7], seed=3)
    over = dict(steps=7, checkpoint_every=2, keep_last=2, log_every=1, optim__schedule="cosine",
                model__encoder__dropout=0.1, data__max_frames=120, spec_augment__enabled=True,
                spec_augment__max_eq_db=6.0, ema__tau0=0.9, ema__tau_end=0.99, ema__tau_n=4)
    full = pretrain(tiny_pretrain_config(tmp_path / "a", man, **over))
    assert len({r.batch_size for r in full.history}) > 1  # several batches per epoch: resume lands mid-epoch
    part = pretrain(tiny_pretrain_config(tmp_path / "b", man, **over), stop=lambda s: s == 3)
    assert part.step == 3 and [s for s, _ in list_checkpoints(tmp_path / "b")] == [2, 3]
    with pytest.raises(ConfigError, match=r"^exp_dir: .* holds checkpoints \(latest step 3\); set resume"):
        pretrain(tiny_pretrain_config(tmp_path / "b", man, **over))
    with open(tmp_path / "b" / "log.jsonl", "a") as f:  # logged past its last checkpoint, then killed
        f.write(json.dumps({"step": 4, "loss": 1.0}) + "\n" + '{"step": 5, "lo')
    rest = pretrain(tiny_pretrain_config(tmp_path / "b", man, resume=True, **over))
    assert [r.step for r in rest.history] == [4, 5, 6, 7]
    for a, b in zip(full.history[3:], rest.history):
        assert (a.loss, a.target_var, a.pred_var, a.mask_frac, a.grad_norm, a.ema_decay, a.chunk_size,
                a.batch_size) == (b.loss, b.target_var, b.pred_var, b.mask_frac, b.grad_norm, b.ema_decay,
                                  b.chunk_size, b.batch_size)

    def logged(exp):
        return [(r["step"], r["loss"], r["target_var"])
                for r in map(json.loads, (exp / "log.jsonl").read_text().splitlines())]
    assert logged(tmp_path / "b") == logged(tmp_path / "a")
    wa, wb = load_checkpoint(full.checkpoint).model.state_dict(), load_checkpoint(rest.checkpoint).model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = (torch.load(tmp_path / x / "train_state-7.pt", weights_only=True) for x in ("a", "b"))
    assert sa["format"] == "streamd-pretrain-state"
    for part_name in ("teacher", "student"):
        assert sa[part_name].keys() == sb[part_name].keys()
        assert all(torch.equal(sa[part_name][k], sb[part_name][k]) for k in sa[part_name])
    assert [s for s, _ in list_checkpoints(tmp_path / "b")] == [6, 7]  # keep_last
    assert pretrain(tiny_pretrain_config(tmp_path / "b", man, resume=True, **over)).history == []
    with pytest.raises(ConfigError, match=r"^model: differs .* \(keys joiner_dim\)"):
        pretrain(tiny_pretrain_config(tmp_path / "b", man, resume=True, model__joiner_dim=16, **{**over, "steps": 9}))


def test_pretrain_checkpoint_initializes_train(tmp_path):
    man = make_corpus(tmp_path / "c", [("hey stream", 0.8, "hey stream"), ("no", 0.6, None)])
    # the placeholder decoder / joiner of the pretraining model differ from the fine-tuning model's
    pre = tiny_pretrain_config(tmp_path / "pre", man, steps=2, checkpoint_every=1, model__decoder__dim=16,
                               model__joiner_dim=16, model__encoder__dropout=0.1, model__encoder__chunk_size=2)
    res = pretrain(pre)
    src = load_checkpoint(res.checkpoint).model
    # everything but the KWS head frozen: after the step the encoder is the pretrained one, decoder and
    # joiner are a fresh model's of the run's seed
    cfg = tiny_config(tmp_path / "ft", man, steps=1, init_from=str(res.checkpoint),
                      freeze=["encoder", "decoder", "joiner", "ctc"])
    tuned = load_checkpoint(train(cfg).checkpoint).model
    for k, v in src.encoder.state_dict().items():
        assert torch.equal(tuned.encoder.state_dict()[k], v), k
    torch.manual_seed(cfg.seed)
    fresh = Transducer(cfg.model)
    for name in ("decoder", "joiner", "ctc"):
        for k, v in getattr(fresh, name).state_dict().items():
            assert torch.equal(getattr(tuned, name).state_dict()[k], v), (name, k)
    # an average of pretrain checkpoints is one too
    avg = write_averaged_checkpoint([p for _, p in list_checkpoints(tmp_path / "pre")], tmp_path / "avg.pt")
    assert is_pretrain_checkpoint(load_checkpoint(avg).meta)
    train(tiny_config(tmp_path / "ft2", man, steps=1, init_from=str(avg)))
    # a different encoder architecture or fbank is refused naming the keys
    with pytest.raises(ConfigError, match=r"^init_from: the pretrained encoder in .* differs from this model "
                                          r"\(model\.encoder\.d_model: 32 there, 16 here\)"):
        train(tiny_config(tmp_path / "x", man, model__encoder__d_model=16, init_from=str(res.checkpoint)))
    with pytest.raises(ConfigError, match=r"\(model\.fbank\.num_mel_bins: 20 there, 24 here; "
                                          r"model\.encoder\.num_features: 20 there, 24 here\)"):
        train(tiny_config(tmp_path / "y", man, model__encoder__num_features=24, model__fbank__num_mel_bins=24,
                          init_from=str(res.checkpoint)))
    with pytest.raises(ConfigError, match=r"\(model\.encoder\.num_layers: 2 there, 3 here\)"):
        train(tiny_config(tmp_path / "z", man, model__encoder__num_layers=3, init_from=str(res.checkpoint)))


# --------------------------------------------------------------------------- config and CLI


def test_shipped_config_loads_and_fits_the_training_model():
    cfg = load_pretrain_config(REPO / "configs" / "pretrain.yaml")
    train_cfg = load_train_config(REPO / "configs" / "train.yaml")
    assert cfg.model.encoder == train_cfg.model.encoder and cfg.model.fbank == train_cfg.model.fbank
    assert (cfg.mask.prob, cfg.mask.span, cfg.ema.tau0, cfg.ema.tau_end, cfg.target.top_k) == (0.65, 10, 0.999,
                                                                                                 0.9999, 8)
    assert len(cfg.data.repeat) == len(cfg.data.train)


@pytest.mark.parametrize("over, key", [
    (["mask.prob=0"], r"^mask\.prob: must be in \(0, 1\]"),
    (["mask.prob=1.5"], r"^mask\.prob: must be in \(0, 1\]"),
    (["mask.span=0"], r"^mask\.span: must be >= 1"),
    (["mask.min_masks=-1"], r"^mask\.min_masks: must be >= 0"),
    (["mask.spam=3"], r"^mask\.spam: unknown key"),
    (["ema.tau0=1.5"], r"^ema\.tau0: must be in \[0, 1\]"),
    (["ema.tau_end=0.5"], r"^ema\.tau_end: must be in \[tau0=0.999, 1\]"),
    (["ema.tau_n=0"], r"^ema\.tau_n: must be >= 1"),
    (["target.top_k=0"], r"^target\.top_k: must be >= 1"),
    (["target.norm=batch"], r"^target\.norm: must be one of \['none', 'instance', 'layer'\]"),
    (["target.instance_norm_layers=maybe"], r"^target\.instance_norm_layers: expected true/false"),
    (["loss.beta=-1"], r"^loss\.beta: must be >= 0"),
    (["loss.scale=-0.1"], r"^loss\.scale: must be >= 0"),
    (["chunk_sizes=[4, 0]"], r"^chunk_sizes\[1\]: must be >= 1 or -1"),
    (["data.train=[]", "data.repeat=[]"], r"^data\.train: at least one training manifest"),
    (["data.repeat=[1]"], r"^data\.repeat: must list one count per data\.train manifest \(2\)"),
    (["model.encoder.num_features=40"],
     r"^model\.encoder\.num_features: must equal fbank\.num_mel_bins \(80\), got 40"),
    (["optim.lr=-1"], r"^optim\.lr: must be > 0"),
    (["steps=0"], r"^steps: must be >= 1"),
    (["init_from=x.pt"], r"^init_from: unknown key"),
    (["nokey"], r"override 'nokey': expected KEY=VALUE"),
])
def test_config_errors_name_the_key(over, key):
    with pytest.raises(ConfigError, match=key):
        load_pretrain_config(REPO / "configs" / "pretrain.yaml", over)


def test_cli(tmp_path, capsys):
    man = audio_corpus(tmp_path / "c", [0.5, 0.7])
    cfg = yaml.safe_load((REPO / "configs" / "pretrain.yaml").read_text())
    cfg.update({"exp_dir": str(tmp_path / "exp"), "model": copy.deepcopy(TINY_MODEL), "steps": 2, "log_every": 1,
                "num_threads": 1, "valid_every": 2})
    cfg["data"].update({"train": [str(man)], "valid": [str(man)], "repeat": [], "num_workers": 0,
                        "min_duration": 0.1})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["pretrain", "--config", str(path)]) == 0
    assert main(["--config", str(path), "--set", "steps=3", "--resume"]) == 0
    assert [s for s, _ in list_checkpoints(tmp_path / "exp")] == [2, 3]
    valid = [json.loads(x)["valid"] for x in (tmp_path / "exp" / "log.jsonl").read_text().splitlines()
             if "valid" in x]
    assert len(valid) == 1 and valid[0]["step"] == 2 and math.isfinite(valid[0]["loss"]) and valid[0]["target_var"] > 0
    assert main(["--config", str(path), "--set", "mask.prob=2"]) == 2
    assert "mask.prob: must be in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["pretrain", "--help"])
    assert e.value.code == 0 and "init_from" in capsys.readouterr().out
