"""Several segments in one model call: the decoder's cross-attention bias (:mod:`streamd.second_pass.cross_mask`),
Moonshine's batched greedy search against each segment searched alone (the oracle), and the second pass's and
the worker's rounds read in one batch, each event as it would come alone."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from fakes import FakeRecognizer
from streamd.config import SecondPassConfig
from streamd.events import Final, WakeCheck, WakeWord, Word
from streamd.second_pass.models import Recognized, RecognizedWord
from streamd.second_pass.rescore import SecondPass
from streamd.second_pass.worker import SecondPassWorker

onnx_missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
moonshine_missing = onnx_missing + (["moonshine_cpp"] if importlib.util.find_spec("moonshine_cpp") is None else [])


# --------------------------------------------------------------------------- the graph edit


def _attention_model(path):
    """out = If(flag, attend(q, k, v), attend(2 q, k, v)) where attend = Softmax(q @ k^T) @ v with the
    softmax named like Moonshine's cross-attention (and a self-attention softmax that must stay unmasked)."""
    import onnx
    from onnx import TensorProto, helper

    def branch(name, scale):
        nodes = [helper.make_node("Mul", ["q", f"{name}_s"], [f"{name}_q"]),
                 helper.make_node("Transpose", ["k"], [f"{name}_kt"], perm=[0, 1, 3, 2]),
                 helper.make_node("MatMul", [f"{name}_q", f"{name}_kt"], [f"{name}_z"]),
                 helper.make_node("Softmax", [f"{name}_z"], [f"{name}_p"], axis=-1,
                                  name=f"/model/decoder/layers.0/encoder_attn/Softmax_{name}"),
                 helper.make_node("MatMul", [f"{name}_p", "v"], [f"{name}_a"]),
                 helper.make_node("Softmax", [f"{name}_a"], [f"{name}_out"], axis=-1,
                                  name=f"/model/decoder/layers.0/self_attn/Softmax_{name}")]
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, ["b", 1, 1, 4])
        return helper.make_graph(nodes, name, [], [out],
                                 [helper.make_tensor(f"{name}_s", TensorProto.FLOAT, [], [scale])])

    node = helper.make_node("If", ["flag"], ["out"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))
    inputs = [helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
              helper.make_tensor_value_info("q", TensorProto.FLOAT, ["b", 1, 1, 4]),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, ["b", 1, "t", 4]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, ["b", 1, "t", 4])]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["b", 1, 1, 4])
    graph = helper.make_graph([node], "attend", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


@pytest.mark.skipif(bool(onnx_missing), reason=f"needs {', '.join(onnx_missing)}: pip install onnxruntime onnx")
def test_the_bias_hides_padded_encoder_positions_in_both_branches(tmp_path):
    import onnx
    import onnxruntime as ort

    from streamd.second_pass.cross_mask import BIAS_INPUT, PAD_BIAS, add_cross_attention_bias

    model = _attention_model(tmp_path / "plain.onnx")
    assert add_cross_attention_bias(model) == 2  # one cross-attention softmax per branch; self-attention left
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp_path / "masked.onnx"))
    plain = ort.InferenceSession(str(tmp_path / "plain.onnx"), providers=["CPUExecutionProvider"])
    masked = ort.InferenceSession(str(tmp_path / "masked.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, 4)).astype(np.float32) for n in (1, 5, 5))
    pad = rng.standard_normal((1, 1, 3, 4)).astype(np.float32) * 5  # loud padding: any leak shows
    for flag in (True, False):
        own = plain.run(None, {"flag": np.array([flag]), "q": q, "k": k, "v": v})[0]
        zero = masked.run(None, {"flag": np.array([flag]), "q": q, "k": k, "v": v,
                                 BIAS_INPUT: np.zeros((1, 1, 1, 5), np.float32)})[0]
        np.testing.assert_array_equal(zero, own)  # a zero bias: the graph's own outputs
        bias = np.zeros((1, 1, 1, 8), np.float32)
        bias[..., 5:] = PAD_BIAS
        padded = masked.run(None, {"flag": np.array([flag]), "q": q, "k": np.concatenate([k, pad], 2),
                                   "v": np.concatenate([v, pad], 2), BIAS_INPUT: bias})[0]
        np.testing.assert_allclose(padded, own, atol=1e-6)
        leaky = plain.run(None, {"flag": np.array([flag]), "q": q, "k": np.concatenate([k, pad], 2),
                                 "v": np.concatenate([v, pad], 2)})[0]
        assert np.abs(leaky - own).max() > 1e-2  # without the bias the padding is heard
    with pytest.raises(ValueError, match="already"):
        add_cross_attention_bias(model)


@pytest.mark.skipif(bool(onnx_missing), reason=f"needs {', '.join(onnx_missing)}: pip install onnxruntime onnx")
def test_a_graph_without_cross_attention_is_refused():
    from onnx import TensorProto, helper

    from streamd.second_pass.cross_mask import add_cross_attention_bias

    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="/other/Softmax")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    with pytest.raises(ValueError, match="not a Moonshine decoder"):
        add_cross_attention_bias(helper.make_model(graph))


# --------------------------------------------------------------------------- the real model, batched and alone


@pytest.mark.skipif(bool(moonshine_missing), reason=f"Moonshine's packages are not installed ("
                    f"{', '.join(moonshine_missing)}): pip install -e \".[second-pass]\"")
@pytest.mark.usefixtures("one_torch_thread")
def test_a_batch_of_segments_reads_as_each_segment_alone():
    from streamd.audio.resample import load_audio_at
    from streamd.paths import default_samples
    from streamd.second_pass.models import Context, keyword_rivals, load_recognizer

    model = load_recognizer("moonshine-base", int8=False)  # the float decoder: the batch moves only rounding
    assert model.batches
    d = default_samples().parent
    xs = [load_audio_at(d / n, 16000) for n in ("lights.wav", "timer.wav", "weather.wav", "digits.wav")]
    assert len({x.size for x in xs}) == 4  # four lengths: every row but the longest padded
    first = model.recognize(xs[0])
    items = [(xs[0], None, "turn on the kitchen lights"),
             (xs[1], Context(xs[0], first.ids), "set a timer"),       # a context: forced tokens first
             (np.zeros(0, np.float32), None, None),                     # nothing to hear
             (xs[2], None, None),
             (xs[3][:3000], None, None),                                # under the encoder's minimum: padded
             (xs[3], None, lambda own: keyword_rivals(own, "hey stream"))]  # a wake verifier's rivals
    many = model.recognize_many(items)
    assert many[2] == Recognized("")
    for item, got in zip(items, many):
        want = model.recognize(item[0], context=item[1], rival=item[2])  # the oracle: each segment alone
        assert got.text == want.text and got.ids == want.ids
        np.testing.assert_allclose([w.prob for w in got.words], [w.prob for w in want.words], atol=1e-5)
        assert (got.rival_gap is None) == (want.rival_gap is None)
        if want.rival_gap is not None:
            assert got.rival_gap == pytest.approx(want.rival_gap, abs=1e-4)
    assert many[0].text == "Turn on the kitchen lights", many[0].text
    assert "Set a timer" in many[1].text, many[1].text


# --------------------------------------------------------------------------- rounds read in one batch


class _Batching(FakeRecognizer):
    """A FakeRecognizer that batches and takes contexts: ``batches_seen`` the item counts of its
    ``recognize_many`` calls; ``contexts`` the context ids each piece heard (in call order)."""

    batches = True
    takes_context = True

    def __init__(self):
        super().__init__("Hello world.")
        self.batches_seen: list[int] = []
        self.contexts: list[tuple[int, ...] | None] = []
        self.break_batch = False

    def recognize(self, audio, hotwords=(), context=None):
        self.contexts.append(None if context is None else tuple(context.ids))
        rec = super().recognize(audio, hotwords)
        return Recognized(rec.text, tuple(RecognizedWord(w.word, w.prob) for w in rec.words), (len(self.calls),))

    def recognize_many(self, items):
        self.batches_seen.append(len(items))
        if self.break_batch:
            raise RuntimeError("batch broke")
        return [self.recognize(a, (), c) for a, c, _ in items]


def segment(stream, seg, start, seconds=1.0, text="hallo", reason="endpoint:rule2"):
    audio = (np.sin(np.arange(int(seconds * 16000)) / 9) * 8000).astype(np.int16)
    words = tuple(Word(w, start + 0.1 + 0.2 * i, start + 0.25 + 0.2 * i, 0.5) for i, w in enumerate(text.split()))
    return Final(stream, seg, text, words, start, start + seconds, reason=reason, first_pass_text=text,
                 second_pass="pending", audio=audio)


def test_a_round_is_one_call_per_wave_and_each_final_as_alone():
    events = [segment(1, 0, 0.0), segment(2, 0, 0.0), segment(1, 1, 1.0), segment(3, 0, 0.0, text=""),
              segment(2, 1, 1.0, reason="eos")]
    cfg = SecondPassConfig(model="fake", select="always")
    batched, alone = _Batching(), _Batching()
    out = SecondPass(batched, cfg).apply_all(events)
    one = SecondPass(alone, cfg)
    ref = [one.apply(e) for e in events]
    # stream 1's and 2's second segments wait for the next call: they hear the first ones as their context
    assert batched.batches_seen == [2, 2]
    assert [(f.stream, f.segment, f.text, f.second_pass) for f in out] == [
        (f.stream, f.segment, f.text, f.second_pass) for f in ref]
    assert out[3].second_pass == "skipped_no_speech"
    assert sorted(c for c in batched.contexts if c is not None) == sorted(c for c in alone.contexts if c is not None)
    assert [w.start for f in out for w in f.words] == [w.start for f in ref for w in f.words]


def test_a_failed_batch_hears_each_segment_alone():
    model = _Batching()
    model.break_batch = True
    out = SecondPass(model, SecondPassConfig(model="fake", select="always")).apply_all(
        [segment(1, 0, 0.0), segment(2, 0, 0.0)])
    assert model.batches_seen == [2]
    assert [(f.pass_no, f.second_pass, f.text) for f in out] == [(2, "done", "hello world")] * 2


def test_wake_checks_ride_in_the_same_batch():
    from fakes import GapRecognizer

    class Gaps(GapRecognizer):
        batches = True

        def __init__(self):
            super().__init__(lambda audio: 0.0 if audio.size >= 8000 else -20.0)
            self.sizes: list[int] = []

        def recognize_many(self, items):
            self.sizes.append(len(items))
            return [self.recognize(a, (), c, r) for a, c, r in items]

    def wake(stream, samples):
        return WakeWord(stream, "hey stream", 1.0, 0.0, 0.5, verification="pending",
                        check=WakeCheck(np.zeros(samples, np.float32), -8.0, False))

    model = Gaps()
    out = SecondPass(model, SecondPassConfig(model="gap", select="always")).apply_all(
        [wake(1, 16000), segment(2, 0, 0.0), wake(3, 4000)])
    assert model.sizes == [3]
    assert [(e.verification, e.verifier_gap) for e in (out[0], out[2])] == [("verified", 0.0), ("rejected", -20.0)]
    assert out[1].pass_no == 2


def test_the_worker_reads_a_round_in_one_batch():
    model = _Batching()
    model.gate = threading.Event()
    w = SecondPassWorker(SecondPass(model, SecondPassConfig(model="fake", select="always")), max_queue=8,
                         max_batch=3, max_wait_s=60)
    got, cond = [], threading.Condition()

    def done(key, final, seconds):
        with cond:
            got.append(key)
            cond.notify_all()

    assert w.submit(0, segment(0, 0, 0.0), done)  # taken alone; the worker waits in the model
    for i in range(1, 4):
        assert w.submit(i, segment(i, 0, 0.0), done)
    model.gate.set()
    with cond:
        assert cond.wait_for(lambda: len(got) == 4, timeout=20)
    assert sum(model.batches_seen) == 4 and max(model.batches_seen) >= 2
    w.close()


def test_eval_reads_a_sets_segments_in_rounds_with_the_same_finals():
    from types import SimpleNamespace

    from streamd.evaluation.recognition import Evaluator
    from streamd.events import Partial

    files = [[Partial(1, 0, "hal"), segment(1, 0, 0.0), segment(1, 1, 1.0, reason="eos")],
             [segment(2, 0, 0.0, text="")], [segment(3, 0, 0.0), segment(3, 1, 1.0, reason="eos")]]
    cfg = SecondPassConfig(model="fake", select="always")
    got = {}
    for batch in (1, 3):
        model = _Batching()
        ev = SimpleNamespace(second=SecondPass(model, cfg))
        got[batch] = Evaluator._second_pass(ev, files, batch)
        # rounds of 3 (every file's first segment, then the second ones): [1/0, 2/0 (no words), 3/0], [1/1, 3/1]
        assert model.batches_seen == ([] if batch == 1 else [2, 2])
    assert [[(e.text, getattr(e, "second_pass", None)) for e in f] for f in got[3]] == [
        [(e.text, getattr(e, "second_pass", None)) for e in f] for f in got[1]]
    assert got[3][1][0].second_pass == "skipped_no_speech" and got[3][0][0] == files[0][0]


def test_a_batching_worker_keeps_the_first_pass_for_late_segments():
    import time

    from streamd.second_pass.worker import OVERLOAD

    model = _Batching()
    model.gate = threading.Event()
    clock = [0.0]
    w = SecondPassWorker(SecondPass(model, SecondPassConfig(model="fake", select="always")), max_queue=4,
                         max_batch=4, max_wait_s=1.0, clock=lambda: clock[0])
    got, cond = {}, threading.Condition()

    def done(key, final, seconds):
        with cond:
            got[key] = final
            cond.notify_all()

    assert w.submit("a", segment(1, 0, 0.0), done)  # taken by the thread, which waits in the model
    time.sleep(0.2)
    clock[0] = 0.5
    assert w.submit("b", segment(2, 0, 0.0), done) and w.submit("c", segment(3, 0, 0.0), done)
    clock[0] = 1.2  # b and c have waited 0.7 s: in time; a new one ...
    assert w.submit("d", segment(4, 0, 0.0), done)
    clock[0] = 1.6  # ... while b and c are now over max_wait_s (1.1 s), d is not (0.4 s)
    model.gate.set()
    with cond:
        assert cond.wait_for(lambda: len(got) == 4, timeout=20)
    assert [(got[k].pass_no, got[k].second_pass) for k in "abcd"] == [
        (2, "done"), (1, OVERLOAD), (1, OVERLOAD), (2, "done")]
    assert model.batches_seen == [1, 1]  # a alone, then d alone: b and c were not decoded
    w.close()


# --------------------------------------------------------------------------- where the model runs


def test_onnx_runtime_providers_for_each_device():
    from streamd.second_pass.models import TeacherUnavailable, ort_providers

    cpu_only, gpu = ["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert ort_providers(gpu, "cpu", "m") == ["CPUExecutionProvider"]
    assert ort_providers(gpu, "cuda", "m") == ort_providers(gpu, "auto", "m") == gpu
    assert ort_providers(cpu_only, "auto", "m") == ["CPUExecutionProvider"]
    with pytest.raises(TeacherUnavailable, match="m on cuda: .*no CUDA provider.*onnxruntime-gpu"):
        ort_providers(cpu_only, "cuda", "m")


def test_the_device_setting_is_checked():
    from streamd.config import ConfigError

    assert SecondPassConfig().device == "cpu"
    for d in ("cpu", "cuda", "auto"):
        assert SecondPassConfig(device=d).device == d
    with pytest.raises(ConfigError, match="device"):
        SecondPassConfig(device="gpu")


def test_whisper_on_a_device_ctranslate2_refuses_says_so(monkeypatch):
    import sys
    from types import SimpleNamespace

    from streamd.second_pass.models import TeacherUnavailable, WhisperTeacher

    class Model:  # faster-whisper's WhisperModel on a machine without CUDA
        def __init__(self, path, device, **kw):
            if device == "cuda":
                raise RuntimeError("CUDA failed with error no CUDA-capable device is detected")
            self.model = SimpleNamespace(device="cpu")

    monkeypatch.setitem(sys.modules, "faster_whisper", SimpleNamespace(WhisperModel=Model))
    assert WhisperTeacher("w", "/nowhere", device="auto").device == "cpu"
    with pytest.raises(TeacherUnavailable, match="w on cuda: CUDA failed.*device: cpu"):
        WhisperTeacher("w", "/nowhere", device="cuda")


@pytest.mark.skipif(bool(moonshine_missing), reason="Moonshine's packages are not installed")
def test_moonshine_on_cuda_without_a_cuda_runtime_says_what_to_install():
    import onnxruntime as ort

    from streamd.second_pass.models import TeacherUnavailable, load_recognizer

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    assert load_recognizer("moonshine-base", device="auto").device == "cpu"
    with pytest.raises(TeacherUnavailable, match="onnxruntime-gpu"):
        load_recognizer("moonshine-base", device="cuda")
