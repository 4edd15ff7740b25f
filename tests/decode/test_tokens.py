"""Token tables (char and bpe), file formats, encode/decode and word grouping."""

from __future__ import annotations

import math
import random
import string

import pytest

from streamd.decode.confidence import aggregate
from streamd.tokens import TokenTable
from streamd.decode.words import tokens_to_words
from streamd.events import Word

CHARS = ["<blk>", " "] + list(string.ascii_lowercase) + ["'"]
PIECES = ["<blk>", "<unk>", "▁", "▁turn", "▁on", "▁the", "▁li", "ghts", "s", "▁t", "ur", "n", "o", "h", "e",
          "l", "i", "g", "t", "▁a", "▁b", "b", "a", "y"]


@pytest.fixture
def chars() -> TokenTable:
    return TokenTable(tuple(CHARS))


@pytest.fixture
def bpe() -> TokenTable:
    return TokenTable(tuple(PIECES))


# --------------------------------------------------------------------------- table basics


def test_kind_and_separator(chars: TokenTable, bpe: TokenTable) -> None:
    assert chars.kind == "char" and chars.separator == " "
    assert bpe.kind == "bpe" and bpe.separator is None
    assert TokenTable(("<blk>", "▁", "a", "b")).kind == "char"  # bare "▁" alone: a char separator
    assert TokenTable(("<blk>", "▁", "a", "b")).separator == "▁"
    assert TokenTable(("<blk>", "|", "a")).separator == "|"
    assert TokenTable(("<blk>", "|", " ", "a")).separator == " "  # priority " ", "▁", "|"
    assert TokenTable(("<blk>", "a", "b")).separator is None
    assert len(chars) == 29 and chars.id("a") == 2 and chars.id(" ") == 1 and bpe.id("▁turn") == 3


def test_table_errors() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        TokenTable(("<blk>", "a", "a"))
    with pytest.raises(ValueError, match="contains whitespace"):
        TokenTable(("<blk>", "a b"))
    with pytest.raises(ValueError, match="non-empty"):
        TokenTable(("<blk>", ""))
    with pytest.raises(ValueError, match="at least 2"):
        TokenTable(("<blk>",))
    with pytest.raises(ValueError, match="blank_id"):
        TokenTable(("<blk>", "a"), blank_id=2)
    with pytest.raises(TypeError, match="tuple of strings"):
        TokenTable("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'zz' is not in the table"):
        TokenTable(("<blk>", "a")).id("zz")


# --------------------------------------------------------------------------- files


def test_one_column_round_trip(tmp_path, chars: TokenTable, bpe: TokenTable) -> None:
    for table in (chars, bpe):
        assert TokenTable.from_lines(table.to_lines()) == table
        assert TokenTable.from_lines(table.to_lines(with_ids=True)) == table
        path = tmp_path / f"{table.kind}.txt"
        table.to_file(path)
        assert TokenTable.from_file(path) == table
        table.to_file(path, with_ids=True)
        assert TokenTable.from_file(path) == table
    # the space token survives the one-column format; CRLF and readlines() endings are stripped
    assert TokenTable.from_lines(["<blk>\r\n", " \r\n", "a\r\n", "\n"]).tokens == ("<blk>", " ", "a")


def test_k2_two_column_format(tmp_path) -> None:
    text = "<blk> 0\n▁ 1\n▁the 3\ns 2\n<unk>\t4\n"
    path = tmp_path / "tokens.txt"
    path.write_text(text, encoding="utf-8")
    table = TokenTable.from_file(path)
    assert table.tokens == ("<blk>", "▁", "s", "▁the", "<unk>")
    assert table.kind == "bpe"
    # a space token in two-column form
    assert TokenTable.from_lines(["<blk> 0", "  1", "a 2"]).tokens == ("<blk>", " ", "a")
    assert TokenTable.from_lines(["<blk> 0", "a 1"], blank_id=1).blank_id == 1


@pytest.mark.parametrize(
    "lines, msg",
    [
        (["<blk> 0", "a 2"], r"0\.\.1 without gaps; missing \[1\]"),
        (["<blk> 0", "a 1", "b 1"], "line 3: id 1 used twice"),
        (["<blk> 0", "a"], "line 2: expected '<token> <id>'"),
        (["<blk>", "", "a"], "line 2: empty token"),
        (["<blk>", "a b"], "contains whitespace"),
        ([], "empty"),
        (["", ""], "empty"),
    ],
)
def test_file_errors(lines: list[str], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        TokenTable.from_lines(lines)


def test_from_file_error_names_path(tmp_path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("<blk> 0\na 5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt"):
        TokenTable.from_file(path)


# --------------------------------------------------------------------------- encode / decode


def test_char_encode_decode(chars: TokenTable) -> None:
    ids = chars.encode("Turn  on\tthe lights")
    assert ids[:5] == [chars.id(c) for c in "turn "]
    assert chars.decode(ids) == "turn on the lights"
    # blanks skipped, separators collapsed, stripped
    assert chars.decode([0, 1, 1, 2, 0, 2, 1, 1, 0, 3, 1]) == "aa b"
    assert chars.decode([]) == "" and chars.encode("") == []
    rng = random.Random(0)
    alphabet = string.ascii_lowercase + "'"
    for _ in range(50):
        text = " ".join("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
                        for _ in range(rng.randint(1, 6)))
        assert chars.decode(chars.encode(text)) == text


def test_char_encode_errors(chars: TokenTable) -> None:
    with pytest.raises(ValueError, match=r"characters not in the token table: \['1', '\?'\]"):
        chars.encode("what? 1")
    with pytest.raises(ValueError, match="no separator"):
        TokenTable(("<blk>", "a", "b")).encode("ab ba")
    assert TokenTable(("<blk>", "a", "b")).encode("ab") == [1, 2]
    with pytest.raises(ValueError, match="out of range"):
        chars.decode([1, 29])


def test_uppercase_char_table_folds_to_upper() -> None:
    table = TokenTable(("<blk>", "|") + tuple(string.ascii_uppercase))
    assert table.decode(table.encode("hello World")) == "HELLO WORLD"


def test_bpe_encode_decode(bpe: TokenTable) -> None:
    ids = bpe.encode("turn on the lights")
    assert [bpe.tokens[i] for i in ids] == ["▁turn", "▁on", "▁the", "▁li", "ghts"]
    assert bpe.decode(ids) == "turn on the lights"
    # longest match first, then shorter pieces; a word start without a "▁" piece uses the bare "▁"
    assert [bpe.tokens[i] for i in bpe.encode("turns tight baby")] == [
        "▁turn", "s", "▁t", "i", "g", "h", "t", "▁b", "a", "b", "y"]
    assert [bpe.tokens[i] for i in bpe.encode("hello")] == ["▁", "h", "e", "l", "l", "o"]
    assert bpe.decode([0, 3, 0, 8, 2, 2, 4]) == "turns on"
    with pytest.raises(ValueError, match="word 'zoo': no piece in the token table matches 'z'"):
        bpe.encode("zoo")


# --------------------------------------------------------------------------- words


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
