"""streamd.train.vocab: the text generator's vocabulary is data its templates can use: every entry normalized
(lower-case a-z, space, apostrophe) once its slots are filled, and no confusable phrase is the wake word."""

import re

import pytest

from streamd.train.text import KEYWORD, TextGenerator, is_normalized
from streamd.train.vocab import V

LISTS = sorted(n for n in vars(V) if n.isupper())


def test_every_list_is_non_empty_strings():
    assert len(LISTS) > 20
    for name in LISTS:
        entries = getattr(V, name)
        assert isinstance(entries, (tuple, frozenset)) and entries, name
        assert all(isinstance(e, str) and e for e in entries), name


@pytest.mark.parametrize("name", LISTS)
def test_entries_are_normalized_once_their_slots_are_filled(name):
    g = TextGenerator(0)
    for entry in getattr(V, name):
        if "$" not in entry:
            assert is_normalized(entry), (name, entry)
        filled = g.t(entry, n="twelve")  # $n: a number in words, as the generator passes it; an unknown slot raises
        assert is_normalized(filled), (name, entry, filled)


def test_the_templates_draw_from_the_lists():
    g = TextGenerator(1)
    for name in ("ROOMS", "DEVICES", "FIRST_NAMES"):
        assert {g.t(f"${name}") for _ in range(50)} <= set(getattr(V, name))


def test_confusable_phrases_never_hold_the_wake_word():
    kw = re.compile(rf"\b{KEYWORD}\b")
    g = TextGenerator(2)
    for name in ("CONFUSABLE_LEADS", "CONFUSABLE_SENTENCES"):
        for entry in getattr(V, name):
            assert not kw.search(entry), entry
            assert not kw.search(g.t(entry, n="twelve")), entry
