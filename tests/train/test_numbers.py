"""Tests for streamd.text.numbers: numbers spelled out in the spoken form, clear errors."""

import re

import pytest

from streamd.text.numbers import cardinal, clock_time, decimal, digits, money, ordinal, percent, year


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
