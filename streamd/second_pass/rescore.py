"""The second pass over one finished segment: its audio decoded again by a real-speech model.

:class:`SecondPass` turns an engine :class:`~streamd.events.Final` whose ``second_pass`` is ``pending``
(its segment's 16 kHz samples in ``audio``) into the Final a client gets:

* ``pass_no`` 2, ``second_pass`` ``done``: the text is the model's, written English turned into the
  model's spoken form word by word (:func:`streamd.text.normalize.readings`: lower case, numbers
  spelled, punctuation gone; a digit string read as the first pass heard it), so that it reads like the
  first pass; ``first_pass_text`` keeps the
  streaming model's text; the words are dated on the stream's time axis (:mod:`.align`) and carry
  ``conf`` = the calibrated probability that the word is right, from the model's word probability
  (``conf_raw``: its tokens' softmax probabilities aggregated), the first pass's confidence in the segment,
  how many words each pass wrote for it and the stream's input rate (:mod:`.confidence`);
* ``pass_no`` 1 with ``second_pass`` ``failed`` when the model raised (logged), so a final is never lost;
  ``skipped_no_speech`` when the first pass heard no words (a segment of silence or noise at a reset or
  the end of the stream: a real-speech model may write words into it; not decoded);
  ``first_pass_preferred`` when ``select`` (``learned`` or ``confidence``) keeps the first pass
  (:meth:`SecondPass.choose`).

A segment longer than ``window_s`` (or the model's own window) is decoded in pieces cut at pauses between
the first pass's words (:func:`.align.cut_points`), and the pieces' words are joined.  A segment that an
endpoint split from the one before it (a pause inside a sentence) is heard in its context: a model that
takes one (Moonshine) decodes the previous segment's audio (up to ``context_s``) and this one together,
forced through the tokens it wrote for the previous one, and writes only this segment's words.  Finals of
one stream must come in order (:class:`~.worker.FinalGate` keeps them so).  Synchronous: the
server runs it in :class:`streamd.second_pass.worker.SecondPassWorker`'s thread, ``transcribe`` / ``eval``
call it in line.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from typing import Sequence

import numpy as np

from streamd.audio.resample import resample
from streamd.config import SecondPassConfig
from streamd.decode.calibration import Calibration
from streamd.events import Event, Final, WakeWord, Word
from streamd.text.normalize import readings

from .align import anchor_times, cut_points, offset_times
from .choice import margin_prefers_first
from .confidence import SecondPassCalibration, narrowband
from .models import Context, Item, Recognized, RecognizedWord, WordRecognizer, keyword_check, keyword_gap

__all__ = ["SecondPass", "fallback", "pending", "spoken_words"]

log = logging.getLogger("streamd.second_pass")

RATE = 16000


def fallback(event: Final | WakeWord, why: str) -> Final | WakeWord:
    """What a client gets when the second pass does not hear a pending event: the engine's Final kept as
    the client's (pass 1), saying ``why``; a pending wake detection with ``verification`` ``why`` when the
    model's score reaches its own threshold (``check.standalone``), else ``unverified`` (not delivered)."""
    if isinstance(event, WakeWord):
        ok = event.check is not None and event.check.standalone
        return dataclasses.replace(event, verification=why if ok else "unverified", check=None)
    return dataclasses.replace(event, pass_no=1, second_pass=why, audio=None,
                               first_pass_text=event.first_pass_text if event.first_pass_text is not None
                               else event.text)


def pending(event: Event) -> bool:
    """``event`` waits for the second pass: a Final with ``second_pass`` ``pending``, or a wake detection
    with ``verification`` ``pending`` (``kws.verify``)."""
    return (isinstance(event, Final) and event.second_pass == "pending") or (
        isinstance(event, WakeWord) and event.verification == "pending")


