"""Tests for streamd.train.text: number spelling, normalization, determinism, diversity."""

import re

import pytest

from streamd.train.text import (
    KEYWORD,
    TextGenerator,
    V,
    cardinal,
    clock_time,
    decimal,
    digits,
    is_normalized,
    money,
    ordinal,
    percent,
    spoken_form,
    year,
)

CARDINALS = {
    0: "zero", 5: "five", 11: "eleven", 13: "thirteen", 19: "nineteen", 20: "twenty", 21: "twenty one",
    40: "forty", 58: "fifty eight", 99: "ninety nine", 100: "one hundred", 101: "one hundred one",
    110: "one hundred ten", 250: "two hundred fifty", 999: "nine hundred ninety nine", 1000: "one thousand",
    1001: "one thousand one", 1100: "one thousand one hundred", 2024: "two thousand twenty four",
    12345: "twelve thousand three hundred forty five", 90000: "ninety thousand", 100000: "one hundred thousand",
    700010: "seven hundred thousand ten", 1000000: "one million", 1000001: "one million one",
    2500000: "two million five hundred thousand", 7000000000: "seven billion",
    123456789: "one hundred twenty three million four hundred fifty six thousand seven hundred eighty nine",
    -15: "minus fifteen",
}


@pytest.mark.parametrize("n,words", sorted(CARDINALS.items()))
def test_cardinal(n, words):
    assert cardinal(n) == words


def test_cardinal_british_and():
    assert cardinal(105, and_=True) == "one hundred and five"
    assert cardinal(2020, and_=True) == "two thousand and twenty"
    assert cardinal(3450, and_=True) == "three thousand four hundred and fifty"
    assert cardinal(100, and_=True) == "one hundred"
    assert cardinal(7, and_=True) == "seven"


ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 8: "eighth", 9: "ninth",
            11: "eleventh", 12: "twelfth", 13: "thirteenth", 20: "twentieth", 21: "twenty first",
            22: "twenty second", 33: "thirty third", 40: "fortieth", 90: "ninetieth", 100: "one hundredth",
            101: "one hundred first", 112: "one hundred twelfth", 1000: "one thousandth",
            1000000: "one millionth"}


@pytest.mark.parametrize("n,words", sorted(ORDINALS.items()))
def test_ordinal(n, words):
    assert ordinal(n) == words


YEARS = {1999: "nineteen ninety nine", 1905: "nineteen oh five", 1900: "nineteen hundred",
         2000: "two thousand", 2005: "two thousand five", 2010: "twenty ten", 2024: "twenty twenty four",
         1066: "ten sixty six", 1800: "eighteen hundred", 3000: "three thousand", 800: "eight hundred"}


@pytest.mark.parametrize("y,words", sorted(YEARS.items()))
def test_year(y, words):
    assert year(y) == words


def test_year_styles():
    assert year(2005, style="pairs") == "twenty oh five"
    assert year(2024, style="cardinal") == "two thousand twenty four"
    assert year(1999, style="cardinal") == "one thousand nine hundred ninety nine"


def test_digits():
    assert digits("3105") == "three one zero five"
    assert digits("3105", oh_for_zero=True) == "three one oh five"
    assert digits("0") == "zero"


CLOCK = [
    (9, 50, "plain", "nine fifty"), (9, 5, "plain", "nine oh five"), (21, 0, "plain", "nine o'clock"),
    (9, 50, "ampm", "nine fifty a m"), (21, 0, "ampm", "nine p m"), (0, 0, "ampm", "twelve a m"),
    (12, 0, "ampm", "twelve p m"), (12, 30, "ampm", "twelve thirty p m"),
    (9, 30, "relative", "half past nine"), (9, 15, "relative", "quarter past nine"),
    (9, 45, "relative", "quarter to ten"), (23, 45, "relative", "quarter to twelve"),
    (9, 50, "relative", "ten to ten"), (10, 7, "relative", "seven minutes past ten"),
    (10, 59, "relative", "one minute to eleven"), (8, 0, "relative", "eight o'clock"),
    (21, 0, "24h", "twenty one hundred"), (9, 30, "24h", "oh nine thirty"), (14, 5, "24h", "fourteen oh five"),
]


@pytest.mark.parametrize("h,m,style,words", CLOCK)
def test_clock_time(h, m, style, words):
    assert clock_time(h, m, style) == words


def test_money_and_percent():
    assert money(5, 20) == "five dollars and twenty cents"
    assert money(5, 20, and_cents=False) == "five dollars twenty cents"
    assert money(1) == "one dollar"
    assert money(0, 1) == "one cent"
    assert money(0, 25) == "twenty five cents"
    assert money(2, 1, "pound") == "two pounds and one penny"
    assert money(3, 50, "pound") == "three pounds and fifty pence"
    assert money(1200, 0, "euro") == "one thousand two hundred euros"
    assert percent(40) == "forty percent"
    assert percent(12.5) == "twelve point five percent"
    assert percent("0.05") == "zero point zero five percent"
    assert percent(100) == "one hundred percent"
    assert decimal(-3.25) == "minus three point two five"


