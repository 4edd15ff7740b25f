"""Recognizer: streaming equals offline, batching is invisible, errors stay in their stream; partials,
endpoints, resets, options, the observer hook, every search's interface."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers import random_audio, write_checkpoint
from streamd.audio.fbank import FbankStream
from streamd.config import EndpointConfig, EngineConfig
from streamd.engine import Recognizer, StreamOptions
from streamd.events import Done, Error, Final, Partial, WakeWord
from tests.engine.feeding import FbankStream_frames, final_tokens, NO_ENDPOINT, offline_tokens, run_one


@pytest.mark.parametrize("method", ["greedy", "modified_beam", "beam", "ctc_greedy", "ctc_prefix_beam"])
@pytest.mark.parametrize("seed", [0, 1])
def test_streaming_equals_offline(tiny_ckpt, method, seed):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    x = random_audio(2.3, seed=seed)
    ev = run_one(rec, x, seed, method=method, beam=3)
    ref, n_frames = offline_tokens(rec, x, method, 3)
    assert final_tokens(ev) == ref
    assert len(ref) > 0
    done = [e for e in ev if isinstance(e, Done)]
    assert len(done) == 1 and done[0].audio_seconds == pytest.approx(x.size / 16000)


def test_batching_is_invisible(tiny_ckpt):
    """Many concurrent streams with random piece sizes and mixed methods == each stream alone."""
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    specs = [dict(method="greedy"), dict(method="modified_beam", beam=2), dict(method="modified_beam", beam=4),
             dict(method="ctc_greedy"), dict(method="greedy", sample_rate=8000), dict(method="beam", beam=2),
             dict(method="ctc_prefix_beam", beam=3)]
    audios = [random_audio(1.0 + 0.37 * i, rate=s.get("sample_rate", 16000), seed=10 + i) for i, s in enumerate(specs)]
    alone = [final_tokens(run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), a, 0, **s))
             for a, s in zip(audios, specs)]
    sids = [rec.create_stream(**s) for s in specs]
    rnd = random.Random(5)
    pos = [0] * len(sids)
    events = []
    while any(p < a.size for p, a in zip(pos, audios)):
        for i, sid in enumerate(sids):
            if pos[i] < audios[i].size:
                n = rnd.randint(1, 4000)
                events += rec.accept_audio(sid, audios[i][pos[i]:pos[i] + n])
                pos[i] += n
                if pos[i] >= audios[i].size:
                    rec.finish(sid)
        events += rec.step()
    events += rec.drain()
    for i, sid in enumerate(sids):
        mine = [e for e in events if e.stream == sid]
        assert final_tokens(mine) == alone[i], specs[i]
        assert isinstance(mine[-1], Done)
    assert rec.num_streams == 0


def test_warm_up_leaves_no_trace(tiny_ckpt):
    """warm_up runs every method once, emits nothing, calls no observer, and changes no later result."""
    seen = []
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    rec.on_batch = seen.append
    rec.warm_up(0.7)
    assert rec.num_streams == 0 and seen == []
    x = random_audio(1.9, seed=4)
    for method in ("greedy", "modified_beam"):
        cold = run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), x, 1, method=method)
        warm = run_one(rec, x, 1, method=method)
        assert [e.to_wire() for e in warm] == [e.to_wire() for e in cold]
    assert seen  # the observer is back for real streams
    sid = rec.create_stream()
    with pytest.raises(RuntimeError, match="idle recognizer"):
        rec.warm_up()
    rec.close(sid)


def test_partials_grow_and_final_matches(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    ev = run_one(rec, random_audio(2.0, seed=3), 3)
    partials = [e for e in ev if isinstance(e, Partial)]
    finals = [e for e in ev if isinstance(e, Final)]
    assert len(partials) >= 2 and len(finals) == 1
    for a, b in zip(partials, partials[1:]):
        assert b.tokens[:len(a.tokens)] == a.tokens  # greedy partials only ever extend
        assert b.end == pytest.approx(a.end + 0.16)  # each covers one more chunk (4 frames x 40 ms)
    assert partials[0].start == 0.0 and partials[0].to_wire()["end"] == pytest.approx(0.16)
    assert finals[0].tokens[:len(partials[-1].tokens)] == partials[-1].tokens
    for w in finals[0].words:
        assert 0.0 <= w.conf <= 1.0 and 0.0 <= w.start < w.end <= 2.0 + 0.2
    assert finals[0].text == " ".join(w.word for w in finals[0].words)
    wire = finals[0].to_wire()
    assert wire["type"] == "final" and set(wire["words"][0]) == {"word", "start", "end", "conf", "conf_raw"}
    assert wire["words"][0]["conf_raw"] == wire["words"][0]["conf"]  # no calibration: conf is the raw measure


def test_partials_off(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    ev = run_one(rec, random_audio(1.0), partials=False)
    assert not any(isinstance(e, Partial) for e in ev)
    assert sum(isinstance(e, Final) for e in ev) == 1


def test_bad_audio_only_hurts_its_stream(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    x = random_audio(1.5, seed=4)
    good = rec.create_stream()
    bad = rec.create_stream()
    ev = rec.accept_audio(good, x[:8000]) + rec.accept_audio(bad, x[:8000]) + rec.step()
    y = x[8000:16000].copy()
    y[100] = np.nan
    err = rec.accept_audio(bad, y)
    assert len(err) == 1 and isinstance(err[0], Error) and err[0].code == "bad_audio" and "NaN" in err[0].message
    assert not rec.has_stream(bad)
    ev += rec.accept_audio(good, x[8000:])
    rec.finish(good)
    ev += rec.drain()
    alone = run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), x)
    assert final_tokens([e for e in ev if e.stream == good]) == final_tokens(alone)
    bad_pcm = rec.create_stream()
    errs = rec.accept_pcm(bad_pcm, b"\x00\x01\x02", "s16le")
    assert errs[0].code == "bad_audio" and "multiple" in errs[0].message


@pytest.mark.parametrize("permanent", [False, True])
def test_crash_inside_one_stream_is_isolated(tiny_ckpt, monkeypatch, permanent):
    """An exception while decoding rolls the batch back; the streams are retried one by one.

    A transient failure costs nothing (both results exact); a permanent one
    becomes an Error for the failing stream only, and the other goes on.
    """
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    x = random_audio(1.2, seed=6)
    y = random_audio(1.2, seed=7)
    a, b = rec.create_stream(), rec.create_stream(method="modified_beam")
    search = rec.searches["modified_beam"]
    orig = search.step
    calls = {"n": 0}

    def flaky(state, *args):
        calls["n"] += 1
        if calls["n"] == 2 or (permanent and calls["n"] > 2):
            raise RuntimeError("boom")
        return orig(state, *args)

    monkeypatch.setattr(search, "step", flaky)
    ev = rec.accept_audio(a, x) + rec.accept_audio(b, y)
    rec.finish(a)
    rec.finish(b)
    ev += rec.drain()
    monkeypatch.setattr(search, "step", orig)
    errs = [e for e in ev if isinstance(e, Error)]
    fresh = lambda: Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)  # noqa: E731
    assert final_tokens([e for e in ev if e.stream == a]) == final_tokens(run_one(fresh(), x))
    if permanent:
        assert [(e.stream, e.code) for e in errs] == [(b, "internal")] and "boom" in errs[0].message
        assert not rec.has_stream(b)
    else:
        assert errs == []
        assert final_tokens([e for e in ev if e.stream == b]) == final_tokens(run_one(fresh(), y, method="modified_beam"))


def test_all_audio_reaches_the_result(tiny_ckpt):
    """Every accepted sample is decoded: frames decoded cover the whole (padded) signal and the end-of-stream
    flush after it; the Final ends with the audio's last frame, not the flush's."""
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    assert rec.tail_padding.size > 0
    for n in (0, 1, 399, 400, 401, 5 * 640 + 17, 16000 * 3 + 5):
        sid = rec.create_stream()
        rec.accept_audio(sid, random_audio(n / 16000 + 1e-9, seed=n)[:n])
        st = rec._streams[sid]
        rec.finish(sid)
        ev = rec.drain()
        fs = FbankStream(rec.model.cfg.fbank)
        fs.accept(np.zeros(n, dtype=np.float32))
        fs.finish()
        audio_frames = (fs.frames_ready() + 3) // 4
        fs = FbankStream(rec.model.cfg.fbank)
        fs.accept(np.zeros(n, dtype=np.float32))
        if n:  # a stream without audio gets no flush
            fs.accept(rec.tail_padding)
        fs.finish()
        assert st.frames_done == (fs.frames_ready() + 3) // 4, n
        assert isinstance(ev[-1], Done) and ev[-1].audio_seconds == pytest.approx(n / 16000)
        finals = [e for e in ev if isinstance(e, Final)]
        assert len(finals) == 1
        assert finals[0].end == pytest.approx(audio_frames * rec.frame_shift_s)
        assert all(w.end <= finals[0].end for w in finals[0].words)


def test_endpoint_rule3_splits_segments(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m.pt", blank_bias=-20.0)  # always emits: a segment never ends in silence
    cfg = EngineConfig(device="cpu", endpoint=EndpointConfig(rule3_max_utterance=1.0))
    rec = Recognizer.from_checkpoint(ckpt, cfg)
    ev = run_one(rec, random_audio(3.5, seed=7))
    finals = [e for e in ev if isinstance(e, Final)]
    assert [f.reason for f in finals[:-1]] == ["endpoint:rule3"] * (len(finals) - 1)
    assert len(finals) >= 3
    assert [f.segment for f in finals] == list(range(len(finals)))
    for f, g in zip(finals, finals[1:]):
        assert g.start == pytest.approx(f.end)
    assert finals[-1].reason == "eos"


def test_endpoint_rule1_on_silence_resets_quietly(tmp_path):
    ckpt = write_checkpoint(tmp_path / "m.pt", blank_bias=50.0)  # never emits
    rec = Recognizer.from_checkpoint(ckpt, EngineConfig(device="cpu"))
    ev = run_one(rec, np.zeros(16000 * 6, dtype=np.float32))
    finals = [e for e in ev if isinstance(e, Final)]
    assert len(finals) == 1 and finals[0].text == "" and finals[0].reason == "eos"
    assert finals[0].start >= 2.4  # two rule1 resets before: the open segment began later


def test_reset_closes_segment(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    x = random_audio(2.0, seed=8)
    sid = rec.create_stream()
    ev = rec.accept_audio(sid, x[:16000]) + rec.drain()
    rec.reset(sid)
    ev += rec.drain()
    assert [e.reason for e in ev if isinstance(e, Final)] == ["reset"]
    ev += rec.accept_audio(sid, x[16000:])
    rec.finish(sid)
    ev += rec.drain()
    finals = [e for e in ev if isinstance(e, Final)]
    assert [f.segment for f in finals] == [0, 1] and finals[1].reason == "eos"


def reset_between(rec, x, y, method):
    """The Finals of one stream: ``x``, reset, then ``y`` and the end of the stream."""
    sid = rec.create_stream(method=method, beam=3)
    ev = rec.accept_audio(sid, x) + rec.drain()
    rec.reset(sid)
    ev += rec.drain()
    ev += rec.accept_audio(sid, y)
    rec.finish(sid)
    return [e for e in ev + rec.drain() if isinstance(e, Final)]


@pytest.mark.parametrize("method", ["greedy", "modified_beam", "ctc_prefix_beam"])
def test_reset_flushes_like_the_end_of_stream(tiny_ckpt, method, monkeypatch):
    """reset closes its segment with the end-of-stream flush, decoded from copies of the stream's states: audio
    ending at a chunk boundary (its last 240 samples silent, so the flush after it is the same silence) gets
    the same Final from reset as from eof, and the stream then goes on as if the flush never happened."""
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    n = 3 * rec.chunk_fbank * 160 + 240  # three chunks of fbank frames exactly (the flush takes two more)
    x = random_audio(n / 16000 + 0.01, seed=3)[:n]
    x[-240:] = 0.0
    y = random_audio(1.0, seed=4)
    eos = [e for e in run_one(rec, x, method=method, beam=3) if isinstance(e, Final)]
    finals = reset_between(rec, x, y, method)
    assert [f.reason for f in finals] == ["reset", "eos"]
    assert finals[0].tokens == eos[0].tokens and len(eos[0].tokens) > 0
    assert finals[0].end == pytest.approx(3 * rec.chunk_frames * rec.frame_shift_s)
    assert max(finals[0].token_frames) < 3 * rec.chunk_frames
    # the stream itself never saw the flush: the second segment is what it is without any reset flush
    plain = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    monkeypatch.setattr(plain, "_reset_flush", lambda batch, sids: {})  # reset without the flush
    second = reset_between(plain, x, y, method)[1]
    assert (finals[1].tokens, finals[1].start) == (second.tokens, second.start)


def test_options_validated(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    with pytest.raises(ValueError, match="sample_rate must be 8000..48000, got 5"):
        rec.create_stream(sample_rate=5)
    with pytest.raises(ValueError, match="method"):
        rec.create_stream(method="viterbi")
    with pytest.raises(ValueError, match="beam"):
        rec.create_stream(beam=0)
    with pytest.raises(ValueError, match="unknown stream option 'colour'"):
        rec.create_stream(colour="red")
    assert StreamOptions().method == "greedy"


def test_max_batch_round_robin(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu", max_batch=2,
                                                             endpoint=EndpointConfig(enabled=False)))
    xs = [random_audio(1.0, seed=20 + i) for i in range(5)]
    sids = [rec.create_stream() for _ in xs]
    ev = []
    for s, x in zip(sids, xs):
        ev += rec.accept_audio(s, x)
        rec.finish(s)
    ev += rec.drain()
    for s, x in zip(sids, xs):
        alone = run_one(Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT), x)
        assert final_tokens([e for e in ev if e.stream == s]) == final_tokens(alone)


def test_lstm_decoder_model(tmp_path):
    ckpt = write_checkpoint(tmp_path / "lstm.pt", kind="lstm")
    rec = Recognizer.from_checkpoint(ckpt, NO_ENDPOINT)
    x = random_audio(1.5, seed=12)
    for method in ("greedy", "modified_beam"):
        assert final_tokens(run_one(rec, x, method=method)) == offline_tokens(rec, x, method)[0]


def test_observer_hook_and_measure_override(tiny_ckpt):
    """on_batch sees every committed step's head outputs; a measure override drives token confidences."""
    seen = []
    rec = Recognizer(__import__("streamd.model.checkpoint", fromlist=["x"]).load_checkpoint(tiny_ckpt), NO_ENDPOINT,
                     measure=lambda lp: torch.full(lp.shape[:-1], 0.25), on_batch=seen.append)
    x = random_audio(1.0, seed=2)
    ev = run_one(rec, x)
    fin = [e for e in ev if isinstance(e, Final)][0]
    assert fin.token_confs and all(c == 0.25 for c in fin.token_confs)
    assert len(fin.token_frames) == len(fin.tokens) and list(fin.token_frames) == sorted(fin.token_frames)
    assert seen and all(v.heads.kws_probs.shape[0] == len(v.stream_ids) for v in seen)
    assert sum(int(v.lengths.sum()) for v in seen) == (FbankStream_frames(rec, x.size) + 3) // 4


