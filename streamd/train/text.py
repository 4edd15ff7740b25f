"""Random voice-assistant English text for the synthetic training corpus.

Two parts:

* Spelled-out number helpers (:func:`cardinal`, :func:`ordinal`, :func:`year`,
  :func:`digits`, :func:`decimal`, :func:`clock_time`, :func:`money`,
  :func:`percent`).  Pure functions of their arguments, American style by
  default ("one hundred five"), optional British "and".
* :class:`TextGenerator`: a seeded template grammar.  Each intent (lights,
  thermostat, timers, alarms, reminders, calendar, music, volume, playback,
  weather, calls, messages, shopping, numbers, dates, short answers, ...) has
  several templates in a tiny language -- ``(a|b)`` one alternative, ``[x]``
  optional, ``$slot`` a random filler (time, date, name, amount, vocabulary
  entry...) -- so each template expands to thousands of sentences.  Commands
  are further wrapped in optional request prefixes/suffixes (only around
  imperatives) or discourse markers and sometimes joined in pairs, so word
  orders and combinations vary far beyond the template count.

Normalization (the transcript convention of the whole project): lower-case
words separated by single spaces, numbers spelled out, hyphens written as
spaces ("twenty one"), apostrophes kept ("what's"), nothing but ``a-z``,
space and apostrophe.  "a.m." is written "a m".  :func:`spoken_form` turns a
normalized sentence back into text that TTS engines pronounce correctly.
Everything is deterministic given the seed (``random.Random``).
"""

from __future__ import annotations

import functools
import random
import re


__all__ = [
    "cardinal",
    "ordinal",
    "year",
    "digits",
    "decimal",
    "clock_time",
    "money",
    "percent",
    "is_normalized",
    "spoken_form",
    "TextGenerator",
    "KEYWORD",
    "V",
]

KEYWORD = "hey stream"

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (10**3, "thousand"))
_ORD_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                  "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_NORM_RE = re.compile(r"[a-z']+( [a-z']+)*")
_KEYWORD_RE = re.compile(r"\bhey stream\b")


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


def _an(phrase: str) -> str:
    """Indefinite article for ``phrase`` ("an eighty", "an hour", "a one", "a five")."""
    w = phrase.split()[0]
    vowel = w in ("eight", "eighteen", "eighty", "eleven", "hour", "hours") or (
        w[0] in "aeio" and not w.startswith("one"))
    return "an" if vowel else "a"


def is_normalized(text: str) -> bool:
    """True iff ``text`` is non-empty lower-case words of a-z/apostrophe separated by single spaces."""
    return bool(_NORM_RE.fullmatch(text))


_SPOKEN_FIXES = ((re.compile(r"\ba m\b"), "a.m."), (re.compile(r"\bp m\b"), "p.m."))


def spoken_form(text: str) -> str:
    """Text to feed a TTS engine for a normalized sentence (engines read "a m" as "uh em")."""
    for pat, rep in _SPOKEN_FIXES:
        text = pat.sub(rep, text)
    return text


_TEMPLATE_TOKEN = re.compile(r"[()\[\]|]|\$[A-Za-z_][A-Za-z0-9_]*|[^()\[\]|$]+")


@functools.lru_cache(maxsize=4096)
def _parse(template: str) -> tuple:
    """Parse a generator template into nested ("seq" | "alt" | "opt" | "lit" | "slot", value) nodes."""
    tokens = _TEMPLATE_TOKEN.findall(template)
    if "".join(tokens) != template:
        raise ValueError(f"template has a stray '$': {template!r}")

    def seq(i: int, stops: str) -> tuple[tuple, int]:
        items: list[tuple] = []
        while i < len(tokens) and tokens[i] not in stops:
            tok = tokens[i]
            if tok == "(":
                alts = []
                while True:
                    node, i = seq(i + 1, "|)")
                    alts.append(node)
                    if i >= len(tokens):
                        raise ValueError(f"template has an unclosed '(': {template!r}")
                    if tokens[i] == ")":
                        break
                items.append(("alt", tuple(alts)))
            elif tok == "[":
                node, i = seq(i + 1, "]")
                if i >= len(tokens):
                    raise ValueError(f"template has an unclosed '[': {template!r}")
                items.append(("opt", node))
            elif tok in ")]|":
                raise ValueError(f"template has an unexpected {tok!r}: {template!r}")
            elif tok.startswith("$"):
                items.append(("slot", tok[1:]))
            else:
                items.append(("lit", tok))
            i += 1
        return ("seq", tuple(items)), i

    node, i = seq(0, "")
    return node


