"""Recording decodes for ``streamd eval``: every confidence measure and the KWS scores from one run.

Only the engine's public hooks are used (no subclass, no patched search or
detector):

* **Confidence** -- :class:`MeasureBank` is passed as the Recognizer's
  ``measure``.  Called by a search with a joiner (or CTC) log-prob vector
  ``(..., V)``, it computes every (measure, alpha) of the study at once,
  keeps the values on the device and returns, instead of a confidence, a
  *tag*: the row number of those values (an integer, exact in float32).
  With ``exclude_blank`` (forced by :func:`recording_recognizer`) the
  searches carry token confidences untouched, so each token of a ``Final``
  has in ``token_confs`` the tag of the frame that emitted it.
  :func:`tagged_words` groups a Final's tokens into words exactly as the
  engine does (:func:`~streamd.decode.words.tokens_to_words` run on token
  positions) and attaches each word's tags; :meth:`MeasureBank.lookup` turns
  tags back into values, from which word confidences for any measure, alpha
  and aggregation are recomputed -- the numbers the engine gives when
  configured with that measure.
* **KWS** -- :class:`KwsTrackRecorder` is passed as ``on_batch``: after
  every committed batch step it keeps the KWS head's scores ``(B, T', K)``
  of the batch's rows (on the device, no transfer), and
  :meth:`KwsTrackRecorder.take_tracks` returns one ``(frames, K)`` track per
  stream with a single host transfer.  :func:`replay_kws` re-runs
  :class:`~streamd.decode.kws.KwsDetector` over recorded tracks for a whole
  threshold sweep at once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from streamd.config import EngineConfig, KwsConfig
from streamd.decode.confidence import MEASURE_NAMES, frame_confidence
from streamd.decode.kws import Detection, KwsDetector
from streamd.tokens import TokenTable
from streamd.decode.words import tokens_to_words
from streamd.engine import BatchView, Recognizer
from streamd.events import Final, Word
from streamd.model.checkpoint import LoadedModel

__all__ = ["MeasureBank", "TaggedWord", "tagged_words", "KwsTrackRecorder", "recording_recognizer", "replay_kws"]

_MAX_TAGS = 2 ** 24  # integers up to here are exact in float32 (the searches store confidences as float32)


class MeasureBank:
    """A confidence measure for the searches that records every measure of a study at once.

    specs: the (measure name, alpha) pairs to compute, names from MEASURE_NAMES.
    Calling it with ``log_probs (..., V)`` stores ``(..., M)`` float32 values
    (M = len(specs)) on the input's device and returns ``(...)`` float32 tags
    (row numbers of the stored values).  :meth:`lookup` maps tags back to
    values with one host transfer; :meth:`reset` clears the store once every
    stream that holds tags is done.
    """

    def __init__(self, specs: Sequence[tuple[str, float]]):
        specs = tuple((str(n), float(a)) for n, a in specs)
        if not specs:
            raise ValueError("MeasureBank: need at least one (measure, alpha)")
        for name, alpha in specs:
            if name not in MEASURE_NAMES:
                raise ValueError(f"MeasureBank: unknown measure {name!r}; expected one of {list(MEASURE_NAMES)}")
            if not alpha > 0:
                raise ValueError(f"MeasureBank: alpha must be > 0, got {alpha!r} for {name}")
        self.specs = specs
        self._rows: list[Tensor] = []
        self._count = 0

    @property
    def num_tags(self) -> int:
        return self._count

    def __call__(self, log_probs: Tensor) -> Tensor:
        """log_probs (..., V) log-softmax of one search step -> (...) float32 tags (values stored)."""
        vals = torch.stack([frame_confidence(log_probs, n, a).to(torch.float32) for n, a in self.specs], -1)
        lead = vals.shape[:-1]
        k = math.prod(lead)
        if self._count + k > _MAX_TAGS:
            raise RuntimeError(f"MeasureBank: more than {_MAX_TAGS} recorded frames since the last reset; "
                               "evaluate with fewer concurrent streams (--batch-streams)")
        self._rows.append(vals.reshape(k, len(self.specs)))
        tags = torch.arange(self._count, self._count + k, dtype=torch.float32, device=log_probs.device)
        self._count += k
        return tags.reshape(lead)

    def tag_of(self, conf: float) -> int:
        """The tag a search stored as a token's confidence (checked: an integer in range)."""
        t = int(conf)
        if t != conf or not 0 <= t < self._count:
            raise RuntimeError(f"MeasureBank: token confidence {conf!r} is not a recorded tag "
                               "(the search changed the measure's output)")
        return t

    def lookup(self, tags: Sequence[int]) -> np.ndarray:
        """(N, M) float32 values of ``tags`` (one device-to-host transfer)."""
        if not len(tags):
            return np.zeros((0, len(self.specs)), dtype=np.float32)
        table = torch.cat(self._rows) if len(self._rows) > 1 else self._rows[0]
        self._rows = [table]
        idx = torch.as_tensor(list(tags), dtype=torch.long, device=table.device)
        return table[idx].cpu().numpy()

    def reset(self) -> None:
        self._rows, self._count = [], 0


