"""Word and sentence error rates of a set, in total, per voice and per source (:mod:`streamd.scoring.metrics`)."""

from __future__ import annotations

from typing import Sequence

from streamd.scoring.metrics import WordErrorCounts, align_words, normalize_words

from .sets import EvalEntry

__all__ = ["wer_figures"]


def wer_figures(entries: Sequence[EvalEntry], hyps: Sequence[str]) -> dict:
    """WER, SER, exact-match rate and error counts of ``hyps`` (one per entry) against the references.

    The totals, then ``per_voice`` and ``per_source`` (entries with a ``source``) with the same figures and
    their utterance counts.
    """
    tot = WordErrorCounts()
    voices: dict[str, WordErrorCounts] = {}
    sources: dict[str, WordErrorCounts] = {}
    for e, hyp in zip(entries, hyps):
        ref = normalize_words(e.text)
        a = align_words(ref, normalize_words(hyp))
        groups = [tot, voices.setdefault(e.voice, WordErrorCounts())]
        if e.source:
            groups.append(sources.setdefault(e.source, WordErrorCounts()))
        for acc in groups:
            acc.add(len(ref), a)

    def rates(acc: WordErrorCounts) -> dict:
        return {"wer": acc.wer, "ser": acc.ser, "exact": None if acc.ser is None else 1.0 - acc.ser,
                "ref_words": acc.words, "sub": acc.subs, "del": acc.dels, "ins": acc.ins, "hits": acc.hits,
                "utterances": acc.utts}

    res = rates(tot)
    res.pop("utterances")
    res["per_voice"] = {v: rates(acc) for v, acc in sorted(voices.items())}
    res["per_source"] = {v: rates(acc) for v, acc in sorted(sources.items())}
    return res
