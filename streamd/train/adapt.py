"""Fine-tune Moonshine base (the second pass) on transcribed speech into a low-rank adapter: ``streamd adapt``.

The installed Moonshine model (``moonshine-cpp``'s int8 ONNX files) is rebuilt in torch: its weight
chains folded to float (the values the runtime multiplies with), the merged decoder's no-cache graph (the
``use_cache_branch=False`` branch: all positions at once, teacher forcing) taken out as a model of its own,
both run by :class:`streamd.train.onnx_graph.TorchGraph` (the same outputs as ONNX Runtime; tested).
Every matrix product with an int8 weight (48 in the encoder, 80 in the decoder) gets a low-rank change
``A @ B`` (LoRA, Hu et al.
2021; ``B`` starts at zero, so step 0 is the installed model); only those are trained, with the decoder's
cross-entropy on the transcripts written as Moonshine writes
(:func:`streamd.second_pass.models.sentence_case`), one utterance at a time (the encoder has no padding
mask), gradients summed over ``accumulate`` utterances, AdamW with a linear warm-up and decay, each
utterance's speed (resampled) and gain drawn per epoch.  The result is an adapter file
(:mod:`streamd.second_pass.adapter`) that the runtime applies to the installed weights.

A run is deterministic for its seed and resumes exactly from its state file (written every
``save_every`` steps next to the output).
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .onnx_graph import TorchGraph

__all__ = ["AdaptOptions", "moonshine_torch", "add_lora", "LoRA", "adapt", "moonshine_weights"]


@dataclass(frozen=True)
class AdaptOptions:
    """How an adapter is trained (validated once)."""

    rank: int = 16
    lr: float = 5e-4
    epochs: float = 2.0
    accumulate: int = 8
    warmup: int = 30
    speeds: tuple[float, ...] = (0.9, 1.0, 1.0, 1.1)
    gain: tuple[float, float] = (0.5, 1.5)
    max_seconds: float = 30.0
    seed: int = 0
    threads: int = 2
    save_every: int = 25

    def __post_init__(self) -> None:
        for name in ("rank", "accumulate", "threads", "save_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")
        if not self.speeds or any(not (0.5 <= s <= 2.0) for s in self.speeds):
            raise ValueError(f"speeds must be factors in [0.5, 2], got {self.speeds!r}")
        if len(self.gain) != 2 or not (0 < self.gain[0] <= self.gain[1]):
            raise ValueError(f"gain must be (low, high) with 0 < low <= high, got {self.gain!r}")
        if not (0 < self.max_seconds <= 30.0):
            raise ValueError(f"max_seconds must be in (0, 30] (Moonshine's window), got {self.max_seconds!r}")


# --------------------------------------------------------------------------- Moonshine in torch


def _fold_chains(model, onnx) -> None:
    """Evaluate the top-level nodes that depend only on initializers (the int8 weights' ``Cast`` / ``Mul`` /
    ``Add`` chains) into float initializers, in place."""
    from onnx import helper, numpy_helper

    g = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    nodes = list(g.node)
    while True:
        rest = []
        for n in nodes:
            if n.op_type in ("Cast", "Mul", "Add") and n.input and all(i in init for i in n.input):
                a = [init[i] for i in n.input]
                if n.op_type == "Cast":
                    to = next(x.i for x in n.attribute if x.name == "to")
                    init[n.output[0]] = a[0].astype(helper.tensor_dtype_to_np_dtype(to))
                else:
                    init[n.output[0]] = np.asarray(a[0] * a[1] if n.op_type == "Mul" else a[0] + a[1])
            else:
                rest.append(n)
        if len(rest) == len(nodes):
            break
        nodes = rest
    read = {o.name for o in g.output} | {i for n in nodes for i in n.input}
    for n in nodes:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                read |= {i for m in a.g.node for i in m.input}
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in init.items() if k in read)


def _no_cache_decoder(model, onnx):
    """The merged decoder's ``use_cache_branch=False`` graph as a model of its own: ``input_ids (B, L)``,
    ``encoder_hidden_states (B, T, 416)`` -> ``logits (B, L, V)``."""
    from onnx import helper

    g = model.graph
    branch = next(n for n in g.node if n.op_type == "If")
    body = next(a.g for a in branch.attribute if a.name == "else_branch")
    inputs = [i for i in g.input if i.name in ("input_ids", "encoder_hidden_states")]
    logits = helper.make_tensor_value_info(body.output[0].name, onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([n for n in g.node if n.op_type != "If"] + list(body.node), "decoder_no_cache",
                              inputs, [logits], initializer=list(g.initializer) + list(body.initializer))
    out = helper.make_model(graph, opset_imports=model.opset_import)
    out.ir_version = model.ir_version
    return out


def moonshine_weights(model, onnx) -> dict[str, str]:
    """The int8 weight chains that are a matrix product's weight: weight name (the chain's, as
    :func:`streamd.second_pass.adapter.chain_weights` gives it) -> the chain's output, the float weight
    (an initializer once the chains are folded)."""
    from streamd.second_pass.adapter import chain_weights

    name_of = {c.output: name for name, c in chain_weights(model.graph).items()}
    found: dict[str, str] = {}

    def walk(g) -> None:
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
            if n.op_type == "MatMul" and n.input[1] in name_of:
                found[name_of[n.input[1]]] = n.input[1]

    walk(model.graph)
    return found


def moonshine_torch(encoder: str | os.PathLike, decoder: str | os.PathLike
                    ) -> tuple[TorchGraph, TorchGraph, dict[str, str], dict[str, str]]:
    """Moonshine's encoder and no-cache decoder as frozen torch modules (float32, :class:`TorchGraph`), from
    the plain ONNX files of :func:`streamd.second_pass.models._moonshine_onnx`, and each one's matrix-product
    weights (weight name -> initializer).  Encoder: ``(B, samples)`` at 16 kHz -> ``(B, T, 416)``; decoder:
    ``input_ids (B, L)``, states -> ``logits (B, L, 32768)``."""
    import onnx

    mods, names = [], []
    for path, no_cache in ((encoder, False), (decoder, True)):
        m = onnx.load(str(path))
        names.append(moonshine_weights(m, onnx))
        if no_cache:
            m = _no_cache_decoder(m, onnx)
        _fold_chains(m, onnx)
        mods.append(TorchGraph(m.graph))
    return mods[0], mods[1], names[0], names[1]


class LoRA(torch.nn.Module):
    """``w -> w + A @ B`` with ``A (K, r)`` drawn like a linear layer's weights and ``B (r, N)`` zero."""

    def __init__(self, k: int, n: int, rank: int, generator: torch.Generator) -> None:
        super().__init__()
        self.A = torch.nn.Parameter(torch.randn(k, rank, generator=generator) / math.sqrt(k))
        self.B = torch.nn.Parameter(torch.zeros(rank, n))

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + self.A @ self.B


