"""Tests for streamd augment (streamd.train.augment_manifest) and the new streamd synth options."""

import json
import wave

import numpy as np
import pytest
import soundfile as sf

from streamd.cli.data import augment_main, synth_main
from streamd.train import augment_manifest as C
from streamd.train import rooms as R
from streamd.train import synth, tts
from helpers import needs_espeak, speechlike

SR = 16000

try:
    from streamd.train.voices import _pyworld
    _pyworld()
    HAS_WORLD = True
except ImportError:  # pragma: no cover - depends on the environment
    HAS_WORLD = False
try:
    import pyroomacoustics  # noqa: F401
    HAS_PRA = True
except ImportError:  # pragma: no cover
    HAS_PRA = False
needs_all = pytest.mark.skipif(not (HAS_WORLD and HAS_PRA),
                               reason="needs pyworld and pyroomacoustics (pip install pyworld pyroomacoustics)")


def read_pcm(path):
    with wave.open(str(path), "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (SR, 1, 2)
        return w.readframes(w.getnframes())


@pytest.fixture
def corpus(tmp_path):
    """A 4-line manifest (one 8 kHz FLAC, one empty-text noise clip), a noise manifest and an RIR folder."""
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    src.mkdir()
    rows = []
    for i, (text, rate) in enumerate([("yes", SR), ("turn on the lights", 8000), ("", SR), ("no", SR)]):
        name = f"u{i}.flac" if rate == 8000 else f"u{i}.wav"
        x = (0.02 * rng.standard_normal(SR)).astype(np.float32) if not text else speechlike(rng, 0.6 + 0.2 * i, rate)
        sf.write(src / name, x, rate)
        row = {"audio": name, "text": text, "speaker": f"spk{i % 2}", "duration": round(len(x) / rate, 3)}
        if not text:
            row["noise"] = True
        if i == 3:
            row.update(keyword="no", aug={"tts_speed": 1.0}, extra=[1, 2])
        rows.append(row)
    (src / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    noise = tmp_path / "noise"
    noise.mkdir()
    for i in range(3):
        sf.write(noise / f"n{i}.wav", (0.05 * rng.standard_normal(SR)).astype(np.float32), SR)
    (noise / "noise.jsonl").write_text("".join(json.dumps({"audio": f"n{i}.wav", "text": ""}) + "\n"
                                               for i in range(3)))
    rirs = tmp_path / "rirs"
    rirs.mkdir()
    h = np.zeros(4000, np.float32)
    h[20] = 1.0
    h[21:] = 0.2 * rng.standard_normal(3979).astype(np.float32) * np.exp(-np.arange(3979) / 800.0)
    sf.write(rirs / "room.wav", h, SR)
    return tmp_path, rows


def _args(tmp_path, out, workers, extra=()):
    return ["--manifest", str(tmp_path / "src" / "manifest.jsonl"), "--out", str(out), "--copies", "3",
            "--seed", "5", "--workers", str(workers), "--voice-perturb", "0.6", "--real-rir", "0.3",
            "--room-sim", "0.3", "--rir-dir", str(tmp_path / "rirs"), "--rir-bank", "2", "--rt60", "0.2,0.3",
            "--noise-manifest", str(tmp_path / "noise" / "noise.jsonl"), "--noise", "0.6", "--snr", "5,20",
            "--channel", "0.6", "--telephone", "0.3", "--speed", "0.4", "--shard-size", "5", *extra]


@needs_all
def test_augment_cli_deterministic_across_workers_and_well_formed(corpus, capsys):
    tmp_path, rows = corpus
    assert augment_main(_args(tmp_path, tmp_path / "a", 1)) == 0
    assert "wrote" in capsys.readouterr().out
    assert augment_main(_args(tmp_path, tmp_path / "b", 2)) == 0
    la = (tmp_path / "a" / "manifest.jsonl").read_text().splitlines()
    lb = (tmp_path / "b" / "manifest.jsonl").read_text().splitlines()
    assert la == lb and len(la) == 12
    out = [json.loads(line) for line in la]
    assert {o["audio"].split("/")[0] for o in out} == {"shard-0000", "shard-0001", "shard-0002"}
    for k, o in enumerate(out):
        i, c = divmod(k, 3)
        src = rows[i]
        assert o["copy"] == c and o["audio"] == f"shard-{k // 5:04d}/aug-{k:08d}.wav"
        for key in src:                                           # input keys kept (audio/duration/aug replaced)
            if key not in ("audio", "duration", "aug"):
                assert o[key] == src[key]
        assert o["source_audio"] == str((tmp_path / "src" / src["audio"]).resolve())
        pa, pb = read_pcm(tmp_path / "a" / o["audio"]), read_pcm(tmp_path / "b" / o["audio"])
        assert pa == pb                                           # same audio whatever the worker count
        assert o["duration"] == round(len(pa) / 2 / SR, 3)
        x = np.frombuffer(pa, "<i2")
        assert np.abs(x).max() <= 0.99 * 32767 + 1 and np.abs(x).max() > 0
        if "speed" not in o["aug"]:
            assert abs(o["duration"] - src["duration"]) < 1e-3    # length kept by every other stage
        if not src["text"]:
            assert "voice" not in o["aug"]                        # no speaker change on a noise clip
    assert out[9]["source_aug"] == {"tts_speed": 1.0} and out[9]["keyword"] == "no"
    assert [o["text"] for o in out[6:9]] == ["", "", ""]          # empty-text utterances kept
    # the copies of one utterance differ from each other
    for i in range(4):
        pcms = {read_pcm(tmp_path / "a" / o["audio"]) for o in out[3 * i: 3 * i + 3]}
        assert len(pcms) == 3
    augs = [o["aug"] for o in out]
    assert any("voice" in a for a in augs) and any(a.get("rir", "").startswith("sim:") for a in augs)
    assert any(a.get("rir") == "room.wav" for a in augs) and any("channel" in a for a in augs)
    assert all(5 <= a["snr"] <= 20 and a["noise"].startswith("real:n") for a in augs if "snr" in a)
    # another seed, other audio
    assert augment_main(_args(tmp_path, tmp_path / "c", 1)[:-2] + ["--shard-size", "5", "--seed", "6"]) == 0
    lc = [json.loads(x) for x in (tmp_path / "c" / "manifest.jsonl").read_text().splitlines()]
    assert [o["aug"] for o in lc] != augs


def test_plain_copies_and_stage_independence(corpus):
    tmp_path, rows = corpus
    chain = C.AugmentChain()
    m = C.augment_manifest([tmp_path / "src" / "manifest.jsonl"], tmp_path / "plain", chain, copies=2)
    out = [json.loads(x) for x in m.read_text().splitlines()]
    assert len(out) == 8 and all(o["aug"] == {} for o in out)
    x, r = sf.read(tmp_path / "src" / "u0.wav", dtype="int16")
    assert read_pcm(tmp_path / "plain" / out[0]["audio"]) == x.astype("<i2").tobytes()
    assert out[2]["duration"] == pytest.approx(rows[1]["duration"], abs=1e-3)  # 8 kHz input resampled to 16 kHz
    # a stage's draws do not depend on the other stages being enabled
    x = speechlike(np.random.default_rng(1), 0.8)
    a = C.augment_one(x, C.AugmentChain(channel=1.0), C.stage_rngs([1, 2, 3]))[1]
    b = C.augment_one(x, C.AugmentChain(channel=1.0, telephone=1.0, speed=1.0), C.stage_rngs([1, 2, 3]))[1]
    assert a["channel"] == b["channel"]


def test_real_noise_snr_over_active_speech(corpus):
    tmp_path, _ = corpus
    bank = R.NoiseBank(tmp_path / "noise" / "noise.jsonl")
    chain = C.AugmentChain(noise=1.0, snr=(10.0, 10.0), noise_bank=bank)
    x = speechlike(np.random.default_rng(2), 1.0)
    x[: SR // 2] = 0.0                                             # half silence: active power is the speech's
    aug: dict = {}
    y = chain.apply_noise(x, np.random.default_rng(0), aug)
    p = C.active_power(x)
    assert abs(p - np.mean(x[SR // 2:].astype(np.float64) ** 2)) / p < 0.05
    assert aug["snr"] == 10.0
    assert abs(10 * np.log10(p / np.mean((y - x).astype(np.float64) ** 2)) - 10.0) < 1e-3


def test_tight_crop_cuts_at_the_speech_and_leaves_noise_whole(corpus):
    """--tight-crop: the copy starts and ends within 40 ms of the speech; noise clips (no text) stay whole."""
    x = np.zeros(SR, np.float32)
    x += (1e-4 * np.random.default_rng(3).standard_normal(SR)).astype(np.float32)   # a quiet floor
    word = speechlike(np.random.default_rng(4), 0.4)
    x[int(0.3 * SR): int(0.3 * SR) + len(word)] += word
    for seed in range(5):
        y, (s, e) = C.tight_crop(x, np.random.default_rng(seed))
        assert int(0.3 * SR) - 0.065 * SR <= s <= int(0.3 * SR) + 0.03 * SR     # margin 0-40 ms + a window
        assert int(0.7 * SR) - 0.03 * SR <= e <= int(0.7 * SR) + 0.065 * SR
        assert np.array_equal(y, x[s:e])
        y, aug = C.augment_one(x, C.AugmentChain(tight_crop=1.0), C.stage_rngs([seed]))
        assert abs(len(y) - SR * (aug["crop"][1] - aug["crop"][0])) <= 16    # the span in ms, rounded
    y, aug = C.augment_one(x, C.AugmentChain(tight_crop=1.0), C.stage_rngs([0]), speech=False)
    assert "crop" not in aug and len(y) == len(x)
    flat = (0.02 * np.random.default_rng(5).standard_normal(SR)).astype(np.float32)   # nothing stands out
    y, span = C.tight_crop(flat, np.random.default_rng(0))
    assert span == (0, SR) and len(y) == SR
    tmp_path, rows = corpus
    m = C.augment_manifest([tmp_path / "src" / "manifest.jsonl"], tmp_path / "crop", C.AugmentChain(tight_crop=1.0))
    out = [json.loads(line) for line in m.read_text().splitlines()]
    assert "crop" not in out[2]["aug"] and out[2]["duration"] == rows[2]["duration"]   # the noise clip


@pytest.mark.parametrize("kw,msg", [
    (dict(voice=1.5), "voice must be a probability"),
    (dict(real_rir=0.7, room_sim=0.5, real_rirs=[1], sim_rirs=[1]), r"real-rir \+ room-sim must be <= 1"),
    (dict(real_rir=0.5), "needs real impulse responses"),
    (dict(room_sim=0.5), "bank of simulated rooms"),
    (dict(noise=0.5), "needs a noise manifest"),
    (dict(snr=(20.0, 10.0)), "snr must be a range"),
    (dict(tight_crop=-0.1), "tight-crop must be a probability"),
])
def test_chain_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        C.AugmentChain(**kw)


def test_cli_errors(corpus, capsys):
    tmp_path, _ = corpus
    base = ["--manifest", str(tmp_path / "src" / "manifest.jsonl"), "--out", str(tmp_path / "o")]
    assert augment_main(base + ["--noise", "0.5"]) == 2
    assert "noise manifest" in capsys.readouterr().err
    assert augment_main(["--manifest", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        augment_main(base + ["--snr", "5"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"audio": "missing.wav", "text": "x"}\n')
    assert augment_main(["--manifest", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "line 1: audio file" in capsys.readouterr().err


def test_registered_in_streamd_cli():
    from streamd import cli

    assert cli.DELEGATED["augment"][:2] == ("streamd.cli.data", "augment_main")


@needs_espeak
def test_synth_defaults_reproduce_and_options_change_only_audio(tmp_path, corpus):
    corpus_dir, _ = corpus
    kw = dict(seed=3, kws_fraction=0.3, negatives_fraction=0.2, engines=("espeak",))
    m0 = synth.synthesize_corpus(tmp_path / "plain", 3, **kw)
    m1 = synth.synthesize_corpus(tmp_path / "inactive", 3, extras=C.AugmentChain(), **kw)
    assert synth_main(["--out", str(tmp_path / "cli"), "--num-utts", "3", "--seed", "3", "--kws-fraction", "0.3",
                       "--negatives-fraction", "0.2", "--engines", "espeak", "--workers", "1"]) == 0
    lines = m0.read_text().splitlines()
    assert m1.read_text().splitlines() == lines
    assert (tmp_path / "cli" / "manifest.jsonl").read_text().splitlines() == lines
    rows = [json.loads(line) for line in lines]
    for r in rows:
        pcm = read_pcm(tmp_path / "plain" / r["audio"])
        assert pcm == read_pcm(tmp_path / "inactive" / r["audio"]) == read_pcm(tmp_path / "cli" / r["audio"])
    # with the options on: same texts and voices, other audio, the new stages in 'aug'
    bank = R.NoiseBank(corpus_dir / "noise" / "noise.jsonl")
    chain = C.AugmentChain(voice=1.0 if HAS_WORLD else 0.0, channel=1.0, noise=1.0, noise_bank=bank,
                           real_rir=1.0, real_rirs=R.load_rir_folder(corpus_dir / "rirs"))
    m2 = synth.synthesize_corpus(tmp_path / "extra", 3, extras=chain, **kw)
    rows2 = [json.loads(line) for line in m2.read_text().splitlines()]
    assert [r["text"] for r in rows2] == [r["text"] for r in rows]
    assert [r["voice"] for r in rows2] == [r["voice"] for r in rows]
    for r, r2 in zip(rows, rows2):
        assert read_pcm(tmp_path / "extra" / r2["audio"]) != read_pcm(tmp_path / "plain" / r["audio"])
        a = r2["aug"]
        assert a["rir"] == "room.wav" and "rt60" not in a and a["noise"].startswith("real:") and "channel" in a
        assert ("voice" in a) == HAS_WORLD
        assert not synth.is_clean(a)
    assert synth.plan_corpus(3, 3, 0.3, 0.2, tts.list_voices(["espeak"])) == synth.plan_corpus(
        3, 3, 0.3, 0.2, tts.list_voices(["espeak"]))
