"""streamd.scoring.recording: MeasureBank tags, tagged words, KWS track recording and replay, all via public hooks."""

import random

import numpy as np
import pytest
import torch

from helpers import CHARS, offline_heads, random_audio
from streamd.feed import transcribe_files
from streamd.config import ConfidenceConfig, DecodingConfig, EngineConfig, KwsConfig
from streamd.decode.confidence import MEASURE_NAMES, aggregate, frame_confidence
from streamd.decode.kws import KwsDetector
from streamd.tokens import WORD_PREFIX, TokenTable
from streamd.decode.words import tokens_to_words
from streamd.engine import BatchView, Recognizer
from streamd.events import Final
from streamd.model.checkpoint import load_checkpoint
from streamd.model.transducer import HeadOutputs
from streamd.scoring.recording import (KwsTrackRecorder, MeasureBank, recording_recognizer, replay_kws,
                                     tagged_words)


pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


# --------------------------------------------------------------------------- MeasureBank


def test_measure_bank_tags_and_lookup():
    specs = [(n, a) for n in MEASURE_NAMES for a in (0.33, 1.0)]
    bank = MeasureBank(specs)
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(3, 7, generator=g).log_softmax(-1)
    x2 = torch.randn(2, 4, 7, generator=g).log_softmax(-1)
    t1, t2 = bank(x1), bank(x2)
    assert t1.shape == (3,) and t2.shape == (2, 4) and t1.dtype == torch.float32
    assert t1.tolist() == [0, 1, 2] and t2.flatten().tolist() == list(range(3, 11))
    vals = bank.lookup([bank.tag_of(c) for c in t2[1].tolist()])
    for m, (n, a) in enumerate(specs):
        assert vals[:, m].tolist() == frame_confidence(x2[1], n, a).tolist()
    with pytest.raises(RuntimeError, match="not a recorded tag"):
        bank.tag_of(0.5)
    with pytest.raises(RuntimeError, match="not a recorded tag"):
        bank.tag_of(11.0)
    bank.reset()
    assert bank.num_tags == 0
    with pytest.raises(ValueError, match="unknown measure"):
        MeasureBank([("entropy", 0.5)])
    with pytest.raises(ValueError, match="alpha must be > 0"):
        MeasureBank([("max_prob", 0.0)])


# --------------------------------------------------------------------------- tagged_words


BPE = ("<blk>", WORD_PREFIX, WORD_PREFIX + "he", WORD_PREFIX + "a", "llo", "b", "c", "<unk>")


def _oracle_word_tags(table, tokens, frames, tags):
    """Membership of token k in word w by an indicator: max over the word of (1 at k, 0 elsewhere) is 1."""
    n = len(tokens)
    words = tokens_to_words(table, tokens, frames, [0.0] * n, 0.04, "max")
    members = [[] for _ in words]
    for k in range(n):
        ind = [1.0 if j == k else 0.0 for j in range(n)]
        for w, word in enumerate(tokens_to_words(table, tokens, frames, ind, 0.04, "max")):
            if word.conf == 1.0:
                members[w].append(k)
    return [(w.word, w.start, w.end, tuple(tags[k] for k in m)) for w, m in zip(words, members)]


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("seed", range(4))
def test_tagged_words_vs_indicator_oracle(kind, seed):
    """Each word gets exactly the tags of its own tokens (random tokens incl. separators, blanks, specials)."""
    table = TokenTable(CHARS if kind == "char" else BPE)
    rnd = random.Random(seed)
    bank = MeasureBank([("max_prob", 1.0)])
    bank(torch.zeros(500, 4).log_softmax(-1))  # tags 0..499 exist
    for _ in range(25):
        n = rnd.randint(0, 14)
        tokens = tuple(rnd.randrange(len(table)) for _ in range(n))
        frames = tuple(sorted(rnd.randrange(60) for _ in range(n)))
        tags = rnd.sample(range(500), n)
        words = tuple(tokens_to_words(table, tokens, frames, [0.5] * n, 0.04, "min"))
        final = Final(1, 0, table.decode(tokens), words, 0.0, 1.0, tokens, frames, tuple(float(t) for t in tags))
        got = tagged_words(final, table, 0.04, bank)
        assert [(w.word, w.start, w.end, w.tags) for w in got] == _oracle_word_tags(table, tokens, frames, tags)
        assert all(np.isnan(w.conf) for w in got)


