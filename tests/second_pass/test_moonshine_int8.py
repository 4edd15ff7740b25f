"""streamd.second_pass.models._moonshine_int8: a Moonshine-style graph (int8 weights behind Cast / Mul / Add,
MatMuls in the main graph, inside an If's branches, and on a transposed weight) gets its products in int8 with
the same int8 weights, gives nearly the same outputs, and is written once (skipped without onnx/onnxruntime)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}: pip install onnxruntime onnx")

K, N = 64, 96


def _chain(name, q, s, z):
    """Nodes and initializers of ``w = Cast(q) * s + z`` (the .ort models' dequantization)."""
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("Cast", [f"{name}_q"], [f"{name}_c"], to=TensorProto.FLOAT),
             helper.make_node("Mul", [f"{name}_c", f"{name}_s"], [f"{name}_m"]),
             helper.make_node("Add", [f"{name}_m", f"{name}_z"], [f"{name}_w"])]
    inits = [numpy_helper.from_array(q, f"{name}_q"), numpy_helper.from_array(np.array([s], np.float32), f"{name}_s"),
             numpy_helper.from_array(np.array([z], np.float32), f"{name}_z")]
    return nodes, inits


def _model(path):
    """x (1, K) -> y = If(flag, x @ A @ B^T, x @ A) @ C, as a float model file; the weights' float values."""
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    qa = rng.integers(-128, 128, (K, N), dtype=np.int8)
    qb = rng.integers(-128, 128, (N, N), dtype=np.int8)  # used transposed: (N, K=N)
    qc = rng.integers(-128, 128, (N, K), dtype=np.int8)
    sa, sb, sc = 0.01, 0.02, 0.005
    nodes, inits = [], []
    for name, q, s, z in (("a", qa, sa, 7 * sa), ("b", qb, sb, -3 * sb), ("c", qc, sc, 0.0)):
        n, i = _chain(name, q, s, z)
        nodes += n
        inits += i
    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("MatMul", ["h", "a_w"], ["t1"]),
                              helper.make_node("Transpose", ["b_w"], ["bt"], perm=[1, 0]),
                              helper.make_node("MatMul", ["t1", "bt"], ["t_out"])], "then", [],
                             [vi("t_out", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("MatMul", ["h", "a_w"], ["e_out"])], "else", [],
                              [vi("e_out", TensorProto.FLOAT, None)])
    nodes += [helper.make_node("Identity", ["x"], ["h"]),
              helper.make_node("If", ["flag"], ["mid"], then_branch=then, else_branch=other),
              helper.make_node("MatMul", ["mid", "c_w"], ["y"])]
    graph = helper.make_graph(nodes, "m", [vi("x", TensorProto.FLOAT, [1, K]), vi("flag", TensorProto.BOOL, [1])],
                              [vi("y", TensorProto.FLOAT, [1, K])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return [(q.astype(np.float32) * s + z).astype(np.float32) for q, s, z in
            ((qa, sa, 7 * sa), (qb, sb, -3 * sb), (qc, sc, 0.0))], (qa, qb, qc)


def _run(path, x, flag):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "flag": np.array([flag])})[0]


def test_int8_products_keep_the_weights_and_nearly_the_outputs(tmp_path):
    import onnx
    from onnx import numpy_helper

    from streamd.second_pass.models import INT8_BLOCK, _moonshine_int8

    src = tmp_path / "decoder_model_merged.onnx"
    (wa, wb, wc), (qa, qb, qc) = _model(src)
    out = _moonshine_int8(src, tmp_path / "cache", onnx)
    assert out != src and out.is_file() and out.name.endswith("-int8.onnx")
    m = onnx.load(str(out))
    ops = [n.op_type for n in m.graph.node]
    branch_ops = [n.op_type for n in m.graph.node if n.op_type == "If"
                  for a in n.attribute for n in a.g.node]
    assert "MatMul" not in ops and "MatMul" not in branch_ops  # every product on an int8 weight converted
    assert ops.count("MatMulNBits") == 1 and branch_ops.count("MatMulNBits") == 3
    assert not any(op in ops for op in ("Cast", "Mul", "Add"))  # the float chains nothing reads are gone
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    # the same int8 steps: (u - zp) * s reproduces each float weight ((N, K) rows; B used transposed as is)
    for w in (wa, wb.T, wc):
        key = next(k[:-2] for k, v in init.items() if k.endswith("_w") and v.shape == (w.shape[1], w.shape[0] //
                   INT8_BLOCK, INT8_BLOCK) and np.allclose((v.reshape(w.shape[1], -1).astype(np.float32)
                   - init[k[:-2] + "_zp"][0]) * init[k[:-2] + "_s"][0], w.T, atol=1e-5))
        assert init[key + "_s"].size == w.size // INT8_BLOCK
    x = np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)
    for flag in (True, False):
        ref, got = _run(src, x, flag), _run(out, x, flag)
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 0.02 * np.abs(ref).max()  # activations rounded to int8: close, not equal
    made = out.stat().st_mtime_ns
    assert _moonshine_int8(src, tmp_path / "cache", onnx) == out and out.stat().st_mtime_ns == made  # made once


def test_a_model_without_int8_weights_is_left_as_it_is(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from streamd.second_pass.models import _moonshine_int8

    w = numpy_helper.from_array(np.ones((K, N), np.float32), "w")
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m", [vi("x", TensorProto.FLOAT, [1, K])],
                              [vi("y", TensorProto.FLOAT, [1, N])], [w])
    src = tmp_path / "decoder_model_merged.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert _moonshine_int8(src, tmp_path / "cache", onnx) == src
    assert not (tmp_path / "cache").exists()


def test_int8_is_a_boolean_setting():
    from streamd.config import SecondPassConfig
    assert SecondPassConfig().int8 is True and SecondPassConfig(int8=False).int8 is False  # int8 by default
    with pytest.raises(ValueError, match="int8"):
        SecondPassConfig(int8="yes")
