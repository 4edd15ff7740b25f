"""Runtime wake words: a keyword search on the transducer, over the recognizer's own encoder output.

Keywords are text, given at run time (no retraining): their token sequences form a
:class:`~streamd.decode.context_graph.ContextGraph`, and a modified beam search
(:class:`~streamd.decode.modified_beam.ModifiedBeamSearch`, beam ``beam``) runs
with that graph's boosts (``boost`` per keyword token, taken back when a path
leaves the keyword), as sherpa-onnx's keyword spotter does.  It shares the
batched engine step with recognition: same encoder frames, one more search
over the rows of the streams that have keywords.

Detection, per stream, checked at the end of every chunk on the best
hypothesis of the keyword search (:func:`detect_one` applies it to one stream):

* its last completed keyword (``match`` of the graph) ended at token position
  ``m`` (1-based) on frame ``f_m``;
* **confirmation** (the keyword is a word of its own, not the start of a
  longer one): the token after position ``m`` is the word separator, or there
  is none yet and the stream has decoded ``trailing_blanks`` frames past
  ``f_m`` (``f_end - f_m >= trailing_blanks``, ``f_end`` the frames decoded so
  far) without one;
* **score**: the mean probability of the keyword's own tokens as emitted
  (positions ``m - len + 1 .. m``) is at least the keyword's ``threshold``;
* **refractory**: the stream's previous detection was at least
  ``refractory_frames`` frames before ``f_m``.

A detection resets the stream's keyword hypotheses (a new segment of the keyword
search) so that the same occurrence is reported once.  Its span runs from the
start of the keyword's first token's frame to the end of ``f_m``.

Shape legend: B streams, K beam slots.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from ..model.transducer import Transducer
from .context_graph import ContextGraph
from .hyps import HypOut
from .modified_beam import BeamState, ModifiedBeamSearch

__all__ = ["KeywordSet", "KeywordState", "KeywordHit", "KeywordSearch", "keyword_set", "detect_one"]

_NEVER = -(2 ** 40)


@dataclass(frozen=True, eq=False)
class KeywordSet:
    """The keywords of a stream: names (P,), per-keyword thresholds (P,), token counts (P,) and their graph."""

    names: tuple[str, ...]
    thresholds: tuple[float, ...]
    lengths: tuple[int, ...]
    graph: ContextGraph


@dataclass
class KeywordState:
    """beam: the keyword search's hypotheses (matches tracked); last_fire: (B,) int64 frame of each
    stream's last detection (very negative if none); sets: (B,) each stream's :class:`KeywordSet`."""

    beam: BeamState
    last_fire: Tensor
    sets: tuple[KeywordSet, ...]

    @property
    def batch(self) -> int:
        return self.last_fire.shape[0]

    @staticmethod
    def cat(states: list["KeywordState"]) -> "KeywordState":
        return KeywordState(BeamState.cat([s.beam for s in states]), torch.cat([s.last_fire for s in states]),
                            tuple(k for s in states for k in s.sets))

    def select(self, rows: Tensor) -> "KeywordState":
        idx = rows.tolist()
        return KeywordState(self.beam.select(rows), self.last_fire[rows], tuple(self.sets[i] for i in idx))


@dataclass(frozen=True)
class KeywordHit:
    """One detection: stream row, keyword, score (mean token probability), span in frames
    (``first_frame`` .. ``frame``, inclusive) and ``frame`` where the keyword's last token was emitted."""

    row: int
    keyword: str
    score: float
    first_frame: int
    frame: int


def detect_one(hyp: HypOut, match: tuple[int, int, int], kset: KeywordSet, separator: int | None,
                     end_frame: int, last_fire: int, trailing_blanks: int, refractory_frames: int
                     ) -> KeywordHit | None:
    """The detection rule of the module docstring for one stream (the hit's row is 0).

    hyp: the keyword search's best hypothesis; match: its (phrase, position m, frame f_m), phrase -1 for none;
    end_frame: the stream's decoded frames so far (f_end)."""
    phrase, m, f_m = match
    if phrase < 0:
        return None
    if len(hyp.tokens) > m:
        confirmed = hyp.tokens[m] == separator
    else:
        confirmed = end_frame - f_m >= trailing_blanks
    if not confirmed or f_m - last_fire < refractory_frames:
        return None
    n = kset.lengths[phrase]
    probs = hyp.confs[m - n:m]
    score = sum(probs) / n
    if score < kset.thresholds[phrase]:
        return None
    return KeywordHit(0, kset.names[phrase], score, hyp.frames[m - n], f_m)


