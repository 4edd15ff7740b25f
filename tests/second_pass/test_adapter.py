"""streamd.second_pass.adapter: low-rank weight changes written back into a Moonshine-style int8 graph (the
new weight within half an int8 step of ``W + A @ B``, the chain's form kept, other weights untouched), the
adapter file's round trip and its errors (skipped without onnx/onnxruntime)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from streamd.second_pass.adapter import _requantize, apply_adapter, chain_weights, load_adapter, save_adapter

missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
needs_onnx = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: pip install onnxruntime onnx")

K, N = 32, 48


def _model(path):
    """x (1, K) -> (x @ Wa) @ Wb, both weights int8 chains ``Cast(q) * s + z``; returns the float weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits, ws = [], [], []
    for name, shape, s, k in (("wa", (K, N), 0.01, 7), ("wb", (N, K), 0.02, -3)):
        q = rng.integers(-128, 128, shape, dtype=np.int8)
        nodes += [helper.make_node("Cast", [f"{name}_quantized"], [f"{name}_c"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{name}_c", f"{name}_scale"], [f"{name}_m"]),
                  helper.make_node("Add", [f"{name}_m", f"{name}_zero_point"], [f"{name}_w"])]
        inits += [numpy_helper.from_array(q, f"{name}_quantized"),
                  numpy_helper.from_array(np.array([s], np.float32), f"{name}_scale"),
                  numpy_helper.from_array(np.array([k * s], np.float32), f"{name}_zero_point")]
        ws.append(q.astype(np.float32) * np.float32(s) + np.float32(k * s))
    nodes += [helper.make_node("MatMul", ["x", "wa_w"], ["h"]), helper.make_node("MatMul", ["h", "wb_w"], ["y"])]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "m", [vi("x", TensorProto.FLOAT, [1, K])], [vi("y", TensorProto.FLOAT, [1, K])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return ws


def _weights(path):
    """The float weights of the chains in an ONNX file, and each chain's (scale, offset)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(str(path))
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    out = {}
    for name, (q, s, z, _) in chain_weights(m.graph).items():
        assert init[q].dtype == np.int8
        out[name] = (init[q].astype(np.float32) * init[s][0] + init[z][0], float(init[s][0]), float(init[z][0]))
    return out


def test_requantize_is_within_half_a_step_with_a_whole_offset():
    rng = np.random.default_rng(1)
    for lo, hi in ((-0.3, 0.5), (0.1, 0.9), (-2.0, -0.5), (-1.0, 1.0)):
        w = rng.uniform(lo, hi, (20, 30)).astype(np.float32)
        q, s, z = _requantize(w)
        assert q.dtype == np.int8
        assert abs(z / s - round(z / s)) < 1e-4 and abs(round(z / s)) <= 127
        assert np.abs(q * s + z - w).max() <= s / 2 + 1e-6


@needs_onnx
def test_apply_changes_only_the_named_weight_within_half_a_step(tmp_path):
    import onnxruntime as ort
    src, dest, file = tmp_path / "m.onnx", tmp_path / "a.onnx", tmp_path / "x.adapter.npz"
    wa, wb = _model(src)
    rng = np.random.default_rng(2)
    a, b = rng.normal(0, 0.1, (K, 4)).astype(np.float32), rng.normal(0, 0.1, (4, N)).astype(np.float32)
    save_adapter(file, {"wa": (a, b)}, {"base": "test"})
    adapter = load_adapter(file)
    assert adapter.rank == 4 and adapter.base == "test" and set(adapter.deltas) == {"wa"}
    import onnx
    model = onnx.load(str(src))
    assert apply_adapter(model, adapter) == ["wa"]
    onnx.save(model, str(dest))
    got = _weights(dest)
    want = wa + a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32)
    new, s, _z = got["wa"]
    assert np.abs(new - want).max() <= s / 2 + 1e-5
    np.testing.assert_array_equal(got["wb"][0], _weights(src)["wb"][0])  # untouched
    x = rng.normal(0, 1, (1, K)).astype(np.float32)
    y = ort.InferenceSession(str(dest), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, x @ new @ wb, rtol=1e-4, atol=1e-3)


@needs_onnx
def test_apply_rejects_a_change_of_another_shape(tmp_path):
    import onnx
    src, file = tmp_path / "m.onnx", tmp_path / "x.adapter.npz"
    _model(src)
    save_adapter(file, {"wa": (np.zeros((N, 2)), np.zeros((2, K)))}, {"base": "test"})
    model = onnx.load(str(src))
    with pytest.raises(ValueError, match="shape"):
        apply_adapter(model, load_adapter(file))
    assert model == onnx.load(str(src))  # nothing changed


def test_adapter_file_round_trip_and_errors(tmp_path):
    rng = np.random.default_rng(3)
    deltas = {"w1": (rng.normal(size=(8, 2)), rng.normal(size=(2, 5))),
              "w2": (rng.normal(size=(5, 2)), rng.normal(size=(2, 8)))}
    f = tmp_path / "a.adapter.npz"
    save_adapter(f, deltas, {"base": "moonshine-base", "files": {"x.ort": 1}})
    ad = load_adapter(f)
    assert ad.rank == 2 and ad.meta["files"] == {"x.ort": 1} and ad.meta["format"] == 1
    for n, (a, b) in deltas.items():
        np.testing.assert_allclose(ad.delta(n), a.astype(np.float16).astype(np.float32)
                                   @ b.astype(np.float16).astype(np.float32), rtol=1e-5, atol=1e-5)
    assert ad.delta("w3") is None
    assert len(ad.digest) == 16 and ad.digest == load_adapter(f).digest
    with pytest.raises(ValueError, match="same rank"):
        save_adapter(tmp_path / "b.adapter.npz", {"w1": deltas["w1"], "w3": (np.zeros((3, 1)), np.zeros((1, 3)))},
                     {"base": "x"})
    with pytest.raises(ValueError, match="do not multiply"):
        save_adapter(tmp_path / "b.adapter.npz", {"w1": (np.zeros((3, 2)), np.zeros((1, 3)))}, {"base": "x"})
    with pytest.raises(ValueError, match="base"):
        save_adapter(tmp_path / "b.adapter.npz", deltas, {})
    with pytest.raises(ValueError, match="at least one"):
        save_adapter(tmp_path / "b.adapter.npz", {}, {"base": "x"})
    bad = tmp_path / "bad.adapter.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a streamd adapter"):
        load_adapter(bad)
    np.savez(bad, meta=np.array(json.dumps({"format": 99, "base": "x", "rank": 2})), **{"A/w": np.zeros((2, 2)),
                                                                                      "B/w": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="format 99"):
        load_adapter(bad)


def test_an_adapter_files_calibration_sits_beside_it(tmp_path):
    from streamd.second_pass.calibration import ASSET, FOLDER_FILE, calibration_path
    f = tmp_path / "mine.adapter.npz"
    save_adapter(f, {"w": (np.zeros((2, 1)), np.zeros((1, 2)))}, {"base": "moonshine-base"})
    assert calibration_path(str(f)) == (tmp_path / "mine.calibration.json", None)
    assert calibration_path(str(tmp_path)) == (tmp_path / FOLDER_FILE, None)
    assert calibration_path("moonshine-base-so762") == (ASSET, "moonshine-base-so762")
