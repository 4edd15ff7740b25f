"""Written English -> the model's spoken form (what :func:`streamd.train.text.is_normalized` accepts).

Real transcripts (corpus text files, prompt lists, teacher-model outputs) are
written text: capitals, punctuation, digits, symbols ("Press 1, then #.",
"$12.50", "10:30 a.m.", "the 21st", "in 1999", "40%").  The model's tokens
are lower-case letters, the apostrophe and the space, and numbers are spelled
as spoken, exactly as the synthetic text generator writes them
(:mod:`streamd.text.numbers`), so :func:`normalize_text` spells them with the
same functions:

* money ``$5`` / ``$12.50`` / ``£3`` / ``€2`` -> :func:`~streamd.text.numbers.money`;
* percent ``40%`` / ``12.5%`` -> :func:`~streamd.text.numbers.percent`;
* clock times ``10:30`` / ``9:05 pm`` -> :func:`~streamd.text.numbers.clock_time`
  (``plain`` style, or ``ampm`` when a.m./p.m. follows: "ten thirty a m");
* ordinals ``1st`` ``22nd`` ``3rd`` ``4th`` -> :func:`~streamd.text.numbers.ordinal`;
* years: a bare 4-digit number in 1100-1999 or 2010-2099 -> :func:`~streamd.text.numbers.year`
  ("nineteen ninety nine"); other integers (commas allowed: ``1,000``) ->
  :func:`~streamd.text.numbers.cardinal`; an integer with a leading zero
  (``007``, ``0800``) is read digit by digit; decimals ``3.5`` ->
  :func:`~streamd.text.numbers.decimal`;
* decades ``1990s`` / ``80s`` -> "nineteen nineties" / "eighties";
* digit strings after a cue word (extension, number, password, pin, code,
  mailbox, room, line, account) are read digit by digit ("extension 1234":
  "extension one two three four"); a digit next to letters is its own word
  ("3D": "three d", "MP3": "m p three");
* in mixed-case text, words of 2-5 capitals are spelled as letters ("PBX":
  "p b x"; all-capital transcripts such as LibriSpeech's are left alone), and web
  addresses are read with "dot" ("www.asterisk.org": "w w w dot asterisk dot org");
* symbols: ``&`` and, ``+`` plus, ``=`` equals, ``@`` at, ``#`` pound (the
  telephone key), ``*`` star; a few titles (Mr. Mrs. Ms. Dr.) and "etc.";
* bracketed annotations of non-speech (``[beep]``, ``[noise]``, ``<unk>``) are dropped;
* accents are stripped (``café`` -> ``cafe``), hyphens, dashes and slashes
  separate words, inner apostrophes are kept (``don't``), everything else
  that is not a letter is dropped.

The result is "" when no word remains (a transcript of non-speech).

:func:`readings` gives one written word's possible spoken forms, :func:`normalize_text`'s first: a bare
digit string of two or more digits ("2648", "802.") may also have been said digit by digit ("two six four
eight", with "zero" or "oh"), which the written form no longer tells (the second pass picks the reading the
streaming model heard).
"""

from __future__ import annotations

import re
import unicodedata

from .numbers import cardinal, clock_time, decimal, digits, money, ordinal, percent, year

__all__ = ["normalize_text", "readings"]

_CURRENCY = {"$": "dollar", "£": "pound", "€": "euro"}
_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "#": " pound ", "*": " star "}
_TITLES = ((re.compile(r"\bmrs\.?(?=\s|$)"), "missus"), (re.compile(r"\bmr\.?(?=\s|$)"), "mister"),
           (re.compile(r"\bms\.(?=\s|$)"), "miz"), (re.compile(r"\bdr\.(?=\s|$)"), "doctor"),
           (re.compile(r"\betc\.?(?=\W|$)"), "et cetera"))
_AMPM = r"\s*([ap])\.?\s?m\b\.?"
_MONEY = re.compile(r"([$£€])\s?(\d[\d,]*)(?:\.(\d{1,2}))?\b")
_PERCENT = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s?%")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)(?:" + _AMPM + r")?")
_HOUR_AMPM = re.compile(r"\b(1[0-2]|0?[1-9])" + _AMPM)
_ORDINAL = re.compile(r"\b(\d[\d,]*)(st|nd|rd|th)\b")
_DECIMAL = re.compile(r"\b(\d+)\.(\d+)\b")
_CUED_DIGITS = re.compile(r"\b(extension|number|password|passcode|pin|code|mailbox|room|line|account)(\s+)(\d{2,})\b")
_DECADE = re.compile(r"\b'?(\d0|1[1-9]\d0|20\d0)s\b")
_DIGIT_LETTER = re.compile(r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)")
_ACRONYM = re.compile(r"(?<![A-Za-z])[A-Z]{2,5}(?![A-Za-z])")
_DOMAIN = re.compile(r"\b(?:www\.)?[a-z0-9]+(?:\.[a-z0-9]+)*\.(?:com|org|net|edu|gov|io)\b")
_INTEGER = re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+\b")
_ANNOTATION = re.compile(r"\[[^\]]*\]|<[^>]*>")
_APOSTROPHES = "\u2019\u2018\u02bc`\u00b4"
_SEPARATORS = "-\u2010\u2011\u2012\u2013\u2014\u2015/\\_"


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _money(m: re.Match) -> str:
    cents = m.group(3)
    return " " + money(_int(m.group(2)), int(cents.ljust(2, "0")) if cents else 0, _CURRENCY[m.group(1)]) + " "


