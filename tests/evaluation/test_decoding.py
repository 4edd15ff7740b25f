"""streamd.evaluation.decoding: the decodes of ``streamd eval`` go through streamd.feed as the daemon would;
the recording decode gives the plain decode's text, with its words' bank values and the KWS tracks."""

import numpy as np
import pytest

from helpers import random_audio
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from streamd.evaluation.decoding import Decoded, finals, record_decode, timed_decode
from streamd.events import Done, Final, Partial, WakeWord
from streamd.feed import feed_streams
from streamd.model.checkpoint import load_checkpoint
from streamd.scoring.recording import KwsTrackRecorder, MeasureBank, recording_recognizer

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


@pytest.fixture(scope="module")
def audio():
    return [(random_audio(1.3, 16000, seed=1), 16000), (random_audio(0.9, 8000, seed=2), 8000),
            (random_audio(1.1, 16000, seed=3), 16000)]


def _wire(events):
    return [e.to_wire() for e in events]


def test_finals_keeps_the_non_empty_finals_in_order():
    a, b = Final(0, 0, "turn on", ()), Final(0, 2, "the lights", ())
    events = [Partial(0, 0, "turn"), a, Final(0, 1, "", ()), WakeWord(0, "hey stream", 0.9, 0.1, 0.5), b, Done(0)]
    assert finals(events) == [a, b]
    assert finals([]) == []


@pytest.mark.parametrize("per_group", [1, 2, 5])
def test_timed_decode_is_feed_streams_in_groups(tiny_ckpt, audio, per_group):
    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))
    events, wall = timed_decode(rec, audio, per_group, 0.1)
    assert wall >= 0.0 and len(events) == len(audio) and rec.num_streams == 0
    _, alone = feed_streams(rec, audio, 0.1)  # each stream decodes as if alone: groups change nothing
    assert [_wire(e) for e in events] == [_wire(e) for e in alone]


@pytest.mark.parametrize("keywords", [False, True])
def test_record_decode_gives_the_plain_text_with_bank_values(tiny_ckpt, audio, keywords):
    loaded = load_checkpoint(tiny_ckpt)
    cfg = EngineConfig(device="cpu")
    bank = MeasureBank([("max_prob", 1.0), ("entropy_tsallis_exp", 0.33)])
    recorder = KwsTrackRecorder(enabled=False)
    rec = recording_recognizer(loaded, cfg, bank, recorder)
    out = [Decoded() for _ in audio]
    record_decode(rec, bank, recorder, audio, out, 2, 0.1, keywords, len(rec.keywords))
    plain, _ = timed_decode(Recognizer(loaded, cfg), audio, 3, 0.1)
    texts = [" ".join(f.text for f in finals(evs)) for evs in plain]
    assert [d.rec_text for d in out] == texts and any(texts)
    for d, evs in zip(out, plain):
        assert [w for w, _ in d.rec_words] == [w.word for f in finals(evs) for w in f.words]
        for _, values in d.rec_words:
            assert values.ndim == 2 and values.shape[1] == 2  # (tokens of the word, measures of the bank)
            assert ((values >= 0) & (values <= 1)).all()
        if keywords:
            assert d.track is not None and d.track.ndim == 2 and d.track.shape[1] == len(rec.keywords)
            assert np.isfinite(d.track).all() and d.track.shape[0] > 0
        else:
            assert d.track is None
    # nothing is left recorded, and the recorder is off again
    assert not recorder.enabled and recorder.take_tracks() == {} and bank.num_tags == 0
