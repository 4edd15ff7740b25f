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

Rooms: :mod:`.records` (the record and the importers' shared steps), :mod:`.datasets` (Speech Commands,
LibriSpeech, Common Voice), :mod:`.kaldi`, :mod:`.system_sounds` (Asterisk, Sphinx, Debian sound packages),
:mod:`.recordings` (untranscribed recordings, JSON lines), :mod:`.manifests` (splits, writing, statistics);
every importer is exported here.
"""

from __future__ import annotations

from .datasets import common_voice, librispeech, speech_commands
from .kaldi import kaldi_dir
from .manifests import ManifestStats, holdout_of, manifest_stats, split_holdout, write_import, write_manifest
from .records import AUDIO_EXTENSIONS, Record, audio_info
from .recordings import CODEC2_WAV, MIN_PIECE_S, codec2_examples, jsonl, pause_cuts
from .system_sounds import (ASTERISK_SOUNDS, ASTERISK_TEXTS, alsa_sounds, asterisk_prompts, asterisk_spoken, klettres,
                            parse_asterisk_texts, pocketsphinx_testdata, saytime, sphinx_transcription)

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