@pytest.mark.parametrize("call,msg", [
    (lambda: cardinal(1.5), "n must be an int"),
    (lambda: cardinal(10**15), "must be < 10**15"),
    (lambda: ordinal(-1), "n must be >= 0"),
    (lambda: year(0), "1..9999"),
    (lambda: year(1999, style="roman"), "style must be"),
    (lambda: digits("12a4"), "string of 0-9"),
    (lambda: digits(""), "string of 0-9"),
    (lambda: clock_time(24, 0), "0 <= h <= 23"),
    (lambda: clock_time(9, 60), "0 <= m <= 59"),
    (lambda: clock_time(9, 0, "french"), "style must be"),
    (lambda: money(5, 100), "0 <= cents <= 99"),
    (lambda: money(5, 0, "yen"), "currency must be one of"),
    (lambda: decimal("1e5"), "plain decimal"),
])
def test_invalid_inputs_raise_clear_errors(call, msg):
    with pytest.raises((ValueError, TypeError), match=re.escape(msg)):
        call()


def test_spoken_form():
    assert spoken_form("wake me at nine fifty a m") == "wake me at nine fifty a.m."
    assert spoken_form("nine p m tonight") == "nine p.m. tonight"
    assert spoken_form("a mango") == "a mango"


def test_template_expansion():
    g = TextGenerator(0)
    outs = {g.t("(turn|switch) [the ]$thing (on|off)", thing="(lamp|fan)") for _ in range(400)}
    expected = {f"{v} {the}{t} {o}" for v in ("turn", "switch") for the in ("", "the ") for t in ("lamp", "fan")
                for o in ("on", "off")}
    assert outs == expected
    assert g.t("$x and $y", x=lambda: "one", y="two") == "one and two"
    assert g.t("in the $ROOMS").split(" ", 2)[2] in V.ROOMS
    assert {g.t("(a||) b") for _ in range(100)} == {"a b", "b"}
    for bad, msg in [("(a|b", "unclosed '('"), ("[a", "unclosed '['"), ("a)", "unexpected ')'"),
                     ("$ nothing", "stray '$'"), ("$nosuchslot", "unknown template slot $nosuchslot")]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            g.t(bad)


def _sample(seed, n=300):
    g = TextGenerator(seed)
    return [g.sentence() for _ in range(n)], [g.keyword_sentence() for _ in range(n)], \
        [g.confusable_negative() for _ in range(n)]


def test_deterministic_given_seed():
    assert _sample(7) == _sample(7)
    assert _sample(7) != _sample(8)


def test_charset_and_normalization():
    for group in _sample(3, 1000):
        for s in group:
            assert is_normalized(s), s
            assert re.fullmatch(r"[a-z' ]+", s), s
            assert "  " not in s and s == s.strip()


def test_keyword_placement():
    sents, kws, negs = _sample(11, 1000)
    kw = re.compile(r"\bhey stream\b")
    assert all(kw.search(s) for s in kws)
    assert sum(s == KEYWORD for s in kws) > 100  # sometimes alone
    assert sum(s.startswith(KEYWORD + " ") for s in kws) > 600  # usually followed by a command
    assert not any(kw.search(s) for s in sents)
    assert not any(kw.search(s) for s in negs)
    # negatives really are confusable: most contain a listed sound-alike
    alike = ("hey st", "stream", "ice cream", "extreme", "steam", "dream", "scream", "hey", "screen", "string")
    assert sum(any(a in s for a in alike) for s in negs) > 0.9 * len(negs)


def test_diversity():
    g = TextGenerator(0)
    sents = [g.sentence() for _ in range(2000)]
    assert len(set(sents)) > 0.9 * len(sents)
    vocab = {w for s in sents for w in s.split()}
    assert len(vocab) > 800
    # numbers in many spoken forms occur
    text = " ".join(sents)
    for needle in (" oh ", " hundred", " thousand", " million", " percent", " dollars", "first", " a m",
                   "o'clock", "quarter"):
        assert needle in text, needle


def test_slot_focus_zero_draws_nothing_extra():
    # corpora made before slot_focus existed must come out the same
    g0, g1 = TextGenerator(5), TextGenerator(5, slot_focus=0.0)
    assert [g0.sentence() for _ in range(200)] == [g1.sentence() for _ in range(200)]


def test_slot_focus_raises_open_class_word_counts():
    def counts(focus):
        g = TextGenerator(2, slot_focus=focus)
        sents = [g.sentence() for _ in range(3000)]
        for s in sents:
            assert is_normalized(s) and re.fullmatch(r"[a-z' ]+", s), s
            assert not re.search(r"\bhey stream\b", s)
        words = [w for s in sents for w in s.split()]
        names = set(V.FIRST_NAMES)
        cities = {w for c in V.CITIES for w in c.split()}
        return sum(w in names for w in words), sum(w in cities for w in words), len(set(sents))

    names0, cities0, _ = counts(0.0)
    names1, cities1, distinct1 = counts(0.6)
    assert names1 > 2.5 * names0 and cities1 > 2 * cities0
    assert distinct1 > 0.9 * 3000  # still varied sentences, not a fixed list
    with pytest.raises(ValueError, match="slot_focus"):
        TextGenerator(0, slot_focus=1.5)