@dataclass(frozen=True)
class TaggedWord(Word):
    """A word of a recording run: ``tags`` are its tokens' MeasureBank tags; ``conf`` is NaN."""

    tags: tuple[int, ...] = ()


def tagged_words(final: Final, table: TokenTable, frame_shift_s: float, bank: MeasureBank) -> tuple[TaggedWord, ...]:
    """The words of a recording run's ``final`` with their tokens' tags (from ``final.token_confs``).

    Grouping is the engine's: :func:`tokens_to_words` over the Final's
    ``tokens`` / ``token_frames`` with token *positions* as confidences, so
    aggregating with min / max gives each word's first / last position; a
    word's tokens are the non-blank positions in between (blanks are the only
    tokens the grouping skips without closing a word).  Raises RuntimeError if
    the words differ from ``final.words`` or a confidence is not a bank tag.
    """
    n = len(final.tokens)
    if not n == len(final.token_frames) == len(final.token_confs):
        raise ValueError(f"Final of stream {final.stream}: tokens, token_frames and token_confs must have equal "
                         f"lengths, got {n}, {len(final.token_frames)}, {len(final.token_confs)}")
    pos = [float(k) for k in range(n)]
    first, last = (tokens_to_words(table, final.tokens, final.token_frames, pos, frame_shift_s, how)
                   for how in ("min", "max"))
    out = tuple(TaggedWord(w.word, w.start, w.end, math.nan,
                           tags=tuple(bank.tag_of(final.token_confs[k]) for k in range(int(w.conf), int(z.conf) + 1)
                                 if final.tokens[k] != table.blank_id))
                for w, z in zip(first, last))
    if [(w.word, w.start, w.end) for w in out] != [(w.word, w.start, w.end) for w in final.words]:
        raise RuntimeError(f"Final of stream {final.stream}: words regrouped from its tokens "
                           f"{[w.word for w in out]} differ from its words {[w.word for w in final.words]}")
    return out


