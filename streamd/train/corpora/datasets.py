"""The public speech corpora: Speech Commands, LibriSpeech (lhotse's line parser), Common Voice."""

from __future__ import annotations

import csv
import os
import re
from collections import Counter
from pathlib import Path

from .records import _audio_files, _count, _cut_pieces, _record, _whole_pieces, audio_info, Record


# --------------------------------------------------------------------------- Speech Commands

_SC_NAME = re.compile(r"^(?:(?P<word>.+?)_)?(?P<spk>[0-9a-fA-F]+)_nohash_(?P<n>\d+)$")
_SC_NOISE = ("_silence_", "_background_noise_")


def speech_commands(root: str | Path, split: str = "all", *, noise_piece_s: float = 0.0,
                    noise_dir: str | Path | None = None, dropped: Counter | None = None) -> list[Record]:
    """Speech Commands (v0.01 / v0.02 and copies of its layout).

    Layout: ``root/<word>/<[word_]speaker>_nohash_<n>.wav|flac`` (both the
    official ``<speaker>_nohash_<n>`` names and ``<word>_<speaker>_nohash_<n>``),
    ``root/_unknown_/<word>_<speaker>_nohash_<n>`` (official test archive: the
    word is the name prefix), and background noise in ``_silence_`` /
    ``_background_noise_`` (text "", ``noise: true``, no speaker).

    Text: the folder name, normalized.  Speaker: the hash before ``_nohash_``.
    ``split``: ``all``, or ``train`` / ``valid`` / ``test`` by the official
    ``testing_list.txt`` / ``validation_list.txt`` in ``root`` (matched
    without extension, so FLAC copies work; train = in neither list; noise
    is train, as it is in no list).  ``noise_piece_s > 0`` cuts background
    files longer than twice that into pieces written to ``noise_dir``.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"speech commands: {root} is not a folder")
    if split not in ("all", "train", "valid", "test"):
        raise ValueError(f"speech commands: split must be all, train, valid or test, got {split!r}")
    lists: dict[str, set[str]] = {}
    if split != "all":
        for name, key in (("testing_list.txt", "test"), ("validation_list.txt", "valid")):
            f = root / name
            if not f.is_file():
                raise ValueError(f"speech commands: --split {split} needs {f} (the official layout's split "
                                 f"lists); use --split all")
            lists[key] = {os.path.splitext(line.strip())[0] for line in f.read_text().splitlines() if line.strip()}

    def split_of(rel: str) -> str:
        stem = os.path.splitext(rel)[0]
        return "test" if stem in lists["test"] else "valid" if stem in lists["valid"] else "train"

    out: list[Record] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = _audio_files(folder)
        noise = folder.name in _SC_NOISE
        if folder.name.startswith("_") and not noise and folder.name != "_unknown_":
            if files:
                _count(dropped, f"unknown_folder:{folder.name}", len(files))
            continue
        for f in files:
            rel = f"{folder.name}/{f.name}"
            if split != "all" and (("train" if noise else split_of(rel)) != split):
                continue
            if noise:
                info = audio_info(f)
                if noise_piece_s > 0 and info[0] >= 2 * noise_piece_s:
                    if noise_dir is None:
                        raise ValueError("speech commands: cutting background noise needs noise_dir")
                    for p, start, _ in _cut_pieces(f, Path(noise_dir), f"{folder.name}_{f.stem}",
                                                   _whole_pieces(noise_piece_s)):
                        out.append(_record(f"{folder.name}/{f.stem}@{start:.3f}", p, "", "speech_commands",
                                           noise=True, extra=(("piece_of", str(f.resolve())), ("start", start))))
                    continue
                out.append(_record(f"{folder.name}/{f.stem}", f, "", "speech_commands", noise=True, info=info))
                continue
            m = _SC_NAME.match(f.stem)
            word = folder.name
            if folder.name == "_unknown_":
                if not m or not m.group("word"):
                    _count(dropped, "unknown_without_word")
                    continue
                word = m.group("word")
            r = _record(f"{folder.name}/{f.stem}", f, word.replace("_", " "), "speech_commands",
                        speaker=m.group("spk") if m else None, dropped=dropped)
            if r is not None:
                out.append(r)
    return out


# --------------------------------------------------------------------------- LibriSpeech


def librispeech(root: str | Path, *, dropped: Counter | None = None) -> list[Record]:
    """LibriSpeech (and Mini LibriSpeech / LibriTTS-like copies of its layout), parsed by lhotse.

    Layout: ``<part>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt`` with
    lines ``<speaker>-<chapter>-<n> TEXT`` and ``<id>.flac`` beside it.
    ``root`` may be the ``LibriSpeech`` folder (all parts in it), one part,
    or anything below; every ``*.trans.txt`` under it is read.  Each line goes
    through ``lhotse.recipes.librispeech.parse_utterance`` (audio path,
    speaker, duration); lines without audio are counted ``missing_audio``.
    Extra keys: ``chapter``, ``part``.
    """
    from lhotse.recipes.librispeech import parse_utterance

    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"librispeech: {root} is not a folder")
    out: list[Record] = []
    for trans in sorted(root.rglob("*.trans.txt")):
        part_path = trans.parent.parent.parent
        for line in trans.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            if len(line.split(maxsplit=1)) < 2:
                _count(dropped, "empty_text")
                continue
            res = parse_utterance(part_path, line, {})
            if res is None:
                _count(dropped, "missing_audio")
                continue
            rec, sup = res
            spk, chapter = rec.id.split("-")[:2]
            audio = rec.sources[0].source
            r = _record(rec.id, audio, sup.text, "librispeech", speaker=sup.speaker, dropped=dropped,
                        info=(float(rec.duration), int(rec.sampling_rate)),
                        extra=(("chapter", f"{spk}-{chapter}"), ("part", part_path.name)))
            if r is not None:
                out.append(r)
    return out


# --------------------------------------------------------------------------- Common Voice

_CV_EXTRA = ("gender", "age", "accents", "accent", "locale", "variant", "up_votes", "down_votes")


def common_voice(src: str | Path, split: str = "train", *, dropped: Counter | None = None) -> list[Record]:
    """Mozilla Common Voice: ``<lang>/<split>.tsv`` (columns ``client_id``, ``path``, ``sentence``...)
    and ``<lang>/clips/<path>`` (MP3 in the official releases; soundfile >= 0.12 reads MP3).

    ``src`` is the language folder or one ``.tsv`` file (clips next to it);
    ``split`` is a TSV name (``train``, ``dev``, ``test``, ``validated``,
    ``other``...) or ``all`` (train + dev + test).  Speaker = ``client_id``;
    ``gender``/``age``/``accents``/``locale`` are kept when present.  Not
    lhotse: see the module docstring.
    """
    src = Path(src)
    if src.is_file():
        tsvs, lang = [src], src.parent
    elif src.is_dir():
        names = ("train", "dev", "test") if split == "all" else (split,)
        tsvs, lang = [src / f"{n}.tsv" for n in names], src
        for t in tsvs:
            if not t.is_file():
                raise ValueError(f"common voice: no {t} (give the language folder holding <split>.tsv and clips/)")
    else:
        raise ValueError(f"common voice: {src} does not exist")
    clips = lang / "clips"
    out: list[Record] = []
    for tsv in tsvs:
        with open(tsv, encoding="utf-8", newline="") as f:
            rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            if rows.fieldnames is None or not {"path", "sentence"} <= set(rows.fieldnames):
                raise ValueError(f"common voice: {tsv} needs the columns path and sentence, has {rows.fieldnames}")
            for row in rows:
                name = (row.get("path") or "").strip()
                audio = clips / name
                if name and not audio.is_file() and not Path(name).suffix and (clips / f"{name}.mp3").is_file():
                    audio = clips / f"{name}.mp3"  # early releases list the clip name without extension
                if not name or not audio.is_file():
                    _count(dropped, "missing_audio")
                    continue
                extra = [("split", tsv.stem)] + [(k, row[k]) for k in _CV_EXTRA if row.get(k)]
                r = _record(Path(name).stem, audio, (row.get("sentence") or "").strip(), "commonvoice",
                            speaker=(row.get("client_id") or None), extra=extra, dropped=dropped)
                if r is not None:
                    out.append(r)
    return out