def test_partials_report_the_backlog_of_undecoded_audio(tiny_ckpt):
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(endpoint=EndpointConfig(enabled=False)))
    x = random_audio(3.0, seed=4)
    # fed in 0.1 s pieces with a step after each (keeping up): one chunk plus the feature window at most
    sid = rec.create_stream()
    kept = []
    for i in range(0, x.size, 1600):
        kept += [e for e in rec.accept_audio(sid, x[i:i + 1600]) + rec.step() if isinstance(e, Partial)]
    chunk = rec.model.cfg.encoder.chunk_size * rec.frame_shift_s
    assert kept and all(0 <= p.backlog <= chunk + 0.1 + 1e-6 for p in kept)
    assert all(p.backlog == pytest.approx(0.1 * k - p.end, abs=1e-6) for p in kept
               for k in [round((p.end + p.backlog) / 0.1)])
    rec.finish(sid)
    rec.drain()
    # all three seconds at once, then steps: the first partial is far behind, the backlog then shrinks
    sid = rec.create_stream()
    late = [e for e in rec.accept_audio(sid, x) + rec.step() + rec.step() if isinstance(e, Partial)]
    assert late[0].backlog == pytest.approx(3.0 - late[0].end, abs=1e-6) and late[0].backlog > 2.0
    assert late[-1].backlog < late[0].backlog
    assert late[0].to_wire()["backlog"] == round(late[0].backlog, 2)


