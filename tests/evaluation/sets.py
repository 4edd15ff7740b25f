"""Evaluation sets and references for the scoring tests: an edit-distance oracle, final texts, set files,
a stand-in wake event."""

from __future__ import annotations

import json

from streamd.events import Final


def levenshtein(r, h):
    """Reference edit distance (textbook recursion, memoized)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (r[i - 1] != h[j - 1]))

    return d(len(r), len(h))


def final_texts(events):
    """Per path, the text of its non-empty Finals joined (the hypothesis ``streamd eval`` scores)."""
    return {p: " ".join(e.text for e in evs if isinstance(e, Final) and e.text) for p, evs in events.items()}


def write_eval_set(path, wavs, texts, keywords=None):
    """An evaluation set (JSON lines) of ``wavs`` (in the set's folder) and their reference ``texts``: voices
    voice0/voice1 alternating, the first two files of source "real", the others "synthetic"; ``keywords`` adds
    a ``keyword`` field per line."""
    rows = []
    for i, (w, t) in enumerate(zip(wavs, texts)):
        row = {"audio": w.rsplit("/", 1)[1], "text": t, "voice": f"voice{i % 2}", "duration": 1.0,
               "source": "real" if i < 2 else "synthetic"}
        if keywords is not None:
            row["keyword"] = keywords[i]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


class Det:
    """A stand-in wake event: a keyword and a score, equal by value."""

    def __init__(self, keyword, score):
        self.keyword, self.score = keyword, score

    def __eq__(self, other):
        return (self.keyword, self.score) == (other.keyword, other.score)

    def __repr__(self):
        return f"Det({self.keyword!r}, {self.score})"
