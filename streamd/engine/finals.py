"""How a segment closes: endpoints and resets flushed and finalized, the Final with its words,
confidence, n-best and second-pass audio."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ..audio.fbank import num_frames
from ..decode.hyps import HypOut
from ..events import Done, Event, Final
from .results import distinct_alternatives
from .state import _Batch, _Stream


class Finals:
    """Part of :class:`~streamd.engine.Recognizer`: closing segments into Finals."""

    def _close_segments(self, ids: tuple[int, ...]) -> list[Event]:
        """Streams with no chunk to decode: end them (eos) or close a requested segment (reset)."""
        ids = tuple(sid for sid in ids if self._streams[sid].finished
                    or self._streams[sid].fbank.frames_taken >= self._streams[sid].reset_at)
        if not ids:
            return []
        batch = self._gather(ids)
        best = self._best_of(batch, ids, final=True)
        close = [(sid, "eos" if self._streams[sid].finished else "reset") for sid in ids]
        return self._finalize(batch, close, best)

    def _reset_flush(self, batch: _Batch, sids: list[int]) -> dict[int, HypOut]:
        """Best final hypothesis of each stream in ``sids`` (closing at a ``reset``) after the end-of-stream
        flush, decoded from copies of its encoder and search states: the last word is finished as at the end
        of a stream, while the stream itself goes on from its own state (it never sees the flush).

        The flush frames are those :meth:`finish` adds after audio that ends with a full frame: the last
        frame's overlap (``frame_length - frame_shift`` samples, silent here) then :attr:`tail_padding`."""
        rows = torch.tensor([batch.ids.index(sid) for sid in sids], device=self.device)
        fc = self.model.cfg.fbank
        sig = np.concatenate([np.zeros(fc.frame_length - fc.frame_shift, np.float32), self.tail_padding])
        total = num_frames(sig.size, fc.frame_length, fc.frame_shift)
        width = self.window_samples
        enc_cache = batch.enc.select(rows)
        states = {}
        for method, (mrows, state) in batch.groups.items():
            ml = mrows.tolist()
            pairs = [(k, ml.index(row)) for k, row in enumerate(rows.tolist()) if row in ml]
            if pairs:  # (row among sids, row of the method's state)
                states[method] = (torch.tensor([k for k, _ in pairs], device=self.device),
                                  state.select(torch.tensor([j for _, j in pairs], device=self.device)))
        offsets = torch.tensor([self._streams[sid].frames_done for sid in sids], device=self.device)
        for first in range(0, total, self.chunk_fbank):
            piece = sig[first * fc.frame_shift: first * fc.frame_shift + width]
            wav = torch.zeros(len(sids), width, device=self.device)
            wav[:, : piece.size] = torch.from_numpy(piece).to(self.device)
            lengths = torch.full((len(sids),), min(self.chunk_fbank, total - first), device=self.device)
            enc, enc_len, enc_cache = self.model.encoder.forward_chunk(self.fbank(wav), lengths, enc_cache)
            heads = self.model.heads(enc)
            for method, (ks, state) in states.items():
                search = self.searches[method]
                states[method] = (ks, search.step(state, getattr(heads, search.reads)[ks], enc_len[ks], offsets[ks]))
            offsets = offsets + enc_len
        out: dict[int, HypOut] = {}
        for method, (ks, state) in states.items():
            for k, hyp in zip(ks.tolist(), self.searches[method].best(state, final=True)):
                out[sids[k]] = hyp
        return out

    def _finalize(self, batch: _Batch, close: list[tuple[int, str]], best: dict[int, HypOut]) -> list[Event]:
        resets = [sid for sid, reason in close if reason == "reset"]
        if resets and self.tail_padding.size:
            best = {**best, **self._reset_flush(batch, resets)}
        events: list[Event] = []
        reset_rows: list[int] = []
        ended: list[int] = []
        nbests = self._nbests(batch, [sid for sid, reason in close if reason != "pause"])
        for sid, reason in close:
            st = self._streams[sid]
            st.search_start = st.frames_done
            if st.shown is not None:  # the search starts afresh (or the stream ends)
                st.shown.clear()
                st.cal, st.cal_valid, st.stale = [], 0, True
            if reason == "pause":  # endpointing off: the search starts afresh, the segment goes on
                st.carry = self._joined(st, best[sid])
                reset_rows.append(batch.ids.index(sid))
                continue
            sub_text = self.tokens.decode(best[sid].tokens)
            hyp = self._joined(st, best[sid])
            text = self.tokens.decode(hyp.tokens)
            st.reset_at = None
            if text or reason in ("eos", "reset"):
                alts, scores = self._alternatives(sid, sub_text, nbests)
                if st.carry is not None and st.carry.tokens:  # n-best of the part after the last pause
                    head = self.tokens.decode(st.carry.tokens)
                    alts = tuple(t for t in (f"{head} {a}".strip() for a in alts) if t != text)
                    scores = tuple(sc + st.carry.score for sc in scores[:1 + len(alts)])
                end = st.frames_done
                if st.end_frame is not None or reason == "reset":  # the flush is not the stream's time:
                    end = max(st.segment_start, min(end, st.end_frame or end))  # what it emits ends the audio
                    hyp = dataclasses.replace(hyp, frames=tuple(min(f, end - 1) for f in hyp.frames))
                second: dict[str, Any] = {}
                if st.audio is not None:
                    audio = self._segment_audio(st)
                    second = {"first_pass_text": text, "audio": audio, "sample_rate": st.opts.sample_rate,
                              "second_pass": "pending" if audio is not None else "skipped_too_long"}
                events.append(Final(sid, st.segment, text, self._words(hyp), st.segment_start * self.frame_shift_s,
                                    end * self.frame_shift_s, hyp.tokens, hyp.frames, hyp.confs, reason, alts, scores,
                                    **second))
                st.segment += 1
            elif st.audio is not None:  # an endpoint with nothing decoded: its audio is not needed
                st.segment_start = st.frames_done
                self._segment_audio(st)
            st.carry = None
            st.segment_start = st.frames_done
            if reason == "eos":
                ended.append(sid)
            else:
                reset_rows.append(batch.ids.index(sid))
        batch.shown.clear()  # the shown copies of closed segments were cleared
        if reset_rows:
            for method, (rows, state) in batch.groups.items():
                mask = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
                rl = rows.tolist()
                for r in reset_rows:
                    if r in rl:
                        mask[rl.index(r)] = True
                if bool(mask.any()):
                    batch.groups[method] = (rows, self.searches[method].reset(state, mask))
            if batch.wake_rows is not None:  # a recognizer endpoint also starts a new keyword segment
                rl = batch.wake_rows.tolist()
                mask = torch.tensor([r in reset_rows for r in rl], dtype=torch.bool, device=self.device)
                if bool(mask.any()):
                    batch.wake = self.keyword_search.reset(batch.wake, mask)
        for sid in ended:
            st = self._streams[sid]
            events.append(Done(sid, st.samples_in / st.opts.sample_rate))
            self.close(sid)
        return events

    def _joined(self, st: _Stream, hyp: HypOut) -> HypOut:
        """The open segment's hypothesis: what was carried over its pauses (endpointing off), then ``hyp``.

        A character table's word separator joins the two (the search starts a new word after a pause);
        it takes the frame of the first token after it and confidence 1."""
        c = st.carry
        if c is None or not c.tokens:
            return hyp
        if not hyp.tokens:
            return HypOut(c.tokens, c.frames, c.confs, c.score + hyp.score)
        sep = self.tokens.separator if self.tokens.kind == "char" else None
        mid = (self.tokens.id(sep),) if sep is not None else ()
        return HypOut(c.tokens + mid + hyp.tokens, c.frames + hyp.frames[:len(mid)] + hyp.frames,
                      c.confs + (1.0,) * len(mid) + hyp.confs, c.score + hyp.score)

    def _nbests(self, batch: _Batch, sids: list[int]) -> dict[int, list[HypOut]]:
        """Each stream's n-best as complete segments (up to its beam, best first), for the streams ``sids`` of
        the batch whose search keeps several hypotheses: one ``nbest`` call per method, not one per stream."""
        out: dict[int, list[HypOut]] = {}
        for method, (rows, state) in batch.groups.items():
            search = self.searches[method]
            if not search.several:
                continue
            pos = {batch.ids[row]: j for j, row in enumerate(rows.tolist())}  # stream id -> its row in the group
            mine = [(sid, pos[sid]) for sid in sids if sid in pos]
            if not mine:
                continue
            beams = [self._streams[sid].opts.beam for sid, _ in mine]
            sub = state.select(torch.tensor([j for _, j in mine], device=self.device))
            for (sid, _), beam, nb in zip(mine, beams, search.nbest(sub, max(beams), final=True)):
                out[sid] = nb[:beam]  # the best ``beam`` of the valid ones, as nbest(.., beam) gives them
        return out

    def _alternatives(self, sid: int, text: str, nbests: dict[int, list[HypOut]]
                      ) -> tuple[tuple[str, ...], tuple[float, ...]]:
        """A Final's alternatives and scores from the stream's n-best (:meth:`_nbests`; none for a search with
        one hypothesis)."""
        if sid not in nbests:
            return (), ()
        return distinct_alternatives(text, [(self.tokens.decode(h.tokens), float(h.score)) for h in nbests[sid]])
