"""streamd.train.adapt and ``streamd adapt`` on the installed Moonshine base: the torch rebuild equals ONNX
Runtime, each LoRA sits on the weight the adapter file names, the tokenizer's encode is what the model
writes, and a short run writes an adapter the second pass loads, resuming exactly (skipped without
moonshine-cpp, onnx, onnxruntime)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from streamd.paths import ASSETS

missing = [m for m in ("onnxruntime", "onnx", "moonshine_cpp") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: pip install -e '.[all]'")

SAMPLES = ASSETS / "samples"


def _samples():
    from streamd.audio.resample import load_audio_at
    rows = [json.loads(line) for line in (SAMPLES / "samples.jsonl").read_text().splitlines() if line.strip()]
    return [(load_audio_at(SAMPLES / r["audio"], 16000), r["text"]) for r in rows if r.get("text")]


@pytest.fixture(scope="module")
def files():
    import onnx
    import onnxruntime as ort

    from streamd.second_pass.models import _moonshine_dir, _moonshine_onnx, cache_root
    src = _moonshine_dir()
    return [_moonshine_onnx(src / f"{m}.ort", cache_root() / "moonshine-base", ort, onnx)
            for m in ("encoder_model", "decoder_model_merged")]


def _ort(path):
    import onnxruntime as ort
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _ort_logits(enc, dec, audio, ids):
    """Encoder states and the merged decoder's no-cache logits (all positions) by ONNX Runtime."""
    states = enc.run(None, {"input_values": audio[None]})[0]
    feed = {i.name: np.zeros((1, 8, 0, 52), np.float32) for i in dec.get_inputs() if i.name.startswith("past_")}
    feed.update(input_ids=np.array([ids], np.int64), encoder_hidden_states=states,
                use_cache_branch=np.array([False]))
    return states, dec.run(["logits"], feed)[0]


def test_encode_is_what_the_model_writes():
    from streamd.second_pass.models import MoonshineTeacher
    teacher = MoonshineTeacher("moonshine-base", cpu_threads=1)
    tok = teacher.tokenizer
    for audio, _ in _samples():
        ids = list(teacher.recognize(audio).ids)
        assert ids and tok.encode(tok.decode(ids)) == ids
    for text in ("We call it bear.", "Zero, three, five, one.", "naïve café 日本"):
        assert tok.decode(tok.encode(text)) == text


def test_torch_rebuild_equals_onnxruntime(files):
    import torch

    from streamd.train.adapt import moonshine_torch
    enc, dec, enc_w, dec_w = moonshine_torch(*files)
    assert len(enc_w) == 48 and len(dec_w) == 80
    audio = _samples()[0][0]
    ids = [1, 1334, 1246, 372, 11460]
    states, logits = _ort_logits(_ort(files[0]), _ort(files[1]), audio, ids)
    with torch.no_grad():
        h = enc(torch.from_numpy(audio)[None])
        out = dec(torch.tensor([ids]), h)
    np.testing.assert_allclose(h.numpy(), states, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), logits, atol=2e-3, rtol=1e-4)


def test_each_lora_changes_the_weight_the_adapter_names(tmp_path, files):
    """Each LoRA sits on a weight whose values are those of the ONNX weight chain it is named after; random
    LoRA weights in torch and the same weights written into the ONNX files then give nearly the same logits
    (the written weights are rounded to int8 steps again)."""
    import onnx
    import torch

    from streamd.second_pass.adapter import apply_adapter, chain_weights, load_adapter, save_adapter
    from streamd.train.adapt import add_lora, moonshine_torch
    enc, dec, enc_w, dec_w = moonshine_torch(*files)
    gen = torch.Generator().manual_seed(0)
    loras = {**add_lora(enc, enc_w, 2, gen), **add_lora(dec, dec_w, 2, gen)}
    chains = {}
    for f in files:
        m = onnx.load(str(f))
        init = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        chains.update({n: init[q].astype(np.float32) * init[s] + init[z]
                       for n, (q, s, z, _) in chain_weights(m.graph).items()})
    assert set(loras) == set(enc_w) | set(dec_w)
    for net, weights in ((enc, enc_w), (dec, dec_w)):
        for name, init_name in weights.items():
            np.testing.assert_allclose(net.initializer(init_name).numpy(), chains[name], atol=1e-6)

    with torch.no_grad():
        for lo in loras.values():
            lo.B.normal_(0.0, 0.3, generator=gen)
    save_adapter(tmp_path / "r.adapter.npz", {n: (lo.A.detach().numpy(), lo.B.detach().numpy())
                                              for n, lo in loras.items()}, {"base": "moonshine-base"})
    ad = load_adapter(tmp_path / "r.adapter.npz")
    with torch.no_grad():  # the torch side takes the file's float16 values
        for name, lo in loras.items():
            lo.A.copy_(torch.from_numpy(ad.deltas[name][0]))
            lo.B.copy_(torch.from_numpy(ad.deltas[name][1]))
    adapted = [tmp_path / "enc.onnx", tmp_path / "dec.onnx"]
    for s, d in zip(files, adapted):
        model = onnx.load(str(s))
        apply_adapter(model, ad)
        onnx.save(model, str(d))
    audio, ids = _samples()[1][0], [1, 1334, 1246, 372]
    _, base = _ort_logits(_ort(files[0]), _ort(files[1]), audio, ids)
    _, want = _ort_logits(_ort(adapted[0]), _ort(adapted[1]), audio, ids)
    with torch.no_grad():
        got = dec(torch.tensor([ids]), enc(torch.from_numpy(audio)[None])).numpy()
    change, off = np.abs(want - base).mean(), np.abs(got - want).mean()
    assert off < 0.2 * change, (off, change)


