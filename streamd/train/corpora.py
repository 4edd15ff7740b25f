"""Importers: real speech corpora layouts -> training manifest records.

Every importer is one function that reads one corpus layout and returns a
``list[Record]``; :func:`write_manifest` (one file) or :func:`write_import`
(``manifest.jsonl``, or ``train.jsonl`` / ``dev.jsonl`` / ``all.jsonl`` with a
hold-out share) writes them in the manifest format of
:mod:`streamd.train.data`::

    {"audio": "/abs/or/relative.flac", "text": "turn on the lights", "duration": 1.7, "keyword": null,
     "id": "...", "speaker": "...", "source": "librispeech", "orig_text": "TURN ON THE LIGHTS", "rate": 16000}

``audio`` is written relative to the manifest's folder when the file lies
inside it, else absolute; ``text`` is :func:`streamd.text.normalize.normalize_text`
of the corpus transcript (kept verbatim in ``orig_text``); ``duration`` and
``rate`` come from the file header (``soundfile.info``); background-noise
clips have ``text == ""`` and ``"noise": true``.  Other keys (``speaker``,
``source``, ``id``, corpus specific ones) are free; the trainer ignores them.

Importers never convert audio: any rate / format soundfile reads is kept
(the trainer resamples).  Audio is only written where the manifest format
needs it: pieces of long Speech Commands background-noise files and Kaldi
``segments`` (the manifest has no start/end offsets), cut at the source rate
and sample format.

Drops (missing audio, empty transcript, non-speech prompts...) are counted
into the optional ``dropped`` :class:`collections.Counter` by reason.

Where lhotse (the data library of icefall / k2) is used and where not:

* LibriSpeech: lhotse's own per-line parser
  (``lhotse.recipes.librispeech.parse_utterance``) on every ``*.trans.txt``
  found under the source folder, so a part folder (``train-clean-100``), the
  ``LibriSpeech`` root or a single speaker folder all work.
* Kaldi data dirs: ``lhotse.kaldi.load_kaldi_data_dir`` (on a scratch copy of
  the small text files whose ``wav.scp`` holds absolute paths).
* Speech Commands: not lhotse.  ``prepare_speechcommands`` expects the two
  official archives side by side (``speech_commands_v0.0N`` and
  ``speech_commands_test_set_v0.0N``), reads ``.wav`` only, takes the speaker
  as the first ``_`` field of the file name (wrong for ``<word>_<spk>_nohash``
  names) and keeps background-noise files whole.  The split rule is the same
  (``testing_list.txt`` / ``validation_list.txt``, train = the rest).
* Common Voice: not lhotse.  ``prepare_commonvoice`` needs ``corpus/<lang>/``
  with the language code from its fixed list, an output folder for its own
  gz manifests, and its row parser needs the ``gender``/``age``/``accents``/
  ``variant`` columns, which differ between Common Voice releases.  The TSV is
  read the same way (``csv`` with ``QUOTE_NONE``).
* Asterisk prompts, Sphinx transcriptions, the small Debian sound packages
  and JSON lines: no lhotse recipe exists for these layouts.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..manifest_lines import iter_json_lines, resolve_audio
from ..text.normalize import normalize_text

__all__ = [
    "AUDIO_EXTENSIONS",
    "Record",
    "audio_info",
    "speech_commands",
    "librispeech",
    "common_voice",
    "kaldi_dir",
    "ASTERISK_TEXTS",
    "ASTERISK_SOUNDS",
    "parse_asterisk_texts",
    "asterisk_prompts",
    "sphinx_transcription",
    "pocketsphinx_testdata",
    "saytime",
    "alsa_sounds",
    "klettres",
    "CODEC2_WAV",
    "pause_cuts",
    "codec2_examples",
    "jsonl",
    "holdout_of",
    "split_holdout",
    "write_manifest",
    "write_import",
    "ManifestStats",
    "manifest_stats",
]

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".au", ".aiff", ".aif")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Record:
    """One manifest entry.

    ``audio`` is an absolute path; ``duration`` in seconds and ``rate`` in Hz
    from the file header; ``text`` normalized ("" for noise or silence);
    ``extra`` holds further JSON keys as ``(key, value)`` pairs.
    """

    id: str
    audio: str
    text: str
    duration: float
    rate: int
    source: str
    speaker: str | None = None
    orig_text: str | None = None
    keyword: str | None = None
    noise: bool = False
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def to_json(self, root: str | Path | None = None) -> dict:
        """The manifest object; ``audio`` relative to ``root`` when the file lies inside it."""
        audio = self.audio
        if root is not None:
            root_abs = os.path.abspath(root)
            if os.path.commonpath([root_abs, os.path.abspath(audio)]) == root_abs:
                audio = os.path.relpath(audio, root_abs)
        d: dict[str, Any] = {"audio": audio, "text": self.text, "duration": round(self.duration, 4),
                             "keyword": self.keyword, "id": self.id, "speaker": self.speaker,
                             "source": self.source, "orig_text": self.orig_text, "rate": self.rate}
        if self.noise:
            d["noise"] = True
        for k, v in self.extra:
            d.setdefault(k, v)
        return d


def audio_info(path: str | Path) -> tuple[float, int]:
    """``(duration seconds, sample rate)`` from the header; ValueError naming the file if unreadable."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except Exception as e:  # soundfile raises RuntimeError / LibsndfileError / TypeError
        raise ValueError(f"cannot read audio file {path}: {e}") from None
    return float(info.duration), int(info.samplerate)


