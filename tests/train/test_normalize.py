"""normalize_text: written transcripts -> the spoken form the model's tokens can spell."""

import pytest

from streamd.text.normalize import normalize_text
from streamd.text.numbers import cardinal, clock_time, money, ordinal, year
from streamd.train.text import is_normalized


@pytest.mark.parametrize("written, spoken", [
    ("Press 1, then the # key.", "press one then the pound key"),
    ("You don't mean that, 25 men.", "you don't mean that twenty five men"),
    ("It\u2019s fine", "it's fine"),
    ("$12.50 and $5", "twelve dollars and fifty cents and five dollars"),
    ("\u00a33", "three pounds"),
    ("40% of 1,000", "forty percent of one thousand"),
    ("12.5%", "twelve point five percent"),
    ("In 1999, 2005 and 2024", "in nineteen ninety nine two thousand five and twenty twenty four"),
    ("3000 people", "three thousand people"),
    ("call 007", "call zero zero seven"),
    ("10:30 a.m.", "ten thirty a m"),
    ("9:05 PM", "nine oh five p m"),
    ("at 9 pm", "at nine p m"),
    ("10:00", "ten o'clock"),
    ("the 21st and 2nd and 103rd", "the twenty first and second and one hundred third"),
    ("3.5 miles", "three point five miles"),
    ("Mr. Smith & Dr. Who, etc.", "mister smith and doctor who et cetera"),
    ("caf\u00e9 \u2014 na\u00efve", "cafe naive"),
    ("Call-Forward on No Answer.", "call forward on no answer"),
    ("'quoted' word", "quoted word"),
    ("press * or #", "press star or pound"),
    ("[this is a simple beep tone]", ""),
    ("hello <unk> [noise] world", "hello world"),
    ("...", ""),
    ("3D audio enabled", "three d audio enabled"),
    ("an MP3 file", "an m p three file"),
    ("Dial extension 1234, password 4242.", "dial extension one two three four password four two four two"),
    ("the 1990s and the '80s", "the nineteen nineties and the eighties"),
    ("visit www.asterisk.org", "visit w w w dot asterisk dot org"),
    ("the Asterisk PBX over IP", "the asterisk p b x over i p"),
    ("THE PBX", "the pbx"),
    ("", ""),
])
def test_examples(written, spoken):
    assert normalize_text(written) == spoken


def test_numbers_use_the_generators_spelling():
    # the same functions that write the synthetic corpus spell real transcripts
    assert normalize_text("7") == cardinal(7)
    assert normalize_text("1,234,567") == cardinal(1234567)
    assert normalize_text("1984") == year(1984)
    assert normalize_text("42nd") == ordinal(42)
    assert normalize_text("$3.05") == money(3, 5)
    assert normalize_text("14:45") == clock_time(14, 45, "plain")


@pytest.mark.parametrize("written", ["Hello, World!", "Press 5 for the operator.", "A-1 steak sauce @ 50%",
                                     "\u00c9cole 2nd floor #3", "rock 'n' roll"])
def test_output_is_normalized(written):
    out = normalize_text(written)
    assert out == "" or is_normalized(out)
    assert normalize_text(out) == out  # idempotent


def test_type_error():
    with pytest.raises(TypeError, match="str"):
        normalize_text(5)


def test_readings_of_a_written_word():
    from streamd.text.normalize import readings
    assert readings("2648,") == ["two thousand six hundred forty eight", "two six four eight"]
    assert readings("0800") == ["zero eight zero zero", "oh eight oh oh"]  # already digit by digit
    assert readings("802.") == ["eight hundred two", "eight zero two", "eight oh two"]
    assert readings("7,") == ["seven"] and readings("1,000") == ["one thousand"] and readings("Hi!") == ["hi"]
    for w in ("2648,", "0800", "802.", "1999", "hello"):
        assert readings(w)[0] == normalize_text(w)
