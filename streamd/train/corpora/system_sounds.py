"""Prompts and test recordings that system packages install: Asterisk's core sounds, CMU Sphinx
transcriptions, saytime, ALSA's sounds, KLettres."""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Sequence

from .records import _audio_files, _count, _record, Record


# --------------------------------------------------------------------------- Asterisk prompts

ASTERISK_TEXTS = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
ASTERISK_SOUNDS = "/usr/share/asterisk/sounds/en_US_f_Allison"

# Annotations of the prompt list itself: "(simple tone sound plays)", "(note: does not say "2")",
# "(10 seconds of silence)", "[ascending tones]", "<beep ascending>", "at [@]".
_AST_ANNOTATION = re.compile(r"\([^)]*\)|\[[^\]]*\]|<[^>]*>")
# Misspellings in core-sounds-en.txt (the voice says the real word).
_AST_TYPOS = ((re.compile(r"\bumute\b", re.I), "unmute"), (re.compile(r"\bexclaimation\b", re.I), "exclamation"),
              (re.compile(r"\bun-indentified\b", re.I), "unidentified"), (re.compile(r"\bwitheld\b", re.I), "withheld"),
              (re.compile(r"\bfourtieth\b", re.I), "fortieth"), (re.compile(r"\bdecending\b", re.I), "descending"),
              (re.compile(r"\bthru\b", re.I), "through"))


def parse_asterisk_texts(path: str | Path) -> list[tuple[str, str]]:
    """``[(prompt name, text), ...]`` from an Asterisk sounds list (``core-sounds-en.txt[.gz]``).

    Lines are ``name: Text.``; ``;`` starts a comment line; names may hold
    subfolders (``digits/1``).  The text is returned verbatim.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(";"):
                continue
            name, sep, text = line.partition(":")
            if sep and name.strip() and " " not in name.strip():
                out.append((name.strip(), text.strip()))
    return out


def asterisk_spoken(text: str) -> str:
    """The prompt list's own conventions undone (annotations removed, its typos fixed); still written text."""
    t = _AST_ANNOTATION.sub(" ", text)
    for pat, rep in _AST_TYPOS:
        t = pat.sub(rep, t)
    return " ".join(t.split())


def asterisk_prompts(sounds_dir: str | Path = ASTERISK_SOUNDS, texts: str | Path = ASTERISK_TEXTS, *,
                     dropped: Counter | None = None) -> list[Record]:
    """Asterisk voice prompts (Debian ``asterisk-core-sounds-en`` + ``asterisk-core-sounds-en-wav``).

    ``texts``: the prompt list (``name: Text.``, see :func:`parse_asterisk_texts`);
    ``sounds_dir``: one voice's folder, ``<name>.wav`` (8 kHz for the Debian
    package).  The same layout holds for the extra-sounds lists and other
    voices.  Annotations (``[...]``, ``(...)``, ``<...>``) are removed and the
    list's typos fixed (:func:`asterisk_spoken`), then the text normalized;
    dropped with a count: ``non_speech`` (nothing left: beeps, silence),
    ``empty_text`` (no words after normalization), ``missing_audio``.
    Speaker = the voice folder name.  Record id = the prompt name.
    """
    sounds = Path(sounds_dir)
    if not sounds.is_dir():
        raise ValueError(f"asterisk: no sounds folder {sounds} (apt-get install asterisk-core-sounds-en-wav)")
    if not Path(texts).is_file():
        raise ValueError(f"asterisk: no prompt list {texts} (apt-get install asterisk-core-sounds-en)")
    out: list[Record] = []
    for name, text in parse_asterisk_texts(texts):
        spoken = asterisk_spoken(text)
        if not re.search(r"[A-Za-z0-9]", spoken):
            _count(dropped, "non_speech")
            continue
        audio = sounds / f"{name}.wav"
        if not audio.is_file():
            _count(dropped, "missing_audio")
            continue
        r = _record(name, audio, spoken, "asterisk", speaker=sounds.name, dropped=dropped,
                    extra=(("prompt_text", text),) if spoken != " ".join(text.split()) else ())
        if r is not None:
            out.append(r)
    return out


