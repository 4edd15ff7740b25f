"""streamd.tokens: token tables (char and bpe: the ``chars`` and ``bpe`` fixtures), file formats, encode/decode.

Word grouping (streamd.decode.words) is tested in tests/decode/test_words.py."""

from __future__ import annotations

import random
import string

import pytest

from streamd.tokens import TokenTable


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
