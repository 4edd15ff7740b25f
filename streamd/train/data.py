"""Training data: manifests, cached fbank features, length bucketing, padding, SpecAugment.

Manifests are JSON-lines files, one utterance per line::

    {"audio": "wav/0001.wav", "text": "turn on the lights", "duration": 1.7, "keyword": null}

``audio`` is relative to the manifest's folder (absolute paths are kept);
``text`` is normalized lower-case text; ``duration`` (seconds, optional:
read from the file header when absent) is only used for length bucketing
and filtering; ``keyword`` (optional) names the wake word spoken in the
utterance or is null.  Other keys (``voice``...) are ignored.

Features: :class:`AsrDataset` loads the audio, resamples it to 16 kHz,
computes ``(T, F)`` log-mel features with :class:`streamd.audio.Fbank` (in
the DataLoader workers) and, if enabled, caches them as ``.pt`` files next to
the corpus: ``<manifest folder>/fbank-<config hash>/<audio path>.pt``.  A
cache entry remembers the audio file's size and mtime and is recomputed when
they change; the folder name changes with the fbank configuration.

Batching: :class:`LengthBucketSampler` groups utterances of similar length
so that ``batch size x longest utterance <= max_frames`` padded fbank
frames; batch lists depend only on ``(seed, epoch)`` so training can resume
in the middle of an epoch.  :func:`collate` pads a list of examples.

SpecAugment (training only, applied by the trainer on the device):
:func:`sample_spec_augment` draws mask positions from a seeded generator,
:func:`apply_spec_augment` applies them to a batch in one vectorised pass.
:func:`sample_spectral_eq` draws a random smooth channel response per utterance
(added to the log-mel features before masking; off unless ``max_eq_db`` > 0).

Shape legend: B utterances, T fbank frames, F mel bins, U target tokens,
Nt / Nf time / frequency masks per utterance.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from ..audio.fbank import Fbank, num_frames
from ..audio.pcm import load_audio
from ..audio.resample import resample
from ..config import FbankConfig, to_dict
from ..tokens import TokenTable
from ..manifest_lines import iter_audio_lines

__all__ = [
    "default_char_tokens",
    "Utterance",
    "read_manifest",
    "Example",
    "Batch",
    "AsrDataset",
    "LengthBucketSampler",
    "collate",
    "feature_stats",
    "SpecAugmentMasks",
    "sample_spec_augment",
    "apply_spec_augment",
    "sample_spectral_eq",
]


def default_char_tokens() -> tuple[str, ...]:
    """The default char vocabulary: ``<blk>`` (id 0), space, ``a``..``z``, apostrophe (29 tokens)."""
    return ("<blk>", " ") + tuple(chr(c) for c in range(ord("a"), ord("z") + 1)) + ("'",)


# --------------------------------------------------------------------------- manifests


@dataclass(frozen=True)
class Utterance:
    """One manifest entry. ``audio`` is an absolute path; ``duration`` in seconds."""

    audio: str
    text: str
    duration: float
    keyword: str | None
    manifest: str
    line: int


def _header_duration(path: str) -> float:
    """Duration in seconds from the audio file header (soundfile if installed, else ``wave``)."""
    try:
        import soundfile

        return float(soundfile.info(path).duration)
    except ImportError:  # pragma: no cover - depends on the environment
        with wave.open(path, "rb") as w:
            return w.getnframes() / float(w.getframerate())


def read_manifest(path: str | Path) -> list[Utterance]:
    """Parse a JSON-lines manifest; errors name the file, line and problem."""
    path = Path(path)
    out: list[Utterance] = []
    for n, where, obj, audio in iter_audio_lines(path):
        if not isinstance(obj.get("text"), str):
            raise ValueError(f"{where}: 'text' must be a string, got {obj.get('text')!r}")
        kw = obj.get("keyword")
        if kw is not None and not isinstance(kw, str):
            raise ValueError(f"{where}: 'keyword' must be a string or null, got {kw!r}")
        dur = obj.get("duration")
        if dur is None:
            dur = _header_duration(audio)
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
            raise ValueError(f"{where}: 'duration' must be a number of seconds >= 0, got {dur!r}")
        out.append(Utterance(audio, obj["text"], float(dur), kw, str(path), n))
    return out


# --------------------------------------------------------------------------- examples and batches


@dataclass
class Example:
    """One utterance ready for batching.

    feats: (T, F) float32 log-mel features.
    tokens: (U,) int64 target token ids.
    kws: keyword index in the model's keyword list, or -1.
    num_samples: 16 kHz samples of the audio (for throughput).
    """

    feats: Tensor
    tokens: Tensor
    kws: int
    num_samples: int


@dataclass
class Batch:
    """Padded batch.

    feats: (B, T, F) float32, zero beyond feat_lengths.
    feat_lengths: (B,) int64 valid fbank frames.
    targets: (B, U) int64 token ids, padded with 0 beyond target_lengths.
    target_lengths: (B,) int64.
    kws_target: (B,) int64 keyword index or -1 (no keyword).
    num_samples: (B,) int64 16 kHz samples of each utterance.
    """

    feats: Tensor
    feat_lengths: Tensor
    targets: Tensor
    target_lengths: Tensor
    kws_target: Tensor
    num_samples: Tensor

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(getattr(self, f).to(device, non_blocking=True) for f in
                       ("feats", "feat_lengths", "targets", "target_lengths", "kws_target", "num_samples")))

    @property
    def size(self) -> int:
        return self.feats.shape[0]


def collate(examples: Sequence[Example]) -> Batch:
    """Pad examples into a :class:`Batch` (features with 0, targets with 0)."""
    if not examples:
        raise ValueError("collate needs at least one example")
    b = len(examples)
    f = examples[0].feats.shape[1]
    t = max(e.feats.shape[0] for e in examples)
    u = max(e.tokens.shape[0] for e in examples)
    feats = torch.zeros(b, t, f, dtype=torch.float32)
    targets = torch.zeros(b, u, dtype=torch.long)
    for i, e in enumerate(examples):
        feats[i, : e.feats.shape[0]] = e.feats
        targets[i, : e.tokens.shape[0]] = e.tokens
    return Batch(
        feats=feats,
        feat_lengths=torch.tensor([e.feats.shape[0] for e in examples], dtype=torch.long),
        targets=targets,
        target_lengths=torch.tensor([e.tokens.shape[0] for e in examples], dtype=torch.long),
        kws_target=torch.tensor([e.kws for e in examples], dtype=torch.long),
        num_samples=torch.tensor([e.num_samples for e in examples], dtype=torch.long),
    )


# --------------------------------------------------------------------------- dataset


def _fbank_hash(cfg: FbankConfig) -> str:
    return hashlib.sha1(json.dumps(to_dict(cfg), sort_keys=True).encode()).hexdigest()[:10]


class AsrDataset(torch.utils.data.Dataset):
    """Utterances of one or more manifests -> :class:`Example` (features computed lazily).

    Args:
        manifests: manifest paths (their utterances are concatenated in order).
        tokens: token table used to encode the text (char or bpe).
        fbank: feature configuration (16 kHz).
        keywords: the model's keyword list; a manifest ``keyword`` must be one
            of them (its index is the KWS target). With no keywords every KWS
            target is -1.
        cache_features: store/reuse features as ``.pt`` files next to the corpus.
        min_duration, max_duration: utterances outside [min, max] seconds are
            dropped (``max_duration`` None: no upper bound). ``dropped`` counts them.
        repeat: per manifest, how many times each of its utterances is listed
            (oversampling a small corpus in a mix; () = once each). A repeated
            utterance shares its cached features; SpecAugment and the channel
            response are drawn per step, so repeats still differ.

    Attributes:
        utterances: the kept utterances.
        frames: (N,) int64 numpy array of fbank frames estimated from the durations.
    """

    def __init__(self, manifests: Sequence[str | Path], tokens: TokenTable, fbank: FbankConfig,
                 keywords: Sequence[str] = (), cache_features: bool = True, min_duration: float = 0.1,
                 max_duration: float | None = None, repeat: Sequence[int] = ()) -> None:
        self._load(manifests, fbank, keywords, cache_features, min_duration, max_duration, repeat, read_manifest,
                   lambda utt: self._label(utt, tokens))

    def _load(self, manifests: Sequence[str | Path] | str | Path, fbank: FbankConfig, keywords: Sequence[str],
              cache_features: bool, min_duration: float, max_duration: float | None, repeat: Sequence[int],
              read: Callable[[str | Path], list[Utterance]],
              label: Callable[[Utterance], tuple[list[int], int]]) -> None:
        """Fill the dataset: the utterances of each manifest (``read``) within the duration bounds, ``repeat``ed,
        with their targets and KWS targets (``label``) and estimated frame counts (shared with subclasses whose
        manifests or targets differ, e.g. :class:`streamd.train.pretrain.AudioDataset`)."""
        if isinstance(manifests, (str, Path)):
            manifests = [manifests]
        if not manifests:
            raise ValueError(f"{type(self).__name__} needs at least one manifest")
        repeat = tuple(repeat) or (1,) * len(manifests)
        if len(repeat) != len(manifests) or any(isinstance(r, bool) or not isinstance(r, int) or r < 1
                                                for r in repeat):
            raise ValueError(f"repeat must list one integer >= 1 per manifest ({len(manifests)}), got {list(repeat)}")
        self.fbank_cfg = fbank
        self.keywords = tuple(keywords)
        self.cache_features = cache_features
        self._fbank: Fbank | None = None
        self._cache_dirs: dict[str, Path] = {}
        tag = f"fbank-{_fbank_hash(fbank)}"  # one cache per front end, shared by every dataset of a manifest
        self.utterances: list[Utterance] = []
        self._targets: list[list[int]] = []
        self._kws: list[int] = []
        self.dropped = 0
        for m, times in zip(manifests, repeat):
            self._cache_dirs[str(Path(m))] = Path(m).resolve().parent / tag
            for utt in read(m):
                if utt.duration < min_duration or (max_duration is not None and utt.duration > max_duration):
                    self.dropped += 1
                    continue
                ids, kws = label(utt)
                self.utterances.extend([utt] * times)
                self._targets.extend([ids] * times)
                self._kws.extend([kws] * times)
        fl, fs = fbank.frame_length, fbank.frame_shift
        self.frames = np.array([num_frames(int(round(u.duration * fbank.sample_rate)), fl, fs)
                                for u in self.utterances], dtype=np.int64)

    def _label(self, utt: Utterance, tokens: TokenTable) -> tuple[list[int], int]:
        """``(token ids of the text, keyword index or -1)`` of one utterance; ValueError naming its line."""
        where = f"manifest {utt.manifest} line {utt.line}"
        try:
            ids = tokens.encode(utt.text)
        except ValueError as e:
            raise ValueError(f"{where}: cannot encode text {utt.text!r}: {e}") from None
        if utt.keyword is None or not self.keywords:
            return ids, -1
        if utt.keyword in self.keywords:
            return ids, self.keywords.index(utt.keyword)
        raise ValueError(f"{where}: keyword {utt.keyword!r} is not one of the model's keywords "
                         f"{list(self.keywords)}")

    def __len__(self) -> int:
        return len(self.utterances)

    def _cache_path(self, utt: Utterance) -> Path:
        root = self._cache_dirs[utt.manifest]
        rel = os.path.relpath(utt.audio, root.parent)
        if rel.startswith(".."):  # audio outside the corpus folder: key by a hash of its path
            rel = hashlib.sha1(utt.audio.encode()).hexdigest()
        return root / (rel + ".pt")

    def compute_features(self, audio_path: str) -> tuple[Tensor, int]:
        """Load, resample to 16 kHz and featurize one file -> ((T, F) float32, num 16 kHz samples)."""
        x, rate = load_audio(audio_path)
        sr = self.fbank_cfg.sample_rate
        if rate != sr:
            x = resample(x, rate, sr)
        if self._fbank is None:
            self._fbank = Fbank(self.fbank_cfg)
        with torch.no_grad():
            feats = self._fbank(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None])[0]
        return feats.contiguous(), len(x)

    def _features(self, utt: Utterance) -> tuple[Tensor, int]:
        if not self.cache_features:
            return self.compute_features(utt.audio)
        st = os.stat(utt.audio)
        path = self._cache_path(utt)
        if path.is_file():
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True)
                if obj.get("size") == st.st_size and obj.get("mtime_ns") == st.st_mtime_ns:
                    return obj["feats"], int(obj["num_samples"])
            except Exception:  # noqa: BLE001 - a truncated/corrupt cache entry is recomputed
                pass
        feats, n = self.compute_features(utt.audio)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save({"feats": feats, "num_samples": n, "size": st.st_size, "mtime_ns": st.st_mtime_ns}, tmp)
        tmp.replace(path)
        return feats, n

    def __getitem__(self, i: int) -> Example:
        utt = self.utterances[i]
        feats, n = self._features(utt)
        return Example(feats=feats, tokens=torch.tensor(self._targets[i], dtype=torch.long),
                       kws=self._kws[i], num_samples=n)


def _identity(x):
    return x


def feature_stats(dataset: AsrDataset, indices: Sequence[int], num_workers: int = 0) -> tuple[Tensor, Tensor]:
    """Per-bin mean and standard deviation over all frames of ``dataset[indices]``.

    Returns mean (F,) and std (F,) float32 (std floored at 1e-5), accumulated in float64.
    """
    if len(indices) == 0:
        raise ValueError("feature_stats needs at least one utterance")
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, sampler=list(indices), collate_fn=_identity,
                                         num_workers=num_workers, worker_init_fn=worker_init)
    total = 0
    s = s2 = None
    for ex in loader:
        x = ex.feats.double()  # (T, F)
        s = x.sum(0) if s is None else s + x.sum(0)
        s2 = (x * x).sum(0) if s2 is None else s2 + (x * x).sum(0)
        total += x.shape[0]
    if total == 0:
        raise ValueError("feature_stats: the selected utterances have no feature frames")
    mean = s / total
    var = (s2 / total - mean * mean).clamp_min(0.0)
    return mean.float(), var.sqrt().clamp_min(1e-5).float()


def worker_init(_worker_id: int) -> None:
    """DataLoader worker setup: one intra-op thread per worker (features are small)."""
    torch.set_num_threads(1)


# --------------------------------------------------------------------------- bucketing


class LengthBucketSampler:
    """Batches of similar-length utterances bounded by padded frames.

    Args:
        frames: (N,) fbank frames of each utterance.
        max_frames: bound on ``len(batch) * max(frames in batch)``; an
            utterance longer than that alone forms a batch of one.
        seed: batches of epoch ``e`` depend only on (seed, e).
        shuffle: random order within equal-length buckets and of the
            batches; False gives sorted, fixed batches (validation).
        bucket_frames: lengths are compared after integer division by this
            (utterances within one bucket are interchangeable, so shuffling
            varies batch composition between epochs).
    """

    def __init__(self, frames: Sequence[int] | np.ndarray, max_frames: int, seed: int = 0, shuffle: bool = True,
                 bucket_frames: int = 50) -> None:
        self.frames = np.asarray(frames, dtype=np.int64)
        if self.frames.ndim != 1 or len(self.frames) == 0:
            raise ValueError(f"LengthBucketSampler needs a non-empty 1-D list of lengths, got shape "
                             f"{self.frames.shape}")
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        if bucket_frames < 1:
            raise ValueError(f"bucket_frames must be >= 1, got {bucket_frames}")
        self.max_frames = int(max_frames)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.bucket_frames = int(bucket_frames)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` (each a list of dataset indices), in training order."""
        n = len(self.frames)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(n)
        else:
            rng, order = None, np.arange(n)
        # stable sort by bucket keeps the random order inside a bucket
        order = order[np.argsort(self.frames[order] // self.bucket_frames, kind="stable")]
        batches: list[list[int]] = []
        cur: list[int] = []
        longest = 0
        for i in order.tolist():
            ln = int(self.frames[i])
            if cur and (len(cur) + 1) * max(longest, ln) > self.max_frames:
                batches.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, ln)
        if cur:
            batches.append(cur)
        if rng is not None:
            batches = [batches[k] for k in rng.permutation(len(batches))]
        return batches

    def iter_from(self, epoch: int, index: int) -> Iterator[tuple[int, int, list[int]]]:
        """Endless ``(epoch, batch index, indices)`` starting at batch ``index`` of ``epoch``."""
        while True:
            batches = self.epoch_batches(epoch)
            for k in range(index, len(batches)):
                yield epoch, k, batches[k]
            epoch, index = epoch + 1, 0


# --------------------------------------------------------------------------- SpecAugment


@dataclass
class SpecAugmentMasks:
    """Mask positions for a batch (a width of 0 masks nothing).

    time_start, time_width: (B, Nt) int64 masked frames [start, start + width).
    freq_start, freq_width: (B, Nf) int64 masked bins [start, start + width).
    """

    time_start: Tensor
    time_width: Tensor
    freq_start: Tensor
    freq_width: Tensor


def sample_spec_augment(lengths: Tensor, num_bins: int, num_time_masks: int, max_time_width: int,
                        max_time_fraction: float, num_freq_masks: int, max_freq_width: int,
                        generator: torch.Generator, device: torch.device | str | None = None) -> SpecAugmentMasks:
    """Draw SpecAugment masks for utterances of ``lengths`` (B,) frames.

    Time mask width is uniform in ``[0, min(max_time_width, floor(max_time_fraction * length))]``
    and its start uniform so the mask fits in the utterance; frequency masks
    likewise with ``[0, min(max_freq_width, num_bins)]``.  Random numbers come
    from ``generator`` (a CPU generator, so pass CPU ``lengths`` to avoid a
    device sync); the masks are put on ``device`` (default ``lengths.device``).
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be (B,), got shape {tuple(lengths.shape)}")
    dev = lengths.device if device is None else device
    ln = lengths.detach().to("cpu", torch.long)
    b = ln.shape[0]
    max_tw = torch.minimum(torch.full_like(ln, max_time_width), (ln.double() * max_time_fraction).floor().long())
    u = torch.rand(b, num_time_masks, 2, generator=generator, dtype=torch.float64)
    tw = (u[..., 0] * (max_tw[:, None] + 1)).floor().long()  # (B, Nt) in [0, max_tw]
    ts = (u[..., 1] * (ln[:, None] - tw + 1)).floor().long()  # (B, Nt) in [0, len - tw]
    max_fw = min(max_freq_width, num_bins)
    v = torch.rand(b, num_freq_masks, 2, generator=generator, dtype=torch.float64)
    fw = (v[..., 0] * (max_fw + 1)).floor().long()
    fs = (v[..., 1] * (num_bins - fw + 1)).floor().long()
    return SpecAugmentMasks(ts.to(dev), tw.to(dev), fs.to(dev), fw.to(dev))


def sample_spectral_eq(batch: int, num_bins: int, max_db: float, generator: torch.Generator,
                       device: torch.device | str | None = None) -> Tensor:
    """Random smooth channel responses, one per utterance, as log-mel offsets.

    A microphone, loudspeaker or codec colours the spectrum with a smooth gain
    curve; in the log-mel domain that is an additive curve over the bins.  Each
    curve is a tilt ``a * (u - 1/2)`` plus two cosines ``b cos(pi u) + c cos(2 pi u)``
    over the normalized bin position ``u`` in [0, 1], with ``a, b, c`` uniform in
    ``[-max_db, max_db]``, ``[-max_db/2, max_db/2]`` and ``[-max_db/4, max_db/4]``
    (decibels of power, converted to natural-log units).

    Returns (B, F) float32 offsets on ``device`` to add to every frame of each utterance.
    """
    if batch < 0 or num_bins < 1 or max_db < 0:
        raise ValueError(f"need batch >= 0, num_bins >= 1 and max_db >= 0, got {batch}, {num_bins}, {max_db}")
    coef = (torch.rand(batch, 3, generator=generator, dtype=torch.float64) * 2 - 1) \
        * torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64) * max_db  # (B, 3) dB
    u = torch.linspace(0.0, 1.0, num_bins, dtype=torch.float64)  # (F,) bin positions; [0.] for one bin
    basis = torch.stack([u - 0.5, torch.cos(torch.pi * u), torch.cos(2 * torch.pi * u)])  # (3, F)
    curve_db = coef @ basis  # (B, F)
    return (curve_db * (math.log(10.0) / 10.0)).to(torch.float32).to(device)


def apply_spec_augment(feats: Tensor, masks: SpecAugmentMasks, fill: Tensor) -> Tensor:
    """Masked copy of ``feats``.

    feats: (B, T, F); masks: from :func:`sample_spec_augment`;
    fill: (F,) value written into masked cells (the feature mean, so that a
    masked cell is 0 after the encoder's normalization).
    Returns (B, T, F).
    """
    b, t, f = feats.shape
    dev = feats.device
    tt = torch.arange(t, device=dev)[None, None, :]  # (1, 1, T)
    in_t = (tt >= masks.time_start[..., None]) & (tt < (masks.time_start + masks.time_width)[..., None])
    ff = torch.arange(f, device=dev)[None, None, :]  # (1, 1, F)
    in_f = (ff >= masks.freq_start[..., None]) & (ff < (masks.freq_start + masks.freq_width)[..., None])
    cells = in_t.any(1)[:, :, None] | in_f.any(1)[:, None, :]  # (B, T, F)
    return torch.where(cells, fill.to(feats.dtype)[None, None, :], feats)