def _count(dropped: Counter | None, reason: str, n: int = 1) -> None:
    if dropped is not None:
        dropped[reason] += n


def _record(rid: str, audio: Path | str, written: str, source: str, *, speaker: str | None = None,
            noise: bool = False, extra: Iterable[tuple[str, Any]] = (), dropped: Counter | None = None,
            info: tuple[float, int] | None = None) -> Record | None:
    """A Record with normalized text and header duration, or None (counted) if the text has no words."""
    text = "" if noise else normalize_text(written)
    if not noise and not text:
        _count(dropped, "empty_text")
        return None
    dur, rate = info if info is not None else audio_info(audio)
    return Record(rid, os.path.abspath(audio), text, dur, rate, source, speaker, written, None, noise, tuple(extra))


def _audio_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_EXTENSIONS)


def _cut_pieces(src: Path, out_dir: Path, prefix: str, cuts: Callable[[Any, int], list[tuple[int, int]]]
                ) -> list[tuple[Path, float, float]]:
    """Write the sample ranges ``cuts(samples, rate)`` of ``src`` (samples (N, C) float32) as
    ``out_dir/<prefix>_<k>.wav`` at its own rate and subtype.

    Returns ``[(piece path, start seconds, duration seconds), ...]``; existing pieces are rewritten.
    """
    import soundfile

    info = soundfile.info(str(src))
    data, rate = soundfile.read(str(src), always_2d=True, dtype="float32")
    out_dir.mkdir(parents=True, exist_ok=True)
    subtype = info.subtype if info.subtype in soundfile.available_subtypes("WAV") else "PCM_16"
    pieces = []
    for k, (a, b) in enumerate(cuts(data, rate)):
        p = out_dir / f"{prefix}_{k:04d}.wav"
        soundfile.write(str(p), data[a:b], rate, subtype=subtype, format="WAV")
        pieces.append((p, a / rate, (b - a) / rate))
    return pieces