def test_adapt_cli_writes_an_adapter_the_second_pass_loads_and_resumes_exactly(tmp_path):
    from streamd.cli import main
    from streamd.second_pass.adapter import load_adapter
    from streamd.second_pass.models import load_recognizer
    from streamd.train.adapt import AdaptOptions, adapt

    manifest = tmp_path / "m.jsonl"
    rows = [json.loads(line) for line in (SAMPLES / "samples.jsonl").read_text().splitlines() if line.strip()]
    manifest.write_text("".join(json.dumps({"audio": str(SAMPLES / r["audio"]), "text": r["text"]}) + "\n"
                                for r in rows[:4]))
    out = tmp_path / "t.adapter.npz"
    assert main(["adapt", "--set", str(manifest), "--out", str(out), "--rank", "2", "--epochs", "1",
                 "--accumulate", "2", "--threads", "1"]) == 0
    ad = load_adapter(out)
    assert ad.rank == 2 and len(ad.deltas) == 128 and ad.meta["trained"]["steps"] == 2
    assert any(np.abs(b).max() > 0 for _, b in ad.deltas.values())  # it learned something
    rec = load_recognizer(str(out), cpu_threads=1, int8=True)
    assert rec.name == "t" and rec.int8
    assert rec.recognize(_samples()[0][0]).text

    # resume: stopped after step 1 (state saved every step), then run again -> the same adapter as one run
    utts = _samples()[:4]
    opts = AdaptOptions(rank=2, epochs=1.0, accumulate=2, threads=1, save_every=1)
    whole = tmp_path / "whole.adapter.npz"
    adapt(utts, whole, opts)

    class Stop(Exception):
        pass

    def stop_after_first(step, steps, loss):
        if step == 1:
            raise Stop

    part = tmp_path / "part.adapter.npz"
    with pytest.raises(Stop):
        adapt(utts, part, opts, progress=stop_after_first)
    assert (tmp_path / "part.adapter.npz.state.pt").is_file() and not part.exists()
    adapt(utts, part, opts)
    assert not (tmp_path / "part.adapter.npz.state.pt").exists()
    a, b = load_adapter(whole), load_adapter(part)
    for n in a.deltas:
        np.testing.assert_array_equal(a.deltas[n][1], b.deltas[n][1])

    # init: a run starts from an adapter's weights (a vanishing learning rate keeps them as they are)
    again = tmp_path / "again.adapter.npz"
    adapt(utts, again, AdaptOptions(rank=2, epochs=1.0, accumulate=2, threads=1, lr=1e-12), init=whole)
    c = load_adapter(again)
    assert c.meta["init"] == {"file": "whole.adapter.npz", "digest": a.digest}
    for n in a.deltas:
        np.testing.assert_array_equal(c.deltas[n][0], a.deltas[n][0])
        np.testing.assert_array_equal(c.deltas[n][1], a.deltas[n][1])
    with pytest.raises(ValueError, match="--rank must match"):
        adapt(utts, tmp_path / "r.adapter.npz", AdaptOptions(rank=3, epochs=1.0, accumulate=2, threads=1), init=whole)


def test_adapt_errors(tmp_path):
    from streamd.cli import main
    from streamd.second_pass.models import sentence_case
    from streamd.train.adapt import AdaptOptions
    with pytest.raises(ValueError, match="rank"):
        AdaptOptions(rank=0)
    with pytest.raises(ValueError, match="max_seconds"):
        AdaptOptions(max_seconds=40)
    assert main(["adapt", "--set", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "a.adapter.npz")]) == 2
    assert main(["adapt", "--set", str(SAMPLES / "samples.jsonl"), "--out", str(tmp_path / "a.npz")]) == 2
    assert sentence_case("i think i'm here") == "I think I'm here."
    assert sentence_case("zero three five one") == "Zero three five one."

