"""The template language of the synthetic corpus's text (:class:`~streamd.train.text.TextGenerator`) and its
slot fillers.

A template is text with ``(a|b)`` one alternative, ``[x]`` optional and ``$slot`` a filler
(:func:`parse_template`); :class:`Grammar` expands templates with a seeded ``random.Random`` and fills the
slots: a keyword argument, one of its filler methods (numbers, times, dates, durations, names, phone numbers,
groceries, temperatures, ... spelled as normalized words by :mod:`streamd.text.numbers`), or (upper-case names)
a random entry of a vocabulary list of :mod:`streamd.train.vocab`.
"""

from __future__ import annotations

import functools
import random
import re

from ..text.numbers import cardinal, clock_time, decimal, digits, ordinal, year
from .vocab import V


_TEMPLATE_TOKEN = re.compile(r"[()\[\]|]|\$[A-Za-z_][A-Za-z0-9_]*|[^()\[\]|$]+")


@functools.lru_cache(maxsize=4096)
def parse_template(template: str) -> tuple:
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


class Grammar:
    """Template expansion and slot fillers over one seeded random generator (``rng``)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

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
        return self._join(self._render(parse_template(template), slots))

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
            return v() if callable(v) else self._render(parse_template(str(v)), slots)
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