def _whole_pieces(piece_s: float) -> Callable[[Any, int], list[tuple[int, int]]]:
    """Cuts into whole ``piece_s`` pieces, the tail dropped (for :func:`_cut_pieces`)."""
    def cuts(data: Any, rate: int) -> list[tuple[int, int]]:
        n = int(round(piece_s * rate))
        return [(i * n, (i + 1) * n) for i in range(len(data) // n)]
    return cuts


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


# --------------------------------------------------------------------------- Kaldi data dirs

_KALDI_COPY = ("text", "utt2spk", "segments", "spk2gender", "utt2lang", "reco2dur")


def _kaldi_lines(path: Path) -> list[tuple[str, str]]:
    """``key rest`` lines of a Kaldi table (rest may be ""), blank lines skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split(maxsplit=1)
        if parts:
            out.append((parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return out


def kaldi_dir(data_dir: str | Path, *, segments_dir: str | Path | None = None,
              dropped: Counter | None = None) -> list[Record]:
    """A Kaldi data directory, loaded with ``lhotse.kaldi.load_kaldi_data_dir``.

    Files: ``wav.scp`` (``<recording> <path>``, required), ``text``
    (``<utt> <transcript>``, required), optional ``utt2spk``, ``segments``
    (``<utt> <recording> <start> <end>``), ``spk2gender``, ``reco2dur``.
    ``wav.scp`` entries must be plain audio paths (absolute, or relative to the
    current folder, the data dir's grandparent -- the recipe folder, Kaldi's
    convention -- or the data dir itself); piped commands (``... |``) are
    refused: extract them to files first.  Utterances without a transcript
    are dropped (``empty_text``).  With ``segments`` each segment is cut into
    ``segments_dir/<utt>.wav`` (the manifest has no offsets) unless it spans
    its whole recording.
    """
    d = Path(data_dir)
    if not (d / "wav.scp").is_file():
        raise ValueError(f"kaldi: {d} has no wav.scp")
    if not (d / "text").is_file():
        raise ValueError(f"kaldi: {d} has no text file (transcripts)")
    wavs = _kaldi_wavs(d)
    texts = dict(_kaldi_lines(d / "text"))
    loaded = _load_kaldi(d, wavs, texts, dropped)
    if loaded is None:
        return []
    recs, sups = loaded
    has_spk = (d / "utt2spk").is_file()
    out: list[Record] = []
    infos: dict[str, tuple[float, int]] = {}
    for sup in sorted(sups, key=lambda s: s.id):
        rec = recs[sup.recording_id]
        path = rec.sources[0].source
        if path not in infos:
            infos[path] = audio_info(path)
        full_dur, src_rate = infos[path]
        whole = sup.start <= 1e-3 and abs(sup.start + sup.duration - full_dur) <= 0.01
        extra: list[tuple[str, Any]] = [("recording", sup.recording_id)]
        if whole:
            audio, info = path, infos[path]
        else:
            if segments_dir is None:
                raise ValueError("kaldi: the segments file needs an output folder for the cut segments")
            audio, info = _cut_segment(path, sup.start, sup.duration, Path(segments_dir) / f"{sup.id}.wav")
            extra.append(("start", round(sup.start, 4)))
        r = _record(sup.id, audio, texts[sup.id], "kaldi", speaker=sup.speaker if has_spk else None,
                    extra=extra, dropped=dropped, info=info)
        if r is not None:
            out.append(r)
    return out


def _kaldi_wavs(d: Path) -> dict[str, str]:
    """``wav.scp`` of Kaldi data dir ``d``: recording -> the audio file's resolved path (ValueError for a piped
    command, a missing path or a file found in none of the places :func:`kaldi_dir` looks)."""
    bases = [Path.cwd(), d.resolve().parent.parent, d.resolve()]
    wavs = {}
    for n, (rid, p) in enumerate(_kaldi_lines(d / "wav.scp"), 1):
        if p.endswith("|") or p.startswith("|"):
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): piped commands are not supported; "
                             f"write the audio to files first (e.g. wav-copy scp:wav.scp ark,scp:...) and list "
                             f"their paths")
        if not p:
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): no path")
        cands = [Path(p)] if os.path.isabs(p) else [b / p for b in bases]
        hit = next((c for c in cands if c.is_file()), None)
        if hit is None:
            raise ValueError(f"kaldi: {d / 'wav.scp'} line {n} ({rid}): audio {p} not found "
                             f"(looked in {', '.join(str(c) for c in cands)})")
        wavs[rid] = str(hit.resolve())
    return wavs


def _load_kaldi(d: Path, wavs: dict[str, str], texts: dict[str, str], dropped: Counter | None
                ) -> tuple[Any, Any] | None:
    """Lhotse's (recordings, supervisions) of the transcribed utterances of Kaldi data dir ``d`` (a copy of it
    with the resolved ``wavs`` and only those utterances; the others counted in ``dropped``), or None when
    none is left."""
    from lhotse.kaldi import load_kaldi_data_dir

    has_segments = (d / "segments").is_file()
    rate = audio_info(next(iter(wavs.values())))[1] if wavs else 16000
    with tempfile.TemporaryDirectory(prefix="streamd-kaldi-") as tmp:
        t = Path(tmp)
        for name in _KALDI_COPY:
            if (d / name).is_file():
                shutil.copyfile(d / name, t / name)
        keep = {u for u, txt in texts.items() if txt}
        _count(dropped, "empty_text", sum(1 for txt in texts.values() if not txt))
        if has_segments:
            segs = [(u, rest) for u, rest in _kaldi_lines(d / "segments") if u in keep]
            _count(dropped, "no_transcript", sum(1 for u, _ in _kaldi_lines(d / "segments") if u not in texts))
            (t / "segments").write_text("".join(f"{u} {rest}\n" for u, rest in segs))
        else:
            missing = [r for r in wavs if r not in keep]
            _count(dropped, "no_transcript", sum(1 for r in missing if r not in texts))
            wavs = {r: p for r, p in wavs.items() if r in keep}
            spk = dict(_kaldi_lines(d / "utt2spk"))
            (t / "utt2spk").write_text("".join(f"{r} {spk.get(r, r)}\n" for r in wavs))
        (t / "text").write_text("".join(f"{u} {txt}\n" for u, txt in texts.items() if u in keep))
        (t / "wav.scp").write_text("".join(f"{r} {p}\n" for r, p in wavs.items()))
        if (t / "reco2dur").is_file():  # must match wav.scp line for line
            r2d = dict(_kaldi_lines(d / "reco2dur"))
            (t / "reco2dur").write_text("".join(f"{r} {r2d[r]}\n" for r in wavs if r in r2d))
            if len(r2d.keys() & wavs.keys()) != len(wavs):
                (t / "reco2dur").unlink()
        if not wavs:
            return None
        recs, sups, _ = load_kaldi_data_dir(t, sampling_rate=rate, num_jobs=1)
    return None if sups is None else (recs, sups)


def _cut_segment(src: str, start: float, duration: float, dst: Path) -> tuple[Path, tuple[float, int]]:
    import soundfile

    info = soundfile.info(src)
    a = int(round(start * info.samplerate))
    b = min(info.frames, a + int(round(duration * info.samplerate)))
    data, rate = soundfile.read(src, start=a, stop=b, always_2d=True, dtype="float32")
    dst.parent.mkdir(parents=True, exist_ok=True)
    subtype = info.subtype if info.subtype in soundfile.available_subtypes("WAV") else "PCM_16"
    soundfile.write(str(dst), data, rate, subtype=subtype, format="WAV")
    return dst, (len(data) / rate, int(rate))


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


# --------------------------------------------------------------------------- JSON lines


# --------------------------------------------------------------------------- untranscribed recordings

CODEC2_WAV = "/usr/share/codec2/wav"
# codec2-examples recordings that repeat others: all.wav joins several of them, f2400 / m2400 are forig / morig
# through the 2400 bit/s codec
_CODEC2_REPEATS = frozenset({"all", "f2400", "m2400"})
MIN_PIECE_S = 0.5  # a shorter tail of a cut recording is dropped (short_piece)


def pause_cuts(x: Any, rate: int, max_seconds: float, frame_seconds: float = 0.02) -> list[tuple[int, int]]:
    """Sample ranges ``[(start, end), ...]`` that tile the samples ``x`` (N,) in order, none longer than
    ``max_seconds``: each cut is in the middle of the quietest ``frame_seconds`` frame (lowest mean square) of
    the second half of the span it ends, a pause between words where the span has one."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    n, m, f = len(x), int(max_seconds * rate), max(1, int(frame_seconds * rate))
    if m < 2 * f:
        raise ValueError(f"max_seconds {max_seconds} is too short for {frame_seconds} s frames")
    out, start = [], 0
    while n - start > m:
        lo = start + m // 2
        frames = (start + m - lo) // f
        energy = (x[lo:lo + frames * f].reshape(frames, f) ** 2).mean(axis=1)
        cut = lo + int(np.argmin(energy)) * f + f // 2
        out.append((start, cut))
        start = cut
    out.append((start, n))
    return out


