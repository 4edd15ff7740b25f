"""Exact streaming band-limited resampling (windowed sinc, polyphase).

With ``g = gcd(in_rate, out_rate)``, ``L = out_rate / g`` and
``M = in_rate / g``, output sample ``n`` sits at time ``n / out_rate``, i.e.
at input position ``t_n = n * M / L = q + r / L`` (``q = floor(n M / L)``,
phase ``r = n M mod L``), and is

    y[n] = sum_j x[q + j] * h(r / L - j),     j = -K .. K + 1

where ``h(t) = 2 nu sinc(2 nu t) * kaiser(t / W)`` is a zero-phase low-pass
(cutoff ``nu = rolloff * min(in_rate, out_rate) / 2 / in_rate`` cycles per
input sample, half-width ``W = zeros / (2 nu)`` input samples, ``K = floor(W)``: exactly
the taps with ``|r / L - j| <= W`` for some phase).  The ``L`` phase rows ``h(r / L - j)`` are precomputed (and shared
between streams of the same rate pair), each normalised to unit DC gain.

The filter is centred, so there is no group delay: output ``n`` is aligned
with time ``n / out_rate``, at the cost of ``K + 1`` input samples of lookahead.
Samples before the start are zeros; :meth:`StreamingResampler.flush`
zero-pads after the end so that exactly ``ceil(N_in * out_rate / in_rate)``
samples come out in total.  Every output is the same dot product whatever the
input chunking, so streaming output equals one-shot output.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .pcm import AudioError, check_sample_rate, load_audio

__all__ = ["StreamingResampler", "resample", "load_audio_at"]

_ZEROS = 32            # sinc zero crossings on each side of the kernel centre
_ROLLOFF = 0.94        # cutoff as a fraction of the lower Nyquist frequency
_BETA = 8.6            # Kaiser window shape (> 85 dB stop-band attenuation)
_BLOCK = 4096          # outputs computed per vectorised step (bounds temporary memory)
_MAX_TABLE = 1 << 20   # above this many table entries (8 MiB), phase rows are computed per block


def _design(in_rate: int, out_rate: int) -> tuple[int, int, int, float, float]:
    """(L, M, K, nu, W) for a rate pair; see the module docstring."""
    g = math.gcd(in_rate, out_rate)
    up, down = out_rate // g, in_rate // g
    nu = _ROLLOFF * min(in_rate, out_rate) / 2.0 / in_rate
    half_width = _ZEROS / (2.0 * nu)
    return up, down, int(math.floor(half_width)), nu, half_width


def _phase_rows(phases: np.ndarray, up: int, k: int, nu: float, half_width: float) -> np.ndarray:
    """Kernel taps ``h(r / L - j)`` for ``j = -K .. K + 1``.

    Args:
        phases: ``(P,)`` int64 phases ``r`` in ``[0, L)``.

    Returns:
        ``(P, 2K + 2)`` float64 taps, each row summing to 1.
    """
    j = np.arange(-k, k + 2, dtype=np.float64)
    tau = phases.astype(np.float64)[:, None] / up - j[None, :]
    ratio = np.clip(tau / half_width, -1.0, 1.0)
    window = np.where(np.abs(tau) <= half_width, np.i0(_BETA * np.sqrt(1.0 - ratio * ratio)) / np.i0(_BETA), 0.0)
    h = 2.0 * nu * np.sinc(2.0 * nu * tau) * window
    return h / h.sum(axis=1, keepdims=True)


@functools.lru_cache(maxsize=32)
def _phase_table(in_rate: int, out_rate: int) -> np.ndarray | None:
    """``(L, 2K + 2)`` read-only table of all phase rows, or None if too large."""
    up, _down, k, nu, half_width = _design(in_rate, out_rate)
    if up * (2 * k + 2) > _MAX_TABLE:
        return None
    table = _phase_rows(np.arange(up, dtype=np.int64), up, k, nu, half_width)
    table.setflags(write=False)
    return table


def _as_signal(x: np.ndarray) -> np.ndarray:
    """Validate a ``(N,)`` floating signal and return it as float64."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise AudioError(f"resampler input must be 1-D (mono samples), got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise AudioError(f"resampler input must be a float array in [-1, 1], got dtype {x.dtype}")
    return x.astype(np.float64, copy=False)


