"""streamd.decode.words: timed words from a hypothesis' tokens, frames and confidences (char and bpe tables:
the ``chars`` and ``bpe`` fixtures)."""

from __future__ import annotations

import math
import random

import pytest

from streamd.decode.confidence import aggregate
from streamd.tokens import TokenTable
from streamd.decode.words import PART, WordBuilder, token_roles, tokens_to_words
from streamd.events import Word


def test_char_words(chars: TokenTable) -> None:
    ids = chars.encode("hi  yo") + [1]  # trailing separator
    ids = [1] + ids  # leading separator
    frames = list(range(len(ids)))
    confs = [0.9, 0.8, 0.6, 0.1, 0.7, 0.5, 0.3]  # separators' confs (0.9, 0.1, 0.3) belong to no word
    words = tokens_to_words(chars, ids, frames, confs, 0.04, "min", time_offset_s=1.0)
    assert words == [
        Word("hi", 1.0 + 1 * 0.04, 1.0 + 3 * 0.04, 0.6),
        Word("yo", 1.0 + 4 * 0.04, 1.0 + 6 * 0.04, 0.5),
    ]
    assert tokens_to_words(chars, [1, 1], [0, 1], [0.5, 0.5], 0.04, "min") == []
    pipe = TokenTable(("<blk>", "|", "a", "b"))
    words = tokens_to_words(pipe, [2, 3, 1, 3], [0, 1, 2, 3], [0.5, 0.25, 1.0, 0.75], 0.04, "mean")
    assert [(w.word, w.conf) for w in words] == [("ab", 0.375), ("b", 0.75)]
    assert tokens_to_words(chars, [], [], [], 0.04, "min") == []


def test_bpe_words(bpe: TokenTable) -> None:
    toks = ["▁turn", "▁on", "▁the", "▁li", "ghts", "▁", "a", "b", "▁", "▁", "s"]
    ids = [bpe.id(t) for t in toks]
    frames = [2, 5, 5, 9, 10, 12, 13, 13, 20, 21, 30]
    confs = [0.9, 0.8, 0.7, 0.6, 0.5, 0.1, 0.4, 0.2, 0.1, 0.1, 0.3]
    shift = 0.04
    for how in ("min", "mean", "max", "prod"):
        words = tokens_to_words(bpe, ids, frames, confs, shift, how)
        assert [w.word for w in words] == ["turn", "on", "the", "lights", "ab", "s"]
        assert [w.start for w in words] == pytest.approx([2 * shift, 5 * shift, 5 * shift, 9 * shift, 13 * shift,
                                                          30 * shift])
        assert [w.end for w in words] == pytest.approx([3 * shift, 6 * shift, 6 * shift, 11 * shift, 14 * shift,
                                                        31 * shift])
        assert words[3].conf == pytest.approx(aggregate([0.6, 0.5], how))
        assert words[4].conf == pytest.approx(aggregate([0.4, 0.2], how))
    # a leading piece without "▁" opens a word; blanks are ignored
    words = tokens_to_words(bpe, [bpe.id("s"), 0, bpe.id("▁on")], [0, 1, 2], [0.5, 0.0, 0.5], 0.04, "prod")
    assert [w.word for w in words] == ["s", "on"]


def test_words_agree_with_decode(chars: TokenTable, bpe: TokenTable) -> None:
    """Property oracle: the word texts are exactly decode(tokens).split(); spans and confs follow the tokens."""
    for seed in range(6):
        rng = random.Random(seed)
        for table in (chars, bpe):
            n = rng.randint(0, 40)
            ids = [rng.randrange(len(table)) for _ in range(n)]
            frames = sorted(rng.randrange(100) for _ in range(n))
            confs = [rng.random() for _ in range(n)]
            how = rng.choice(["min", "mean", "max", "prod"])
            words = tokens_to_words(table, ids, frames, confs, 0.04, how, time_offset_s=0.5)
            assert [w.word for w in words] == table.decode(ids).split(), (seed, table.kind)
            for w in words:
                assert 0.5 <= w.start < w.end <= 0.5 + 100 * 0.04
                assert 0.0 <= w.conf <= 1.0
            for a, b in zip(words, words[1:]):
                assert a.start <= b.start
            if how == "min" and words:
                assert min(w.conf for w in words) >= min(c for i, c in zip(ids, confs) if i != table.blank_id)


def test_words_errors(chars: TokenTable) -> None:
    with pytest.raises(ValueError, match="equal lengths, got 2, 1, 2"):
        tokens_to_words(chars, [2, 3], [0], [0.5, 0.5], 0.04, "min")
    with pytest.raises(ValueError, match="frame_shift_s"):
        tokens_to_words(chars, [2], [0], [0.5], 0.0, "min")
    with pytest.raises(ValueError, match="frame_shift_s"):
        tokens_to_words(chars, [2], [0], [0.5], math.nan, "min")
    with pytest.raises(ValueError, match="'median'"):
        tokens_to_words(chars, [2], [0], [0.5], 0.04, "median")
    with pytest.raises(ValueError, match="token id 99 out of range"):
        tokens_to_words(chars, [99], [0], [0.5], 0.04, "min")