def codec2_examples(out_dir: str | Path, root: str | Path = CODEC2_WAV, *, max_seconds: float = 15.0,
                    dropped: Counter | None = None) -> list[dict]:
    """Debian ``codec2-examples`` (LGPL-2.1): the speech recordings of its ``wav/`` folder (8 kHz: the codec's
    test sentences by several speakers, amateur-radio contacts), without transcripts, as audio-only manifest
    rows ``{"audio", "duration", "speaker", "source"}`` for ``streamd label`` (the teachers write the text).

    Recordings that repeat others (``all.wav``, the coded ``f2400`` / ``m2400``) are left out (``repeat``);
    one longer than ``max_seconds`` is cut at pauses (:func:`pause_cuts`) into ``out_dir/<name>_<k>.wav``
    (its own rate and subtype), a tail under :data:`MIN_PIECE_S` dropped (``short_piece``).  The speaker is
    the file name (the package names no speakers)."""

    def at_pauses(data: Any, rate: int) -> list[tuple[int, int]]:
        cuts = pause_cuts(data.mean(axis=1), rate, max_seconds)
        kept = [(a, b) for a, b in cuts if (b - a) / rate >= MIN_PIECE_S]
        if len(kept) < len(cuts):
            _count(dropped, "short_piece", len(cuts) - len(kept))
        return kept

    out_dir = Path(out_dir)
    rows: list[dict] = []
    for f in _audio_files(Path(root)):
        if f.stem in _CODEC2_REPEATS:
            _count(dropped, "repeat")
            continue
        dur, _ = audio_info(f)
        base = {"speaker": f.stem, "source": "codec2-examples"}
        if dur <= max_seconds:
            rows.append({"audio": os.path.abspath(f), "duration": round(dur, 4), **base})
            continue
        for piece, _, seconds in _cut_pieces(f, out_dir, f.stem, at_pauses):
            rows.append({"audio": os.path.abspath(piece), "duration": round(seconds, 4), **base})
    return rows