class StreamingResampler:
    """Per-stream resampler from ``in_rate`` to ``out_rate`` Hz.

    Feed any number of chunks with :meth:`process` (sizes may be 0 or 1),
    then call :meth:`flush` once.  The concatenated outputs do not depend on
    how the input was split.

    Attributes:
        in_rate, out_rate: rates in Hz (validated, 8000..48000; ``any_rate``: any positive rate, for one-shot
            use on files, :func:`resample`).
        up, down: the gcd-reduced ratio ``L / M = out_rate / in_rate``.
        lookahead: input samples needed past an output's time before it can
            be produced (0 when the rates are equal).
        samples_in, samples_out: totals so far.
    """

    def __init__(self, in_rate: int, out_rate: int = 16000, *, any_rate: bool = False) -> None:
        check = _check_any_rate if any_rate else check_sample_rate
        self.in_rate = check(in_rate)
        self.out_rate = check(out_rate)
        self.up, self.down, k, self._nu, self._half_width = _design(self.in_rate, self.out_rate)
        self.passthrough = self.in_rate == self.out_rate
        self._k = k  # taps j = -K .. K + 1 around q = floor(n M / L)
        self.lookahead = 0 if self.passthrough else k + 1
        self._table = None if self.passthrough else _phase_table(self.in_rate, self.out_rate)
        # _buf[i] holds input sample _buf_start + i; the K zeros before the start are stored explicitly.
        # (Unused when passthrough.)
        self._buf = np.zeros(self._k, dtype=np.float64)
        self._buf_start = -self._k
        self.samples_in = 0
        self.samples_out = 0
        self.flushed = False

    def process(self, x: np.ndarray) -> np.ndarray:
        """Add input and return every output sample computable so far.

        Args:
            x: ``(N,)`` float samples at ``in_rate`` (N may be 0).

        Returns:
            ``(P,)`` float32 samples at ``out_rate`` continuing the output.
        """
        if self.flushed:
            raise RuntimeError("StreamingResampler.process called after flush()")
        x = _as_signal(x)
        self.samples_in += len(x)
        if self.passthrough:
            self.samples_out += len(x)
            return x.astype(np.float32)
        if len(x):
            self._buf = np.concatenate([self._buf, x])
        # output n needs input up to floor(n M / L) + K + 1 < samples_in
        q_max = self.samples_in - 2 - self._k
        n_end = -(-(q_max + 1) * self.up // self.down) if q_max >= 0 else 0
        return self._produce(n_end)

    def flush(self) -> np.ndarray:
        """End of input: zero-pad and return the remaining outputs.

        Returns:
            ``(P,)`` float32; afterwards ``samples_out == ceil(samples_in *
            out_rate / in_rate)``.
        """
        if self.flushed:
            raise RuntimeError("StreamingResampler.flush called twice")
        self.flushed = True
        if self.passthrough:
            return np.zeros(0, dtype=np.float32)
        n_total = -(-self.samples_in * self.up // self.down)
        if n_total > self.samples_out:
            need_end = (n_total - 1) * self.down // self.up + self._k + 2  # exclusive absolute input index
            pad = need_end - (self._buf_start + len(self._buf))
            if pad > 0:
                self._buf = np.concatenate([self._buf, np.zeros(pad)])
        return self._produce(n_total)

    def _produce(self, n_end: int) -> np.ndarray:
        """Compute outputs ``samples_out .. n_end - 1`` and drop consumed input."""
        n0 = self.samples_out
        if n_end <= n0:
            return np.zeros(0, dtype=np.float32)
        out = np.empty(n_end - n0, dtype=np.float32)
        taps = np.arange(-self._k, self._k + 2, dtype=np.int64)
        for b0 in range(n0, n_end, _BLOCK):
            n = np.arange(b0, min(b0 + _BLOCK, n_end), dtype=np.int64)
            pos = n * self.down
            q, r = pos // self.up, pos % self.up
            rows = (self._table[r] if self._table is not None
                    else _phase_rows(r, self.up, self._k, self._nu, self._half_width))
            frames = self._buf[(q - self._buf_start)[:, None] + taps[None, :]]  # (P, 2K+2)
            out[b0 - n0:b0 - n0 + len(n)] = (frames * rows).sum(axis=1)
        self.samples_out = n_end
        keep_from = min(n_end * self.down // self.up - self._k,  # first input the next output needs
                        self._buf_start + len(self._buf))
        drop = keep_from - self._buf_start
        if drop > 0:
            self._buf = self._buf[drop:].copy()
            self._buf_start = keep_from
        return out


def resample(x: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """One-shot resampling: ``(N,)`` float -> ``(ceil(N * out_rate / in_rate),)`` float32.  Any positive rates
    (a file's: 96 kHz, 4 kHz); the streaming class keeps to the live rates, 8..48 kHz."""
    r = StreamingResampler(in_rate, out_rate, any_rate=True)
    return np.concatenate([r.process(x), r.flush()])


def _check_any_rate(rate) -> int:
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate < 1:
        raise AudioError(f"sample rate must be a positive integer, got {rate!r}", code="bad_sample_rate")
    return int(rate)


def load_audio_at(path, rate: int) -> np.ndarray:
    """A file's mono float32 samples (N,) at ``rate`` Hz (:func:`~streamd.audio.pcm.load_audio`, resampled
    once where the file has another rate); AudioError as ``load_audio``'s."""
    x, r = load_audio(path)
    return (resample(x, r, rate) if r != rate else x).astype(np.float32, copy=False)
