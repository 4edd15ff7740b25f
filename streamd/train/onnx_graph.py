"""Run an ONNX graph with torch operations, differentiably: how ``streamd adapt`` trains the installed
Moonshine model (:mod:`streamd.train.adapt`).

:class:`TorchGraph` walks the graph's nodes in order, each computed by the torch operation of the same
meaning; initializers are (non-persistent) buffers, and a :meth:`TorchGraph.hook` module can be put on any of
them (``value -> module(value)``, computed once per call: LoRA on a weight).  Only the operators of the
graphs it is used on are implemented (:data:`OPS`, ONNX opset 14 semantics); any other is a ValueError at
construction, naming it.  The reference is ONNX Runtime (``tests/train/test_adapt.py``: Moonshine's encoder
states within 1e-4, its decoder's logits within 2e-3).  ``onnx2torch`` would do the same, but it requires torchvision, which
pins another torch build.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["TorchGraph", "OPS"]

_DTYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64}


def _i(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.reshape(-1).tolist()]


def _div(x, a):
    p, q = x
    if not p.is_floating_point() and not q.is_floating_point():
        return torch.div(p, q, rounding_mode="trunc")
    return p / q


def _slice(x, a):
    data, starts, ends = x[0], _i(x[1]), _i(x[2])
    axes = _i(x[3]) if len(x) > 3 and x[3] is not None else list(range(len(starts)))
    steps = _i(x[4]) if len(x) > 4 and x[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.dim()
    for s, e, ax, st in zip(starts, ends, axes, steps):
        if st < 1:
            raise ValueError(f"Slice with step {st} is not supported")
        n = data.shape[ax]
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        index[ax] = slice(s, e, st)
    return data[tuple(index)]


def _unsqueeze(x, a):
    out = x[0]
    axes = sorted(ax + x[0].dim() + len(_i(x[1])) if ax < 0 else ax for ax in _i(x[1]))
    for ax in axes:
        out = out.unsqueeze(ax)
    return out


def _reshape(x, a):
    shape = _i(x[1])
    if not a.get("allowzero", 0):
        shape = [x[0].shape[k] if v == 0 else v for k, v in enumerate(shape)]
    return x[0].reshape(shape)


def _gather(x, a):
    data, idx, axis = x[0], x[1].long(), a.get("axis", 0)
    axis = axis + data.dim() if axis < 0 else axis
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    out = data.index_select(axis, idx.reshape(-1))
    return out.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])


def _conv(x, a):
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise ValueError(f"Conv auto_pad {a['auto_pad']!r} is not supported")
    if len(a.get("kernel_shape", x[1].shape[2:])) != 1:
        raise ValueError("only 1-D Conv is supported")
    pads = list(a.get("pads", [0, 0]))
    inp = x[0]
    if pads[0] != pads[1]:
        inp, pads = F.pad(inp, (pads[0], pads[1])), [0, 0]
    return F.conv1d(inp, x[1], x[2] if len(x) > 2 else None, stride=list(a.get("strides", [1])),
                    padding=pads[0], dilation=list(a.get("dilations", [1])), groups=a.get("group", 1))


def _trilu(x, a):
    k = _i(x[1])[0] if len(x) > 1 and x[1] is not None else 0
    return torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)


def _reduce_mean(x, a):
    axes = a.get("axes")
    if axes is None:
        return x[0].mean().reshape([1] * x[0].dim()) if a.get("keepdims", 1) else x[0].mean()
    return x[0].mean(dim=list(axes), keepdim=bool(a.get("keepdims", 1)))


def _constant_of_shape(x, a):
    v = a.get("value")
    value = v.reshape(-1) if v is not None else torch.zeros(1)
    return torch.full(_i(x[0]), value[0].item(), dtype=value.dtype)


OPS: dict[str, Callable[[list, dict], torch.Tensor]] = {
    "Add": lambda x, a: x[0] + x[1],
    "Sub": lambda x, a: x[0] - x[1],
    "Mul": lambda x, a: x[0] * x[1],
    "Div": _div,
    "Pow": lambda x, a: torch.pow(x[0], x[1]),
    "Sqrt": lambda x, a: torch.sqrt(x[0]),
    "Neg": lambda x, a: -x[0],
    "Erf": lambda x, a: torch.erf(x[0]),
    "Sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "Tanh": lambda x, a: torch.tanh(x[0]),
    "Sin": lambda x, a: torch.sin(x[0]),
    "Cos": lambda x, a: torch.cos(x[0]),
    "MatMul": lambda x, a: torch.matmul(x[0], x[1]),
    "Softmax": lambda x, a: torch.softmax(x[0], dim=a.get("axis", -1)),
    "Cast": lambda x, a: x[0].to(_DTYPES[a["to"]]),
    "Shape": lambda x, a: torch.tensor(list(x[0].shape), dtype=torch.int64),
    "Slice": _slice,
    "Unsqueeze": _unsqueeze,
    "Concat": lambda x, a: torch.cat(x, dim=a["axis"]),
    "Reshape": _reshape,
    "Transpose": lambda x, a: x[0].permute(list(a["perm"]) if "perm" in a else list(range(x[0].dim()))[::-1]),
    "ReduceMean": _reduce_mean,
    "Gather": _gather,
    "Conv": _conv,
    "InstanceNormalization": lambda x, a: F.instance_norm(x[0], weight=x[1], bias=x[2], eps=a.get("epsilon", 1e-5)),
    "Range": lambda x, a: torch.arange(x[0].item(), x[1].item(), x[2].item(), dtype=x[0].dtype),
    "ConstantOfShape": _constant_of_shape,
    "Trilu": _trilu,
    "Greater": lambda x, a: x[0] > x[1],
    "Equal": lambda x, a: x[0] == x[1],
    "Where": lambda x, a: torch.where(x[0], x[1], x[2]),
    "Expand": lambda x, a: x[0].expand(torch.broadcast_shapes(tuple(x[0].shape), tuple(_i(x[1])))),
    "Identity": lambda x, a: x[0],
}


class TorchGraph(torch.nn.Module):
    """An ONNX graph (``onnx.GraphProto``) as a torch module: ``forward(*inputs)`` in the graph's input order,
    the graph's output (or a tuple of its outputs)."""

    def __init__(self, graph) -> None:
        from onnx import helper, numpy_helper

        super().__init__()
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        unknown = sorted({n.op_type for n in graph.node} - set(OPS))
        if unknown:
            raise ValueError(f"ONNX operators without a torch version here: {', '.join(unknown)}")
        self.nodes = []
        for n in graph.node:
            attrs = {}
            for at in n.attribute:
                v = helper.get_attribute_value(at)
                attrs[at.name] = torch.from_numpy(numpy_helper.to_array(v).copy()) if hasattr(v, "dims") else v
            self.nodes.append((n.op_type, list(n.input), list(n.output), attrs))
        self._buffers_of: dict[str, str] = {}
        for k, t in enumerate(graph.initializer):
            self.register_buffer(f"c{k}", torch.from_numpy(np.array(numpy_helper.to_array(t))), persistent=False)
            self._buffers_of[t.name] = f"c{k}"
        self.hooks = torch.nn.ModuleDict()
        self._hooked: dict[str, str] = {}  # initializer name -> key in self.hooks

    def initializer(self, name: str) -> torch.Tensor:
        """The value of initializer ``name`` (without its hook)."""
        return getattr(self, self._buffers_of[name])

    def hook(self, name: str, module: torch.nn.Module) -> None:
        """Read initializer ``name`` through ``module`` (``value -> module(value)``) from now on."""
        if name not in self._buffers_of:
            raise KeyError(f"no initializer {name!r}")
        key = f"h{len(self._hooked)}"
        self.hooks[key] = module
        self._hooked[name] = key

    def forward(self, *args: torch.Tensor):
        env: dict[str, torch.Tensor] = {}
        for name, attr in self._buffers_of.items():
            v = getattr(self, attr)
            env[name] = self.hooks[self._hooked[name]](v) if name in self._hooked else v
        env.update(zip(self.inputs, args))
        for op, ins, outs, attrs in self.nodes:
            env[outs[0]] = OPS[op]([env[i] if i else None for i in ins], attrs)
        out = tuple(env[o] for o in self.outputs)
        return out[0] if len(out) == 1 else out
