"""Trained wake-word models on the frozen speech_embedding (:mod:`streamd.model.speech_embedding`).

A wake model is a small head (openWakeWord's shape: flatten 16 embeddings x 96 -> Linear(1536, H) ->
LayerNorm -> ReLU -> Linear(H, H) -> ReLU -> Linear(H, 1) -> sigmoid; or several such nets, the sigmoid of
the mean of their logits) scoring the last 16 embeddings (1.28 s of embeddings, 1.975 s of audio) every
80 ms.  :class:`WakeScorer` runs one embedding per stream and every net of every loaded head on it, batched
across streams, models and nets.

Time convention: a stream is scored as if preceded by :data:`PREFIX_SAMPLES` of digital silence, so its
first score comes after its first 80 ms: score ``k`` of a stream (k = 0, 1, ...) sees the audio up to
``(k + 1) * 0.08`` s and back to ``(k + 1) * 0.08 - 1.975`` s (silence before 0).  Offline
(:meth:`WakeScorer.offline_scores`) and streaming (:meth:`WakeScorer.stream`) give the same scores.

File (``torch.save`` of a dict, :func:`save_wake_model` / :func:`load_wake_model`): ``format``
(:data:`WAKE_FORMAT`), ``keyword``, ``threshold``, ``hidden``, ``window``, ``members`` (nets in the head;
absent in files of one net written before it, whose keys are ``net.*``), ``state_dict`` (the head), and
``info``: what it was trained on, how long it took, the DET curve on held-out data; optionally ``verify_gap``,
the model's own verifier threshold (:mod:`streamd.train.wake_verifier`; ``info["verifier"]`` says how it was
measured).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from streamd.model.speech_embedding import (DIM, compute_dtype, FRAME_SHIFT_S, HOP, STRIDE_FRAMES, WIN, WINDOW_FRAMES,
                                            EmbeddingStream, SpeechEmbedding, load_speech_embedding)

__all__ = ["WAKE_FORMAT", "WINDOW", "PREFIX_SAMPLES", "TAIL_SAMPLES", "WakeHead", "WakeModel", "WakeStream", "WakeScorer",
           "save_wake_model", "load_wake_model", "verify_span", "verify_clip", "MIN_VERIFY_SAMPLES",
           "VERIFY_GAP_FLOOR", "VERIFY_GAP_MARGIN", "VERIFY_GAP_RANK", "own_gap"]

WAKE_FORMAT = "streamd-wake-1"
WINDOW = 16
_EMB_SAMPLES = STRIDE_FRAMES * HOP                      # 1280 samples per embedding
_FIRST_EMB_END = (WINDOW_FRAMES - 1) * HOP + WIN        # 12400: samples that end embedding 0
PREFIX_SAMPLES = _FIRST_EMB_END + (WINDOW - 1) * _EMB_SAMPLES - _EMB_SAMPLES  # 30320 (1.895 s) of silence
TAIL_SAMPLES = 4 * _EMB_SAMPLES  # 0.32 s of silence fed at a stream's end (a keyword said at the very end)


def verify_span(end_s: float, before_s: float, after_s: float, rate: int = 16000) -> tuple[int, int]:
    """The samples ``[a, b)`` a verifier hears for a detection whose score frame ends at ``end_s``: from
    ``before_s`` before it to ``after_s`` after it (``a`` >= 0; the caller cuts ``b`` at the stream's end)."""
    return max(0, int((end_s - before_s) * rate)), int((end_s + after_s) * rate)


MIN_VERIFY_SAMPLES = 1600
"""A verifier's clip shorter than this (0.1 s) is replaced by all the audio there is (:func:`verify_clip`)."""


def verify_clip(audio: np.ndarray, end_s: float, before_s: float, after_s: float, start: int = 0) -> np.ndarray:
    """What a verifier hears for a detection ending at ``end_s``: the samples of :func:`verify_span` that
    ``audio`` holds (16 kHz, its first sample the stream's sample ``start``), or all of ``audio`` when that
    is under :data:`MIN_VERIFY_SAMPLES`."""
    a, b = verify_span(end_s, before_s, after_s)
    clip = audio[max(a - start, 0):max(b - start, 0)]
    return clip if clip.size >= MIN_VERIFY_SAMPLES else audio


VERIFY_GAP_FLOOR = -11.0
"""The lowest own threshold (nats): a keyword whose held-out negatives all stay far below still needs this
much evidence.  Chosen with :data:`VERIFY_GAP_MARGIN` and :data:`VERIFY_GAP_RANK` on the dev half of Mycroft's
recordings (the fewest summed dev misses with every keyword at <= 0.5 FA/h; docs/benchmarks.md, "Each wake
model's own verifier threshold")."""
VERIFY_GAP_MARGIN = 2.0
"""Nats above the rank-th highest held-out negative gap (the same choice as :data:`VERIFY_GAP_FLOOR`)."""
VERIFY_GAP_RANK = 3
"""Which held-out negative gap the threshold clears: 1 the highest, 3 the third highest (the same choice)."""


def own_gap(gaps: Sequence[float], floor: float = VERIFY_GAP_FLOOR, margin: float = VERIFY_GAP_MARGIN,
            rank: int = VERIFY_GAP_RANK) -> float:
    """A model's verifier threshold from its held-out negatives' gaps: ``margin`` above the ``rank``-th highest
    (1: the highest), at least ``floor`` (``floor`` when fewer were detected)."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    top = sorted(gaps, reverse=True)
    return max(float(floor), top[rank - 1] + margin) if len(top) >= rank else float(floor)


class WakeHead(nn.Module):
    """windows (N, 16, 96) -> logits (N,): the mean of the logits of ``members`` nets of the same shape (an
    ensemble of heads trained from different seeds; ``members`` = 1: one net).  ``nets[k]``: flatten ->
    Linear(1536, H) -> LayerNorm -> ReLU -> Linear(H, H) -> ReLU -> Linear(H, 1)."""

    def __init__(self, hidden: int = 32, window: int = WINDOW, members: int = 1) -> None:
        super().__init__()
        if members < 1:
            raise ValueError(f"WakeHead: members must be >= 1, got {members}")
        self.window, self.hidden = window, hidden
        self.nets = nn.ModuleList(
            nn.Sequential(nn.Flatten(), nn.Linear(window * DIM, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                          nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) for _ in range(members))

    @property
    def members(self) -> int:
        return len(self.nets)

    def forward(self, windows: Tensor) -> Tensor:
        z = self.nets[0](windows).squeeze(-1)
        for net in self.nets[1:]:
            z = z + net(windows).squeeze(-1)
        return z / self.members

    @classmethod
    def average(cls, heads: Sequence["WakeHead"]) -> "WakeHead":
        """One head whose nets are those of ``heads`` (same hidden size and window): its logit is the mean of
        theirs."""
        heads = list(heads)
        if not heads or len({(h.hidden, h.window) for h in heads}) != 1:
            raise ValueError("WakeHead.average: need heads of one hidden size and window")
        out = cls(heads[0].hidden, heads[0].window, sum(h.members for h in heads))
        for dst, src in zip(out.nets, [n for h in heads for n in h.nets]):
            dst.load_state_dict(src.state_dict())
        return out


@dataclass(frozen=True)
class WakeModel:
    """A loaded wake model: its keyword, detection threshold, head and the training record (``info``)."""

    keyword: str
    threshold: float
    head: WakeHead
    info: dict = field(default_factory=dict)
    path: str = ""
    verify_gap: float | None = None  # its own verifier threshold (streamd.train.wake_verifier), nats; None: the config's


def save_wake_model(path: str | Path, keyword: str, threshold: float, head: WakeHead, info: dict,
                    verify_gap: float | None = None) -> None:
    blob = {"format": WAKE_FORMAT, "keyword": keyword, "threshold": float(threshold), "hidden": head.hidden,
            "window": head.window, "members": head.members,
            "state_dict": {k: v.detach().cpu() for k, v in head.state_dict().items()}, "info": info}
    if verify_gap is not None:
        blob["verify_gap"] = float(verify_gap)
    torch.save(blob, path)


def load_wake_model(path: str | Path) -> WakeModel:
    """Read a wake model file; a clear error for anything else."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"wake model not found: {p}")
    try:
        blob = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ValueError(f"{p}: not a wake model file ({e.__class__.__name__}: {e})") from None
    if not isinstance(blob, dict) or blob.get("format") != WAKE_FORMAT:
        raise ValueError(f"{p}: not a wake model file (expected format {WAKE_FORMAT!r})")
    kw, thr = blob.get("keyword"), blob.get("threshold")
    if not isinstance(kw, str) or not kw.strip():
        raise ValueError(f"{p}: keyword must be a non-empty string, got {kw!r}")
    if not isinstance(thr, float) or not 0.0 < thr < 1.0:
        raise ValueError(f"{p}: threshold must be in (0, 1), got {thr!r}")
    if blob.get("window") != WINDOW:
        raise ValueError(f"{p}: window must be {WINDOW} embeddings, got {blob.get('window')!r}")
    gap = blob.get("verify_gap")
    if gap is not None and not (isinstance(gap, float) and -100.0 <= gap <= 100.0):
        raise ValueError(f"{p}: verify_gap must be a number of nats in [-100, 100], got {gap!r}")
    members = blob.get("members", 1)
    if not isinstance(members, int) or members < 1:
        raise ValueError(f"{p}: members must be an integer >= 1, got {members!r}")
    head = WakeHead(int(blob["hidden"]), WINDOW, members)
    sd = blob["state_dict"]
    if "members" not in blob:  # a file of one net written before ensembles (keys "net.*")
        sd = {("nets.0." + k[4:] if k.startswith("net.") else k): v for k, v in sd.items()}
    head.load_state_dict(sd)
    head.eval().requires_grad_(False)
    return WakeModel(" ".join(kw.split()), thr, head, dict(blob.get("info") or {}), str(p), gap)


@dataclass
class WakeStream:
    """One stream's scoring state: its embedding stream and its last 15 embeddings (15, 96)."""

    emb: EmbeddingStream
    hist: Tensor
    scored: int = 0


class WakeScorer:
    """The speech embedding and K wake heads (batched over streams and models).

    models: the K wake models (distinct keywords).  embedding: a loaded :class:`SpeechEmbedding` (default:
    the shipped weights on ``device``, computing as ``precision`` says: :func:`compute_dtype`).
    """

    frame_shift_s = FRAME_SHIFT_S

    def __init__(self, models: Sequence[WakeModel], embedding: SpeechEmbedding | None = None,
                 device: torch.device | str = "cpu", precision: str = "float32") -> None:
        models = list(models)
        if not models:
            raise ValueError("WakeScorer: need at least one wake model")
        names = [m.keyword for m in models]
        if len(set(n.casefold() for n in names)) != len(names):
            raise ValueError(f"wake models: duplicate keyword in {names}")
        self.models = models
        self.keywords = tuple(names)
        self.thresholds = {m.keyword: m.threshold for m in models}
        self.embedding = (embedding if embedding is not None else
                          load_speech_embedding(device=device, dtype=compute_dtype(precision, device)))
        dev = self.embedding.mel_matrix.device
        self.device = dev
        self._stack(dev)
        with torch.no_grad():
            s = self.embedding.init_state()
            pre = self.embedding.stream([s], [torch.zeros(PREFIX_SAMPLES, device=dev)])[0]
        if pre.shape[0] != WINDOW - 1:
            raise AssertionError(f"prefix gave {pre.shape[0]} embeddings, expected {WINDOW - 1}")
        self._fresh = WakeStream(s, pre)

    def _stack(self, dev: torch.device) -> None:
        """Stack the member nets of the K heads for one batched evaluation (grouped by hidden size): per group
        the nets' weights and ``avg`` (K' nets, M models), the mean over each model's nets."""
        self._groups: list[tuple[list[int], dict[str, Tensor]]] = []
        by_h: dict[int, list[int]] = {}
        for i, m in enumerate(self.models):
            by_h.setdefault(m.head.hidden, []).append(i)
        for h, idx in by_h.items():
            nets = [n for i in idx for n in self.models[i].head.nets]
            owner = torch.tensor([j for j, i in enumerate(idx) for _ in self.models[i].head.nets])
            avg = torch.nn.functional.one_hot(owner, len(idx)).float()
            avg = avg / avg.sum(0, keepdim=True)                                         # (K', M)
            st = {
                "w1": torch.cat([n[1].weight.t() for n in nets], 1).contiguous(),                # (D, K' H)
                "b1": torch.stack([n[1].bias for n in nets]),
                "g": torch.stack([n[2].weight for n in nets]), "beta": torch.stack([n[2].bias for n in nets]),
                "w2": torch.stack([n[4].weight.t() for n in nets]), "b2": torch.stack([n[4].bias for n in nets]),
                "w3": torch.stack([n[6].weight[0] for n in nets]), "b3": torch.stack([n[6].bias[0] for n in nets]),
                "avg": avg,
            }
            self._groups.append((idx, {k: v.detach().to(dev) for k, v in st.items()}))
        self._eps = self.models[0].head.nets[0][2].eps

    @property
    def num_models(self) -> int:
        return len(self.models)

    def head_scores(self, windows: Tensor) -> Tensor:
        """windows (N, 16, 96) -> (N, K) sigmoid scores of every model."""
        n = windows.shape[0]
        x = windows.reshape(n, -1)
        out = windows.new_empty(n, self.num_models)
        for idx, p in self._groups:
            h = (x @ p["w1"]).view(n, *p["b1"].shape) + p["b1"]                           # (N, K', H)
            h = torch.nn.functional.layer_norm(h, h.shape[-1:], eps=self._eps) * p["g"] + p["beta"]
            h = torch.relu(h)
            h = torch.relu(torch.einsum("nkh,khj->nkj", h, p["w2"]) + p["b2"])
            z = (h * p["w3"]).sum(-1) + p["b3"]                                           # (N, K')
            out[:, idx] = torch.sigmoid(z if p["avg"].shape[0] == p["avg"].shape[1] else z @ p["avg"])
        return out

    # ------------------------------------------------------------------ streaming

    def init_stream(self) -> WakeStream:
        """A fresh stream (as if after :data:`PREFIX_SAMPLES` of silence)."""
        return copy.deepcopy(self._fresh)

    @torch.no_grad()
    def stream(self, states: list[WakeStream], chunks: list[Tensor]) -> list[Tensor]:
        """Feed B streams their new 16 kHz audio (tensors (N_b,) in [-1, 1]); return B tensors (T_b, K) of
        new scores (score k of a stream ends at ``(k + 1) * 0.08`` s).  One embedding call and one head call
        for the whole batch."""
        embs = self.embedding.stream([s.emb for s in states], chunks)
        wins, counts = [], []
        for s, e in zip(states, embs):
            seq = torch.cat([s.hist, e])                                                # (15 + T, 96)
            t = e.shape[0]
            counts.append(t)
            if t:
                wins.append(seq.unfold(0, WINDOW, 1).transpose(1, 2))                   # (T, 16, 96)
            s.hist = seq[seq.shape[0] - (WINDOW - 1):]
            s.scored += t
        if not wins:
            return [torch.zeros(0, self.num_models, device=self.device) for _ in states]
        return list(self.head_scores(torch.cat(wins)).split(counts))

    @torch.no_grad()
    def offline_scores(self, audio: Tensor) -> Tensor:
        """audio (B, N) -> (B, T, K) scores of the whole files (the same as streaming them)."""
        b = audio.shape[0]
        x = torch.cat([audio.new_zeros(b, PREFIX_SAMPLES), audio], dim=1)
        e = self.embedding(x)                                                           # (B, 15 + T, 96)
        t = e.shape[1] - (WINDOW - 1)
        if t <= 0:
            return audio.new_zeros(b, 0, self.num_models)
        w = e.unfold(1, WINDOW, 1).transpose(2, 3)                                      # (B, T, 16, 96)
        return self.head_scores(w.reshape(b * t, WINDOW, DIM)).reshape(b, t, self.num_models)


def describe(model: WakeModel) -> dict[str, Any]:
    """What a wake model says about itself (keyword, threshold, path, training summary)."""
    return {"keyword": model.keyword, "threshold": model.threshold, "path": model.path,
            **{k: model.info[k] for k in ("target_fa_per_h", "trained_s", "created") if k in model.info}}
