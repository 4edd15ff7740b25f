"""The Recognizer's trained wake models (speech embedding heads): built from ``kws.wake_models``,
scored per step on the 16 kHz audio of the streams that ask for them, their detections as events.

With ``kws.verify`` every model fires at ``verify_wake_threshold``, and each detection is held until the
stream has ``verify_after_s`` of audio after it (or ends), then emitted with ``verification: pending`` and
the audio around it (:class:`~streamd.events.WakeCheck`, :func:`~streamd.model.wake.verify_span`) for the
second pass to verify (:meth:`streamd.second_pass.rescore.SecondPass.verify`), at the model file's own
verifier threshold where it has one (:mod:`streamd.train.wake_verifier`), else ``verify_gap``."""

from __future__ import annotations

import dataclasses
import logging
from typing import Collection

import numpy as np
import torch
from torch import Tensor

from ..decode.kws import Detection, KwsDetector, KwsState, aligned_span
from ..events import Event, WakeCheck, WakeWord
from ..model.wake import verify_clip, verify_span
from ..options import StreamOptions
from .state import _Batch, _Stream

log = logging.getLogger("streamd.engine")


class WakeModels:
    """Part of :class:`~streamd.engine.Recognizer`: its trained wake models."""


    def _init_wake_models(self, kcfg) -> None:
        """Load ``kws.wake_models`` (:mod:`streamd.model.wake`): one speech embedding per stream, every model
        on it, and a detector over their scores (each model's threshold, ``refractory_s``, no smoothing)."""
        self.wake_scorer = None
        self.wake_detector: KwsDetector | None = None
        self.wake_stats: dict[str, dict[str, int]] = {}
        if not kcfg.wake_models:
            return
        from ..model.wake import WakeScorer, load_wake_model
        models = []
        for i, path in enumerate(kcfg.wake_models):
            try:
                models.append(load_wake_model(path))
            except (OSError, ValueError) as e:
                raise ValueError(f"kws.wake_models[{i}]: {e}") from None
        head = {k.casefold() for k in self.keywords}
        for m in models:
            if m.keyword.casefold() in head:
                raise ValueError(f"kws.wake_models: {m.path} spots {m.keyword!r}, the model's own KWS keyword "
                                 "(its events would come twice)")
        self.wake_scorer = WakeScorer(models, device=self.device, precision=kcfg.embedding_precision)
        self.wake_verify = bool(kcfg.verify)
        thr = [kcfg.verify_wake_threshold if self.wake_verify else m.threshold for m in models]
        wcfg = dataclasses.replace(kcfg, thresholds={m.keyword: t for m, t in zip(models, thr)}, smoothing_frames=1,
                                   wake_words=(), wake_models=(), verify=False)
        self.wake_detector = KwsDetector(self.wake_scorer.keywords, wcfg, self.wake_scorer.frame_shift_s)
        self._wake_thr = np.array(thr)
        self._wake_own = {m.keyword: m.threshold for m in models}
        self._wake_gap = {m.keyword: kcfg.verify_gap if m.verify_gap is None else m.verify_gap for m in models}
        for m in models:  # a file's own threshold holds for the detections it was measured on
            made_at = (m.info.get("verifier") or {}).get("wake_threshold")
            if self.wake_verify and m.verify_gap is not None and made_at not in (None, kcfg.verify_wake_threshold):
                log.warning("wake model %s: its verifier threshold was measured at wake threshold %s, the config "
                            "fires at %s (kws.verify_wake_threshold)", m.path, made_at, kcfg.verify_wake_threshold)
        self.wake_stats = {m.keyword: {"detections": 0, "suppressed": 0} for m in models}

    def _wake_mask(self, opts: StreamOptions) -> Tensor | None:
        """(K,) bool: the loaded wake models a stream scores (None: none)."""
        if self.wake_scorer is None or not opts.keywords or not self.config.kws.enabled:
            return None
        names = self.wake_scorer.keywords
        if opts.wake_models is None:
            return torch.ones(len(names), dtype=torch.bool, device=self.device)
        known = {n.casefold(): i for i, n in enumerate(names)}
        on = torch.zeros(len(names), dtype=torch.bool)
        for i, k in enumerate(opts.wake_models):
            j = known.get(k.casefold())
            if j is None:
                raise ValueError(f"wake_models[{i}] {k!r}: no such wake model loaded (loaded: {list(names)})")
            on[j] = True
        return on.to(self.device) if bool(on.any()) else None

    def _wake_step(self, ids: Collection[int]) -> list[Event]:
        """Score the pending audio of streams ``ids`` with every wake model (one embedding and one head call
        for the whole batch) and run the detector; WakeWord events with the model's score (with
        ``kws.verify``: the held detections whose audio is complete, ``pending``).  Firings the refractory
        period holds back are counted in :attr:`wake_stats` (``suppressed``)."""
        events = self._wake_score(ids)
        return events + self._wake_release(ids) if self.wake_verify else events

    def _wake_score(self, ids: Collection[int]) -> list[Event]:
        streams = [self._streams[i] for i in ids if i in self._streams]
        streams = [st for st in streams if st.wake_emb is not None and st.wake_audio]
        if not streams:
            return []
        chunks = [torch.from_numpy(np.concatenate(st.wake_audio)).to(self.device) for st in streams]
        for st in streams:
            st.wake_audio = []
        scores = self.wake_scorer.stream([st.wake_emb for st in streams], chunks)       # B x (T_b, K)
        lens = [s.shape[0] for s in scores]
        if not max(lens):
            return []
        k = self.wake_scorer.num_models
        padded = torch.zeros(len(streams), max(lens), k, device=self.device)
        for j, (st, sc) in enumerate(zip(streams, scores)):
            padded[j, :sc.shape[0]] = sc * st.wake_on
        state = KwsState.cat([st.wake_det for st in streams])
        offsets = [st.wake_emb.scored - n for st, n in zip(streams, lens)]   # each stream's first new score
        new, dets = self.wake_detector.step(state, padded, torch.tensor(lens, device=self.device),
                                            torch.tensor(offsets, device=self.device))
        host = padded.cpu().numpy()
        fired = {(d.row, d.frame, d.keyword) for d in dets}
        names = self.wake_scorer.keywords
        for j, st in enumerate(streams):
            st.wake_det = new.select([j])
            above = host[j, :lens[j]] >= self._wake_thr                                  # (T, K)
            prev = np.concatenate([st.wake_above[None], above[:-1]]) if lens[j] else above
            st.wake_above = above[-1] if lens[j] else st.wake_above
            for t, m in zip(*np.nonzero(above & ~prev)):
                if (j, offsets[j] + int(t), names[m]) not in fired:
                    self.wake_stats[names[m]]["suppressed"] += 1
        events: list[Event] = []
        for d in dets:
            self.wake_stats[d.keyword]["detections"] += 1
            ev = WakeWord(streams[d.row].id, d.keyword, d.score, d.start, d.end)
            if self.wake_verify:
                streams[d.row].wake_held.append(ev)
            else:
                events.append(ev)
        return events

    def _wake_release(self, ids: Collection[int]) -> list[Event]:
        """``kws.verify``: the held detections of streams ``ids`` whose audio after the keyword has come (all of
        them once the stream ended and its audio is scored), ``pending`` with their audio; then drops the
        kept audio no detection can need any more."""
        k = self.config.kws
        out: list[Event] = []
        for sid in ids:
            st = self._streams.get(sid)
            if st is None or st.wake_kept is None:
                continue
            ended = st.finished and not st.wake_audio
            held = []
            for ev in st.wake_held:
                if verify_span(ev.end, k.verify_before_s, k.verify_after_s)[1] <= st.wake_in or ended:
                    out.append(self._wake_pending(st, ev))
                else:
                    held.append(ev)
            st.wake_held = held
            earliest = min([ev.end for ev in held] + [(st.wake_emb.scored + 1) * self.wake_scorer.frame_shift_s])
            lo = verify_span(earliest, k.verify_before_s, k.verify_after_s)[0]
            while st.wake_kept and st.wake_kept_from + st.wake_kept[0].size <= lo:
                st.wake_kept_from += st.wake_kept.pop(0).size
        return out

    def _wake_pending(self, st: _Stream, ev: WakeWord) -> WakeWord:
        """``ev`` to be verified, with the kept samples around it (:func:`~streamd.model.wake.verify_clip`)."""
        k = self.config.kws
        kept = np.concatenate(st.wake_kept) if st.wake_kept else np.zeros(0, np.float32)
        clip = verify_clip(kept, ev.end, k.verify_before_s, k.verify_after_s, st.wake_kept_from)
        check = WakeCheck(np.array(clip, dtype=np.float32), self._wake_gap[ev.keyword],
                          ev.score >= self._wake_own[ev.keyword])
        return dataclasses.replace(ev, verification="pending", check=check)


    def _wake_events(self, batch: _Batch, dets: list[Detection]) -> list[Event]:
        """One WakeWord per detection, spanning the keyword as the stream's best hypothesis aligned it
        (:func:`~streamd.decode.kws.aligned_span`), else the head's span."""
        if not dets:
            return []
        kws_ids = [batch.ids[row] for row in batch.kws_rows.tolist()]
        best = self._best_of(batch, sorted({kws_ids[d.row] for d in dets}))
        events: list[Event] = []
        for d in dets:
            sid = kws_ids[d.row]
            earliest = self.kws.earliest_start_frame(d.frame) * self.frame_shift_s
            span = aligned_span(d.keyword, self._words(best[sid]), earliest, d.end)
            start, end = span if span is not None else (d.start, d.end)
            events.append(WakeWord(sid, d.keyword, d.score, start, end))
        return events
