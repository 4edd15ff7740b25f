"""Corpus importers (streamd.train.corpora) and ``streamd data``, on tiny layouts built in tmp_path."""

import gzip
import hashlib
import json
from collections import Counter

import numpy as np
import pytest
import soundfile as sf

from streamd.cli import main as streamd_main
from streamd.train import corpora as C
from streamd.train.data import read_manifest


def audio(path, seconds=0.5, rate=16000, **kw):
    """Write a short tone (any soundfile format, by the extension) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (0.1 * np.sin(2 * np.pi * 440 * t)).astype("float32"), rate, **kw)
    return path


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# --------------------------------------------------------------------------- Speech Commands


def speech_commands_tree(root, lists=False):
    audio(root / "yes" / "03401e93_nohash_0.wav", 1.0)
    audio(root / "yes" / "yes_1538beb7_nohash_1.flac", 1.0)
    audio(root / "no" / "03401e93_nohash_2.wav", 1.0)
    audio(root / "no" / "c0ffee12_nohash_0.wav", 1.0)
    audio(root / "_silence_" / "1037.flac", 1.0)
    audio(root / "_background_noise_" / "white_noise.wav", 3.2)
    (root / "_background_noise_" / "README.md").write_text("noise files")
    audio(root / "_unknown_" / "bed_abcd1234_nohash_0.wav", 1.0)
    if lists:
        (root / "testing_list.txt").write_text("yes/03401e93_nohash_0.wav\n")
        (root / "validation_list.txt").write_text("no/c0ffee12_nohash_0.wav\nyes/yes_1538beb7_nohash_1.wav\n")


def test_speech_commands_texts_speakers_noise(tmp_path):
    root = tmp_path / "sc"
    speech_commands_tree(root)
    recs = C.speech_commands(root, noise_piece_s=1.0, noise_dir=tmp_path / "out" / "noise")
    by = {r.id: r for r in recs}
    assert by["yes/03401e93_nohash_0"].text == "yes" and by["yes/03401e93_nohash_0"].speaker == "03401e93"
    assert by["yes/yes_1538beb7_nohash_1"].speaker == "1538beb7"
    assert by["_unknown_/bed_abcd1234_nohash_0"].text == "bed"
    sil = by["_silence_/1037"]
    assert sil.noise and sil.text == "" and sil.speaker is None
    pieces = [r for r in recs if r.id.startswith("_background_noise_/")]
    assert len(pieces) == 3 and all(r.noise and r.text == "" and abs(r.duration - 1.0) < 1e-6 for r in pieces)
    assert all(r.rate == 16000 and abs(r.duration - 1.0) < 1e-6 for r in recs)
    assert all(r.source == "speech_commands" for r in recs)
    # without cutting: the background file stays whole
    whole = C.speech_commands(root)
    bg = [r for r in whole if r.id.startswith("_background_noise_/")]
    assert len(bg) == 1 and abs(bg[0].duration - 3.2) < 1e-3


def test_speech_commands_official_splits(tmp_path):
    root = tmp_path / "sc"
    speech_commands_tree(root, lists=True)
    ids = {s: {r.id for r in C.speech_commands(root, s)} for s in ("train", "valid", "test", "all")}
    assert ids["test"] == {"yes/03401e93_nohash_0"}
    assert ids["valid"] == {"no/c0ffee12_nohash_0", "yes/yes_1538beb7_nohash_1"}  # matched without extension
    assert "no/03401e93_nohash_2" in ids["train"] and "_silence_/1037" in ids["train"]
    assert ids["train"] | ids["valid"] | ids["test"] == ids["all"]
    assert not (ids["train"] & ids["valid"]) and not (ids["train"] & ids["test"])
    bare = tmp_path / "bare"
    speech_commands_tree(bare)
    with pytest.raises(ValueError, match="testing_list.txt"):
        C.speech_commands(bare, "train")


def test_cli_speech_commands_writes_loadable_manifest(tmp_path, capsys):
    root = tmp_path / "sc"
    speech_commands_tree(root)
    out = tmp_path / "out"
    assert streamd_main(["data", "import", "speech-commands", str(root), "--out", str(out)]) == 0
    rows = lines(out / "manifest.jsonl")
    assert len(rows) == 9  # 4 words + 1 unknown + 1 silence + 3 background pieces
    assert all(set(r) >= {"audio", "text", "duration", "keyword", "speaker", "source", "orig_text"} for r in rows)
    noise = [r for r in rows if r.get("noise")]
    assert len(noise) == 4 and all(r["text"] == "" for r in noise)
    # pieces are inside --out: relative; the corpus is outside: absolute
    assert any(r["audio"].startswith("noise/") for r in noise)
    assert all(r["audio"].startswith("/") for r in rows if "noise/" not in r["audio"])
    utts = read_manifest(out / "manifest.jsonl")
    assert len(utts) == 9 and all(u.duration > 0 for u in utts)
    assert "9 utterances" in capsys.readouterr().err


# --------------------------------------------------------------------------- LibriSpeech (lhotse)


def test_librispeech_via_lhotse(tmp_path):
    chap = tmp_path / "LibriSpeech" / "dev-clean" / "84" / "121123"
    audio(chap / "84-121123-0000.flac", 0.7)
    audio(chap / "84-121123-0001.flac", 0.4)
    (chap / "84-121123.trans.txt").write_text("84-121123-0000 GO DO YOU HEAR\n84-121123-0001 MR SMITH'S 2 DOGS\n"
                                              "84-121123-0002 NO AUDIO FOR THIS ONE\n")
    dropped = Counter()
    for root in (tmp_path / "LibriSpeech", tmp_path / "LibriSpeech" / "dev-clean"):
        recs = C.librispeech(root, dropped=dropped)
        assert [r.id for r in recs] == ["84-121123-0000", "84-121123-0001"]
        assert [r.text for r in recs] == ["go do you hear", "mister smith's two dogs"]
        assert recs[0].orig_text == "GO DO YOU HEAR" and recs[0].speaker == "84"
        assert abs(recs[0].duration - 0.7) < 1e-3 and recs[0].rate == 16000
        assert dict(recs[0].extra)["part"] == "dev-clean"
    assert dropped["missing_audio"] == 2


# --------------------------------------------------------------------------- Common Voice


def test_common_voice(tmp_path):
    lang = tmp_path / "cv-corpus" / "en"
    audio(lang / "clips" / "common_voice_en_1.wav", 0.5, rate=48000)
    audio(lang / "clips" / "common_voice_en_2.wav", 0.6, rate=48000)
    head = "client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccents\tlocale\n"
    (lang / "train.tsv").write_text(head + "abc\tcommon_voice_en_1.wav\tI have 2 \"dogs\".\t2\t0\ttwenties\t\t\ten\n"
                                    "def\tcommon_voice_en_9.wav\tMissing clip.\t2\t0\t\t\t\ten\n")
    (lang / "dev.tsv").write_text(head + "ghi\tcommon_voice_en_2.wav\tIt's 10:30 now!\t2\t0\t\tfemale\t\ten\n")
    (lang / "test.tsv").write_text(head)
    dropped = Counter()
    recs = C.common_voice(lang, "train", dropped=dropped)
    assert len(recs) == 1 and dropped["missing_audio"] == 1
    r = recs[0]
    assert r.text == "i have two dogs" and r.speaker == "abc" and r.rate == 48000
    assert dict(r.extra)["age"] == "twenties" and "gender" not in dict(r.extra)
    both = C.common_voice(lang, "all")
    assert [x.text for x in both] == ["i have two dogs", "it's ten thirty now"]
    assert [dict(x.extra)["split"] for x in both] == ["train", "dev"]
    assert len(C.common_voice(lang / "dev.tsv")) == 1
    with pytest.raises(ValueError, match="validated.tsv"):
        C.common_voice(lang, "validated")


# --------------------------------------------------------------------------- Kaldi (lhotse)


def test_kaldi_dir_whole_files(tmp_path):
    d = tmp_path / "egs" / "data" / "train"
    audio(d / "a.wav", 0.5)
    audio(tmp_path / "egs" / "wav" / "b.flac", 0.8, rate=8000)
    d.joinpath("wav.scp").write_text(f"rec_a a.wav\nrec_b wav/b.flac\nrec_c {audio(tmp_path / 'c.wav', 0.3)}\n")
    d.joinpath("text").write_text("rec_a HELLO THERE\nrec_b call 911\nrec_c\n")
    d.joinpath("utt2spk").write_text("rec_a spk1\nrec_b spk2\nrec_c spk1\n")
    dropped = Counter()
    recs = C.kaldi_dir(d, dropped=dropped)
    assert [(r.id, r.text, r.speaker, r.rate) for r in recs] == [
        ("rec_a", "hello there", "spk1", 16000), ("rec_b", "call nine hundred eleven", "spk2", 8000)]
    assert abs(recs[1].duration - 0.8) < 1e-3 and recs[1].audio == str((tmp_path / "egs" / "wav" / "b.flac").resolve())
    assert dropped["empty_text"] == 1


def test_kaldi_dir_segments_and_pipes(tmp_path):
    d = tmp_path / "data"
    long = audio(tmp_path / "long.wav", 3.0)
    d.mkdir()
    (d / "wav.scp").write_text(f"rec1 {long}\n")
    (d / "segments").write_text("utt1 rec1 0.0 1.0\nutt2 rec1 1.5 3.0\n")
    (d / "text").write_text("utt1 first part\nutt2 second part\n")
    (d / "utt2spk").write_text("utt1 s\nutt2 s\n")
    recs = C.kaldi_dir(d, segments_dir=tmp_path / "out" / "segments")
    assert [(r.id, r.text) for r in recs] == [("utt1", "first part"), ("utt2", "second part")]
    assert [round(r.duration, 3) for r in recs] == [1.0, 1.5]
    assert all(sf.info(r.audio).duration == pytest.approx(r.duration) for r in recs)
    assert dict(recs[1].extra)["start"] == 1.5
    (d / "wav.scp").write_text("rec1 sox long.flac -t wav - |\n")
    with pytest.raises(ValueError, match="piped commands are not supported"):
        C.kaldi_dir(d, segments_dir=tmp_path / "x")


# --------------------------------------------------------------------------- Asterisk


ASTERISK_LIST = """; Core Asterisk Sounds in English