class TextGenerator:
    """Seeded random generator of normalized voice-assistant sentences.

    ``sentence()`` gives an in-domain utterance (command, question, statement
    or short answer); ``keyword_sentence()`` starts with "hey stream" (often
    followed by a command, sometimes alone); ``confusable_negative()`` gives
    an utterance without the wake phrase but with something that sounds or
    reads like it ("hey steve", "ice cream", "mainstream", ...).
    """

    def __init__(self, seed: int, slot_focus: float = 0.0) -> None:
        """``slot_focus``: share of ``sentence()`` drawn from :meth:`slot_drill` (open-class words:
        names, places, groceries, artists) instead of the full grammar.  At 0 (the default) no
        extra random draw is made, so corpora made before this option existed are reproduced."""
        if not 0.0 <= slot_focus <= 1.0:
            raise ValueError(f"slot_focus must be in [0, 1], got {slot_focus}")
        self.rng = random.Random(seed)
        self.slot_focus = slot_focus

    # ----------------------------------------------------------- primitives
    def c(self, *options: str) -> str:
        """One of the options (a single tuple/list argument is unpacked)."""
        if len(options) == 1 and not isinstance(options[0], str):
            options = tuple(options[0])
        return self.rng.choice(options)

    def opt(self, s: str, p: float = 0.5) -> str:
        return s if self.rng.random() < p else ""

    def n(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    @staticmethod
    def _join(*parts: str) -> str:
        return " ".join(" ".join(parts).split())

    def t(self, template: str, **slots: object) -> str:
        """Expand a template: ``(a|b)`` one alternative, ``[x]`` optional, ``$slot`` a value.

        A slot is looked up in ``slots`` (a string, or a callable called only when
        used), then as a method of this generator, then (upper-case names) as a
        random entry of the vocabulary list ``V.<NAME>``.  String slot values are
        themselves expanded as templates.
        """
        return self._join(self._render(_parse(template), slots))

    def _render(self, node: tuple, slots: dict) -> str:
        kind, val = node
        if kind == "lit":
            return val
        if kind == "seq":
            return "".join(self._render(n, slots) for n in val)
        if kind == "alt":
            return self._render(self.rng.choice(val), slots)
        if kind == "opt":
            return self._render(val, slots) if self.rng.random() < 0.5 else ""
        if val in slots:
            v = slots[val]
            return v() if callable(v) else self._render(_parse(str(v)), slots)
        if val.isupper() and isinstance(getattr(V, val, None), tuple):
            return self.c(getattr(V, val))
        if val.islower() and callable(getattr(self, val, None)):
            return getattr(self, val)()
        raise ValueError(f"unknown template slot ${val}: not an argument, generator method or vocabulary list")

    # ------------------------------------------------------------ slot fillers
    def number(self, lo: int = 0, hi: int = 100) -> str:
        return cardinal(self.n(lo, hi), and_=self.rng.random() < 0.1)

    def big_number(self) -> str:
        r = self.rng.random()
        if r < 0.3:
            v = self.n(100, 999)
        elif r < 0.6:
            v = self.n(1000, 999_999)
        elif r < 0.75:
            v = self.n(1, 99) * self.c((1000, 100, 10_000, 100_000))
        elif r < 0.9:
            v = self.n(1_000_000, 999_999_999)
        else:
            return decimal(f"{self.n(1, 99)}.{self.n(1, 9)}") + " " + self.c("million", "billion", "thousand")
        return cardinal(v, and_=self.rng.random() < 0.15)

    def time(self) -> str:
        r = self.rng.random()
        if r < 0.05:
            return self.c("noon", "midnight", "midday")
        h, m = self.n(0, 23), self.c((0, 0, 0, 15, 30, 45, self.n(1, 59), self.n(1, 59)))
        style = self.c("plain", "ampm", "ampm", "ampm", "relative", "24h")
        s = clock_time(h, m, style)
        if style == "plain" and m and self.rng.random() < 0.3:
            if h < 12:
                s += " in the morning"
            elif h < 18:
                s += " in the afternoon"
            else:
                s += " " + self.c("in the evening", "at night", "tonight")
        return s

    def day(self, bare: bool = False) -> str:
        """A day expression ("tomorrow", "on friday"); ``bare`` drops a leading "on" (after "for")."""
        d = self.c(V.DAY_WORDS)
        return d[3:] if bare and d.startswith("on ") else d

    def past_day(self) -> str:
        return self.c(V.PAST_DAY_WORDS)

    def timer_length(self) -> str:
        """Adjective form for "a ... timer": "five minute", "eighty two second", "one hour"."""
        unit = self.c("second", "minute", "minute", "minute", "hour")
        return f"{cardinal(self.n(1, 90 if unit != 'hour' else 12))} {unit}"

    def duration(self) -> str:
        r = self.rng.random()
        if r < 0.15:
            return self.c("half an hour", "an hour", "a minute", "an hour and a half", "a couple of minutes",
                          "a few minutes", "a quarter of an hour", "thirty seconds", "ninety seconds")
        unit = self.c("second", "minute", "minute", "minute", "hour")
        v = self.n(1, 90 if unit != "hour" else 12)
        s = f"{cardinal(v)} {unit}{'' if v == 1 else 's'}"
        if unit == "hour" and self.rng.random() < 0.4:
            s += f" and {cardinal(self.n(1, 59))} minutes"
        elif unit == "minute" and self.rng.random() < 0.2:
            s += f" and {cardinal(self.n(1, 59))} seconds"
        return s

    def date(self) -> str:
        m = self.n(1, 12)
        month, day = V.MONTHS[m - 1], self.n(1, (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[m - 1])
        yr = self.opt(" " + self.year(1950, 2040), 0.25)
        form = self.rng.random()
        if form < 0.4:
            return f"{month} {ordinal(day)}{yr}"
        if form < 0.6:
            return f"the {ordinal(day)} of {month}{yr}"
        if form < 0.75:
            return f"{month} the {ordinal(day)}"
        if form < 0.85:
            return f"{month} {cardinal(day)}{yr}"
        return f"{self.c(V.WEEKDAYS)} {self.c('the ', '')}{ordinal(day)}"

    def year(self, lo: int, hi: int) -> str:
        """A year in [lo, hi], usually in pairs; "two thousand ..." style only from 2000 on."""
        y = self.n(lo, hi)
        return year(y, style=self.c("auto", "auto", "pairs", "cardinal") if y >= 2000 else "auto")

    def when(self) -> str:
        r = self.rng.random()
        if r < 0.3:
            return self.c(V.DAY_WORDS)
        if r < 0.55:
            return "at " + self.time()
        if r < 0.7:
            return f"{self.c(V.DAY_WORDS)} at {self.time()}"
        if r < 0.8:
            return f"on {self.date()}"
        if r < 0.9:
            return f"in {self.duration()}"
        return f"on {self.c(V.WEEKDAYS)}{self.opt(' at ' + self.time())}"

    def room(self) -> str:
        return self.c(V.ROOMS)

    def name(self) -> str:
        r = self.rng.random()
        if r < 0.6:
            return self.c(V.FIRST_NAMES)
        if r < 0.8:
            return f"{self.c(V.FIRST_NAMES)} {self.c(V.LAST_NAMES)}"
        return self.c(V.RELATIONS)

    def phone(self) -> str:
        oh = self.rng.random() < 0.5
        groups = self.c(((3, 3, 4), (3, 4), (3, 3, 4), (4, 3, 3), (5, 6), (3, 4, 4)))
        return " ".join(digits("".join(str(self.n(0, 9)) for _ in range(g)), oh) for g in groups)

    def code(self, lo: int = 3, hi: int = 8) -> str:
        return digits("".join(str(self.n(0, 9)) for _ in range(self.n(lo, hi))), self.rng.random() < 0.5)

    def items(self) -> str:
        k = self.c((1, 1, 1, 2, 2, 3))
        picked = self.rng.sample(V.GROCERIES, k)
        quant = [self.opt(self.c(cardinal(self.n(2, 12)), "some", "a dozen", "two bags of", "a pack of",
                                 "a bottle of", "a carton of", "a box of"), 0.3) for _ in picked]
        words = [self._join(q, g) for q, g in zip(quant, picked)]
        return words[0] if k == 1 else " ".join(words[:-1]) + " and " + words[-1]

    def temperature(self) -> str:
        v = self.n(-10, 95) if self.rng.random() < 0.8 else self.n(15, 30)
        unit = self.opt(" degree" if abs(v) == 1 else " degrees", 0.8)
        return f"{cardinal(v)}{unit}{self.opt(self.c(' fahrenheit', ' celsius'), 0.15) if unit else ''}"

    # ---------------------------------------------------------------- intents
    # Templates: (a|b|c) picks one alternative (may be empty), [x] is optional,
    # $slot is a keyword argument, a method of this class, or (UPPER CASE) a
    # random entry of the vocabulary list V.SLOT.  Each intent picks one template.

    def lights(self) -> str:
        off = self.rng.random() < 0.5
        verb = "(turn|switch|flip|shut)" if off else "(turn|switch|flip)"
        return self.t(self.c(
            f"{verb} $onoff (the|the|my|all the|all of the) $ROOMS $LIGHTS",
            f"{verb} (the|my) $ROOMS $LIGHTS $onoff",
            f"{verb} $onoff the $LIGHTS in the $ROOMS",
            "$ROOMS $LIGHTS $onoff",
            "lights $onoff[ in the $ROOMS]",
            "(dim|brighten|set|change) the $LIGHTS[ in the $ROOMS] to $pct",
            "(set|change|make|turn) the $ROOMS $LIGHTS [to ]$COLORS",
            "make (it|the $ROOMS|the lights) (brighter|darker|dimmer|a bit brighter|a little darker|warmer|cooler)"
            "[ in here]",
            "(are|did i leave) the $LIGHTS (on|off) in the $ROOMS",
            "(dim|lower|bring down|turn down|raise|brighten|bring up|turn up) the $ROOMS $LIGHTS by $pct",
            f"{verb} $onoff every light (in the house|downstairs|upstairs|except the $ROOMS)",
            "set the $ROOMS $LIGHTS to (full brightness|half brightness|level $small|$pct)",
            "(turn|switch) (on|off) the $LIGHTS (in the $ROOMS|at $time|in $duration)",
        ), onoff="off" if off else "on")

    def devices(self) -> str:
        return self.t(self.c(
            "(turn|switch) (on|off) the [$ROOMS ]$DEVICES",
            "(turn|switch) the $DEVICES[ in the $ROOMS] (on|off)",
            "(lock|unlock|open|close) the $DOORS",
            "is the $DOORS (locked|open|closed|unlocked)",
            "(start|stop|pause|run) the (dishwasher|washing machine|dryer|vacuum|robot vacuum|sprinklers|coffee maker)"
            "[ $when]",
            "(open|close|raise|lower) the (blinds|curtains|shades|shutters)[ in the $ROOMS][ halfway]",
            "set the (fan|ceiling fan|air purifier|humidifier) to (low|medium|high|speed $small|auto)",
            "(preheat|set) the oven to $oven[ degrees]",
        ), oven=lambda: cardinal(self.c((325, 350, 375, 400, 425, 450, self.n(150, 500)))))

    def thermostat(self) -> str:
        return self.t(self.c(
            "set $thing to $temperature",
            "(raise|lower|increase|decrease|turn up|turn down|bump up) $thing by $small[ degrees]",
            "(what is|what's) the temperature (inside|in the $ROOMS|in here|outside|upstairs)",
            "make it (warmer|cooler|a little warmer|a bit cooler|colder|hotter)[ in here]",
            "(i'm|it's|we're) (cold|hot|freezing|too warm|a bit chilly)",
            "(switch|set|change) the thermostat to (heat|cool|auto|eco|off)[ mode]",
            "(keep|set) the $ROOMS at $temperature $day",
            "$thing to $temperature",
        ), thing="(the thermostat|the heat|the temperature|the heating|the air conditioning)")

    def timer(self) -> str:
        length = self.timer_length()
        return self.t(self.c(
            "set a timer for $duration",
            "(set|start|create|make) $a $length timer",
            "(set|start) a $TIMER_NAMES timer for $duration",
            "timer $duration",
            "how much time is left on (the|my) [$TIMER_NAMES ]timer",
            "(cancel|stop|pause|resume|delete) the [$TIMER_NAMES ]timer",
            "add $duration to (the|my) [$TIMER_NAMES ]timer",
            "(count down from|start a countdown from) $num",
            "$length timer for the $TIMER_NAMES",
        ), a=_an(length), length=length)

    def alarm(self) -> str:
        return self.t(self.c(
            "set an alarm for $time[ $day]",
            "wake me up at $time[ $day]",
            "$day wake me [up ]at $time",
            "(cancel|delete|turn off|disable|remove) (my|the) $time alarm",
            "(snooze|snooze for $duration|stop the alarm|turn off the alarm|dismiss)",
            "(what alarms do i have|when is my next alarm)[ $day]",
            "what time is my alarm set for[ $dayb]",
            "do i have an alarm set for $dayb",
            "set a (recurring|daily|weekday|weekend) alarm (for|at) $time",
            "(move|change) my alarm (to|from $time to) $time",
        ))

    def reminder(self) -> str:
        return self.t(self.c(
            "remind me to $TASKS $when",
            "remind me $when to $TASKS",
            "(set|create|add) a reminder (to|for me to) $TASKS[ $when]",
            "(don't let me forget|make sure i remember|remind me) to $TASKS",
            "(what are my reminders|what reminders do i have|read my reminders|do i have any reminders)[ for $dayb]",
            "(cancel|delete|remove) (the|my) reminder to $TASKS",
            "$when remind me to $TASKS",
        ))

    def calendar(self) -> str:
        return self.t(self.c(
            "(schedule|book|add|set up|put) a $EVENTS with $name $when",
            "what's on my calendar ($day|on $date)",
            "(when is|where is|what time is) my [next ]$EVENTS",
            "the $EVENTS is (on $WEEKDAYS|$day|on $date) at $time",
            "(move|reschedule|push) my $EVENTS [with $name ]to ($day|$time|next week)",
            "(cancel|delete) (my|the) $EVENTS (with $name|on $WEEKDAYS|$day)",
            "am i free $when",
            "i have a $EVENTS $when",
        ))

    def music(self) -> str:
        return self.t(self.c(
            "play $MUSIC$where",
            "(put on|start playing|i want to hear|let's hear|can i hear) $MUSIC$where",
            "play (my|the) $PLAYLISTS playlist$where",
            "play (the latest episode of|the news on|the podcast) $PODCASTS",
            "play something (relaxing|upbeat|calm|fun)",
            "play (some music|a song|music|songs) (for dinner|to help me sleep|for working out|i like|from the eighties"
            "|from the nineties|from $year|for kids|to dance to)",
            "(what song is this|who sings this|what's playing|what album is this from|who is this artist)",
            "(shuffle|play) (my|the) $PLAYLISTS (playlist|mix|station)",
            "play $STATIONS radio",
            "(add this song to|save this to|remove this from) my $PLAYLISTS playlist",
        ), where="( in the $ROOMS| on the $ROOMS speaker| everywhere| on all speakers||||||||)",
            year=lambda: self.year(1960, 2024))

    def volume(self) -> str:
        return self.t(self.c(
            "(set|change|put) the volume to ($small|$pct|$num)",
            "volume (up|down|$small|to $num)[ by $small]",
            "turn (it|the volume|the music|the sound|the $ROOMS speaker) (up|down)[ (a little|a bit|a lot|by $small)]",
            "(louder|quieter|softer|a little louder|a bit quieter|too loud|i can't hear it)",
            "(mute|unmute)[ (the speaker|the television|the music|yourself|the $ROOMS)]",
            "(increase|decrease|raise|lower) the volume (by $num|to $pct|)",
            "what's the volume[ at]",
            "(make it|make the music|can you make it) (louder|quieter|a little softer)",
        ))

    def playback(self) -> str:
        return self.t(self.c(
            "$PLAYBACK",
            "(skip|rewind|go back|fast forward|jump ahead|skip ahead) ($seconds seconds|$duration)",
            "(skip|go|jump) to (track|song|chapter|episode) $num",
            "(play|skip to|go to) the $nth (song|track|chapter|episode)",
            "(play|watch|put on|resume) season $small episode $num",
            "(pause|resume|stop|play|restart|skip|replay|continue) the (music|song|podcast|movie|show|video|audiobook)",
        ), seconds=lambda: cardinal(self.n(5, 90)), nth=lambda: ordinal(self.n(1, 30)))

    def weather(self) -> str:
        return self.t(self.c(
            "what's the weather[ like][ in $CITIES][ $dayb]",
            "(will it|is it going to|does it look like it will) (rain|snow|be sunny|be windy|be cold|storm) "
            "($dayb|in $CITIES|$dayb in $CITIES)",
            "(what's the|tell me the|give me the) forecast for ($dayb|$CITIES|the weekend|next week|this week)",
            "(how hot|how cold|how warm|how windy) (is it|will it be) ($dayb|outside|in $CITIES)",
            "do i need (an umbrella|a jacket|a coat|sunscreen) $dayb",
            "what's the (temperature|humidity|wind speed|chance of rain|pollen count|high|low) "
            "($dayb|in $CITIES|right now|outside)",
            "is it (raining|snowing|cold|sunny) in $CITIES",
            "weather in $CITIES[ $dayb]",
        ))

    def call(self) -> str:
        return self.t(self.c(
            "(call|phone|ring|dial|video call|facetime) $name[ (on mobile|at home|at work|on speaker|on the cell)]",
            "(call|dial) $phone",
            "call (home|work|the office)[ (now|please)]",
            "(my number is|my phone number is|the number is|you can reach me at|call me back at) $phone",
            "(answer|decline|hang up|ignore) (the call|it|)",
            "who (called|called me|texted me|was at the door)[ $past_day]",
            "(call|get) $name on the phone",
        ))

    def message(self) -> str:
        return self.t(self.c(
            "(text|message|send a message to|send a text to|tell) $name (saying|that|) $MESSAGES",
            "send $name a (message|text|note) (saying|that says) $MESSAGES",
            "(read|check|play) my (messages|texts|new messages|voicemail|email)[ from $name]",
            "(reply|respond) [to $name ](with|saying) $MESSAGES",
            "tell $name i'll be (late|there|home|back) in $duration",
            "did $name (text|call|email|message) me[ $past_day]",
            "(email|send an email to) $name about (the|my|our) $EVENTS $day",
        ))

    def shopping(self) -> str:
        item = self.c(V.GROCERIES)
        return self.t(self.c(
            "(add|put) $items (to|on) (my|the) $list",
            "(remove|take|delete) $items (from|off) (my|the) $list",
            "(what's on|read|show me|what is on) my $list",
            "(we need|we're out of|i need|we're running low on) $items",
            "(order|buy|reorder) ($count|more|some) $GROCERIES",
            f"{'are' if item.endswith('s') else 'is'} $item on (my|the) $list",
            "(clear|empty|share) my $list",
        ), item=item, list="(shopping list|grocery list|list|shopping list|to do list)")

    def numbers(self) -> str:
        return self.t(self.c(
            "my (code|pin|pin number|zip code|confirmation code|access code|account number|order number|member number"
            "|passcode) is $code",
            "the (code|door code|gate code|wifi password|tracking number|flight number|room number|reference number)"
            " is $code",
            "(what's|what is|calculate|how much is) $num3 (plus|minus|times|divided by) $num",
            "(convert|what's) $quantity $UNIT_PAIRS",
            "how many $HOW_MANY",
            "(it costs|the total is|that comes to|i paid|i owe you|the bill was|pay|send) $amount",
            "(how much is|what's) $amount in (euros|dollars|pounds|yen|pesos)",
            "(it's|that's|there's a|they're offering) $pct (off|discount|interest|battery|humidity|chance of rain)",
            "what's $pct of $num4",
            "the population of $CITIES is $big_number",
            "($CITIES has about|there are|roughly) $big_number people[ live in $CITIES]",
            "we have $big_number (followers|subscribers|customers|visitors)",
            "(the house costs|the car was|they sold it for|the budget is|we raised) $big_number "
            "(dollars|euros|pounds)",
            "(i was born in|we moved here in|that was in|it happened in|the song came out in|the company started in)"
            " $year",
            "(i'm|she's|he's|my son is|my daughter is|grandpa is) $age years old",
            "(i live at|the address is|send it to|deliver it to) $house_number $STREETS",
            "(what's the square root of|what's|spell|say) $big_number",
            "(pick|give me) a random number between $small and $num4",
        ), num3=lambda: self.number(0, 1000), num4=lambda: self.number(11, 10_000),
            quantity=lambda: self.c(cardinal(self.n(1, 500)), decimal(f"{self.n(0, 99)}.{self.n(1, 9)}")),
            year=lambda: self.year(1900, 2030), age=lambda: cardinal(self.n(1, 99)),
            house_number=lambda: self.c(cardinal(self.n(1, 9999)), digits(str(self.n(10, 9999)))))

    def dates(self) -> str:
        return self.t(self.c(
            "what day (is|was|will it be on) $date",
            "how many days (until|till|are left until|since) ($date|christmas|my birthday|the weekend|new year's eve)",
            "(my birthday is|our anniversary is|the party is|the deadline is|we leave|school starts) [on ]$date",
            "what's the date (today|tomorrow|next friday|on $WEEKDAYS)",
            "(what year is it|what's today's date|what day is it|what's the date)",
            "(book a table for|reserve a table for|table for) $count [people ](on $date|$day) at $time",
            "set the date to $date",
        ))

    def clock(self) -> str:
        return self.t(self.c(
            "(what time is it|what's the time|do you have the time|tell me the time|what time is it now)",
            "what time is it in $CITIES",
            "how long (until|till) $time",
            "it's $time",
            "(what time does|when does) (the store|the pharmacy|the bank|the library|the gym|the game|the movie)"
            " (open|close|start)[ $day]",
            "(what time does|when does) the sun (rise|set)[ $day]",
        ))

    def answer(self) -> str:
        return self.c(V.ANSWERS)

    def misc(self) -> str:
        return self.t(self.c(
            "$MISC",
            "(start|run|turn on|activate) (my|the) (morning|bedtime|movie|dinner|leaving home|good night|focus|party)"
            " (routine|scene|mode)",
            "how (long will it take|far is it|long is the drive) to (get to work|get home|the airport|$CITIES)",
            "(what's the score of|who won|when is) the $TEAMS game[ $day]",
            "(how do you spell $WORDS|what does $WORDS mean|define $WORDS|what's the meaning of $WORDS"
            "|what's another word for $WORDS)",
            "(find|search for|look up|show me) (a recipe for|how to make) $RECIPES",
            "(find|show me|where's|directions to) the nearest $PLACES",
            "(what are the hours for|when does) the $PLACES[ (open|close)]",
        ))

    def banking(self) -> str:
        return self.t(self.c(
            "(transfer|send|move|wire) $amount (to|into) $account",
            "(transfer|send|pay|wire) $amount to $name",
            "(transfer|move) $amount from (my|the) $ACCOUNTS (account|) to (my|the) $ACCOUNTS[ account]",
            "pay $name $amount[ for (the|my) $BILLS]",
            "(pay|schedule a payment for) (my|the) $BILLS[ $when]",
            "(split|share) (the bill|the check|dinner|the rent) with $name",
            "(request|ask for) $amount from $name[ for (the|my) $BILLS]",
            "(what's|what is|check|tell me) my $ACCOUNTS (balance|account balance)",
            "how much (money do i have|is) in my $ACCOUNTS[ account]",
            "(did $name (pay|send|transfer)|has $name (paid|sent)) (me|the money|the rent)[ $past_day]",
            "(show me|read me|what were) my (last|latest|recent) $few (transactions|payments|deposits)",
            "(how much did i spend|what did i spend) on $SPENDING $period",
            "(set|change) my (budget|spending limit) for $SPENDING to $amount",
            "(cancel|stop) the (payment|transfer) to $name",
        ), account=lambda: self.t("((my|the) $ACCOUNTS[ account]|$name)"),
            few=lambda: cardinal(self.n(2, 20)),
            period=lambda: self.c("this month", "last month", "this week", "last week", "this year", "today",
                                  "yesterday", "in " + V.MONTHS[self.n(0, 11)]))

    def history(self) -> str:
        """Statements and questions about years: built, born, founded, released ..."""
        return self.t(self.c(
            "(it|the house|the bridge|the church|the school|the building|this place|the tower) was "
            "(built|finished|opened|renovated|designed|sold|rebuilt) in $year",
            "(he|she|my grandfather|my grandmother|my dad|my mom|the author|the singer) was born in $year",
            "(the company|the band|the city|the club|the restaurant|the museum) was (founded|started|formed)"
            " in $year",
            "(the movie|the album|the song|the book|the game|the phone) (came out|was released|was published)"
            " in $year",
            "(when was|what year was) (the $LANDMARKS|the eiffel tower|the first iphone) (built|made|released)",
            "(who won|what happened|who was president) in $year",
            "(we|they|i) (got married|moved|graduated|met) in $year",
            "(play|show me) (music|songs|movies|photos|the top hits) from $year",
        ), year=lambda: self.year(1800, 2030))

    def amount(self) -> str:
        r = self.rng.random()
        cur = self.c("dollar", "dollar", "dollar", "euro", "pound")
        if r < 0.15:
            return money(0, self.n(1, 99), cur)
        units = self.c((self.n(1, 20), self.n(1, 200), self.n(100, 99_999)))
        if r < 0.55:
            return money(units, 0, cur)
        if r < 0.9:
            return money(units, self.n(1, 99), cur, and_cents=self.rng.random() < 0.6)
        return f"{cardinal(units)} {cardinal(self.n(10, 99))}"  # "five twenty" style

    # small number slots
    def small(self) -> str:
        return cardinal(self.n(1, 10))

    def num(self) -> str:
        return self.number(1, 100)

    def count(self) -> str:
        return cardinal(self.n(1, 24))

    def pct(self) -> str:
        v = self.n(0, 100) if self.rng.random() < 0.85 else f"{self.n(0, 99)}.{self.n(1, 9)}"
        return percent(v)

    def dayb(self) -> str:
        return self.day(bare=True)

    # --------------------------------------------------------- composition
    _COMMANDS = ("lights", "lights", "devices", "thermostat", "timer", "timer", "alarm", "reminder", "calendar",
                 "music", "music", "volume", "playback", "weather", "weather", "call", "message", "shopping",
                 "numbers", "numbers", "numbers", "dates", "clock", "misc", "banking", "history")

    def command(self) -> str:
        """One command or question, sometimes wrapped in a prefix and/or suffix.

        Request prefixes ("could you please") and suffixes ("for me") only wrap
        imperatives (first word a verb); discourse markers ("okay", "um") and
        "please"/"thanks" wrap anything.
        """
        s = getattr(self, self.c(self._COMMANDS))()
        imperative = s.split()[0] in V.VERBS
        if self.rng.random() < 0.35:
            pre = V.REQUEST_PREFIXES if imperative and self.rng.random() < 0.65 else V.DISCOURSE_PREFIXES
            s = f"{self.c(pre)} {s}"
        if self.rng.random() < 0.2:
            s = f"{s} {self.c(V.REQUEST_SUFFIXES if imperative and self.rng.random() < 0.6 else V.POLITE_SUFFIXES)}"
        return s

    def slot_drill(self) -> str:
        """A short command dense in open-class words: first and last names, cities, groceries, artists.

        Each such word is one entry of a long list, so the full grammar shows it only
        a few times per ten thousand sentences; these commands raise that count
        without new vocabulary (the phone-line phrases are the only new words).
        """
        return self.t(self.c(
            "(call|phone|ring|video call) $person[ ((on|at) (the|his|her|their) (home|work|office|cell|mobile)"
            " (phone|number)|on speaker|at (home|work))]",
            "(text|message|email|send a text to|send a message to) $person[ (and|or) $FIRST_NAMES]",
            "(tell|ask|remind) $FIRST_NAMES to (call|text|email) $FIRST_NAMES",
            "(did $FIRST_NAMES (call|text|write|reply|pay)|has $FIRST_NAMES (called|texted|written|replied|paid))"
            "[ $past_day]",
            "(remind me to call|schedule a call with|set up a meeting with) $person[ (on $date|$day)]",
            "(transfer|send|pay) $amount to $FIRST_NAMES",
            "(is $FIRST_NAMES (home|there|coming to dinner)|will $FIRST_NAMES (be home|be there|come to dinner"
            "|call back))[ $day]",
            "(add|put) $items (to|on) (the|my) (shopping|grocery) list",
            "(do we need|do we have|do i need) $GROCERIES[ (and|or) $GROCERIES]",
            "(remove|take|cross) $GROCERIES[ and $GROCERIES] off the list",
            "(order|buy) (some|more) $GROCERIES (and|or) $GROCERIES",
            "(what's|what is) the (weather|forecast|time|temperature) in $CITIES[ $dayb]",
            "(how far is it|how long does it take) (to|from) $CITIES[ to $CITIES]",
            "(book a flight to|find flights to|find hotels in|navigate to) $CITIES[ $day]",
            "(play|put on|shuffle) $MUSIC[ in the $ROOMS]",
        ), person="$FIRST_NAMES[ $LAST_NAMES]")

    def sentence(self) -> str:
        """An in-domain utterance (normalized), never containing the wake phrase."""
        return self._without_keyword(self._sentence)

    def _sentence(self) -> str:
        if self.slot_focus and self.rng.random() < self.slot_focus:
            return self._finish(self.slot_drill())
        r = self.rng.random()
        if r < 0.05:
            s = self.answer()
        elif r < 0.15:
            s = f"{self.command()} {self.c('and', 'and then', 'then', 'and also')} {self.command()}"
        elif r < 0.19:
            s = f"{self.answer()} {self.command()}"
        else:
            s = self.command()
        return self._finish(s)

    def keyword_sentence(self) -> str:
        """ "hey stream" alone (about 20%) or followed by an utterance."""
        r = self.rng.random()
        if r < 0.2:
            s = KEYWORD
        elif r < 0.25:
            s = f"{self.c(V.WAKE_LEADS)} {KEYWORD} {self.command()}"
        else:
            filler = self.c("", "", "", "", "um", "uh", "okay")
            s = f"{KEYWORD} {filler} {self.command() if r < 0.93 else self.answer()}"
        return self._finish(s)

    def confusable_negative(self) -> str:
        """A negative for wake-word training: no "hey stream", but similar sounds or words."""
        return self._without_keyword(self._negative)

    def _negative(self) -> str:
        r = self.rng.random()
        if r < 0.35:  # sound-alike wake phrase + command
            s = f"{self.c(V.CONFUSABLE_LEADS)} {self.command()}"
        elif r < 0.5:
            s = self.c(V.CONFUSABLE_LEADS)
        elif r < 0.8:
            s = self._confusable_sentence()
        else:  # confusable words after a command
            s = f"{self.command()} {self.c('and', 'then')} {self._confusable_sentence()}"
        return self._finish(s)

    def _confusable_sentence(self) -> str:
        return self.t(self.c(V.CONFUSABLE_SENTENCES), n=lambda: cardinal(self.n(2, 30)))

    @staticmethod
    def _finish(s: str) -> str:
        s = " ".join(s.replace("-", " ").split())
        if not is_normalized(s):
            raise AssertionError(f"TextGenerator produced a non-normalized sentence: {s!r}")
        return s

    def _without_keyword(self, make) -> str:
        """Draw from ``make`` until the result does not contain the wake phrase as words."""
        while True:
            s = make()
            if not _KEYWORD_RE.search(s):
                return s


class V:
    """Vocabulary for the templates (all normalized: lower-case a-z, space, apostrophe)."""

    ROOMS = ("kitchen", "living room", "bedroom", "master bedroom", "bathroom", "hallway", "garage", "office",
             "basement", "dining room", "kids room", "guest room", "porch", "patio", "attic", "laundry room",
             "nursery", "study", "front room", "back room", "den", "family room", "entryway", "balcony",
             "playroom", "upstairs bathroom", "downstairs bathroom", "guest bedroom", "sunroom", "workshop",
             "front yard", "back yard", "garden", "closet", "hall", "lounge", "library", "gym", "spare room")
    LIGHTS = ("lights", "lights", "light", "lamp", "ceiling light", "floor lamp", "desk lamp", "reading light",
              "light strip", "overhead lights", "lamps", "bulbs", "night light", "pendant lights", "spotlights",
              "string lights", "wall lights", "porch light")
    DEVICES = ("fan", "ceiling fan", "heater", "space heater", "air conditioner", "television", "speaker", "radio",
               "smart plug", "coffee maker", "kettle", "dishwasher", "washing machine", "dryer", "vacuum",
               "air purifier", "humidifier", "dehumidifier", "electric blanket", "sprinklers", "oven", "stove fan",
               "projector", "sound bar", "fireplace", "hot tub", "pool pump", "computer", "printer", "router",
               "christmas tree", "fountain", "towel warmer", "water heater")
    DOORS = ("front door", "back door", "garage door", "side door", "gate", "patio door", "basement door",
             "front gate", "shed", "bedroom window", "kitchen window")
    COLORS = ("red", "blue", "green", "warm white", "cool white", "daylight", "purple", "orange", "yellow", "pink",
              "teal", "soft white", "candlelight", "lavender", "turquoise", "magenta", "gold", "white", "amber",
              "sky blue", "lime green", "violet", "crimson", "a sunset color", "a relaxing color", "rainbow")
    FIRST_NAMES = ("john", "mary", "james", "patricia", "robert", "jennifer", "michael", "linda", "william",
                   "elizabeth", "david", "barbara", "richard", "susan", "joseph", "jessica", "thomas", "sarah",
                   "charles", "karen", "chris", "nancy", "daniel", "lisa", "matthew", "betty", "anthony",
                   "margaret", "mark", "sandra", "paul", "ashley", "andrew", "emily", "josh", "donna",
                   "kevin", "michelle", "brian", "carol", "george", "amanda", "tim", "melissa", "jason",
                   "deborah", "ryan", "stephanie", "jacob", "rebecca", "gary", "laura", "nick", "sharon",
                   "eric", "cynthia", "jonathan", "kathleen", "larry", "amy", "justin", "anna", "scott",
                   "olivia", "brandon", "emma", "frank", "sophia", "ben", "mia", "sam", "grace", "alex",
                   "chloe", "luis", "maria", "carlos", "sofia", "wei", "mei", "raj", "priya", "mohammed",
                   "fatima", "ahmed", "aisha", "hiroshi", "yuki", "ivan", "olga", "pierre", "claire",
                   "hans", "ingrid", "kofi", "amara", "diego", "lucia", "noah", "liam", "ethan", "ava",
                   "isabella", "lucas", "zoe", "nora", "leo", "max", "ella", "jack", "lily", "henry", "ruby",
                   "oscar", "hannah", "adam", "rachel", "peter", "julia", "tony", "kate", "steven", "helen",
                   "dennis", "joan", "walter", "alice", "victor", "diana", "owen", "fiona", "tyler", "megan")
    LAST_NAMES = ("smith", "johnson", "williams", "brown", "jones", "garcia", "miller", "davis", "rodriguez",
                  "martinez", "hernandez", "lopez", "wilson", "anderson", "taylor", "thomas", "moore",
                  "jackson", "martin", "lee", "thompson", "white", "harris", "clark", "lewis", "robinson",
                  "walker", "young", "allen", "king", "wright", "scott", "green", "baker", "adams", "nelson",
                  "hill", "campbell", "mitchell", "roberts", "carter", "phillips", "evans", "turner", "patel",
                  "nguyen", "kim", "chen", "wang", "singh", "kowalski", "murphy", "o'brien", "o'connor",
                  "mcdonald", "fischer", "schmidt", "rossi", "silva", "cohen", "tanaka", "ali")
    RELATIONS = ("mom", "dad", "mum", "grandma", "grandpa", "my wife", "my husband", "my sister", "my brother",
                 "my mother", "my father", "my son", "my daughter", "my boss", "the office", "the doctor",
                 "the dentist", "my aunt", "my uncle", "my neighbor", "my partner",
                 "the babysitter", "the plumber", "my friend", "the school", "the vet", "grandma and grandpa")
    DAY_WORDS = ("today", "tomorrow", "tonight", "this evening", "this afternoon", "this morning",
                 "tomorrow morning", "tomorrow night", "tomorrow afternoon", "next week", "on the weekend",
                 "this weekend", "the day after tomorrow", "next monday", "next tuesday", "on friday",
                 "on saturday", "on sunday", "on monday", "on wednesday", "on thursday", "every day",
                 "every morning", "every weekday", "later", "later today", "next month", "right now", "now",
                 "in the morning", "at lunch", "after dinner", "before bed", "on tuesday")
    PAST_DAY_WORDS = ("today", "yesterday", "this morning", "last night", "earlier", "this afternoon",
                      "while i was out", "an hour ago", "last week", "on monday", "yesterday evening")
    WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
              "october", "november", "december")
    TIMER_NAMES = ("pasta", "egg", "pizza", "oven", "laundry", "cookie", "rice", "tea", "workout", "nap",
                   "homework", "meditation", "bread", "roast", "chicken", "cake", "parking", "study", "potato",
                   "screen time", "break", "turkey", "steak", "soup", "coffee")
    TASKS = ("call mom", "take out the trash", "water the plants", "pick up the kids", "buy milk",
             "take my medicine", "feed the cat", "walk the dog", "pay the rent", "check the oven",
             "call the doctor", "send the report", "book the flight", "renew my passport", "pay the electric bill",
             "move the car", "charge my phone", "start the laundry", "lock the door", "bring an umbrella",
             "email john", "pick up the dry cleaning", "go to the gym", "stretch", "drink some water",
             "turn off the oven", "buy a birthday present", "call the plumber", "return the library books",
             "take the chicken out of the freezer", "check the mail", "set the table", "leave for the airport",
             "feed the fish", "cancel my subscription", "wish sarah a happy birthday", "order more coffee",
             "clean the fridge", "schedule a haircut", "text my sister", "submit my timesheet",
             "take out the recycling", "pay the credit card", "check on grandma")
    EVENTS = ("meeting", "call", "appointment", "dentist appointment", "doctor's appointment", "lunch", "dinner",
              "video call", "interview", "haircut", "yoga class", "soccer practice", "piano lesson",
              "team meeting", "one on one", "conference call", "date night", "parent teacher conference",
              "flight", "party", "birthday party", "check up", "review", "standup", "book club", "game night",
              "presentation", "workout", "coffee")
    MUSIC = ("jazz", "classical music", "rock", "some rock music", "hip hop", "country music", "pop music",
             "the beatles", "taylor swift", "beyonce", "queen", "miles davis", "bach", "mozart", "the rolling stones",
             "lo fi beats", "reggae", "blues", "ambient music", "white noise", "rain sounds", "ocean sounds",
             "kids songs", "christmas music", "the radio", "something by adele", "elton john", "bob marley",
             "some jazz", "some piano music", "metal", "folk music", "latin music", "salsa", "k pop", "disco",
             "eighties hits", "nineties rock", "top forty", "the news", "my favorites", "my liked songs",
             "bohemian rhapsody", "hey jude", "billie eilish", "ed sheeran", "frank sinatra", "nirvana",
             "the weeknd", "drake", "dolly parton", "johnny cash", "coldplay", "fleetwood mac")
    PLAYLISTS = ("workout", "chill", "dinner", "focus", "morning", "road trip", "party", "sleep", "running",
                 "study", "summer", "discover weekly", "favorites", "relax", "cooking", "rainy day",
                 "throwback", "kids", "jazz", "happy", "sunday morning", "late night")
    PODCASTS = ("the daily", "radiolab", "this american life", "the morning show", "science friday",
                "my favorite podcast", "the history podcast", "the tech show", "freakonomics", "the comedy hour")
    STATIONS = ("jazz", "classical", "country", "oldies", "hits", "public", "sports", "talk", "news", "rock",
                "kiss f m", "local")
    PLAYBACK = ("pause", "resume", "stop", "next", "next song", "skip", "skip this song", "previous",
                "previous song", "go back", "play", "play it again", "repeat", "repeat this song",
                "shuffle", "shuffle on", "shuffle off", "stop the music", "pause the music", "keep playing",
                "continue", "restart the song", "start over", "turn off repeat", "like this song",
                "i don't like this song", "play the next episode", "unpause")
    CITIES = ("new york", "london", "paris", "tokyo", "chicago", "seattle", "boston", "berlin", "sydney",
              "toronto", "denver", "austin", "miami", "dallas", "madrid", "rome", "dublin", "los angeles",
              "san francisco", "atlanta", "phoenix", "houston", "vancouver", "mexico city", "mumbai",
              "delhi", "beijing", "shanghai", "seoul", "cairo", "lagos", "nairobi", "cape town", "amsterdam",
              "brussels", "vienna", "prague", "warsaw", "stockholm", "oslo", "helsinki", "lisbon", "athens",
              "istanbul", "moscow", "bangkok", "singapore", "manila", "jakarta", "melbourne", "auckland",
              "honolulu", "anchorage", "portland", "nashville", "new orleans", "las vegas", "salt lake city",
              "minneapolis", "detroit", "philadelphia", "pittsburgh", "montreal", "edinburgh", "glasgow",
              "manchester", "birmingham", "liverpool", "buenos aires", "sao paulo", "lima", "bogota")
    GROCERIES = ("milk", "eggs", "bread", "butter", "apples", "bananas", "coffee", "paper towels", "dish soap",
                 "cheese", "yogurt", "orange juice", "chicken", "rice", "pasta", "tomatoes", "onions", "potatoes",
                 "carrots", "lettuce", "spinach", "cereal", "oatmeal", "peanut butter", "jam", "honey", "sugar",
                 "flour", "olive oil", "salt", "pepper", "toilet paper", "shampoo", "toothpaste", "batteries",
                 "light bulbs", "trash bags", "laundry detergent", "cat food", "dog food", "diapers", "wipes",
                 "ice cream", "cookies", "chips", "salsa", "avocados", "lemons", "limes", "garlic", "ground beef",
                 "salmon", "tofu", "beans", "soup", "tea", "sparkling water", "beer", "wine", "grapes",
                 "strawberries", "blueberries", "broccoli", "mushrooms", "bagels", "tortillas", "cream cheese",
                 "sour cream", "almond milk", "granola", "frozen peas", "aluminum foil", "sponges", "vitamins")
    UNIT_PAIRS = ("miles to kilometers", "kilometers to miles", "pounds to kilograms", "kilograms to pounds",
                  "cups to milliliters", "ounces to grams", "feet to meters", "inches to centimeters",
                  "degrees fahrenheit to celsius", "degrees celsius to fahrenheit", "liters to gallons",
                  "gallons to liters", "yards to meters", "acres to hectares", "meters in feet", "euros in dollars")
    HOW_MANY = ("tablespoons in a cup", "ounces in a pound", "minutes in a day", "seconds in an hour",
                "days in a year", "cups in a quart", "teaspoons in a tablespoon", "feet in a mile",
                "grams in a kilogram", "weeks in a year", "hours in a week", "days until christmas",
                "calories in an apple", "people live in canada", "steps did i take today")
    STREETS = ("main street", "oak avenue", "maple drive", "park road", "elm street", "pine lane",
               "washington boulevard", "lake shore drive", "first avenue", "second street", "broadway",
               "high street", "church road", "sunset boulevard", "river road", "hill street", "market street",
               "fifth avenue", "cedar court", "mill lane")
    ANSWERS = ("yes", "no", "yes please", "no thanks", "no thank you", "cancel", "stop", "never mind", "nevermind",
               "that's right", "correct", "nope", "yeah", "yep", "sure", "go ahead", "confirm", "cancel that",
               "stop it", "okay", "ok then", "thank you", "thanks", "repeat that", "say that again",
               "that's wrong", "no that's not what i said", "yes that's correct", "not now", "maybe later",
               "of course", "absolutely", "definitely not", "i said no", "forget it", "wait", "hold on",
               "one moment", "that's all", "that's it", "i'm done", "yes do it", "please don't", "stop talking",
               "be quiet", "that's fine", "sounds good", "perfect", "great thanks", "no stop", "cancel please",
               "yes i'm sure", "undo that", "go back", "help", "what can you do")
    MISC = ("good morning", "good night", "tell me a joke", "what's the news", "i'm leaving", "i'm home",
            "i'm going to bed", "what's new", "how are you", "thank you very much", "what's up", "tell me a story",
            "flip a coin", "roll a die", "roll two dice", "what can you do", "how's the traffic",
            "what's traffic like on the way to work", "find my phone", "where's my phone", "play a game",
            "what's my battery level", "read me the headlines", "give me my daily briefing", "turn everything off",
            "good afternoon", "let's go", "lock up", "start the car", "set the house to away mode",
            "arm the security system", "disarm the alarm system", "show me the front door camera",
            "who's at the door", "what did i miss", "what's for dinner", "how do i make pancakes")
    ACCOUNTS = ("checking", "savings", "credit card", "business", "joint", "retirement", "brokerage",
                "emergency fund", "vacation fund", "college fund", "main", "personal")
    BILLS = ("rent", "electric bill", "water bill", "phone bill", "internet bill", "gas bill", "mortgage",
             "car payment", "insurance", "credit card bill", "tuition", "dinner", "groceries", "tickets",
             "taxi", "concert tickets", "gym membership", "daycare")
    SPENDING = ("groceries", "restaurants", "gas", "coffee", "clothes", "shopping", "travel", "entertainment",
                "subscriptions", "take out", "utilities", "books", "gifts")
    LANDMARKS = ("golden gate bridge", "empire state building", "statue of liberty", "brooklyn bridge",
                 "sydney opera house", "tower bridge", "space needle", "white house", "colosseum", "taj mahal")
    TEAMS = ("yankees", "lakers", "patriots", "red sox", "warriors", "cowboys", "bulls", "giants", "arsenal",
             "chelsea", "liverpool", "real madrid", "maple leafs", "seahawks", "packers", "celtics", "dodgers",
             "cubs", "knicks", "eagles")
    WORDS = ("serendipity", "ephemeral", "ubiquitous", "necessary", "rhythm", "accommodate", "onomatopoeia",
             "photosynthesis", "algorithm", "quintessential", "definitely", "restaurant", "mischievous",
             "pronunciation", "entrepreneur", "conscientious", "wednesday", "february", "colonel", "gauge")
    RECIPES = ("chocolate chip cookies", "lasagna", "pizza dough", "thai curry", "sushi rice", "banana bread",
               "chicken soup", "tacos", "pancakes", "guacamole", "vegetable curry", "apple pie", "meatballs",
               "french toast", "fried rice", "chili", "mac and cheese", "lemonade", "hummus", "pad thai")
    PLACES = ("gas station", "pharmacy", "coffee shop", "hardware store", "post office", "grocery store", "bakery",
              "library", "museum", "pool", "bank", "hospital", "park", "gym", "bus stop", "train station",
              "parking garage", "thai restaurant", "pizza place", "car wash", "vet", "atm")
    MESSAGES = ("i'm on my way", "i'll be late", "running ten minutes late", "see you soon", "call me back",
                "dinner is ready", "love you", "happy birthday", "i'm home", "can you pick up milk",
                "where are you", "don't forget the keys", "the meeting is moved to three", "thanks for everything",
                "good luck today", "i'm stuck in traffic", "let's meet at noon", "can we talk later",
                "the kids are asleep", "bring a jacket", "i miss you", "what time is the game", "on my way home",
                "i'll call you tonight", "are you coming to dinner", "congratulations", "we need more coffee",
                "the package arrived", "leave the door unlocked", "how was your day")
    VERBS = frozenset(("activate add answer arm book brighten bring bump buy calculate call cancel change check "
                       "clear close continue convert count create decline decrease define delete deliver dial dim "
                       "disable dismiss email empty facetime fast find flip get give go hang ignore increase jump "
                       "keep lock look lower make message move mute open order pause pay phone pick play preheat "
                       "push put raise read remind remove reorder repeat replay reply reschedule reserve respond "
                       "restart resume rewind ring roll run save say schedule search send set share show shuffle "
                       "shut skip snooze spell start stop switch take tell text turn unlock unmute unpause video "
                       "wake watch transfer wire request split").split())
    REQUEST_PREFIXES = ("please", "can you", "could you", "could you please", "would you", "would you please",
                        "can you please", "i want you to", "i'd like you to", "i need you to", "go ahead and",
                        "will you", "kindly", "please just", "just", "i want to", "i'd like to", "help me",
                        "remember to", "don't forget to", "i need to", "you can", "try to")
    DISCOURSE_PREFIXES = ("okay", "um", "uh", "hey", "alright", "so", "and", "oh and", "actually", "i said",
                          "ok so", "right", "well", "now", "sorry", "excuse me", "quick question", "oh", "hmm",
                          "one more thing", "also")
    REQUEST_SUFFIXES = ("for me", "right now", "now", "for me please", "if you can", "when you get a chance",
                        "quickly", "right away", "as well", "too", "again", "please", "immediately", "real quick")
    POLITE_SUFFIXES = ("please", "thanks", "thank you", "okay", "please and thank you", "thanks a lot", "again",
                       "by the way", "then")
    WAKE_LEADS = ("okay", "um", "so", "oh", "alright", "excuse me", "hello", "yo", "and")
    CONFUSABLE_LEADS = ("hey steve", "hey string", "hey siri", "hey stranger", "hey sweetie", "hey dream",
                        "hey team", "hey stephen", "hey scream", "hey strings", 
                        "hey stella", "hey stu", "hey stan", "hey stacy", "hey trim", "hey cream", "hey steam",
                        "hey sean", "hey steven", "hey tim", "hey jim", "hey kim", "hey google", "hey you",
                        "hey there", "hey listen", "hey siri stream", "hi stream", "they stream", "the stream",
                        "a stream", "pay stream", "hey extreme", "ice cream", "okay google", "hey computer",
                        "hey strawberry", "hey street", "hey speaker", "hey sam", "hey stray", "stream", "hey",
                        "hey steam room", "hey mainstream", "hey bean", "hey jean", "hey frame",
                        "hey kristine", "hey christine", "hey upstream")
    CONFUSABLE_SENTENCES = (
        "buy some ice cream", "add ice cream to the shopping list", "i scream you scream we all scream for ice cream",
        "extreme weather warning for $dayb", "is there any extreme weather coming", "that's extreme",
        "hey string the lights on the tree", "a stream of water", "a stream of cars", "we walked along the stream",
        "the stream behind the house", "that song is pretty mainstream", "mainstream music", "the mainstream media",
        "stream the game on the television", "stream the new episode", "can i stream this", "live stream",
        "start a live stream", "the stream is buffering", "is the stream still live", "upstream", "downstream",
        "swim upstream", "the river flows downstream", "the stream keeps cutting out", "hey siri set a timer",
        "hey steve how are you", "hey steve can you help me", "hey stranger long time no see",
        "they stream movies every friday", "they stream $n hours a day", "the steam room is hot",
        "a steam engine", "steam the vegetables for $n minutes", "the dream was strange", "i had a weird dream",
        "a string of numbers", "hand me the string", "extreme sports", "the team is playing $dayb",
        "hey team great job", "hey $name", "hey $name what's up", "say hey to $name", "i scream",
        "hey there how's it going", "stream", "streaming service", "she streams on weekends", "streamline the process",
        "ice cream for dessert", "hay is stored in the barn", "the stream is frozen", "hey is for horses",
        "gulf stream", "jet stream", "bloodstream", "the jet stream is moving south", "extreme heat warning",
        "hey stephen call me", "hey sweetie dinner's ready", "hey mom", "the screen is frozen", "clean the screen",
        "hey there stranger", "stranger things", "a strong stream", "streamer", "screen time is over",
        "this stream has $n viewers", "a steady stream of customers", "dream team", "cream cheese")