# --------------------------------------------------------------------------- CMU Sphinx transcriptions

_SPHINX_LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<id>[^()\s]+)\)\s*$")
_SPHINX_FILLER = re.compile(r"</?s>|<sil>|\+\+[^+]*\+\+|\+[^+\s]*\+")


def sphinx_transcription(transcription: str | Path, audio_dir: str | Path | None = None, *,
                         fileids: str | Path | None = None, ext: str = "wav", source: str = "sphinx",
                         speaker: str | None = None, dropped: Counter | None = None) -> list[Record]:
    """A CMU Sphinx test/training set (an4, pocketsphinx test data...).

    ``transcription`` lines: ``<s> text </s> (uttid)`` (fillers ``<sil>``,
    ``++NOISE++`` removed); ``fileids`` (optional) lists the audio paths
    without extension relative to ``audio_dir`` (default: the transcription's
    folder); their basename is the uttid.  Without fileids the audio is
    ``audio_dir/<uttid>.<ext>``.
    """
    transcription = Path(transcription)
    audio_dir = Path(audio_dir) if audio_dir is not None else transcription.parent
    by_id = {}
    if fileids is not None:
        for fid in Path(fileids).read_text().split():
            by_id[Path(fid).name] = fid
    out: list[Record] = []
    for line in transcription.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        m = _SPHINX_LINE.match(line.strip())
        if not m:
            _count(dropped, "unparsed")
            continue
        uid = m.group("id")
        audio = audio_dir / f"{by_id.get(uid, uid)}.{ext}"
        if not audio.is_file():
            _count(dropped, "missing_audio")
            continue
        written = " ".join(_SPHINX_FILLER.sub(" ", m.group("text")).split())
        r = _record(uid, audio, written, source, speaker=speaker, dropped=dropped)
        if r is not None:
            out.append(r)
    return out


def pocketsphinx_testdata(root: str | Path = "/usr/share/pocketsphinx/test/data", *,
                          dropped: Counter | None = None) -> list[Record]:
    """Debian ``pocketsphinx-testdata`` (BSD): ``cards/`` (5 card-game commands) and ``librivox/``
    (5 sentences of one LibriVox reader), both with Sphinx transcriptions.

    Left out: ``tidigits/`` (LDC licence, features only) and the headerless
    ``*.raw`` files (no transcript in the package).
    """
    root = Path(root)
    out: list[Record] = []
    for sub, spk in (("cards", None), ("librivox", "librivox_sense_and_sensibility_01")):
        d = root / sub
        trans = d / f"{sub}.transcription" if (d / f"{sub}.transcription").is_file() else d / "transcription"
        fids = d / f"{sub}.fileids" if (d / f"{sub}.fileids").is_file() else d / "fileids"
        if not trans.is_file():
            _count(dropped, f"missing:{sub}")
            continue
        recs = sphinx_transcription(trans, d, fileids=fids if fids.is_file() else None,
                                    source=f"pocketsphinx-testdata/{sub}", speaker=spk, dropped=dropped)
        out += [dataclasses.replace(r, id=f"{sub}/{r.id}") for r in recs]
    return out


# --------------------------------------------------------------------------- small Debian sound packages

# saytime file name -> written text (the digits are the numbers spoken; the rest are words).
_SAYTIME_WORDS = {"am": "a.m.", "pm": "p.m.", "oclock": "o'clock", "the_time_is": "the time is"}