beep: [this is a simple beep tone]
digits/1: one
digits/a-m: A.M.
vm-press: Press 1 to record, then #.
dictate/both_help: press * to toggle pause
silence/1: (1 second of silence)
letters/at: at [@]
vm-intro: Please leave your message after the tone. (simple tone sound plays)
conf-adminmenu: 3 to mute or umute all users.
missing-file: Not recorded.
symbols-only: ... !
"""


def asterisk_tree(tmp_path):
    texts = tmp_path / "core-sounds-en.txt.gz"
    with gzip.open(texts, "wt") as f:
        f.write(ASTERISK_LIST)
    voice = tmp_path / "sounds" / "en_US_f_Allison"
    for name in ("beep", "digits/1", "digits/a-m", "vm-press", "dictate/both_help", "silence/1", "letters/at",
                 "vm-intro", "conf-adminmenu", "symbols-only"):
        audio(voice / f"{name}.wav", 0.3, rate=8000)
    return texts, voice


def test_asterisk_prompts(tmp_path):
    texts, voice = asterisk_tree(tmp_path)
    assert C.parse_asterisk_texts(texts)[0] == ("beep", "[this is a simple beep tone]")
    dropped = Counter()
    recs = C.asterisk_prompts(voice, texts, dropped=dropped)
    got = {r.id: r.text for r in recs}
    assert got == {"digits/1": "one", "digits/a-m": "a m", "vm-press": "press one to record then pound",
                   "dictate/both_help": "press star to toggle pause", "letters/at": "at",
                   "vm-intro": "please leave your message after the tone",
                   "conf-adminmenu": "three to mute or unmute all users"}
    assert dropped == Counter({"non_speech": 3, "missing_audio": 1})  # beep, silence, "... !"; missing-file
    assert all(r.rate == 8000 and r.speaker == "en_US_f_Allison" and r.source == "asterisk" for r in recs)
    r = next(r for r in recs if r.id == "vm-intro")
    assert r.orig_text == "Please leave your message after the tone." and "prompt_text" in dict(r.extra)


def test_cli_asterisk_holdout(tmp_path, capsys):
    texts, voice = asterisk_tree(tmp_path)
    out = tmp_path / "out"
    argv = ["data", "import", "asterisk", str(voice), "--texts", str(texts), "--out", str(out), "--holdout", "0.2"]
    assert streamd_main(argv) == 0
    train, dev, allr = (lines(out / f"{n}.jsonl") for n in ("train", "dev", "all"))
    assert len(allr) == 7 and len(train) + len(dev) == 7
    expect_dev = {r["id"] for r in allr
                  if int(hashlib.sha1(r["id"].encode()).hexdigest()[:15], 16) / 16 ** 15 < 0.2}
    assert {r["id"] for r in dev} == expect_dev
    assert "non_speech 3" in capsys.readouterr().err
    # deterministic: same split on a second run
    assert streamd_main(argv) == 0
    assert lines(out / "dev.jsonl") == dev


def test_holdout_by_speaker_is_speaker_disjoint():
    recs = [C.Record(f"u{i}", f"/x/{i}.wav", "hi", 1.0, 16000, "t", speaker=f"s{i % 7}") for i in range(70)]
    train, dev = C.split_holdout(recs, 0.3, "speaker")
    assert not ({r.speaker for r in train} & {r.speaker for r in dev}) and len(train) + len(dev) == 70
    with pytest.raises(ValueError):
        C.split_holdout(recs, 1.5)


# --------------------------------------------------------------------------- JSON lines, Sphinx, Debian packages


def test_jsonl_renormalizes_and_fills(tmp_path):
    src = tmp_path / "src"
    audio(src / "wav" / "a.wav", 0.5)
    audio(src / "wav" / "n.wav", 0.25)
    (src / "m.jsonl").write_text("\n".join(json.dumps(x) for x in [
        {"audio": "wav/a.wav", "text": "Turn on 2 lights!", "voice": "v1", "keyword": None},
        {"audio": "wav/n.wav", "text": "", "noise": True},
        {"audio": "wav/gone.wav", "text": "x"},
        {"audio": str(src / "wav" / "a.wav"), "text": "[noise]"},
    ]) + "\n")
    dropped = Counter()
    recs = C.jsonl(src / "m.jsonl", dropped=dropped)
    assert [(r.text, r.noise) for r in recs] == [("turn on two lights", False), ("", True)]
    assert recs[0].orig_text == "Turn on 2 lights!" and dict(recs[0].extra) == {"voice": "v1"}
    assert abs(recs[0].duration - 0.5) < 1e-6 and recs[0].audio == str(src / "wav" / "a.wav")
    assert dropped == Counter({"missing_audio": 1, "empty_text": 1})
    with pytest.raises(ValueError, match="line 1"):
        (src / "bad.jsonl").write_text("{not json\n")
        C.jsonl(src / "bad.jsonl")


def test_sphinx_transcription(tmp_path):
    d = tmp_path / "cards"
    audio(d / "001.wav", 0.4)
    audio(d / "sub" / "002.wav", 0.4)
    (d / "cards.transcription").write_text("<s> ten of clubs  </s> (001)\n<s> <sil> four ++NOISE++ queen </s> (002)\n"
                                           "<s> gone </s> (003)\n")
    (d / "cards.fileids").write_text("001\nsub/002\n003\n")
    dropped = Counter()
    recs = C.sphinx_transcription(d / "cards.transcription", d, fileids=d / "cards.fileids", dropped=dropped)
    assert [(r.id, r.text) for r in recs] == [("001", "ten of clubs"), ("002", "four queen")]
    assert dropped["missing_audio"] == 1


def test_debian_package_layouts(tmp_path):
    st = tmp_path / "saytime"
    for n in ("0", "21", "am", "oclock", "the_time_is"):
        audio(st / f"{n}.au", 0.2, rate=8000, subtype="ULAW")
    assert {r.id: r.text for r in C.saytime(st)} == {
        "0": "zero", "21": "twenty one", "am": "a m", "oclock": "o'clock", "the_time_is": "the time is"}
    al = tmp_path / "alsa"
    audio(al / "Front_Center.wav", 0.2, rate=48000)
    audio(al / "Noise.wav", 0.2, rate=48000)
    got = {r.id: (r.text, r.noise) for r in C.alsa_sounds(al)}
    assert got == {"Front_Center": ("front center", False), "Noise": ("", True)}
    kl = tmp_path / "klettres"
    audio(kl / "en" / "alpha" / "A.ogg", 0.3, rate=44100)
    audio(kl / "en" / "syllab" / "car.ogg", 0.3, rate=44100)
    audio(kl / "en" / "syllab" / "th.ogg", 0.3, rate=44100)
    audio(kl / "en_GB" / "alpha" / "a.ogg", 0.3, rate=44100)
    audio(kl / "en_GB" / "syllab" / "dog.ogg", 0.3, rate=44100)
    (kl / "en").joinpath("sounds.xml").write_text(
        '<klettres><language code="en"><alphabet><sound name="A" file="en/alpha/A.ogg" /></alphabet>'
        '<syllables><sound name="CAR" file="en/syllab/car.ogg" /><sound name="TH" file="en/syllab/th.ogg" />'
        "</syllables></language></klettres>")
    (kl / "en_GB").joinpath("sounds.xml").write_text(
        '<klettres><language code="en_GB"><alphabet><sound name="A" file="en_GB/alpha/a.ogg" /></alphabet>'
        "</language></klettres>")
    dropped = Counter()
    recs = C.klettres(kl, ("en", "en_GB"), dropped=dropped)
    assert sorted((r.id, r.text) for r in recs) == [("en/alpha/A", "a"), ("en/syllab/CAR", "car"),
                                                    ("en_GB/syllab/dog", "dog")]
    assert dropped == Counter({"not_a_word": 1, "phonics_letter:en_GB": 1})


# --------------------------------------------------------------------------- writer and stats


def test_pause_cuts_tile_the_audio_and_cut_in_pauses():
    rate = 1000
    rng = np.random.default_rng(0)
    x = rng.standard_normal(25 * rate) * 0.3  # 25 s of "speech" with two pauses
    x[7000:7300] = 0.0  # in the second half of the first 10 s span
    x[15500:15800] = 0.001
    cuts = C.pause_cuts(x, rate, 10.0)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(x) and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(0 < e - s <= 10 * rate for s, e in cuts)
    assert 7000 <= cuts[0][1] < 7300 and 15500 <= cuts[1][1] < 15800  # in the pauses
    assert C.pause_cuts(x[:9000], rate, 10.0) == [(0, 9000)]  # short enough: whole
    flat = np.ones(30 * rate)
    assert all(e - s <= 10 * rate for s, e in C.pause_cuts(flat, rate, 10.0))  # no pause: still bounded
    with pytest.raises(ValueError, match="too short"):
        C.pause_cuts(x, rate, 0.01)


def test_codec2_examples_lists_audio_for_the_teachers(tmp_path):
    root = tmp_path / "wav"
    root.mkdir()
    for name, sec in (("hts1a", 3.0), ("all", 4.0), ("f2400", 1.0), ("ve9qrp", 40.0)):
        audio(root / f"{name}.wav", sec, rate=8000)
    dropped = Counter()
    rows = C.codec2_examples(tmp_path / "out", root, max_seconds=15.0, dropped=dropped)
    assert dropped == {"repeat": 2}  # all.wav joins the others, f2400 is a coded copy
    assert rows[0] == {"audio": str(root / "hts1a.wav"), "duration": 3.0, "speaker": "hts1a",
                       "source": "codec2-examples"}
    pieces = rows[1:]
    assert len(pieces) >= 3 and all(r["speaker"] == "ve9qrp" and r["duration"] <= 15.0 for r in pieces)
    assert sum(r["duration"] for r in pieces) == pytest.approx(40.0, abs=C.MIN_PIECE_S)
    for r in pieces:
        info = sf.info(r["audio"])
        assert info.samplerate == 8000 and info.duration == pytest.approx(r["duration"], abs=1e-3)
        assert r["audio"].startswith(str(tmp_path / "out"))


def test_writer_paths_and_stats_cli(tmp_path, capsys):
    out = tmp_path / "out"
    inside = audio(out / "wav" / "a.wav", 0.5)
    outside = audio(tmp_path / "elsewhere" / "b.wav", 1.5, rate=8000)
    recs = [C.Record("a", str(inside), "hello world", 0.5, 16000, "x", speaker="s1"),
            C.Record("b", str(outside), "", 1.5, 8000, "y", noise=True, extra=(("start", 0.0),))]
    assert C.write_manifest(recs, out / "m.jsonl") == 2
    rows = lines(out / "m.jsonl")
    assert rows[0]["audio"] == "wav/a.wav" and rows[1]["audio"] == str(outside)
    assert rows[1]["noise"] is True and rows[1]["start"] == 0.0 and rows[0]["keyword"] is None
    assert [u.audio for u in read_manifest(out / "m.jsonl")] == [str(inside), str(outside)]
    s = C.manifest_stats(out / "m.jsonl")
    assert (s.utterances, s.speakers, s.words, s.vocabulary, s.noise) == (2, 1, 2, 2, 1)
    assert s.seconds == pytest.approx(2.0) and dict(s.rates) == {16000: 1, 8000: 1}
    assert streamd_main(["data", "stats", str(out / "m.jsonl"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["utterances"] == 2 and d["sources"]["x"]["utterances"] == 1 and d["hours"] == pytest.approx(2 / 3600, abs=1e-4)
    assert streamd_main(["data", "stats", str(out / "m.jsonl")]) == 0
    assert "utterances 2" in capsys.readouterr().out