def jsonl(path: str | Path, *, source: str | None = None, dropped: Counter | None = None) -> list[Record]:
    """A JSON-lines manifest (any producer): texts re-normalized, paths resolved, durations filled.

    ``audio`` relative to the file's folder or absolute; ``text`` normalized
    (the original kept as ``orig_text`` unless the line already has one);
    ``duration``/``rate`` from the header; ``noise: true`` lines keep text "";
    other lines whose text normalizes to "" are dropped (``empty_text``);
    other keys are kept.  Errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"jsonl: {path}: no such file")
    root = path.resolve().parent
    out: list[Record] = []
    for n, where, obj in iter_json_lines(path, lambda n: f"jsonl: {path} line {n}"):
        if not isinstance(obj.get("audio"), str) or not isinstance(obj.get("text"), str):
            raise ValueError(f"{where}: needs an object with string 'audio' and 'text'")
        audio = resolve_audio(root, obj["audio"])
        if not os.path.isfile(audio):
            _count(dropped, "missing_audio")
            continue
        noise = bool(obj.get("noise"))
        orig = obj.get("orig_text") if isinstance(obj.get("orig_text"), str) else obj["text"]
        rid = str(obj.get("id") or os.path.splitext(obj["audio"])[0])
        known = {"audio", "text", "duration", "keyword", "id", "speaker", "source", "orig_text", "rate", "noise"}
        extra = tuple((k, v) for k, v in obj.items() if k not in known)
        r = _record(rid, audio, obj["text"], str(source or obj.get("source") or path.parent.name),
                    speaker=obj.get("speaker"), noise=noise, extra=extra, dropped=dropped)
        if r is None:
            continue
        kw = obj.get("keyword")
        out.append(dataclasses.replace(r, orig_text=orig, keyword=kw if isinstance(kw, str) else None))
    return out


# --------------------------------------------------------------------------- splits and writing


def holdout_of(key: str, fraction: float) -> bool:
    """True for a deterministic share ``fraction`` of keys: ``sha1(key)`` as a number in [0, 1)."""
    h = int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:15], 16) / float(16 ** 15)
    return h < fraction


def split_holdout(records: Sequence[Record], fraction: float, by: str = "id") -> tuple[list[Record], list[Record]]:
    """``(train, dev)``: dev = records whose ``by`` key (``id`` or ``speaker``) falls in the hold-out share.

    With ``by="speaker"`` the split is speaker-disjoint (records without a speaker use their id).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {fraction}")
    if by not in ("id", "speaker"):
        raise ValueError(f"holdout key must be id or speaker, got {by!r}")
    train, dev = [], []
    for r in records:
        key = (r.speaker or r.id) if by == "speaker" else r.id
        (dev if holdout_of(key, fraction) else train).append(r)
    return train, dev