def test_every_search_has_the_complete_interface(tiny_ckpt):
    """The engine reaches every search through the Search protocol alone (no method-name branches):
    state creation, the head output it reads, whether it keeps several hypotheses, final ranking."""
    import dataclasses as dc

    from streamd.config import BEAM_METHODS, HOTWORD_METHODS, SEARCH_METHODS
    from streamd.decode.context_graph import ContextGraph
    from streamd.model.transducer import HeadOutputs

    rec = Recognizer.from_checkpoint(tiny_ckpt, NO_ENDPOINT)
    with torch.no_grad():
        heads = rec.model.heads(torch.randn(1, 5, rec.model.cfg.encoder.d_model))
    fields = {f.name for f in dc.fields(HeadOutputs)}
    graph = ContextGraph(((2, 3),), (1.0,), rec.model.cfg.vocab_size)
    assert set(rec.searches) == set(SEARCH_METHODS)
    assert {m for m, s in rec.searches.items() if s.several} == set(BEAM_METHODS)  # the config's rule, written once
    for method, search in rec.searches.items():
        assert search.reads in fields and isinstance(search.several, bool) and isinstance(search.ranks_final, bool)
        state = search.new_state(3, "cpu")
        x = getattr(heads, search.reads)
        state = search.step(state, x, torch.tensor([5]), torch.zeros(1, dtype=torch.long))
        assert len(search.best(state, final=True)) == 1 and search.trailing_blanks(state).shape == (1,)
        if search.several:
            assert len(search.nbest(state, 3)[0]) >= 1
        if method in HOTWORD_METHODS:
            search.new_state(3, "cpu", graph=graph)
        else:
            with pytest.raises(ValueError, match="no hotwords"):
                search.new_state(3, "cpu", graph=graph)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", ["greedy", "modified_beam"])