def test_tagged_words_errors():
    table = TokenTable(CHARS)
    bank = MeasureBank([("max_prob", 1.0)])
    bank(torch.zeros(4, 3).log_softmax(-1))
    tokens, frames = (3, 4, 1, 5), (0, 1, 2, 3)  # "bc d"
    words = tuple(tokens_to_words(table, tokens, frames, [0.5] * 4, 0.04, "min"))
    ok = Final(1, 0, "bc d", words, tokens=tokens, token_frames=frames, token_confs=(0.0, 1.0, 2.0, 3.0))
    assert [w.tags for w in tagged_words(ok, table, 0.04, bank)] == [(0, 1), (3,)]
    with pytest.raises(RuntimeError, match=r"not a recorded tag"):
        tagged_words(Final(1, 0, "bc d", words, tokens=tokens, token_frames=frames,
                           token_confs=(0.0, 0.7, 2.0, 3.0)), table, 0.04, bank)
    with pytest.raises(RuntimeError, match=r"regrouped .* differ from its words \['bc'\]"):
        tagged_words(Final(1, 0, "bc d", words[:1], tokens=tokens, token_frames=frames,
                           token_confs=(0.0, 1.0, 2.0, 3.0)), table, 0.04, bank)
    with pytest.raises(ValueError, match=r"must have equal lengths, got 4, 4, 3"):
        tagged_words(Final(1, 0, "bc d", words, tokens=tokens, token_frames=frames,
                           token_confs=(0.0, 1.0, 2.0)), table, 0.04, bank)


# --------------------------------------------------------------------------- recorded confidences = engine's


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    import wave

    d = tmp_path_factory.mktemp("rec")
    out = []
    for i in range(3):
        path = d / f"f{i}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.clip(random_audio(1.2 + 0.3 * i, seed=i), -1, 1) * 32767).astype("<i2").tobytes())
        out.append(str(path))
    return out


def _confidence_config(name, alpha, how):
    if name == "max_prob":
        return ConfidenceConfig(measure="max_prob", alpha=alpha, aggregation=how)
    _, kind, norm = name.split("_")
    return ConfidenceConfig(measure="entropy", entropy_type=kind, entropy_norm=norm, alpha=alpha, aggregation=how)


@pytest.mark.parametrize("method, ckpt, settings", [
    ("greedy", "ckpt5",
     [("entropy_tsallis_exp", 0.25, "min"), ("max_prob", 1.0, "prod"), ("entropy_renyi_lin", 0.5, "mean")]),
    ("modified_beam", "ckpt5", [("entropy_gibbs_lin", 0.25, "max"), ("entropy_renyi_exp", 1.0, "min")]),
    ("beam", "tiny_ckpt", [("entropy_gibbs_exp", 0.5, "mean"), ("entropy_tsallis_lin", 0.25, "prod")]),
    ("ctc_prefix_beam", "ckpt5", [("max_prob", 0.5, "max"), ("entropy_tsallis_exp", 0.5, "min")]),
])
def test_recorded_confidences_equal_engine(request, wavs, method, ckpt, settings):
    """Word confidences recomputed from recorded frames = the engine's when configured with that measure."""
    files = wavs[:2]
    dec = DecodingConfig(method=method, beam=3)
    loaded = load_checkpoint(request.getfixturevalue(ckpt))
    bank = MeasureBank([(n, a) for n in MEASURE_NAMES for a in (0.25, 0.5, 1.0)])
    rec = recording_recognizer(loaded, EngineConfig(device="cpu", decoding=dec), bank)
    assert type(rec) is Recognizer and rec.measure is bank and rec.config.confidence.exclude_blank
    rec_words = {p: [w for e in evs if isinstance(e, Final)
                     for w in tagged_words(e, rec.tokens, rec.frame_shift_s, bank)]
                 for p, evs in transcribe_files(rec, files).items()}
    assert sum(len(w.tags) for ws in rec_words.values() for w in ws) >= 3
    for name, alpha, how in settings:
        m = bank.specs.index((name, alpha))
        engine = Recognizer(loaded, EngineConfig(device="cpu", decoding=dec,
                                                 confidence=_confidence_config(name, alpha, how)))
        for p, evs in transcribe_files(engine, files).items():
            words = [w for e in evs if isinstance(e, Final) for w in e.words]
            assert [w.word for w in words] == [w.word for w in rec_words[p]]
            vals = bank.lookup([t for w in rec_words[p] for t in w.tags])
            pos, confs = 0, []
            for rw in rec_words[p]:
                confs.append(aggregate(vals[pos:pos + len(rw.tags), m].tolist(), how))
                pos += len(rw.tags)
            assert confs == pytest.approx([w.conf for w in words], abs=1e-7), (name, alpha, how)
            assert len(set(confs)) > 1 or len(confs) <= 1 or how == "max"


# --------------------------------------------------------------------------- KWS tracks


def _offline_kws(rec, x):
    """Whole utterance (with the end-of-stream flush): the KWS head over the encoder's output."""
    heads, enc_len = offline_heads(rec, x)
    return heads.kws_probs[0, : int(enc_len[0])].double().numpy()