class KwsTrackRecorder:
    """An ``on_batch`` observer that keeps the KWS head's per-frame scores of every stream.

    While ``enabled``, each committed batch step's ``heads.kws_probs`` (B, T', K),
    ``lengths`` (B,) and ``frame_offsets`` (B,) are kept as they are, on the
    engine's device; the rows are the view's ``stream_ids`` (every stream of
    the batch, whatever its ``keywords`` option).  Nothing is recorded for a
    model without a KWS head.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._chunks: list[tuple[tuple[int, ...], Tensor, Tensor, Tensor]] = []

    def __call__(self, view: BatchView) -> None:
        probs = view.heads.kws_probs
        if not self.enabled or probs is None:
            return
        if not probs.shape[0] == len(view.stream_ids) == view.lengths.shape[0] == view.frame_offsets.shape[0]:
            raise RuntimeError(f"KWS recording: {probs.shape[0]} score rows, {view.lengths.shape[0]} lengths and "
                               f"{view.frame_offsets.shape[0]} offsets for {len(view.stream_ids)} streams")
        self._chunks.append((tuple(view.stream_ids), probs, view.lengths, view.frame_offsets))

    def take_tracks(self) -> dict[int, np.ndarray]:
        """Per stream id its recorded (frames, K) float64 scores, frame 0 on; clears the record.

        One host transfer for everything recorded.  Raises RuntimeError if a
        stream's chunks do not follow each other (a gap or an overlap).
        """
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return {}
        flat = torch.cat([torch.cat([off.double(), ln.double(), sc.double().flatten()]) for _, sc, ln, off in chunks])
        host = flat.cpu().numpy()
        parts: dict[int, list[tuple[int, np.ndarray]]] = {}
        pos = 0
        for ids, sc, _, _ in chunks:
            b, t, k = sc.shape
            off, ln = host[pos:pos + b].astype(np.int64), host[pos + b:pos + 2 * b].astype(np.int64)
            vals = host[pos + 2 * b:pos + 2 * b + b * t * k].reshape(b, t, k)
            pos += 2 * b + b * t * k
            for r, sid in enumerate(ids):
                if ln[r] > 0:
                    parts.setdefault(sid, []).append((int(off[r]), vals[r, : ln[r]]))
        tracks = {}
        for sid, ps in parts.items():
            expect = 0
            for off, v in ps:
                if off != expect:
                    raise RuntimeError(f"KWS recording of stream {sid}: chunk at frame {off}, expected {expect}")
                expect += len(v)
            tracks[sid] = np.concatenate([v for _, v in ps])
        return tracks


def recording_recognizer(loaded: LoadedModel, config: EngineConfig, bank: MeasureBank,
                         kws: KwsTrackRecorder | None = None) -> Recognizer:
    """A plain :class:`Recognizer` with ``bank`` as confidence measure and ``kws`` as batch observer.

    ``config.confidence.exclude_blank`` is forced on, so token confidences are
    the bank's tags untouched; everything else (searches, endpointing) is
    ``config``'s, so the recording decodes the same text as the plain engine.
    """
    conf = dataclasses.replace(config.confidence, exclude_blank=True)
    return Recognizer(loaded, dataclasses.replace(config, confidence=conf), measure=bank, on_batch=kws)


def replay_kws(tracks: Sequence[np.ndarray], keywords: Sequence[str], cfg: KwsConfig, frame_shift_s: float,
               thresholds: Sequence[float], max_elements: int = 2_000_000) -> list[list[list[Detection]]]:
    """Run the KWS detector over recorded score tracks for many thresholds at once.

    tracks: per file an (N_f, K) array of the KWS head's sigmoid scores, K = len(keywords).
    cfg: smoothing window and refractory period (its thresholds are ignored: every keyword
        uses each of ``thresholds`` in turn).
    Returns ``dets[i][f]``: the detections of file f at thresholds[i] (``row`` = f), the same
    firings and scores as the engine's with ``KwsConfig(threshold=thresholds[i])``; their spans
    are the head's (the engine's wake events span the keyword's words where its hypothesis
    holds them: :func:`~streamd.decode.kws.aligned_span`).  One detector with K x
    len(thresholds) columns (keyword k at threshold i) runs over batches of files.
    """
    keywords = tuple(keywords)
    thr = [float(t) for t in thresholds]
    k, n = len(keywords), len(thr)
    for f, tr in enumerate(tracks):
        if tr.ndim != 2 or tr.shape[1] != k:
            raise ValueError(f"tracks[{f}]: expected shape (frames, {k}), got {tr.shape}")
    columns = [f"{i}\t{kw}" for i in range(n) for kw in keywords]
    det_cfg = KwsConfig(enabled=True, thresholds={c: thr[i // k] for i, c in enumerate(columns)},
                        smoothing_frames=cfg.smoothing_frames, refractory_s=cfg.refractory_s)
    detector = KwsDetector(tuple(columns), det_cfg, frame_shift_s)
    out: list[list[list[Detection]]] = [[[] for _ in tracks] for _ in range(n)]
    order = sorted(range(len(tracks)), key=lambda f: len(tracks[f]))
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end + 1 - start) * len(tracks[order[end]]) * k * n <= max_elements:
            end += 1
        files = order[start:end]
        t_max = max(1, max(len(tracks[f]) for f in files))
        x = np.zeros((len(files), t_max, k), dtype=np.float64)
        for r, f in enumerate(files):
            x[r, : len(tracks[f])] = tracks[f]
        scores = torch.from_numpy(x).repeat(1, 1, n)  # column i * K + k = keyword k at threshold i
        lengths = torch.tensor([len(tracks[f]) for f in files])
        offsets = torch.zeros(len(files), dtype=torch.long)
        _, dets = detector.step(detector.init_state(len(files)), scores, lengths, offsets)
        for d in dets:
            i, kw = d.keyword.split("\t", 1)
            f = files[d.row]
            out[int(i)][f].append(dataclasses.replace(d, row=f, keyword=kw))
        start = end
    return out