def add_lora(net: TorchGraph, weights: dict[str, str], rank: int, generator: torch.Generator) -> dict[str, LoRA]:
    """Put a :class:`LoRA` on each weight of ``weights`` (weight name -> initializer of ``net``), in name
    order; returns weight name -> LoRA."""
    out: dict[str, LoRA] = {}
    for name in sorted(weights):
        w = net.initializer(weights[name])
        out[name] = LoRA(w.shape[0], w.shape[1], rank, generator)
        net.hook(weights[name], out[name])
    return out


# --------------------------------------------------------------------------- training


def _speed(audio: np.ndarray, factor: float) -> np.ndarray:
    """``audio`` played ``factor`` times faster (linear interpolation)."""
    if factor == 1.0:
        return audio
    n = max(1, int(len(audio) / factor))
    return np.interp(np.arange(n) * factor, np.arange(len(audio)), audio).astype(np.float32)


def adapt(utterances: Sequence[tuple[np.ndarray, str]], out: str | os.PathLike, options: AdaptOptions = AdaptOptions(),
          meta: dict | None = None, progress: Callable[[int, int, float], None] | None = None,
          init: str | os.PathLike | None = None) -> dict:
    """Train an adapter on ``utterances`` (16 kHz float32 audio, transcript in spoken words) and write it to
    ``out``; returns a summary (steps, mean loss of the last steps, seconds).  The run's state is saved to
    ``<out>.state.pt`` every ``options.save_every`` steps and resumed from there when present (same
    utterances and options: checked); removed when the adapter is written.  ``progress(step, steps,
    loss)`` is called after each step.  ``init``: an adapter file to start from (its rank and weights must be
    this run's) instead of ``B = 0``, e.g. to go on training a finished adapter on other data."""
    from streamd.second_pass.adapter import save_adapter
    from streamd.second_pass.models import (_MOONSHINE_FILES, MoonshineTokenizer, _moonshine_dir, _moonshine_onnx,
                                            cache_root, moonshine_file_sizes, sentence_case)

    import onnx
    import onnxruntime as ort

    if not utterances:
        raise ValueError("no utterances to adapt on")
    torch.set_num_threads(options.threads)
    src = _moonshine_dir()
    folder = cache_root() / "moonshine-base"
    files = [_moonshine_onnx(src / f"{m}.ort", folder, ort, onnx) for m in _MOONSHINE_FILES]
    enc, dec, enc_w, dec_w = moonshine_torch(*files)
    gen = torch.Generator().manual_seed(options.seed)
    loras = {**add_lora(enc, enc_w, options.rank, gen), **add_lora(dec, dec_w, options.rank, gen)}
    start = None
    if init is not None:
        from streamd.second_pass.adapter import load_adapter

        start = load_adapter(init)
        if start.rank != options.rank or set(start.deltas) != set(loras):
            raise ValueError(f"{init}: rank {start.rank} over {len(start.deltas)} weights; this run has rank "
                             f"{options.rank} over {len(loras)} (--rank must match)")
        with torch.no_grad():
            for name, lo in loras.items():
                lo.A.copy_(torch.from_numpy(start.deltas[name][0]))
                lo.B.copy_(torch.from_numpy(start.deltas[name][1]))
    params = [p for name in sorted(loras) for p in loras[name].parameters()]
    tok = MoonshineTokenizer.from_file(src / "tokenizer.bin")
    keep = [(a, t) for a, t in utterances if 0 < len(a) <= options.max_seconds * 16000 and t.strip()]
    if not keep:
        raise ValueError(f"no utterance of 0-{options.max_seconds:g} s with a transcript")
    targets = [[MoonshineTokenizer.BOS] + tok.encode(sentence_case(t)) + [MoonshineTokenizer.EOS] for _, t in keep]
    steps = max(1, int(options.epochs * len(keep) / options.accumulate))
    opt = torch.optim.AdamW(params, lr=options.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, options.warmup)) * max(0.0, 1.0 - s / steps))
    out = Path(out)
    state_path = out.with_name(out.name + ".state.pt")
    fingerprint = {"options": asdict(options), "utterances": len(keep),
                   "samples": int(sum(len(a) for a, _ in keep)), "files": [f.name for f in files],
                   "init": start.digest if start is not None else None}
    step = 0
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise ValueError(f"{state_path}: a run with other utterances or options; remove it to start again")
        for name in sorted(loras):
            loras[name].load_state_dict(state["loras"][name])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
    t0 = time.monotonic()
    losses: list[float] = []
    per_epoch = len(keep) // options.accumulate or 1
    while step < steps:
        epoch, pos = divmod(step, per_epoch)
        order = list(range(len(keep)))
        random.Random(options.seed * 1_000_003 + epoch).shuffle(order)
        batch = order[pos * options.accumulate:(pos + 1) * options.accumulate]
        total = 0.0
        for i in batch:
            rng = random.Random((options.seed * 1_000_003 + epoch) * 1_000_003 + i)
            audio = _speed(keep[i][0], rng.choice(options.speeds)) * rng.uniform(*options.gain)
            ids = torch.tensor([targets[i]])
            logits = dec(ids[:, :-1], enc(torch.from_numpy(audio.astype(np.float32))[None]))[0]
            loss = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
            (loss / len(batch)).backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        step += 1
        losses.append(total / len(batch))
        if step % options.save_every == 0 and step < steps:
            tmp = state_path.with_name(state_path.name + ".tmp")
            torch.save({"fingerprint": fingerprint, "step": step, "opt": opt.state_dict(),
                        "sched": sched.state_dict(),
                        "loras": {n: loras[n].state_dict() for n in sorted(loras)}}, tmp)
            os.replace(tmp, state_path)
        if progress is not None:
            progress(step, steps, losses[-1])
    summary = {"steps": steps, "utterances": len(keep), "hours": round(fingerprint["samples"] / 16000 / 3600, 3),
               "final_loss": round(float(np.mean(losses[-25:])), 4) if losses else None,
               "seconds": round(time.monotonic() - t0, 1)}
    save_adapter(out, {n: (loras[n].A.detach().numpy(), loras[n].B.detach().numpy()) for n in loras},
                 {**(meta or {}), "base": "moonshine-base", "files": moonshine_file_sizes(src), "options": asdict(options),
                  "trained": summary, "init": None if start is None else {"file": Path(init).name,
                                                                          "digest": start.digest}})
    state_path.unlink(missing_ok=True)
    return summary
