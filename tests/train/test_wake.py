"""``streamd wake train``: confusable phrases, which real files may be negatives, window labels, the detection
rule of the threshold choice, and a tiny end-to-end run (TTS needed) whose file loads as a wake model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import write_wav
from streamd.model.wake import load_wake_model
from streamd.cli.wake import wake_main
from streamd.train import wake as W


def test_confusable_phrases_are_never_the_keyword():
    rng = np.random.default_rng(0)
    out = W.confusable_phrases("hey jarvis", rng, 200)
    assert len(out) == 200
    assert "hey jarvis" not in {p.casefold() for p in out}
    assert {"hey", "jarvis", "jarvis hey"} <= set(out)
    assert any(p.startswith("hey ") and p != "hey jarvis" and p.endswith("arvis") for p in out)


def _fake_real(root):
    lines = {
        "speech_commands/train": [{"audio": "yes/a.wav", "text": "yes"}, {"audio": "_silence_/n.wav", "text": "",
                                                                           "noise": True}],
        "speech_commands/dev": [{"audio": "yes/d.wav", "text": "yes"}],
        "speechocean762/train": [{"audio": "s/b.wav", "text": "we say hey jarvis now"},
                                 {"audio": "s/c.wav", "text": "hello there"}],
        "speechocean762/dev": [{"audio": "s/e.wav", "text": "hello again"}],
        "speechocean762/unlabeled": [{"audio": "u/f.wav"}],
        "librispeech_unlabeled": [{"audio": "librispeech_train-clean-100/x.wav"},
                                  {"audio": "librispeech_test-other/y.wav"}],
        "mycroft": [{"audio": "wake/m.wav", "text": "hey jarvis", "keyword": "hey jarvis"}],
    }
    rng = np.random.default_rng(1)
    for sub, objs in lines.items():
        d = root / sub
        for o in objs:
            (d / o["audio"]).parent.mkdir(parents=True, exist_ok=True)
            write_wav(d / o["audio"], (0.1 * rng.standard_normal(16000)).astype(np.float32))
        (d / "manifest.jsonl").write_text("".join(json.dumps(o) + "\n" for o in objs))
    return root


def test_real_negatives_come_from_training_splits_only(tmp_path):
    files = W.real_negative_files("Hey  Jarvis", _fake_real(tmp_path))
    names = [n for _, n in files["speech"]]
    assert names == ["speech_commands/train/yes/a.wav", "speechocean762/train/s/c.wav",
                     "speechocean762/unlabeled/u/f.wav", "librispeech_unlabeled/librispeech_train-clean-100/x.wav"]
    assert [n for _, n in files["noise"]] == ["speech_commands/train/_silence_/n.wav"]


def test_window_labels():
    pos, neg = W._labels(40, start=16000, end=24000)
    ends = (np.arange(40) + 1) * 1280
    assert pos.any() and np.all((ends[pos] >= 24000) & (ends[pos] <= 24000 + 0.32 * 16000))
    assert np.all(ends[neg] <= 20000) and not (pos & neg).any()


def test_detection_rule_counts_refractory():
    s = np.zeros(60)
    s[[5, 6, 10, 30]] = 0.9       # 5 fires; 6 and 10 are within 1 s (12.5 frames); 30 fires again
    assert W._detections(s, 0.5) == 2
    det = W.det_curve(np.array([0.95, 0.4]), [s], 1.0, [0.5, 0.95])
    assert det == [[0.5, 0.5, 2.0], [0.95, 0.5, 0.0]]


def test_train_end_to_end(tmp_path, monkeypatch):
    from streamd.train.tts import list_voices
    if not list_voices():
        pytest.skip("no TTS engine installed (espeak-ng, flite, festival or piper-tts)")
    monkeypatch.setenv("STREAMD_SHARED", str(tmp_path / "shared"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _fake_real(tmp_path / "shared" / "real")
    W._REAL_CACHE.clear()
    out = tmp_path / "m.wake.pt"
    args = ["train", "hey jarvis", "--tts-positives", "4", "--copies", "1", "--tts-negatives", "4",
            "--real-negatives", "3", "--epochs", "1", "--workers", "1", "--hard-negatives", "5"]
    rc = wake_main(args + ["--out", str(out), "--members", "1", "--wide-negatives", "0", "--draws", "1"])
    assert rc == 0
    m = load_wake_model(out)
    assert m.keyword == "hey jarvis" and m.threshold == 0.5  # calibrated: 0.5 at the chosen threshold
    assert m.info["data"]["real_negative_files"] >= 1 and m.info["det"]
    assert all(not s.startswith("real/mycroft") for s in m.info["data"]["sources"])
    assert all("/dev" not in s for s in m.info["data"]["sources"])
    # the real negatives' embeddings are on disk; a second process (empty memory cache) reads them back
    cache = W.real_cache_file()
    assert cache.is_file() and str(cache).startswith(str(tmp_path / "cache"))
    before = cache.stat().st_mtime_ns
    W._REAL_CACHE.clear()
    assert wake_main(args + ["--out", str(tmp_path / "m2.wake.pt"), "--members", "2", "--wide-negatives", "2",
                             "--draws", "2"]) == 0
    assert cache.stat().st_mtime_ns == before  # nothing new to embed: the cache was not rewritten
    m2 = load_wake_model(tmp_path / "m2.wake.pt")
    assert m2.info["data"]["real_negative_files"] == m.info["data"]["real_negative_files"]
    assert m2.head.members == 4 and m.head.members == 1      # two nets on each of two draws of the TTS data
    assert m2.info["data"]["draws"] == 2 and m.info["data"]["draws"] == 1
    # two draws of 4 + 2 wide sound-alikes against one of 4: the wide sound-alikes joined, the draws add up
    assert m2.info["data"]["tts_negatives"] > 2 * m.info["data"]["tts_negatives"]
    assert m2.info["data"]["tts_positives"] == 2 * m.info["data"]["tts_positives"]


def test_draws_merge_their_held_out_data_and_count_the_real_negatives_once():
    a, b = W._Embedded(), W._Embedded()
    for k, d in enumerate((a, b)):
        d.train.finish()
        d.pos_held, d.held_tts, d.held_neg = [("p", k)], [f"t{k}"], ["real"]
        d.held_secs, d.held_tts_secs, d.train_tts_secs, d.train_real_secs, d.n_pos_ok = 60.0, 2.0, 3.0, 100.0, 5
    m = W._Embedded()
    m.merge(a); m.merge(b)
    assert m.pos_held == [("p", 0), ("p", 1)] and m.held_tts == ["t0", "t1"] and m.held_neg == ["real"]
    assert (m.held_secs, m.held_tts_secs, m.train_tts_secs, m.train_real_secs, m.n_pos_ok) == (60.0, 4.0, 6.0, 100.0, 10)
    assert W._draw_seed(5, 0) == 5 and len({W._draw_seed(5, k) for k in range(4)}) == 4


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        wake_main(["train", "a", "b", "--out", "x.pt"])
    assert "--out names one file" in capsys.readouterr().err
    for bad, msg in ((["--rhyme-share", "1.5"], "--rhyme-share"), (["--draws", "0"], "--draws")):
        with pytest.raises(SystemExit):
            wake_main(["train", "hey jarvis"] + bad)
        assert msg in capsys.readouterr().err
    assert wake_main(["train", "hey 7"]) == 2


def test_convert_embedding_is_a_wake_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        wake_main(["convert-embedding", "--help"])
    assert e.value.code == 0 and "streamd wake convert-embedding" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        wake_main(["--help"])
    assert "convert-embedding" in capsys.readouterr().out


def test_sound_alikes_are_near_but_never_the_keyword():
    lex = {"hey": ("hh", "ey"), "savant": ("s", "ah", "v", "aa", "n", "t"), "servant": ("s", "er", "v", "ah", "n", "t"),
           "levant": ("l", "ah", "v", "aa", "n", "t"), "savants": ("s", "ah", "v", "aa", "n", "t", "s"),
           "save": ("s", "ey", "v"), "ant": ("ae", "n", "t"), "sahvant": ("s", "ah", "v", "aa", "n", "t"),
           "table": ("t", "ey", "b", "ah", "l")}
    out = W.sound_alikes("hey savant", lex, np.random.default_rng(0), 50)
    assert "hey levant" in out and "hey servant" in out
    assert out.index("hey levant") < out.index("hey servant")          # nearest (1 edit) first
    assert "hey savant" not in out and "hey sahvant" not in out         # never the keyword or a homophone
    assert "hey savants" not in out                                     # nor a word that holds the keyword
    assert not any("table" in p for p in out)                           # too far
    assert W._pronounce("chatterbox", {"chatter": ("ch", "ae"), "box": ("b", "aa")}) == ("ch", "ae", "b", "aa")


def test_wide_sound_alikes_lie_beyond_the_near_ones_with_the_same_syllables():
    lex = {"hey": ("hh", "ey"), "savant": ("s", "ah", "v", "aa", "n", "t"),
           "levant": ("l", "ah", "v", "aa", "n", "t"),                   # 1 edit: a near one, not wide
           "vermont": ("v", "er", "m", "aa", "n", "t"),                   # 3 of 6: wide
           "ferment": ("f", "er", "m", "eh", "n", "t"),                   # 4 of 6: beyond half
           "servants": ("s", "er", "v", "ah", "n", "t", "s"),             # 3 edits but holds no "savant": wide
           "sieve": ("s", "ih", "v"), "dent": ("d", "eh", "n", "t"),      # two words, 3 edits: wide
           "savannah": ("s", "ah", "v", "ae", "n", "ah"),                 # 3 syllables: not the same shape
           "day": ("d", "ey"), "say": ("s", "ey")}                        # "hey" (2 phonemes) is never replaced
    out = W.wide_sound_alikes("hey savant", lex, np.random.default_rng(0), 50)
    assert {"hey vermont", "hey servants", "hey sieve dent"} <= set(out)
    assert not {"hey levant", "hey ferment", "hey savannah", "hey savant"} & set(out)
    assert not any(p.startswith(("day", "say")) for p in out)
    assert sorted(W.wide_sound_alikes("hey savant", lex, np.random.default_rng(1), 50)) == sorted(out)
    assert len(W.wide_sound_alikes("hey savant", lex, np.random.default_rng(0), 2)) == 2


def test_wide_sound_alikes_draw_the_rhyming_ones_first_up_to_their_share():
    lex = {"hey": ("hh", "ey"), "savant": ("s", "ah", "v", "aa", "n", "t")}
    rhyming = {"vermont": ("v", "er", "m", "aa", "n", "t"), "durant": ("d", "er", "r", "aa", "n", "t"),
               "bouffant": ("b", "uw", "f", "aa", "n", "t")}         # wide, and they end in "aa n t"
    other = {"servants": ("s", "er", "v", "ah", "n", "t", "s"), "sermon": ("s", "er", "m", "ah", "n"),
             "sabbath": ("s", "ae", "b", "ah", "th"), "solvent": ("s", "aa", "l", "v", "ah", "n", "t")}
    lex.update(rhyming); lex.update(other)
    assert W._rhyme(lex["savant"]) == ("aa", "n", "t") and W._rhyme(("hh",)) == ()
    plain = W.wide_sound_alikes("hey savant", lex, np.random.default_rng(0), 50)
    for seed in range(5):
        out = W.wide_sound_alikes("hey savant", lex, np.random.default_rng(seed), 4, rhyme_share=0.5)
        assert len(out) == 4 and all(p.split()[1] in rhyming for p in out[:2])
        full = W.wide_sound_alikes("hey savant", lex, np.random.default_rng(seed), 50, rhyme_share=1.0)
        assert {p.split()[1] for p in full[:3]} == set(rhyming) and sorted(full) == sorted(plain)
    # share 0 is the plain random draw
    assert W.wide_sound_alikes("hey savant", lex, np.random.default_rng(0), 50, rhyme_share=0.0) == plain
    with pytest.raises(ValueError, match="rhyme_share"):
        W.wide_sound_alikes("hey savant", lex, np.random.default_rng(0), 4, rhyme_share=1.5)


def test_read_lexicon_both_forms(tmp_path):
    f = tmp_path / "festival.out"
    f.write_text('MNCL\n("savant" nil (((s ax) 0) ((v aa n t) 1)))\n("hey" nil (((hh ey) 1)))\n')
    assert W.read_lexicon(f) == {"savant": ("s", "ah", "v", "aa", "n", "t"), "hey": ("hh", "ey")}
    g = tmp_path / "cmu.dict"
    g.write_text("savant S AH0 V AA1 N T\nsavant(2) S AE0 V AH0 N T\n")
    assert W.read_lexicon(g) == {"savant": ("s", "ah", "v", "aa", "n", "t")}


def test_threshold_logit_is_the_lowest_within_the_budget():
    a = np.array([0.0, 5.0, 0.0, 0.0])
    b = np.zeros(40)
    b[[0, 30]] = [3.0, 4.0]                                 # 30 frames apart: two firings at <= 3
    assert W._threshold_logit([a, b], hours=1.0, target_fa_per_h=0.5) == pytest.approx(5.0 + 1e-3)  # no FA allowed
    assert W._threshold_logit([a, b], hours=2.0, target_fa_per_h=0.5) == 5.0       # one allowed: 5 fires once
    assert W._threshold_logit([a, b], hours=4.0, target_fa_per_h=0.5) == 4.0       # two: 5 and 4


def test_calibration_keeps_the_order_and_puts_the_threshold_at_half():
    import torch
    from streamd.model.wake import WakeHead
    torch.manual_seed(0)
    head = WakeHead(8).eval()
    x = torch.randn(50, 16, 96)
    with torch.no_grad():
        z = head(x)
    thr, med = float(z[10]), float(z.max())
    W._calibrate(head, thr, med)
    with torch.no_grad():
        z2 = head(x)
    assert torch.equal(torch.argsort(z2), torch.argsort(z))
    assert float(z2[10]) == pytest.approx(0.0, abs=1e-5)
    assert float(z2.max()) == pytest.approx(W.CAL_POSITIVE_LOGIT, abs=1e-4)


def test_calibration_of_a_head_of_several_nets():
    import torch
    from streamd.model.wake import WakeHead
    torch.manual_seed(0)
    head = WakeHead(8, members=3).eval()
    x = torch.randn(50, 16, 96)
    with torch.no_grad():
        z = head(x)
    W._calibrate(head, float(z[10]), float(z.max()))
    with torch.no_grad():
        z2 = head(x)
    assert torch.equal(torch.argsort(z2), torch.argsort(z))
    assert float(z2[10]) == pytest.approx(0.0, abs=1e-5)
    assert float(z2.max()) == pytest.approx(W.CAL_POSITIVE_LOGIT, abs=1e-4)


def test_training_windows_are_gathered_without_copies():
    import torch
    w = W._Windows()
    a = torch.arange(20 * 96, dtype=torch.float32).reshape(20, 96)      # 5 windows
    w.add(a, pos=np.array([0, 0, 0, 1, 1], bool), neg=np.array([1, 0, 0, 0, 0], bool))
    w.add(a[:17], real=True)                                            # 2 windows, both negative
    w.finish()
    assert w.pos.tolist() == [3, 4] and w.neg.tolist() == [0, 20, 21] and w.real.tolist() == [False, True, True]
    assert torch.equal(w.gather(torch.tensor([4, 21]))[0], a[4:20])
    assert torch.equal(w.gather(torch.tensor([21]))[0], a[1:17])


def test_each_positive_is_placed_copies_times_and_more_copies_only_add():
    """``copies`` placements of every positive utterance, all of an utterance on one side of the held-out split;
    placement c is the same whatever ``copies`` (more copies add placements, they do not redraw the first ones)."""
    import torch

    def emb(t):  # a stand-in for the speech embedding: one row per 1280 samples, + 15 rows (T + 15, 96)
        x = t[0]
        n = len(x) // W.EMB
        rms = x[: n * W.EMB].reshape(n, W.EMB).abs().mean(1)
        return torch.cat([torch.zeros(15), rms])[:, None].repeat(1, 96)[None]

    g = np.random.default_rng(0)
    pos = [np.sin(np.arange(8000) * 0.05 * (1 + k)).astype(np.float32) * 0.3 + 0.01 * g.standard_normal(8000)
           .astype(np.float32) for k in range(12)]
    held = [i for i in range(len(pos)) if W._held_out(f"pos-{i}")]
    assert 0 < len(held) < len(pos)
    d5 = W._embed(W.WakeTrainConfig(copies=5), emb, pos, [], [], None, [])
    d8 = W._embed(W.WakeTrainConfig(copies=8), emb, pos, [], [], None, [])
    assert len(d5.pos_held) == 5 * len(held) and len(d8.pos_held) == 8 * len(held)
    for k in range(len(held)):  # the held-out placements of utterance held[k]: 5 (or 8) in a row
        a5, a8 = d5.pos_held[5 * k:5 * k + 5], d8.pos_held[8 * k:8 * k + 8]
        for (s5, p5), (s8, p8) in zip(a5, a8[:5]):
            assert torch.equal(s5, s8) and np.array_equal(p5, p8)
        assert len({(s.shape[0], round(float(s.sum()), 3)) for s, _ in a8}) == 8  # eight different placements
    assert len(d8.train.pos) > len(d5.train.pos) > 0