class KeywordSearch:
    """Batched keyword search (module docstring).

    model: the transducer; beam: hypotheses per stream; max_symbols_per_frame: as the recognizer's;
    separator: the word-separator token id of a character table (None for BPE);
    trailing_blanks, refractory_frames: the detection rule's frame counts.
    """

    def __init__(self, model: Transducer, beam: int = 4, max_symbols_per_frame: int = 3, separator: int | None = None,
                 trailing_blanks: int = 2, refractory_frames: int = 25, sync_free: bool = False):
        if beam < 1 or trailing_blanks < 0 or refractory_frames < 0:
            raise ValueError("beam must be >= 1, trailing_blanks and refractory_frames >= 0")
        self.search = ModifiedBeamSearch(model, None, max_symbols_per_frame=max_symbols_per_frame,
                                         sync_free=sync_free, token_probs=True, track_matches=True)
        self.beam = beam
        self.separator = separator
        self.trailing_blanks = trailing_blanks
        self.refractory_frames = refractory_frames

    def init_state(self, kset: KeywordSet, device: torch.device | str = "cpu") -> KeywordState:
        """Fresh state of one stream with keywords ``kset``."""
        beam = self.search.init_state(torch.tensor([self.beam]), device, graph=kset.graph)
        return KeywordState(beam, torch.full((1,), _NEVER, dtype=torch.long, device=device), (kset,))

    def step(self, state: KeywordState, enc_p: Tensor, lengths: Tensor, frame_offset: Tensor) -> KeywordState:
        """Decode one chunk (see :meth:`ModifiedBeamSearch.step`); the given state is left unchanged."""
        return KeywordState(self.search.step(state.beam, enc_p, lengths, frame_offset), state.last_fire, state.sets)

    def detect(self, state: KeywordState, end_frames: Tensor) -> tuple[KeywordState, list[KeywordHit]]:
        """Detections after a chunk, and the state with the detected streams' hypotheses reset.

        end_frames: (B,) int64 frames each stream has decoded so far.  One host transfer for the batch
        (the best hypotheses with their last matches)."""
        beam = state.beam
        b = state.batch
        if b == 0:
            return state, []
        best_idx = beam.scores.argmax(dim=1)
        ar = torch.arange(b, device=best_idx.device)
        info = torch.cat([beam.matches[ar, best_idx], end_frames[:, None].long(), state.last_fire[:, None]], 1)
        hyps = beam.hyps.to_lists(best_idx, beam.scores)
        info_h = info.cpu().tolist()
        hits: list[KeywordHit] = []
        for r in range(b):
            phrase, m, f_m, end, last = info_h[r]
            hit = detect_one(hyps[r], (phrase, m, f_m), state.sets[r], self.separator, end, last,
                                   self.trailing_blanks, self.refractory_frames)
            if hit is not None:
                hits.append(KeywordHit(r, hit.keyword, hit.score, hit.first_frame, hit.frame))
        if not hits:
            return state, []
        fired = torch.zeros(b, dtype=torch.bool, device=best_idx.device)
        fired[[h.row for h in hits]] = True
        frames = torch.tensor([0] * b, dtype=torch.long, device=best_idx.device)
        frames[[h.row for h in hits]] = torch.tensor([h.frame for h in hits], device=best_idx.device)
        new_beam = self.search.reset(_copy_beam(beam), fired)
        return KeywordState(new_beam, torch.where(fired, frames, state.last_fire), state.sets), hits

    def reset(self, state: KeywordState, rows: Tensor) -> KeywordState:
        """New keyword segment for the streams where rows (B,) bool is set (the refractory clock is kept)."""
        return KeywordState(self.search.reset(_copy_beam(state.beam), rows), state.last_fire, state.sets)


def _copy_beam(beam: BeamState) -> BeamState:
    """A shallow copy whose fields :meth:`ModifiedBeamSearch.reset` may replace without touching ``beam``
    (reset replaces tensors, never writes into them)."""
    return dataclasses.replace(beam, hyps=beam.hyps.copy(), acc=dataclasses.replace(beam.acc))


def keyword_set(table, specs: Sequence, default_threshold: float, default_boost: float, path: str) -> KeywordSet:
    """A :class:`KeywordSet` from phrase specs (:class:`~streamd.config.PhraseSpec`) spelled by ``table``.
    ValueError names the entry the table cannot spell."""
    from .context_graph import phrase_graph

    graph = phrase_graph(table, specs, default_boost, path)
    return KeywordSet(tuple(s.phrase for s in specs),
                      tuple(default_threshold if s.threshold is None else s.threshold for s in specs),
                      tuple(len(p) for p in graph.phrases), graph)