def spoken_words(words: Sequence[RecognizedWord], heard: Sequence[str] = ()) -> list[tuple[str, int]]:
    """The model's written words in spoken form: (spoken word, index of the written word it came from);
    one written word may give several ("$5" -> "five dollars") or none (a lone "-").  A written word with
    several readings (:func:`streamd.text.normalize.readings`: "2648" said as a number or digit by digit)
    takes the one that ``heard`` (the first pass's words of the segment: what the streaming model heard)
    supports best (score: its words heard - its words not heard); the usual reading when no reading has a
    word heard, or on a tie."""
    bag = collections.Counter(heard)

    def support(r: str) -> float:  # -inf for a reading with no word heard: it ties with the usual one
        ws = r.split()
        hits = sum((collections.Counter(ws) & bag).values())
        return 2 * hits - len(ws) if hits else -math.inf

    out = []
    for i, w in enumerate(words):
        options = readings(w.word)
        best = max(range(len(options)), key=lambda k: (support(options[k]), -k))
        out += [(s, i) for s in options[best].split()]
    return out


CONTEXT_STREAMS = 4096
"""Streams whose last segment :class:`SecondPass` keeps as a context at most (the oldest are dropped)."""


@dataclasses.dataclass(frozen=True)
class _Before:
    """A stream's previous segment, as the next one's context: its number, end, (M,) float32 audio, tokens."""

    segment: int
    end: float
    audio: np.ndarray
    ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _Piece:
    """One model call's worth of a segment: (M,) float32 audio, its context, the first pass's words in it (as
    text: the rival; and as (word, start, end)), and its span on the stream's time axis."""

    audio: np.ndarray
    context: Context | None
    rival: str
    start: float
    end: float
    inside: list[tuple[str, float, float]]


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A pending Final's pieces; ``audio`` (N,) float32 its whole segment; ``whole``: one piece (a context)."""

    final: Final
    audio: np.ndarray
    whole: bool
    pieces: list[_Piece]