@pytest.mark.parametrize("seed, max_batch", [(0, 256), (1, 2), (2, 3)])
def test_kws_tracks_equal_offline_head(tiny_ckpt, seed, max_batch):
    """Concurrent streams, random pieces, mixed keywords flags, partial batches: each recorded track is the
    KWS head over the stream's whole utterance (rows mapped by stream id, chunks joined in order)."""
    recorder = KwsTrackRecorder()
    rec = recording_recognizer(load_checkpoint(tiny_ckpt), EngineConfig(device="cpu", max_batch=max_batch),
                               MeasureBank([("max_prob", 1.0)]), recorder)
    rnd = random.Random(seed)
    audios = [random_audio(0.6 + 0.45 * i, seed=20 * seed + i) for i in range(4)]
    sids = [rec.create_stream(keywords=i % 2 == 0, partials=False) for i in range(4)]
    pos = [0] * 4
    while any(p < a.size for p, a in zip(pos, audios)):
        for i, sid in enumerate(sids):
            if pos[i] < audios[i].size:
                n = rnd.randint(1, 5000)
                rec.accept_audio(sid, audios[i][pos[i]:pos[i] + n])
                pos[i] += n
                if pos[i] >= audios[i].size:
                    rec.finish(sid)
        rec.step()
    rec.drain()
    tracks = recorder.take_tracks()
    assert sorted(tracks) == sorted(sids)
    for sid, x in zip(sids, audios):
        ref = _offline_kws(rec, x)
        assert tracks[sid].shape == ref.shape and tracks[sid].dtype == np.float64
        np.testing.assert_allclose(tracks[sid], ref, atol=2e-5)
    assert recorder.take_tracks() == {}


def test_kws_recorder_disabled_and_errors():
    recorder = KwsTrackRecorder(enabled=False)
    g = torch.Generator().manual_seed(0)

    def view(ids, t, lengths, offsets, k=2):
        heads = HeadOutputs(torch.zeros(len(ids), t, 3), None, torch.rand(len(ids), t, k, generator=g))
        return BatchView(tuple(ids), heads, torch.tensor(lengths), torch.tensor(offsets))

    recorder(view([1], 4, [4], [0]))
    assert recorder.take_tracks() == {}
    recorder.enabled = True
    recorder(BatchView((1,), HeadOutputs(torch.zeros(1, 4, 3), None, None), torch.tensor([4]), torch.tensor([0])))
    assert recorder.take_tracks() == {}  # no KWS head: nothing to record
    v1, v2 = view([1, 2], 4, [4, 4], [0, 0]), view([2, 1], 4, [3, 4], [4, 4])
    recorder(v1)
    recorder(v2)
    tracks = recorder.take_tracks()
    assert tracks[1].tolist() == torch.cat([v1.heads.kws_probs[0], v2.heads.kws_probs[1]]).double().tolist()
    assert tracks[2].tolist() == torch.cat([v1.heads.kws_probs[1], v2.heads.kws_probs[0, :3]]).double().tolist()
    recorder(view([7], 4, [4], [0]))
    recorder(view([7], 4, [4], [8]))
    with pytest.raises(RuntimeError, match="KWS recording of stream 7: chunk at frame 8, expected 4"):
        recorder.take_tracks()
    with pytest.raises(RuntimeError, match="3 score rows, 2 lengths and 2 offsets for 2 streams"):
        recorder(BatchView((1, 2), HeadOutputs(torch.zeros(3, 4, 3), None, torch.rand(3, 4, 2)),
                           torch.tensor([4, 4]), torch.tensor([0, 0])))


@pytest.mark.parametrize("seed, smoothing, refractory", [(0, 1, 1.0), (1, 3, 0.2), (2, 2, 0.0)])
def test_replay_kws_equals_chunked_detector(seed, smoothing, refractory):
    """The batched many-threshold replay equals one detector per threshold fed chunk by chunk, per file."""
    g = np.random.default_rng(seed)
    keywords = ("hey stream", "stop")
    tracks = [g.random((int(g.integers(0, 40)), 2)).astype(np.float32).astype(np.float64) for _ in range(5)]
    cfg = KwsConfig(smoothing_frames=smoothing, refractory_s=refractory)
    thresholds = [0.3, 0.55, 0.8, 0.9]
    got = replay_kws(tracks, keywords, cfg, 0.04, thresholds, max_elements=200)  # small batches of files
    for i, t in enumerate(thresholds):
        det = KwsDetector(keywords, KwsConfig(threshold=t, smoothing_frames=smoothing, refractory_s=refractory), 0.04)
        for f, tr in enumerate(tracks):
            state, expect = det.init_state(1), []
            for off in range(0, len(tr), 4):
                x = torch.from_numpy(tr[off:off + 4]).float()[None]
                state, dets = det.step(state, x, torch.tensor([x.shape[1]]), torch.tensor([off]))
                expect += [(d.keyword, d.score, d.start, d.end) for d in dets]
            assert [(d.keyword, d.score, d.start, d.end) for d in got[i][f]] == expect
            assert all(d.row == f for d in got[i][f])
    assert sum(len(d) for d in got[0]) > sum(len(d) for d in got[-1])  # the sweep is not trivial
    with pytest.raises(ValueError, match=r"tracks\[1\]: expected shape \(frames, 2\), got \(3, 1\)"):
        replay_kws([tracks[0], np.zeros((3, 1))], keywords, cfg, 0.04, thresholds)