def write_manifest(records: Iterable[Record], path: str | Path) -> int:
    """Write records as JSON lines (audio relative to the file's folder when inside it); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_json(path.parent), ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_import(records: Sequence[Record], out_dir: str | Path, holdout: float | None = None,
                 by: str = "id") -> dict[str, int]:
    """``out_dir/manifest.jsonl``, or with ``holdout`` ``train.jsonl`` + ``dev.jsonl`` + ``all.jsonl``.

    Returns file name -> number of records written.
    """
    out = Path(out_dir)
    if holdout is None:
        return {"manifest.jsonl": write_manifest(records, out / "manifest.jsonl")}
    train, dev = split_holdout(records, holdout, by)
    return {"train.jsonl": write_manifest(train, out / "train.jsonl"),
            "dev.jsonl": write_manifest(dev, out / "dev.jsonl"),
            "all.jsonl": write_manifest(records, out / "all.jsonl")}


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class ManifestStats:
    """Totals of one manifest: ``sources`` maps source -> (utterances, seconds); ``rates`` Hz -> count."""

    path: str
    utterances: int
    seconds: float
    speakers: int
    words: int
    vocabulary: int
    noise: int
    rates: tuple[tuple[int, int], ...]
    sources: tuple[tuple[str, int, float], ...]

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    def to_dict(self) -> dict:
        return {"path": self.path, "utterances": self.utterances, "hours": round(self.hours, 4),
                "seconds": round(self.seconds, 2), "speakers": self.speakers, "words": self.words,
                "vocabulary": self.vocabulary, "noise": self.noise, "rates": dict(self.rates),
                "sources": {s: {"utterances": n, "hours": round(sec / 3600, 4)} for s, n, sec in self.sources}}


def manifest_stats(path: str | Path) -> ManifestStats:
    """Utterances, duration, speakers, words, sample rates and per-source totals of a JSON-lines manifest.

    ``duration`` / ``rate`` missing from a line are read from the audio header.
    """
    path = Path(path)
    root = path.resolve().parent
    n = noise = words = 0
    seconds = 0.0
    speakers: set = set()
    vocab: set = set()
    rates: Counter = Counter()
    src_n: Counter = Counter()
    src_s: Counter = Counter()
    for _, _, obj in iter_json_lines(path, lambda line_no: f"{path} line {line_no}"):
        dur, rate = obj.get("duration"), obj.get("rate")
        if dur is None or rate is None:
            hdur, hrate = audio_info(resolve_audio(root, obj["audio"]))
            dur = hdur if dur is None else dur
            rate = hrate if rate is None else rate
        n += 1
        seconds += float(dur)
        rates[int(rate)] += 1
        if obj.get("speaker"):
            speakers.add(obj["speaker"])
        ws = str(obj.get("text", "")).split()
        words += len(ws)
        vocab.update(ws)
        noise += bool(obj.get("noise")) or not ws
        s = str(obj.get("source") or "-")
        src_n[s] += 1
        src_s[s] += float(dur)
    return ManifestStats(str(path), n, seconds, len(speakers), words, len(vocab), noise,
                         tuple(sorted(rates.items())), tuple((s, src_n[s], src_s[s]) for s in sorted(src_n)))
