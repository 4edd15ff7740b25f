"""The encoder's chunk step as a TorchScript graph: the same arithmetic with less Python around it.

At the batch sizes a live daemon mostly runs (one to a few streams per
step) eager :meth:`StreamingEncoder.forward_chunk` spends about a third of
its time dispatching Python modules, not computing: 4.4 ms for one stream's
320 ms chunk, 2.9 ms as a traced graph on the same CPU thread
(docs/benchmarks.md, "Speed: the engine").

:class:`TracedChunkEncoder` records ``forward_chunk`` once per device,
dtype and kind of cache (with or without an attention left context: the
only branch the trace fixes) with :func:`torch.jit.trace` and replays the
recorded graph after that (optionally after ``eager_calls`` eager calls).
Batch size, chunk length, left-context length, stream offsets and valid
lengths stay inputs of the graph (the recorded size arithmetic follows the
tensors), and the graph reads the encoder's own parameters (not frozen
copies), so an update of the weights in place is seen.  The output is
bitwise the eager one (tests/model/test_traced.py).

Why a trace and not the successors torch recommends: ``torch.compile``
gives the same time after 40 s of compiling per process and needs a C++
compiler on the host; an exported program (``torch.export``) replays
slower than eager.  ``torch.jit.trace`` is deprecated in recent torch
releases; the warning is silenced here, and a trace that fails leaves the
encoder eager with the reason kept in :attr:`TracedChunkEncoder.eager_reason`.

Gradients are never recorded: use it for inference only (the engine runs
under ``torch.inference_mode``); with gradients enabled it runs eager.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from .encoder import EncoderCache, StreamingEncoder, check_chunk_frames

__all__ = ["TracedChunkEncoder"]


class _ChunkStep(nn.Module):
    """forward_chunk over plain tensors (what a trace can record)."""

    def __init__(self, encoder: StreamingEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x: Tensor, lengths: Tensor, sub1: Tensor, sub2: Tensor, keys: Tensor, values: Tensor,
                conv: Tensor, offset: Tensor) -> tuple[Tensor, ...]:
        y, n, c = self.encoder.forward_chunk(x, lengths, EncoderCache(sub1, sub2, keys, values, conv, offset))
        return y, n, c.sub1, c.sub2, c.keys, c.values, c.conv, c.offset


class TracedChunkEncoder:
    """``forward_chunk`` of ``encoder`` through recorded graphs (see the module docstring).

    Same signature and results as :meth:`StreamingEncoder.forward_chunk`:
    x (B, T, F) fbank, T a multiple of 4; lengths (B,); cache an
    :class:`EncoderCache` -> enc (B, T/4, D), enc_lengths (B,), new cache.
    """

    def __init__(self, encoder: StreamingEncoder, eager_calls: int = 0):
        """eager_calls: calls that run eager before the first recording, so that a short job (one short
        file) does not pay for a recording (0.2-0.3 s for the shipped model) that it would not earn back;
        :meth:`record_soon` ends the wait (a server's warm-up does, before its first client)."""
        if eager_calls < 0:
            raise ValueError(f"eager_calls must be >= 0, got {eager_calls}")
        self.encoder = encoder
        self._step = _ChunkStep(encoder)
        self._graphs: dict[tuple, torch.jit.ScriptModule | None] = {}  # None: recording failed
        self._failed: dict[tuple, str] = {}
        self._eager_left = eager_calls
        self.eager_reason: str | None = None  # why the last call ran eager (None: traced)

    def record_soon(self) -> None:
        """Record at the next call instead of after the remaining ``eager_calls``."""
        self._eager_left = 0

    def forward_chunk(self, x: Tensor, lengths: Tensor, cache: EncoderCache) -> tuple[Tensor, Tensor, EncoderCache]:
        check_chunk_frames(x.shape[1])  # here: a recorded graph has no such check in it
        if torch.is_grad_enabled() or self.encoder.training or x.shape[0] == 0:
            self.eager_reason = "gradients enabled or training mode" if x.shape[0] else "empty batch"
            return self.encoder.forward_chunk(x, lengths, cache)
        if self._eager_left > 0:
            self._eager_left -= 1
            self.eager_reason = "not recorded yet (eager_calls)"
            return self.encoder.forward_chunk(x, lengths, cache)
        args = (x, lengths, cache.sub1, cache.sub2, cache.keys, cache.values, cache.conv, cache.offset)
        key = (x.device, x.dtype, cache.keys.shape[3] > 0)
        if key not in self._graphs:
            try:
                self._graphs[key] = self._record(args)
            except Exception as e:  # noqa: BLE001 - any failure to record leaves this key eager, once
                self._graphs[key] = None
                self._failed[key] = f"trace failed: {type(e).__name__}: {e}"
        graph = self._graphs[key]
        if graph is None:
            self.eager_reason = self._failed[key]
            return self.encoder.forward_chunk(x, lengths, cache)
        self.eager_reason = None
        y, n, *state = graph(*args)
        return y, n, EncoderCache(*state)

    def _record(self, args: tuple[Tensor, ...]) -> torch.jit.ScriptModule:
        with warnings.catch_warnings():
            # deprecation notices, and the tracer's notes on the chunk-length check and the layer loop
            # (both fixed by the model, not by the inputs)
            warnings.simplefilter("ignore")
            with torch.no_grad():
                return torch.jit.trace(self._step, args, check_trace=False)