def _time(m: re.Match) -> str:
    h, mins, ap = int(m.group(1)), int(m.group(2)), m.group(3)
    if ap is None:
        return " " + clock_time(h, mins, "plain") + " "
    h = h % 12 + (12 if ap == "p" else 0)
    return " " + clock_time(h, mins, "ampm") + " "


def _hour_ampm(m: re.Match) -> str:
    return f" {cardinal(int(m.group(1)))} {m.group(2)} m "


def _decade(m: re.Match) -> str:
    n = int(m.group(1))
    words = (year(n) if len(m.group(1)) == 4 else cardinal(n)).split()
    last = words[-1][:-1] + "ies" if words[-1].endswith("y") else words[-1] + "s"
    return " " + " ".join(words[:-1] + [last]) + " "


def _integer(m: re.Match) -> str:
    s = m.group(0)
    if "," not in s and len(s) > 1 and s.startswith("0"):
        return " " + digits(s) + " "
    n = _int(s)
    if "," not in s and len(s) == 4 and (1100 <= n <= 1999 or 2010 <= n <= 2099):
        return " " + year(n) + " "
    return " " + cardinal(n) + " "


def normalize_text(written: str) -> str:
    """Spoken-form normalization of one written transcript.

    >>> normalize_text("Press 1, then the # key; it's 10:30 a.m. on the 21st.")
    "press one then the pound key it's ten thirty a m on the twenty first"
    """
    if not isinstance(written, str):
        raise TypeError(f"normalize_text needs a str, got {type(written).__name__}")
    t = unicodedata.normalize("NFKD", written)
    t = "".join(c for c in t if not unicodedata.combining(c))
    t = _ANNOTATION.sub(" ", t)
    if any(c.islower() for c in t):  # an all-capital transcript has no acronyms to tell apart
        t = _ACRONYM.sub(lambda m: " " + " ".join(m.group(0)) + " ", t)
    t = t.lower()
    t = _DOMAIN.sub(lambda m: " " + " dot ".join(" ".join(p) if p == "www" else p
                                                for p in m.group(0).split(".")) + " ", t)
    t = _CUED_DIGITS.sub(lambda m: m.group(1) + m.group(2) + digits(m.group(3)), t)
    for a in _APOSTROPHES:
        t = t.replace(a, "'")
    for pat, rep in _TITLES:
        t = pat.sub(rep, t)
    t = _MONEY.sub(_money, t)
    t = _PERCENT.sub(lambda m: " " + percent(m.group(1).replace(",", "")) + " ", t)
    t = _TIME.sub(_time, t)
    t = _HOUR_AMPM.sub(_hour_ampm, t)
    t = _ORDINAL.sub(lambda m: " " + ordinal(_int(m.group(1))) + " ", t)
    t = _DECADE.sub(_decade, t)
    t = _DIGIT_LETTER.sub(" ", t)
    t = _DECIMAL.sub(lambda m: " " + decimal(f"{m.group(1)}.{m.group(2)}") + " ", t)
    t = _INTEGER.sub(_integer, t)
    t = re.sub(r"\ba\.m\.|\ba\.m\b", " a m ", t)
    t = re.sub(r"\bp\.m\.|\bp\.m\b", " p m ", t)
    for sym, rep in _SYMBOLS.items():
        t = t.replace(sym, rep)
    for sep in _SEPARATORS:
        t = t.replace(sep, " ")
    t = "".join(c if ("a" <= c <= "z") or c == "'" else " " for c in t)
    words = (w.strip("'") for w in t.split())
    return " ".join(w for w in words if w)


_BARE_DIGITS = re.compile(r"[^\w]*(\d{2,})[^\w]*")


def readings(word: str) -> list[str]:
    """The spoken forms of one written ``word``: :func:`normalize_text`'s first, then, for a bare digit
    string of two or more digits (punctuation around it allowed, no commas inside), its digit-by-digit
    readings with "zero" and with "oh" when they differ from the first.

    >>> readings("2648,")
    ['two thousand six hundred forty eight', 'two six four eight']
    >>> readings("hello")
    ['hello']
    """
    out = [normalize_text(word)]
    m = _BARE_DIGITS.fullmatch(word)
    if m:
        for oh in (False, True):
            r = digits(m.group(1), oh_for_zero=oh)
            if r not in out:
                out.append(r)
    return out
