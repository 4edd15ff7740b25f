"""Numbers spelled out in the project's spoken form (American style by default: "one hundred five";
optional British "and"): :func:`cardinal`, :func:`ordinal`, :func:`year`, :func:`digits`,
:func:`decimal`, :func:`clock_time`, :func:`money`, :func:`percent`.  Pure functions of their
arguments; used by the text generator (:mod:`streamd.train.text`) and the normalizer
(:mod:`streamd.text.normalize`)."""

from __future__ import annotations

import re

__all__ = ["cardinal", "ordinal", "year", "digits", "decimal", "clock_time", "money", "percent"]

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (10**3, "thousand"))
_ORD_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                  "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}


def _check_int(n: object, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__} {n!r}")
    return n


def _below_hundred(n: int) -> str:
    if n < 20:
        return _ONES[n]
    t, u = divmod(n, 10)
    return _TENS[t] + ("" if u == 0 else " " + _ONES[u])


def cardinal(n: int, *, and_: bool = False) -> str:
    """Spell an integer: ``cardinal(21) == "twenty one"``, ``cardinal(-5) == "minus five"``.

    ``and_=True`` gives the British form ("one hundred and five",
    "two thousand and twenty").  Supports ``|n| < 10**15``.
    """
    _check_int(n)
    if n < 0:
        return "minus " + cardinal(-n, and_=and_)
    if n >= 10**15:
        raise ValueError(f"cardinal: |n| must be < 10**15, got {n}")
    if n == 0:
        return "zero"
    parts: list[str] = []
    for scale, word in _SCALES:
        if n >= scale:
            q, n = divmod(n, scale)
            parts.append(cardinal(q, and_=and_) + " " + word)
    if n:
        h, r = divmod(n, 100)
        if h:
            parts.append(_ONES[h] + " hundred")
        if r:
            parts.append(("and " if and_ and parts else "") + _below_hundred(r))
    return " ".join(parts)


