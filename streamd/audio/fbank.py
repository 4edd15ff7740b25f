"""Kaldi-like log-mel filterbank features, batched in torch, plus a per-stream cursor.

:class:`Fbank` turns ``(B, S)`` waveforms (16 kHz float samples in [-1, 1])
into ``(B, T, num_mel_bins)`` log-mel features with Kaldi's ``snip_edges``
framing, ``T = 1 + (S - frame_length) // frame_shift`` (0 if ``S <
frame_length``).  Per frame: remove the DC offset, pre-emphasise
(``x[i] -= c x[i-1]``, ``x[0] -= c x[0]``), apply the Povey window
(``(0.5 - 0.5 cos(2 pi i / (N - 1))) ** 0.85``), zero-pad to a power-of-two
FFT, take the power spectrum, apply triangular mel filters (Kaldi mel scale
``1127 ln(1 + f / 700)``, triangles uniform in mel between ``low_freq`` and
``high_freq``, the Nyquist bin unused) and ``log(max(e, log_floor))``.  No
dither, so the features are deterministic.

:class:`FbankStream` is pure numpy bookkeeping for one stream: it buffers
samples and hands out the sample window covering the next ``n`` frames, so
the engine can stack windows of many streams into one ``(B, S)`` batch.
Features computed window by window equal features of the whole signal.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..config import FbankConfig
from .pcm import AudioError

__all__ = ["Fbank", "FbankStream", "mel_scale", "inverse_mel_scale", "mel_filterbank", "povey_window",
           "num_frames"]


def mel_scale(freq_hz: np.ndarray | float) -> np.ndarray | float:
    """Kaldi/HTK mel scale: ``1127 ln(1 + f / 700)``."""
    return 1127.0 * np.log1p(np.asarray(freq_hz, dtype=np.float64) / 700.0)


def inverse_mel_scale(mel: np.ndarray | float) -> np.ndarray | float:
    """Inverse of :func:`mel_scale` (mel -> Hz)."""
    return 700.0 * np.expm1(np.asarray(mel, dtype=np.float64) / 1127.0)


def num_frames(num_samples: int, frame_length: int, frame_shift: int) -> int:
    """Frames in ``num_samples`` samples with snip-edges framing."""
    return 0 if num_samples < frame_length else 1 + (num_samples - frame_length) // frame_shift


def povey_window(length: int) -> np.ndarray:
    """``(length,)`` float64 Povey window (Hann to the power 0.85)."""
    i = np.arange(length, dtype=np.float64)
    return (0.5 - 0.5 * np.cos(2.0 * math.pi * i / (length - 1))) ** 0.85


def mel_filterbank(num_bins: int, n_fft: int, sample_rate: float, low_freq: float,
                   high_freq: float) -> tuple[np.ndarray, np.ndarray]:
    """Kaldi triangular mel filters over an ``n_fft``-point power spectrum.

    Returns:
        ``(weights, centers)``: weights ``(n_fft // 2 + 1, num_bins)`` float64
        (row ``k`` is FFT bin ``k`` at ``k * sample_rate / n_fft`` Hz; the
        Nyquist row is zero as in Kaldi); centers ``(num_bins,)`` the filter
        centre frequencies in Hz.
    """
    mel_lo, mel_hi = mel_scale(low_freq), mel_scale(high_freq)
    delta = (mel_hi - mel_lo) / (num_bins + 1)
    b = np.arange(num_bins, dtype=np.float64)
    left, center, right = mel_lo + b * delta, mel_lo + (b + 1) * delta, mel_lo + (b + 2) * delta
    mel = mel_scale(np.arange(n_fft // 2, dtype=np.float64) * sample_rate / n_fft)[:, None]
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    w = np.where((mel > left) & (mel < right), np.where(mel <= center, up, down), 0.0)
    weights = np.concatenate([w, np.zeros((1, num_bins))], axis=0)
    return weights, inverse_mel_scale(center)


class Fbank(torch.nn.Module):
    """Batched log-mel filterbank (see module docstring).

    Buffers (non-persistent, follow ``.to(device)``):
        window: ``(frame_length,)`` Povey window.
        mel_weights: ``(n_fft // 2 + 1, num_mel_bins)`` filter matrix.
        mel_centers: ``(num_mel_bins,)`` filter centre frequencies in Hz.
    """

    def __init__(self, cfg: FbankConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.frame_length = cfg.frame_length
        self.frame_shift = cfg.frame_shift
        self.n_fft = 1 << (self.frame_length - 1).bit_length()
        self.num_mel_bins = cfg.num_mel_bins
        self.preemphasis = float(cfg.preemphasis)
        self.log_floor = float(cfg.log_floor)
        weights, centers = mel_filterbank(cfg.num_mel_bins, self.n_fft, cfg.sample_rate, cfg.low_freq,
                                          cfg.high_freq)
        self.register_buffer("window", torch.tensor(povey_window(self.frame_length), dtype=torch.float32),
                             persistent=False)
        self.register_buffer("mel_weights", torch.tensor(weights, dtype=torch.float32), persistent=False)
        self.register_buffer("mel_centers", torch.tensor(centers, dtype=torch.float32), persistent=False)

    CPU_BLOCK_ROWS = 32
    """Rows per pass on the CPU: each pass's intermediates (32 x T x n_fft floats) stay in cache (1024 rows of
    32 frames: 3.6x faster than one pass over all rows, measured); other devices take the batch in one pass."""

    def num_frames(self, num_samples: int) -> int:
        """``T`` for ``num_samples`` samples (snip edges)."""
        return num_frames(num_samples, self.frame_length, self.frame_shift)

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        """Log-mel features.

        Args:
            samples: ``(B, S)`` floating waveforms at ``cfg.sample_rate``,
                nominally in [-1, 1]; any device.

        Returns:
            ``(B, T, num_mel_bins)`` log energies (same dtype and device),
            ``T = 1 + (S - frame_length) // frame_shift`` or 0 if ``S <
            frame_length``; frame ``t`` covers samples ``[t * frame_shift,
            t * frame_shift + frame_length)``.
        """
        if samples.dim() != 2:
            raise ValueError(f"Fbank expects samples of shape (B, S), got shape {tuple(samples.shape)}")
        if not samples.is_floating_point():
            raise ValueError(f"Fbank expects floating samples in [-1, 1], got dtype {samples.dtype}")
        batch, length = samples.shape
        if length < self.frame_length:
            return samples.new_zeros(batch, 0, self.num_mel_bins)
        rows = batch if samples.device.type != "cpu" else self.CPU_BLOCK_ROWS
        frames = samples.unfold(1, self.frame_length, self.frame_shift)  # (B, T, N), a view
        out = samples.new_empty(frames.shape[:2] + (self.num_mel_bins,))
        # the FFT input (rows, T, n_fft): zero-padded once, pre-emphasis and window written into its head
        padded = samples.new_zeros((min(rows, batch),) + frames.shape[1:-1] + (self.n_fft,))
        centred = samples.new_empty((min(rows, batch),) + frames.shape[1:])
        window = self.window.to(samples.dtype)
        weights = self.mel_weights.to(samples.dtype)
        c = self.preemphasis
        for lo in range(0, batch, rows):
            f = frames[lo:lo + rows]
            n = f.shape[0]
            g = torch.sub(f, f.mean(dim=-1, keepdim=True), out=centred[:n])  # DC offset removed
            x = padded[:n, :, :self.frame_length]
            torch.mul(g[..., :1], 1.0 - c, out=x[..., :1])
            torch.add(g[..., 1:], g[..., :-1], alpha=-c, out=x[..., 1:])
            x *= window
            spec = torch.view_as_real(torch.fft.rfft(padded[:n], dim=-1))  # (n, T, n_fft // 2 + 1, 2)
            power = torch.addcmul(spec[..., 0].square(), spec[..., 1], spec[..., 1])
            torch.matmul(power, weights, out=out[lo:lo + n])  # (n, T, num_mel_bins)
        return out.clamp_min_(self.log_floor).log_()


class FbankStream:
    """Sample cursor of one stream (numpy only, no feature computation).

    ``accept`` appends samples, ``take(n)`` returns the window
    ``(frame_length + (n - 1) * frame_shift,)`` covering the next ``n``
    frames and drops samples no later frame needs, ``finish`` zero-pads the
    tail so every accepted sample lies in at least one frame.

    Storage: one float32 array used as a queue; appending grows it by
    doubling (amortized O(1) per sample, not a copy of the whole backlog per
    packet) and consumed samples are only skipped, moved down when the free
    room is needed; once the held samples fall below a quarter of the array
    (a backlog decoded) it is reallocated to fit, so memory follows the
    backlog back down.

    Attributes:
        frame_length, frame_shift: in samples.
        accepted: samples accepted so far (excluding finish padding).
        frames_taken: frames handed out by ``take``.
        finished: True after :meth:`finish`.
    """

    MIN_CAPACITY = 8192  # samples (32 KiB): below this the array is never shrunk

    def __init__(self, cfg: FbankConfig) -> None:
        self.frame_length = cfg.frame_length
        self.frame_shift = cfg.frame_shift
        self.accepted = 0
        self.frames_taken = 0
        self.finished = False
        self._data = np.zeros(0, dtype=np.float32)  # held samples are _data[_lo:_hi] (padding included)
        self._lo = self._hi = 0
        self._buf_start = 0  # absolute index of sample _data[_lo]
        self._frames_known = 0  # frames fully covered by the samples so far (changes only with appends)

    @property
    def buffered_samples(self) -> int:
        """Samples currently held (bounded: consumed samples are dropped by ``take``)."""
        return self._hi - self._lo

    @property
    def capacity(self) -> int:
        """Samples the storage array can hold (memory in use: 4 bytes each)."""
        return len(self._data)

    @property
    def _available(self) -> int:
        """Samples (incl. finish padding) known so far, absolute end index."""
        return self._buf_start + self._hi - self._lo

    def _append(self, x: np.ndarray) -> None:
        n = len(x)
        if self._hi + n > len(self._data):
            held = self._hi - self._lo
            need = held + n
            if need > len(self._data) or held > len(self._data) // 2:
                cap = max(self.MIN_CAPACITY, 1 << max(0, need - 1).bit_length(), 2 * held)
                data = np.empty(cap, dtype=np.float32)
            else:
                data = self._data  # enough room once the consumed samples are gone: move down
            data[:held] = self._data[self._lo:self._hi]
            self._data, self._lo, self._hi = data, 0, held
        self._data[self._hi:self._hi + n] = x
        self._hi += n
        self._frames_known = num_frames(self._available, self.frame_length, self.frame_shift)

    def accept(self, samples: np.ndarray) -> None:
        """Append ``(N,)`` float samples (16 kHz, in [-1, 1]); N may be 0."""
        if self.finished:
            raise RuntimeError("FbankStream.accept called after finish()")
        x = np.asarray(samples)
        if x.ndim != 1:
            raise AudioError(f"FbankStream.accept expects 1-D samples, got shape {tuple(x.shape)}")
        if not np.issubdtype(x.dtype, np.floating):
            raise AudioError(f"FbankStream.accept expects float samples in [-1, 1], got dtype {x.dtype}")
        if len(x) == 0:
            return
        self._append(x)
        self.accepted += len(x)

    def finish(self) -> None:
        """No more input: zero-pad so the last accepted sample lies in a frame (idempotent)."""
        if self.finished:
            return
        self.finished = True
        if self.accepted == 0:
            return
        total = max(self.accepted, self.frame_length)
        frames = 1 + -(-(total - self.frame_length) // self.frame_shift)
        pad = (frames - 1) * self.frame_shift + self.frame_length - self.accepted
        if pad > 0:
            self._append(np.zeros(pad, dtype=np.float32))

    def frames_ready(self) -> int:
        """Frames fully covered by the samples so far and not yet taken."""
        return self._frames_known - self.frames_taken

    def take(self, n: int) -> np.ndarray:
        """Hand out the next ``n`` frames' samples and advance.

        Args:
            n: 0 <= n <= :meth:`frames_ready`.

        Returns:
            ``(frame_length + (n - 1) * frame_shift,)`` float32 window
            starting at sample ``frames_taken * frame_shift`` (empty if n == 0);
            ``Fbank`` on it gives exactly those ``n`` frames.
        """
        ready = self.frames_ready()
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"FbankStream.take: n must be an int, got {type(n).__name__}")
        if not 0 <= n <= ready:
            raise ValueError(f"FbankStream.take: n must be in 0..{ready} (frames ready), got {n}")
        n = int(n)
        window = np.empty(0 if n == 0 else self.frame_length + (n - 1) * self.frame_shift, dtype=np.float32)
        self._take_into(n, window)
        return window

    def take_into(self, max_frames: int, out: np.ndarray) -> int:
        """Hand out up to ``max_frames`` ready frames into ``out`` and advance: the engine's batch row.

        Args:
            max_frames: >= 0; ``min(max_frames, frames_ready())`` frames are taken.
            out: ``(frame_length + (max_frames - 1) * frame_shift,)`` float32 row; the window of the frames
                taken (as :meth:`take` returns it) is written at its start, zeros after it.

        Returns:
            The number of frames taken.
        """
        n = min(max_frames, self.frames_ready())
        size = self._take_into(n, out)
        if size < out.shape[0]:  # a short window (the tail): the rest of the row is zero
            out[size:] = 0.0
        return n

    def _take_into(self, n: int, out: np.ndarray) -> int:
        """Copy the next ``n`` frames' window (0 <= n <= frames_ready) to ``out[:size]``, advance; size."""
        if n <= 0:
            return 0
        shift, lo, data = self.frame_shift, self._lo, self._data
        size = self.frame_length + (n - 1) * shift
        start = lo + self.frames_taken * shift - self._buf_start
        out[:size] = data[start:start + size]
        self.frames_taken += n
        # drop what no later frame needs: samples before the next frame's first (all held ones at the end)
        drop = min(self.frames_taken * shift - self._buf_start, self._hi - lo)
        if drop > 0:
            lo += drop
            self._lo = lo
            self._buf_start += drop
        held = self._hi - lo
        if 4 * held < len(data) and len(data) > self.MIN_CAPACITY:  # a backlog was decoded: give back
            data = np.empty(max(self.MIN_CAPACITY, 2 * held), dtype=np.float32)
            data[:held] = self._data[lo:self._hi]
            self._data, self._lo, self._hi = data, 0, held
        elif held == 0:
            self._lo = self._hi = 0
        return size
