"""streamd.evaluation.recognition: :class:`Evaluator` decodes a set as the daemon would (here: downsampled to
8 kHz, against the same files streamed by hand)."""

import itertools

import pytest

from tests.evaluation.sets import write_eval_set as _write_set
from streamd.audio.resample import resample
from streamd.config import EngineConfig
from streamd.engine import Recognizer
from streamd.events import Final
from streamd.model.checkpoint import load_checkpoint
from streamd.evaluation.options import EvalOptions
from streamd.evaluation.recognition import Evaluator

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


def test_resample_to_8000(tiny_ckpt, wav_files, tmp_path):
    files = wav_files[:2]
    for w in files:
        (tmp_path / w.rsplit("/", 1)[1]).write_bytes(open(w, "rb").read())
    jsonl = _write_set(tmp_path / "r.jsonl", files, ["a b", "c"])
    report = Evaluator(load_checkpoint(tiny_ckpt), EngineConfig(device="cpu"),
                       EvalOptions(resample_to=8000)).evaluate(jsonl)
    assert report["sample_rate"] == 8000
    # oracle: the same files downsampled and streamed at 8 kHz, 0.1 s pieces, one step per round
    from streamd.audio.pcm import load_audio

    rec = Recognizer.from_checkpoint(tiny_ckpt, EngineConfig(device="cpu"))
    xs = [resample(load_audio(w)[0], 16000, 8000) for w in files]
    sids = [rec.create_stream(sample_rate=8000) for _ in xs]
    events = []
    for r in itertools.count():
        if r * 800 >= max(x.size for x in xs):
            break
        for sid, x in zip(sids, xs):
            if r * 800 < x.size:
                rec.accept_audio(sid, x[r * 800:(r + 1) * 800])
                if (r + 1) * 800 >= x.size:
                    rec.finish(sid)
        events += rec.step()
    events += rec.drain()
    texts = [" ".join(e.text for e in events if isinstance(e, Final) and e.stream == sid and e.text) for sid in sids]
    assert [f["hyp"] for f in report["files"]] == texts
    assert report["audio_seconds"] == pytest.approx(sum(x.size for x in xs) / 8000, abs=1e-3)