def ordinal(n: int) -> str:
    """Spell an ordinal: 1 -> "first", 22 -> "twenty second", 100 -> "one hundredth"."""
    _check_int(n)
    if n < 0:
        raise ValueError(f"ordinal: n must be >= 0, got {n}")
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORD_IRREGULAR:
        last = _ORD_IRREGULAR[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last = last + "th"
    return " ".join(words[:-1] + [last])


def year(n: int, *, style: str = "auto") -> str:
    """Spell a year 1..9999.

    ``style="auto"``: spoken in pairs ("nineteen ninety nine", "nineteen oh
    five", "nineteen hundred", "twenty twenty four") except 2000-2009 and
    multiples of 1000 ("two thousand five"), and years below 1000 (cardinal).
    ``style="pairs"`` always uses pairs where possible ("twenty oh five");
    ``style="cardinal"`` uses :func:`cardinal` ("two thousand twenty four").
    """
    _check_int(n)
    if not 1 <= n <= 9999:
        raise ValueError(f"year: n must be in 1..9999, got {n}")
    if style not in ("auto", "pairs", "cardinal"):
        raise ValueError(f"year: style must be 'auto', 'pairs' or 'cardinal', got {style!r}")
    hi, lo = divmod(n, 100)
    if style == "cardinal" or n < 1000 or n % 1000 == 0 or (style == "auto" and 2000 <= n <= 2009):
        return cardinal(n)
    if lo == 0:
        return cardinal(hi) + " hundred"
    if lo < 10:
        return cardinal(hi) + " oh " + _ONES[lo]
    return cardinal(hi) + " " + _below_hundred(lo)


def digits(s: str, oh_for_zero: bool = False) -> str:
    """Read a digit string one digit at a time: "3105" -> "three one zero five".

    With ``oh_for_zero`` a zero is read "oh" ("three one oh five").
    """
    if not isinstance(s, str) or not s or not s.isascii() or not s.isdigit():
        raise ValueError(f"digits: s must be a non-empty string of 0-9, got {s!r}")
    zero = "oh" if oh_for_zero else "zero"
    return " ".join(zero if c == "0" else _ONES[int(c)] for c in s)


def decimal(x: int | float | str) -> str:
    """Spell a decimal number: 12.5 -> "twelve point five", "0.05" -> "zero point zero five".

    Floats are spelled from their shortest ``repr``; pass a string for exact
    control over trailing zeros.
    """
    if isinstance(x, bool):
        raise TypeError(f"decimal: x must be int, float or str, got bool {x!r}")
    if isinstance(x, int):
        return cardinal(x)
    s = repr(x) if isinstance(x, float) else x
    if not isinstance(s, str) or not re.fullmatch(r"-?\d+(\.\d+)?", s):
        raise ValueError(f"decimal: expected a plain decimal like '12.5', got {x!r}")
    sign = ""
    if s.startswith("-"):
        sign, s = "minus ", s[1:]
    whole, _, frac = s.partition(".")
    out = cardinal(int(whole))
    if frac:
        out += " point " + digits(frac)
    return sign + out


def clock_time(h: int, m: int, style: str = "plain") -> str:
    """Spell a clock time given 24-hour ``h`` (0-23) and ``m`` (0-59).

    Styles: ``plain`` ("nine fifty", "nine oh five", "nine o'clock"),
    ``ampm`` ("nine fifty a m", "nine p m"), ``relative`` ("half past nine",
    "quarter to ten", "ten past nine", "seven minutes to ten", "nine o'clock"),
    ``24h`` ("twenty one hundred", "oh nine thirty", "fourteen oh five").
    """
    _check_int(h, "h")
    _check_int(m, "m")
    if not (0 <= h <= 23 and 0 <= m <= 59):
        raise ValueError(f"clock_time: need 0 <= h <= 23 and 0 <= m <= 59, got h={h} m={m}")
    h12 = h % 12 or 12
    if style in ("plain", "ampm"):
        if m == 0:
            s = cardinal(h12) + ("" if style == "ampm" else " o'clock")
        elif m < 10:
            s = cardinal(h12) + " oh " + _ONES[m]
        else:
            s = cardinal(h12) + " " + cardinal(m)
        return s + ((" a m" if h < 12 else " p m") if style == "ampm" else "")
    if style == "relative":
        if m == 0:
            return cardinal(h12) + " o'clock"
        if m <= 30:
            mins, rel, hour = m, "past", h12
        else:
            mins, rel, hour = 60 - m, "to", (h + 1) % 12 or 12
        if mins == 15:
            word = "quarter"
        elif mins == 30:
            word = "half"
        elif mins % 5 == 0:
            word = cardinal(mins)
        else:
            word = cardinal(mins) + (" minute" if mins == 1 else " minutes")
        return f"{word} {rel} {cardinal(hour)}"
    if style == "24h":
        hs = "zero" if h == 0 else ("oh " + _ONES[h] if h < 10 else cardinal(h))
        if m == 0:
            return hs + " hundred"
        return hs + " " + ("oh " + _ONES[m] if m < 10 else cardinal(m))
    raise ValueError(f"clock_time: style must be 'plain', 'ampm', 'relative' or '24h', got {style!r}")


_CURRENCIES = {"dollar": ("dollar", "dollars", "cent", "cents"),
               "euro": ("euro", "euros", "cent", "cents"),
               "pound": ("pound", "pounds", "penny", "pence")}


def money(units: int, cents: int = 0, currency: str = "dollar", *, and_cents: bool = True) -> str:
    """Spell an amount: ``money(5, 20) == "five dollars and twenty cents"``.

    ``currency`` is "dollar", "euro" or "pound" (pence/penny);  zero units
    with cents gives just the cents ("twenty five cents"); ``and_cents=False``
    drops the "and" ("five dollars twenty cents").
    """
    _check_int(units, "units")
    _check_int(cents, "cents")
    if units < 0 or not 0 <= cents <= 99:
        raise ValueError(f"money: need units >= 0 and 0 <= cents <= 99, got units={units} cents={cents}")
    if currency not in _CURRENCIES:
        raise ValueError(f"money: currency must be one of {sorted(_CURRENCIES)}, got {currency!r}")
    one, many, cent1, centn = _CURRENCIES[currency]
    big = f"{cardinal(units)} {one if units == 1 else many}"
    small = f"{cardinal(cents)} {cent1 if cents == 1 else centn}"
    if cents == 0:
        return big
    if units == 0:
        return small
    return f"{big} {'and ' if and_cents else ''}{small}"


def percent(value: int | float | str) -> str:
    """Spell a percentage: 40 -> "forty percent", 12.5 -> "twelve point five percent"."""
    return decimal(value) + " percent"