def saytime(root: str | Path = "/usr/share/saytime", *, dropped: Counter | None = None) -> list[Record]:
    """Debian ``saytime``: one file per spoken time piece, ``<name>.au`` (8 kHz mu-law).

    The transcript is the file name: numbers ``0``..``20``, ``30``..``50``
    (spelled out: ``0`` is "zero"; ``oh`` is its own file), ``am``/``pm``
    ("a m"/"p m"), ``oclock``, ``the_time_is``, ``and``, ``exactly``,
    ``hour(s)``, ``minute(s)``, ``second(s)``.  One speaker.
    """
    root = Path(root)
    out: list[Record] = []
    for f in _audio_files(root):
        r = _record(f.stem, f, _SAYTIME_WORDS.get(f.stem, f.stem.replace("_", " ")), "saytime",
                    speaker="saytime", dropped=dropped)
        if r is not None:
            out.append(r)
    return out


def alsa_sounds(root: str | Path = "/usr/share/sounds/alsa", *, dropped: Counter | None = None) -> list[Record]:
    """Debian ``alsa-utils`` speaker-test voices: ``Front_Center.wav`` ... ("front center"), one speaker;
    ``Noise.wav`` is noise (text "", ``noise: true``)."""
    root = Path(root)
    out: list[Record] = []
    for f in _audio_files(root):
        noise = f.stem.lower() == "noise"
        r = _record(f.stem, f, "" if noise else f.stem.replace("_", " "), "alsa-utils",
                    speaker=None if noise else "alsa", noise=noise, dropped=dropped)
        if r is not None:
            out.append(r)
    return out


# KLettres English phonics sounds that are not words (their transcript would be a guess); en_GB "the" is a
# 0.2 s clip that sounds like the "th" phonics sound rather than the word.
_KLETTRES_NOT_WORDS = {"en": frozenset({"aw", "ch", "th"}), "en_GB": frozenset({"the"})}


def klettres(root: str | Path = "/usr/share/klettres", languages: Sequence[str] = ("en",), *,
             letters: bool = True, dropped: Counter | None = None) -> list[Record]:
    """Debian ``klettres-data``: ``<lang>/sounds.xml`` maps names to ``<lang>/alpha/*.ogg`` (letters) and
    ``<lang>/syllab/*.ogg`` (syllables), 44.1 kHz Vorbis.

    Only English is usable here.  ``en`` letters are spoken as letter names
    (text: the single letter, "a"); ``en_GB`` letters are phonics sounds and
    are not transcribable, so ``letters`` only applies to ``en``.  Syllables
    are kept when they are words ("car", "dog", "key"); the phonics fragments
    ``aw``/``ch``/``th`` (and en_GB's ``the``, a "th" sound) are dropped (``not_a_word``).  Syllable files missing
    from sounds.xml are taken from ``<lang>/syllab/`` by file name.
    """
    root = Path(root)
    out: list[Record] = []
    for lang in languages:
        d = root / lang
        entries: dict[str, tuple[str, str]] = {}  # file -> (kind, name)
        xml = d / "sounds.xml"
        if xml.is_file():
            for s in ET.parse(xml).getroot().iter("sound"):
                f = s.get("file") or ""
                kind = "alpha" if "/alpha/" in f else "syllab"
                entries[str(root / f)] = (kind, s.get("name") or "")
        if (d / "syllab").is_dir():
            for f in _audio_files(d / "syllab"):
                entries.setdefault(str(f), ("syllab", f.stem))
        for f, (kind, name) in sorted(entries.items()):
            if kind == "alpha" and not (letters and lang == "en"):
                _count(dropped, f"phonics_letter:{lang}")
                continue
            if kind == "syllab" and name.lower() in _KLETTRES_NOT_WORDS.get(lang, frozenset({"aw", "ch", "th"})):
                _count(dropped, "not_a_word")
                continue
            if not os.path.isfile(f):
                _count(dropped, "missing_audio")
                continue
            r = _record(f"{lang}/{kind}/{name}", f, name, "klettres", speaker=f"klettres_{lang}", dropped=dropped,
                        extra=(("kind", "letter" if kind == "alpha" else "word"),))
            if r is not None:
                out.append(r)
    return out