class SecondPass:
    """A real-speech model over finished segments; ``calibration`` maps its word probability (with what the
    segment says about it) to P(right)."""

    def __init__(self, model: WordRecognizer, cfg: SecondPassConfig | None = None,
                 calibration: SecondPassCalibration | Calibration | None = None, hotwords: Sequence[str] = (),
                 first_calibrated: bool = False):
        """calibration: a :class:`~.confidence.SecondPassCalibration`, or one Calibration for every word.
        first_calibrated: the first pass's word ``conf`` is a calibrated probability too (the engine's model
        carries a calibration), so ``select: confidence`` may compare the two passes."""
        self.model = model
        self.first_calibrated = first_calibrated
        self.cfg = cfg or SecondPassConfig(model=getattr(model, "name", "model"))
        self.calibration = (SecondPassCalibration.of_map(calibration) if isinstance(calibration, Calibration)
                            else calibration)
        self.hotwords = tuple(hotwords)
        # the model's window holds warp x its length of the segment's audio once warped
        self.window_s = min(self.cfg.window_s,
                            float(getattr(model, "window_s", self.cfg.window_s)) * min(1.0, self.cfg.warp))
        self._context: collections.OrderedDict[int, _Before] = collections.OrderedDict()

    def apply(self, final: Final, choose: bool = True) -> Final:
        """The client's Final for the engine's ``final`` (unchanged unless its second pass is ``pending``);
        ``choose=False``: the second pass's Final whatever ``select`` says (evaluation)."""
        if final.second_pass != "pending":
            return final
        before = self._context.pop(final.stream, None)
        if not final.text:  # the first pass heard no words: no second model writes words into silence or noise
            return fallback(final, "skipped_no_speech")
        try:
            return self._decode(final, choose, before)
        except Exception:  # noqa: BLE001 - the first pass stands; the failure is logged
            log.exception("second pass failed for stream %d segment %d", final.stream, final.segment)
            return fallback(final, "failed")

    def _context_for(self, final: Final, before: _Before | None, duration: float) -> Context | None:
        """The context the model hears before ``final``'s audio: the stream's previous segment when the
        model takes one, that segment ended at an endpoint right where this one starts, and both fit
        ``context_s`` and the model's window."""
        if before is None or not getattr(self.model, "takes_context", False) or not before.ids:
            return None
        seconds = before.audio.size / RATE
        if (before.segment != final.segment - 1 or abs(before.end - final.start) > 0.1
                or seconds > self.cfg.context_s or seconds + duration > self.window_s):
            return None
        return Context(before.audio, before.ids)

    def _remember(self, final: Final, audio: np.ndarray, rec: Recognized | None) -> None:
        """Keep ``final``'s audio and tokens as the next segment's context (after an endpoint only: a reset or
        the end of the stream starts anew); at most :data:`CONTEXT_STREAMS` streams, the oldest dropped."""
        if rec is None or not rec.ids or not final.reason.startswith("endpoint") or self.cfg.context_s <= 0:
            return
        self._context[final.stream] = _Before(final.segment, final.end, audio, rec.ids)
        while len(self._context) > CONTEXT_STREAMS:
            self._context.popitem(last=False)

    def prefers_first(self, first: Sequence[Word], second: Sequence[Word], margin: float | None = None,
                      sample_rate: int | None = None, rival_gap: float | None = None) -> bool:
        """Keep the first pass's words (``select`` ``learned`` or ``confidence``; ``always`` never does): when it
        has words and the second pass none; otherwise only when both have words and both confidences are
        calibrated probabilities, and then, with ``select: learned`` and a stored segment choice
        (:class:`~.choice.SegmentChoice`, ``margin`` None), when that rule does not expect the second pass to
        have fewer errors; else (``select: confidence``, no stored choice, or an explicit ``margin``) when the
        first's mean ``conf`` exceeds the second's by over ``margin`` (default ``select_margin``).
        ``sample_rate``: the stream's declared input rate (the rule's ``narrowband``); ``rival_gap``: the
        second-pass Final's (the rule's ``rescore``)."""
        if self.cfg.select == "always" or not first:
            return False
        if not second:  # the second model heard nothing where the first pass heard words: no evidence against them
            return True
        if not (self.first_calibrated and self.calibration is not None):
            return False
        c1, c2 = [w.conf for w in first], [w.conf for w in second]
        choice = self.calibration.choice
        if self.cfg.select == "learned" and choice is not None and margin is None:
            return not choice.second_better(c1, c2, narrowband(sample_rate), rival_gap)
        return margin_prefers_first(c1, c2, self.cfg.select_margin if margin is None else margin)

    def apply_events(self, events: Sequence[Event]) -> list[Event]:
        """A stream's events with every pending Final replaced by :meth:`apply`'s and every pending wake
        detection verified, those that do not stand left out (``transcribe``, ``eval``)."""
        out = [self.verify(e) if isinstance(e, WakeWord) else self.apply(e) if isinstance(e, Final) else e
               for e in events]
        return [e for e in out if not isinstance(e, WakeWord) or e.stands]

    def apply_all(self, events: Sequence[Final | WakeWord], choose: bool = True) -> list[Final | WakeWord]:
        """:meth:`apply` over several segments, :meth:`verify` over wake detections (one worker round), in order.
        A model that :attr:`batches` reads them in batches: every pending event of the round in one call,
        except that a stream's later segment waits for the next call (it may hear the one before as its
        context); each event comes out as :meth:`apply` / :meth:`verify` would make it alone.  ``choose`` as
        :meth:`apply`'s."""
        if not self.batches:
            return [self.verify(e) if isinstance(e, WakeWord) else self.apply(e, choose) for e in events]
        out = list(events)
        todo = list(range(len(out)))
        while todo:
            wave: list[int] = []
            later: list[int] = []
            streams: set[int] = set()
            for i in todo:
                (later if out[i].stream in streams else wave).append(i)
                streams.add(out[i].stream)
            self._apply_batch(out, wave, choose)
            todo = later
        return out

    @property
    def batches(self) -> bool:
        """The model reads several pieces in one batch (``recognize_many``: Moonshine with its bias input)."""
        return bool(getattr(self.model, "batches", False))

    def _apply_batch(self, out: list[Final | WakeWord], idx: Sequence[int], choose: bool = True) -> None:
        """:meth:`apply` / :meth:`verify` of ``out[i]`` for each ``i`` in ``idx`` (at most one segment of a
        stream), every piece and wake check in one ``recognize_many`` call; written back into ``out``.  When
        that call raises, each event is heard on its own, so one bad segment fails only itself."""
        plans: dict[int, _Plan] = {}
        items: list[tuple[int, Item]] = []  # (index into out, what the model hears)
        for i in idx:
            e = out[i]
            if isinstance(e, WakeWord):
                if e.verification == "pending" and e.check is not None:
                    items.append((i, keyword_check(e.check.audio, e.keyword)))
                continue
            if e.second_pass != "pending":
                continue
            before = self._context.pop(e.stream, None)
            if not e.text:
                out[i] = fallback(e, "skipped_no_speech")
                continue
            try:
                plans[i] = self._plan(e, before)
            except Exception:  # noqa: BLE001 - the first pass stands; the failure is logged
                log.exception("second pass failed for stream %d segment %d", e.stream, e.segment)
                out[i] = fallback(e, "failed")
                continue
            items += [(i, self._model_input(p.audio, p.context, p.rival)) for p in plans[i].pieces]
        try:
            recs = self.model.recognize_many([it for _, it in items]) if items else []
        except Exception:  # noqa: BLE001 - heard one by one below
            log.exception("second pass: a batch of %d pieces failed; each heard on its own", len(items))
            recs = None
        got: dict[int, list[Recognized]] = collections.defaultdict(list)
        for (i, _), rec in zip(items, recs or []):
            got[i].append(rec)
        for i in idx:
            e = out[i]
            if isinstance(e, WakeWord):
                if e.verification == "pending" and e.check is not None:
                    out[i] = self.verify(e) if recs is None else self._verified(e, got[i][0].rival_gap)
                continue
            if i not in plans:
                continue
            try:
                out[i] = self._finish(plans[i], got[i] if recs is not None else self._read(plans[i]), choose)
            except Exception:  # noqa: BLE001 - the first pass stands; the failure is logged
                log.exception("second pass failed for stream %d segment %d", e.stream, e.segment)
                out[i] = fallback(e, "failed")

    @property
    def scores_texts(self) -> bool:
        """The model scores given texts (Moonshine): it can verify wake detections and rescore the first pass."""
        return bool(getattr(self.model, "scores_rivals", False))

    def verify(self, wake: WakeWord) -> WakeWord:
        """A pending wake detection (``kws.verify``) heard by the model: ``verifier_gap`` = log P(keyword in
        the model's text) - log P(the model's own text) on ``wake.check.audio`` (as recorded, no hotwords;
        :func:`~.models.keyword_gap`), ``verified`` when it
        reaches ``check.min_gap``, else ``rejected``; ``failed`` (:func:`fallback`) when the model raised or
        scores no texts.  Other events come back unchanged."""
        if wake.verification != "pending" or wake.check is None:
            return wake
        try:
            gap = keyword_gap(self.model, np.asarray(wake.check.audio, dtype=np.float32), wake.keyword)
        except Exception:  # noqa: BLE001 - the detection falls back; the failure is logged
            log.exception("second pass: verifying %r of stream %d failed", wake.keyword, wake.stream)
            gap = None
        return self._verified(wake, gap)

    @staticmethod
    def _verified(wake: WakeWord, gap: float | None) -> WakeWord:
        """A pending detection given the verifier's ``gap`` (None: ``failed``)."""
        if gap is None or wake.check is None:
            return fallback(wake, "failed")
        return dataclasses.replace(wake, verification="verified" if gap >= wake.check.min_gap else "rejected",
                                   verifier_gap=float(gap), check=None)

    def _decode(self, final: Final, choose: bool = True, before: _Before | None = None) -> Final:
        plan = self._plan(final, before)
        return self._finish(plan, self._read(plan), choose)

    def _read(self, plan: _Plan) -> list[Recognized]:
        """The model's reading of each of ``plan``'s pieces, one call a piece."""
        return [self._recognize(p.audio, p.context, p.rival) for p in plan.pieces]

    def _plan(self, final: Final, before: _Before | None) -> _Plan:
        """What the model hears of ``final``: its audio cut into pieces (:func:`.align.cut_points`), each with its
        context and the first pass's words in it."""
        audio = np.asarray(final.audio if final.audio is not None else np.zeros(0, np.int16))
        x = audio.astype(np.float32) / 32768.0 if audio.dtype == np.int16 else audio.astype(np.float32)
        duration = x.size / RATE
        first = [(w.word, w.start, w.end) for w in final.words]
        gaps = [(a[2] + b[1]) / 2 - final.start for a, b in zip(first, first[1:]) if b[1] > a[2]]
        bounds = [0.0] + cut_points(duration, self.window_s, gaps) + [duration]
        whole = len(bounds) == 2  # one piece: it may hear the previous segment, and be the next one's context
        context = self._context_for(final, before, duration) if whole else None
        pieces = []
        for lo, hi in zip(bounds, bounds[1:]):
            piece = x[int(round(lo * RATE)):int(round(hi * RATE))]
            if piece.size < RATE // 20:  # under 50 ms: nothing a word fits in
                continue
            start, end = final.start + lo, min(final.start + hi, final.end)
            inside = [f for f in first if start - 1e-6 <= (f[1] + f[2]) / 2 < end + 1e-6]
            pieces.append(_Piece(piece, context, " ".join(w for w, _, _ in inside), start, end, inside))
        return _Plan(final, x, whole, pieces)

    def _finish(self, plan: _Plan, recs: Sequence[Recognized], choose: bool = True) -> Final:
        """The second pass's Final of ``plan`` from the model's reading of each of its pieces (``recs``)."""
        final = plan.final
        heard = [w.word for w in final.words]
        spoken: list[str] = []
        probs: list[float] = []
        times: list[tuple[float, float]] = []
        gap: float | None = 0.0  # the pieces' rival gaps summed (None: the model scores no texts)
        for p, rec in zip(plan.pieces, recs):
            gap = None if gap is None or rec.rival_gap is None else gap + rec.rival_gap
            sw = spoken_words(rec.words, heard)
            if rec.words and all(w.start is not None for w in rec.words):
                k = RATE / self._warp_rate  # the model's seconds of warped audio -> seconds of the segment
                span = offset_times([(w.start * k, w.end * k) for w in rec.words], p.start, p.start, p.end)
                times += [span[i] for _, i in sw]
            else:
                times += anchor_times([s for s, _ in sw], p.inside, p.start, p.end)
            spoken += [s for s, _ in sw]
            probs += [rec.words[i].prob for _, i in sw]
        last = recs[-1] if recs else None
        self._remember(final, plan.audio, last if plan.whole else None)
        conf = (self.calibration.apply(probs, [w.conf for w in final.words], final.sample_rate).tolist()
                if self.calibration is not None and probs else list(probs))
        words = tuple(Word(w, a, b, c, p) for w, (a, b), c, p in zip(spoken, times, conf, probs))
        first_text = final.first_pass_text if final.first_pass_text is not None else final.text
        two = dataclasses.replace(final, text=" ".join(spoken), words=words, pass_no=2, second_pass="done",
                                  first_pass_text=first_text, alternatives=(), scores=(), audio=None,
                                  rival_gap=gap if last is not None else None)
        return self.choose(final, two) if choose else two

    @property
    def _warp_rate(self) -> int:
        """The rate the segment is resampled to and heard at 16 kHz (``warp``: 16000 / warp samples a second)."""
        return int(round(RATE / self.cfg.warp))

    def _recognize(self, piece: np.ndarray, context: Context | None, rival: str) -> Recognized:
        """The model on ``piece`` (and ``context``), both warped by ``warp`` (1: as they are); a model that
        ``scores_rivals`` also scores ``rival`` (the first pass's words in the piece)."""
        piece, context, scored = self._model_input(piece, context, rival)
        kw = {"rival": scored} if scored is not None else {}
        if context is not None:
            return self.model.recognize(piece, self.hotwords, context, **kw)
        return self.model.recognize(piece, self.hotwords, **kw)

    def _model_input(self, piece: np.ndarray, context: Context | None, rival: str) -> Item:
        """What the model hears of a piece: ``piece`` and ``context`` warped by ``warp``, and ``rival`` when the
        model ``scores_rivals`` (else None)."""
        if self.cfg.warp != 1.0:
            piece = resample(piece, RATE, self._warp_rate)
            if context is not None:
                context = Context(resample(context.audio, RATE, self._warp_rate), context.ids)
        return piece, context, rival if getattr(self.model, "scores_rivals", False) else None

    def choose(self, final: Final, two: Final, margin: float | None = None) -> Final:
        """The client's Final from the engine's ``final`` and its second pass ``two`` (``select``; ``margin``
        replaces ``select_margin``)."""
        if two.second_pass != "done" or not self.prefers_first(final.words, two.words, margin, final.sample_rate,
                                                               two.rival_gap):
            return two
        return dataclasses.replace(final, pass_no=1, second_pass="first_pass_preferred", audio=None,
                                   first_pass_text=two.first_pass_text, second_pass_text=two.text)
