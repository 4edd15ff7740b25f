"""What a step tells its streams: the search's best hypotheses as words (calibrated), partials
(read only where a hypothesis changed), keyword events, and a Final's distinct n-best."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..decode.hyps import HypBuffer, HypOut
from ..decode.keyword_search import KeywordHit
from ..decode.words import tokens_to_words
from ..events import Event, Partial, WakeWord, Word
from .state import _Batch, _Stream


def distinct_alternatives(best: str, nbest: Sequence[tuple[str, float]]
                          ) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """A Final's n-best: the non-empty texts other than ``best``, each once at its highest score, in score order.

    ``nbest``: (text, total log-score) of the search's hypotheses; several may spell the same text
    (token sequences that decode alike, or the best text again).  Returns (alternatives, scores) with
    ``scores[0]`` the score of ``best`` (the highest score its text has, or the top score when the
    search's n-best does not hold it) and ``scores[k + 1]`` that of ``alternatives[k]``."""
    top: dict[str, float] = {}
    for text, score in nbest:
        if text not in top or score > top[text]:
            top[text] = score
    best_score = top.pop(best, max(top.values(), default=0.0))
    order = sorted(((t, sc) for t, sc in top.items() if t), key=lambda kv: -kv[1])
    return tuple(t for t, _ in order), (best_score, *(sc for _, sc in order))




class Results:
    """Part of :class:`~streamd.engine.Recognizer`: partials, keyword events, best hypotheses."""

    def _keyword_events(self, batch: _Batch, hits: list[KeywordHit]) -> list[Event]:
        """One WakeWord per runtime-keyword detection, spanning the keyword's tokens' frames."""
        if not hits:
            return []
        ids = [batch.ids[row] for row in batch.wake_rows.tolist()]
        fs = self.frame_shift_s
        return [WakeWord(ids[h.row], h.keyword, h.score, h.first_frame * fs, (h.frame + 1) * fs) for h in hits]

    def _best_of(self, batch: _Batch, sids: Sequence[int], final: bool = False) -> dict[int, HypOut]:
        """Best hypothesis of streams ``sids`` of the batch (one host transfer per method among them).

        final: rank hypotheses as complete segments (the LM's end-of-sentence term, where fused)."""
        if not sids:
            return {}
        want = {batch.ids.index(sid) for sid in sids}
        best: dict[int, HypOut] = {}
        for method, (rows, state) in batch.groups.items():
            pairs = [(j, row) for j, row in enumerate(rows.tolist()) if row in want]
            if not pairs:
                continue
            sub = state.select(torch.tensor([j for j, _ in pairs], device=self.device))
            for (_, row), hyp in zip(pairs, self.searches[method].best(sub, final=final)):
                best[batch.ids[row]] = hyp
        return best

    def _words(self, hyp: HypOut) -> tuple[Word, ...]:
        """The hypothesis' words; with a calibration, ``conf`` calibrated and ``conf_raw`` the measure."""
        return tuple(self._calibrated(tokens_to_words(self.tokens, hyp.tokens, hyp.frames, hyp.confs,
                                                      self.frame_shift_s, self.config.confidence.aggregation)))

    def _calibrated(self, words: list[Word]) -> list[Word]:
        """Words with ``conf`` calibrated and ``conf_raw`` the measure (as they are without a calibration)."""
        if self.calibration is None or not words:
            return words
        probs = self.calibration.apply([w.conf for w in words]).tolist()
        return [dataclasses.replace(w, conf=p, conf_raw=w.conf) for w, p in zip(words, probs)]

    def _calibrate_partials(self, streams: list[_Stream]) -> None:
        """Bring the calibrated words (:attr:`_Stream.cal`) of the next partials of ``streams`` (with partials)
        up to date, one calibration call for the batch (:meth:`_partial_of` reads them)."""
        todo = [st for st in streams if st.stale and st.cal_valid < len(st.shown.words)
                and not (st.carry is not None and st.carry.tokens)]
        if not todo:
            return
        words = [st.shown.words[st.cal_valid:] for st in todo]
        cal = iter(self._calibrated([w for ws in words for w in ws]))
        for st, ws in zip(todo, words):
            st.cal[st.cal_valid:] = [next(cal) for _ in ws]
            st.cal_valid = len(st.cal)

    def _refresh(self, batch: _Batch, streams: list[_Stream]) -> tuple[np.ndarray, np.ndarray]:
        """Tokens (B,) and trailing blank frames (B,) of every row's best hypothesis, as int64 host arrays;
        brings the host copy of the best hypothesis (:attr:`_Stream.shown`) of streams with partials up to date.

        Per method: one host transfer of the lengths and trailing blanks, then one of only the tokens the
        shown copies lack (an ``append_only`` search: those past the copy's length; otherwise the whole best
        hypothesis, compared with the copy on the host); a stream whose hypothesis did not change costs no
        Python beyond its row of these arrays."""
        b = len(streams)
        n_all = np.zeros(b, np.int64)
        tb_all = np.zeros(b, np.int64)
        for method, (rows, state) in batch.groups.items():
            search = self.searches[method]
            rl = rows.tolist()
            slots = search.best_slots(state)
            if slots is None:  # host-side hypotheses: every one at once
                outs = search.best(state)
                n_all[rl] = [len(h.tokens) for h in outs]
                tb_all[rl] = search.trailing_blanks(state).tolist()
                for row, hyp in zip(rl, outs):
                    if streams[row].shown is not None:
                        self._show(streams[row], hyp.tokens, hyp.frames, hyp.confs, 0)
                continue
            buf = state.hyps
            lengths = buf.lengths.gather(1, slots[:, None])[:, 0]
            shown = [(j, streams[row]) for j, row in enumerate(rl) if streams[row].shown is not None]
            summary = [lengths, search.trailing_blanks(state).to(lengths.dtype)]
            if shown and not search.append_only:  # which best hypotheses differ from the last shown, and where
                summary += [x.to(lengths.dtype) for x in self._best_changed(batch, method, buf, slots, lengths)]
            host = torch.stack(summary).cpu().numpy()
            n, tb = host[0], host[1]
            n_all[rl], tb_all[rl] = n, tb
            if not shown:
                continue
            js = np.fromiter((j for j, _ in shown), np.int64, len(shown))
            if search.append_only:
                known = np.fromiter((len(st.shown.tokens) for _, st in shown), np.int64, len(shown))
                new = n[js]
                moved = np.flatnonzero(new != known)
                keep = np.where(new[moved] > known[moved], known[moved], 0)  # shorter: a new segment
            else:
                moved = np.flatnonzero(host[2][js])
                keep = host[3][js[moved]]  # the tokens before the first change are shown already
            if not moved.size:
                continue
            count = n[js[moved]] - keep  # (M,) new tokens of each moved row
            width = int(count.max())
            sel = torch.from_numpy(js[moved]).to(self.device)
            toks, frames, confs = buf.windows_to_host(sel, slots[sel], torch.from_numpy(keep).to(self.device), width)
            show = self._show
            for m, d, k, t, f, c in zip(moved.tolist(), count.tolist(), keep.tolist(), toks, frames, confs):
                show(shown[m][1], t[:d].tolist(), f[:d].tolist(), c[:d].tolist(), k)
        return n_all, tb_all

    @staticmethod
    def _best_changed(batch: _Batch, method: str, buf: HypBuffer, slots: Tensor, lengths: Tensor
                      ) -> tuple[Tensor, Tensor]:
        """Rows whose best hypothesis (tokens, frames or confs) differs from the one recorded in ``batch.shown``
        at the last call: (R,) bool (all rows without a record), and (R,) int64 how many of its first tokens
        are the same (0 without a record); records the current ones."""
        rows = torch.arange(slots.shape[0], device=slots.device)
        live = torch.arange(buf.capacity, device=slots.device) < lengths[:, None]  # (R, L)
        now = (lengths, *(x[rows, slots].masked_fill(~live, 0) for x in (buf.tokens, buf.frames, buf.confs)))
        before = batch.shown.get(method)
        batch.shown[method] = now
        if before is None or before[0].shape != lengths.shape:
            return torch.ones_like(lengths, dtype=torch.bool), torch.zeros_like(lengths)
        width = max(before[1].shape[1], now[1].shape[1])
        pad = [torch.nn.functional.pad(x, (0, width - x.shape[1])) for x in (*before[1:], *now[1:])]
        diff = (pad[0] != pad[3]) | (pad[1] != pad[4]) | (pad[2] != pad[5])  # (R, W)
        # past the shorter length both are zero-padded, so the prefix ends there at the latest
        first = torch.where(diff.any(1), diff.int().argmax(1), width)
        same = torch.minimum(first, torch.minimum(before[0], lengths))
        return (before[0] != lengths) | diff.any(1), same

    @staticmethod
    def _show(st: _Stream, tokens: Sequence[int], frames: Sequence[int], confs: Sequence[float], keep: int) -> None:
        """Make the stream's shown hypothesis ``shown[:keep] + (tokens, frames, confs)``; only the part past
        what it already holds is re-read (``keep`` grows to the common prefix)."""
        sh = st.shown
        n = len(sh.tokens)
        if keep == n:  # the held hypothesis grows (or stays)
            if tokens:
                st.cal_valid = min(st.cal_valid, sh.update(tokens, frames, confs, keep))
                st.stale = True
            return
        tokens, frames, confs = list(tokens), list(frames), list(confs)
        if keep + len(tokens) == n and sh.tokens[keep:] == tokens and sh.frames[keep:] == frames \
                and sh.confs[keep:] == confs:
            return  # unchanged
        # the longest common prefix past ``keep`` (slice comparisons, a binary search: no Python per token)
        lo, hi = 0, min(len(tokens), n - keep)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sh.tokens[keep:keep + mid] == tokens[:mid] and sh.frames[keep:keep + mid] == frames[:mid] \
                    and sh.confs[keep:keep + mid] == confs[:mid]:
                lo = mid
            else:
                hi = mid - 1
        p = lo
        st.cal_valid = min(st.cal_valid, sh.update(tokens[p:], frames[p:], confs[p:], keep + p))
        st.stale = True

    def _partial_of(self, st: _Stream) -> tuple[str, tuple[Word, ...], tuple[int, ...], tuple[int, ...],
                                                   tuple[float, ...]]:
        """(text, words, tokens, frames, confs) of the stream's next Partial: its shown hypothesis, after what
        was carried over its pauses (:meth:`_joined`); its calibrated words as :meth:`_calibrate_partials` left
        them."""
        if st.stale:
            st.stale = False
            sh = st.shown
            if st.carry is not None and st.carry.tokens:
                # endpointing off, after a pause: the joined hypothesis, read whole (the same again when the
                # pause only moved the words into the carry: then the same text and words)
                hyp = self._joined(st, HypOut(tuple(sh.tokens), tuple(sh.frames), tuple(sh.confs)))
                if st.partial is not None and st.partial[2:] == (hyp.tokens, hyp.frames, hyp.confs):
                    return st.partial
                st.partial = (self.tokens.decode(hyp.tokens), self._words(hyp), hyp.tokens, hyp.frames, hyp.confs)
            else:
                st.partial = (sh.text, tuple(st.cal), tuple(sh.tokens), tuple(sh.frames), tuple(sh.confs))
        return st.partial

    def _results(self, batch: _Batch) -> list[Event]:
        """Partials, endpoints and ends of streams after a decoded chunk."""
        events: list[Event] = []
        streams = [self._streams[i] for i in batch.ids]
        n, trailing = self._refresh(batch, streams)
        ends = [st.finished and st.fbank.frames_ready() == 0 for st in streams]  # no audio left: the stream ends
        self._calibrate_partials([st for st, done in zip(streams, ends) if st.shown is not None and not done])
        seg_frames = np.fromiter((st.frames_done - st.search_start for st in streams), np.int64, len(streams))
        rules = self.endpointer.check_arrays(trailing, seg_frames, n)
        close: list[tuple[int, str]] = []
        fs = self.frame_shift_s
        partial_of, backlog = self._partial_of, self._backlog
        for st, rule, done in zip(streams, rules, ends):
            if st.shown is not None and not done:  # (text, words, tokens, frames, confs), then its times
                events.append(Partial(st.id, st.segment, *partial_of(st), st.segment_start * fs, st.frames_done * fs,
                                      backlog(st)))
            if done:
                close.append((st.id, "eos"))
            elif st.reset_at is not None and st.fbank.frames_taken >= st.reset_at:
                close.append((st.id, "reset"))
            elif rule is not None:
                close.append((st.id, f"endpoint:{rule}" if st.opts.endpointing else "pause"))
        if close:
            events += self._finalize(batch, close, self._best_of(batch, [sid for sid, _ in close], final=True))
        return events