def _random_edits(wb: WordBuilder, table: TokenTable, how: str, rng: random.Random, steps: int, grow: float,
                  most: int, draw) -> None:
    """``steps`` random edits of ``wb``'s hypothesis (with probability ``grow`` only growing, else cut back to a
    random prefix first; up to ``most`` new tokens, each ``draw()``); after each, its tokens, text and words
    equal the whole hypothesis' and the words it reports unchanged are."""
    ids: list[int] = []
    frames: list[int] = []
    confs: list[float] = []
    for _ in range(steps):
        keep = len(ids) if rng.random() < grow else rng.randint(0, len(ids))
        n = rng.randint(0, most)
        new = [draw() for _ in range(n)]
        start = frames[keep - 1] if keep else 0
        new_frames = sorted(start + rng.randrange(5) for _ in range(n))
        new_confs = [rng.random() for _ in range(n)]
        before = list(wb.words)
        unchanged = wb.update(new, new_frames, new_confs, keep)
        ids, frames, confs = ids[:keep] + new, frames[:keep] + new_frames, confs[:keep] + new_confs
        assert (wb.tokens, wb.frames, wb.confs) == (ids, frames, confs)
        assert wb.text == table.decode(ids), table.kind
        assert wb.words == tokens_to_words(table, ids, frames, confs, 0.04, how), table.kind
        assert wb.words[:unchanged] == before[:unchanged]


def test_word_builder_matches_whole_hypothesis(chars: TokenTable, bpe: TokenTable) -> None:
    """The incremental text and words equal decode() and tokens_to_words() of the whole hypothesis after every
    edit: growing at the end (greedy), and cutting back to a random common prefix then growing (beam)."""
    for seed in range(40):
        rng = random.Random(seed)
        for table in (chars, bpe, TokenTable(("<blk>", " ", "▁", "a", "b"))):
            how = rng.choice(["min", "mean", "max", "prod"])
            wb = WordBuilder(table, 0.04, how)
            _random_edits(wb, table, how, rng, 25, 0.6, 6, lambda: rng.randrange(len(table)))
            wb.clear()
            assert (wb.text, wb.words, wb.tokens) == ("", [], [])


def test_word_builder_growing_words_match_whole_hypothesis(chars: TokenTable, bpe: TokenTable) -> None:
    """Long runs of tokens inside a word (the path that appends to the open word and the text) between
    boundaries, blanks and cut-backs: text and words equal the whole hypothesis' after every edit."""
    for seed in range(30):
        rng = random.Random(seed)
        for table in (chars, bpe, TokenTable(("<blk>", " ", "▁", "a", "b"))):
            roles = token_roles(table)
            parts = [i for i, r in enumerate(roles) if r == PART]
            how = rng.choice(["min", "mean", "max", "prod"])
            wb = WordBuilder(table, 0.04, how)
            _random_edits(wb, table, how, rng, 40, 0.85, 4,
                          lambda: rng.choice(parts) if rng.random() < 0.9 else rng.randrange(len(table)))


def test_word_builder_growth_reads_pieces_as_word_texts() -> None:
    """Growing the open word appends each token's text piece to the word: pieces that are not their token's text
    (a bpe piece with "▁" inside, a char table's own separator) never take that path; text and words equal the
    whole hypothesis' after every edit."""
    tables = (TokenTable(("<blk>", "▁", "▁a", "b", "c▁d", "e", "▁f")), TokenTable(("<blk>", "|", "a", "b▁", "c")))
    for seed in range(30):
        rng = random.Random(seed)
        for table in tables:
            parts = [i for i, r in enumerate(token_roles(table)) if r == PART]
            how = rng.choice(["min", "mean", "max", "prod"])
            wb = WordBuilder(table, 0.04, how)
            _random_edits(wb, table, how, rng, 40, 0.85, 4,
                          lambda: rng.choice(parts) if rng.random() < 0.8 else rng.randrange(len(table)))


def test_word_builder_errors(chars: TokenTable) -> None:
    wb = WordBuilder(chars, 0.04, "min")
    with pytest.raises(ValueError, match="keep must be in 0..0, got 1"):
        wb.update([2], [0], [0.5], 1)
    with pytest.raises(ValueError, match="equal lengths"):
        wb.update([2], [0, 1], [0.5], 0)
    with pytest.raises(ValueError, match="'median'"):
        WordBuilder(chars, 0.04, "median")