def test_cuda_engine_matches_cpu_on_shipped_model(method):
    """The shipped model on its sample recordings, all streams batched: CUDA (sync-free searches) gives the
    CPU's tokens, token frames, words, wake-word events and endpoints; scores and confidences agree to float
    tolerance."""
    from streamd.audio.pcm import load_audio
    from streamd.paths import default_bench_audio, default_model_path

    clips = []
    for p in default_bench_audio():
        x, rate = load_audio(p)
        assert rate == 16000
        clips.append(x)

    def run(device):
        rec = Recognizer.from_checkpoint(str(default_model_path()), EngineConfig(device=device))
        sids = [rec.create_stream(method=method, beam=4) for _ in clips]
        ev, pos = [], 0
        while pos < max(x.size for x in clips):  # 100 ms packets to every stream, a step after each
            for sid, x in zip(sids, clips):
                if pos < x.size:
                    ev += rec.accept_audio(sid, x[pos:pos + 1600])
            ev += rec.step()
            pos += 1600
        for sid in sids:
            rec.finish(sid)
        return ev + rec.drain()

    cpu, cuda = run("cpu"), run("cuda")
    finals = lambda ev: sorted((e for e in ev if isinstance(e, Final)), key=lambda e: (e.stream, e.segment))
    fc, fg = finals(cpu), finals(cuda)
    assert [(f.stream, f.segment, f.text, f.tokens, f.token_frames, f.reason) for f in fg] == \
        [(f.stream, f.segment, f.text, f.tokens, f.token_frames, f.reason) for f in fc]
    assert any(f.text for f in fc)
    for a, b in zip(fc, fg):
        assert [(w.word, w.start, w.end) for w in b.words] == [(w.word, w.start, w.end) for w in a.words]
        np.testing.assert_allclose(b.token_confs, a.token_confs, atol=2e-3)
        np.testing.assert_allclose(b.scores, a.scores, rtol=1e-3, atol=1e-2)
    wakes = lambda ev: [(e.stream, e.keyword, round(e.end, 2)) for e in ev if isinstance(e, WakeWord)]
    assert wakes(cuda) == wakes(cpu)


def test_partials_reuse_text_and_words_only_for_an_unchanged_hypothesis():
    """A partial's text and words are those of its own tokens, frames and confidences (computed afresh
    here), also when the engine reused the previous chunk's for an unchanged hypothesis."""
    from streamd.audio.pcm import load_audio
    from streamd.decode.hyps import HypOut
    from streamd.paths import default_model_path, default_samples

    rec = Recognizer.from_checkpoint(str(default_model_path()), EngineConfig(device="cpu"))
    x, _ = load_audio(default_samples().parent / "lights.wav")
    x = np.concatenate([x, np.zeros(16000, np.float32)])  # a second of silence: unchanged hypotheses
    for method in ("greedy", "modified_beam"):
        parts = [e for e in run_one(rec, x, seed=3, method=method, endpointing=False) if isinstance(e, Partial)]
        assert len(parts) > 5
        for p in parts:
            assert p.text == rec.tokens.decode(p.tokens)
            assert p.words == rec._words(HypOut(p.tokens, p.token_frames, p.token_confs))
        same = [(a, b) for a, b in zip(parts, parts[1:])
                if (a.tokens, a.token_frames, a.token_confs) == (b.tokens, b.token_frames, b.token_confs)]
        assert same and all(b.words is a.words for a, b in same)
