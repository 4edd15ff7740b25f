"""Shared fixtures: checkpoints written once per session, token tables, decoder kinds, thread and host-sync
guards (shared helpers live in tests/helpers.py, importable as ``helpers``; an area's own next to its tests,
e.g. tests/server/wire.py)."""

import collections
from pathlib import Path

import pytest
import torch

from helpers import CHARS, PIECES, random_audio, write_checkpoint, write_jsonl, write_wav
from streamd.tokens import TokenTable


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    """A small random model with a char token table and one keyword, saved once per session."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory) -> str:
    """A small random model (seed 3) that decodes a few words from helpers.random_audio, saved once per session."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt3") / "m.pt", seed=3)


@pytest.fixture(scope="session")
def ep_ckpt(tmp_path_factory) -> str:
    """A random model that decodes sparse text with endpoints inside a few seconds of audio (so Vosk 'result'
    replies occur mid-stream)."""
    return write_checkpoint(tmp_path_factory.mktemp("ep") / "ep.pt", seed=2, blank_bias=1.0)


@pytest.fixture(scope="session")
def ckpt5(tmp_path_factory) -> str:
    """A small random model (seed 5) that emits several words per file (so confidences and alignments vary) and
    whose hypotheses repeat "rr" and "vv" (runtime keywords that fire at low scores)."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt5") / "seed5.pt", seed=5)


@pytest.fixture(scope="session")
def wav_files(tmp_path_factory) -> list[str]:
    """Four WAV files of helpers.random_audio, 1.2 to 2.1 s, in one folder (evaluation sets)."""
    d = tmp_path_factory.mktemp("evalset")
    return [write_wav(d / f"f{i}.wav", random_audio(1.2 + 0.3 * i, seed=i)) for i in range(4)]


@pytest.fixture(scope="session")
def engine_sets(tmp_path_factory) -> tuple[str, list[str]]:
    """An evaluation set of six files with keyword fields "rr", "vv" and null in turn: (set path, WAV paths)."""
    d = tmp_path_factory.mktemp("kwengine")
    rows = [{"audio": Path(write_wav(d / f"f{i}.wav", random_audio(1.2 + 0.3 * i, seed=i))).name, "text": "x",
             "keyword": ["rr", "vv", None][i % 3]} for i in range(6)]
    return write_jsonl(d / "set.jsonl", rows), [str(d / r["audio"]) for r in rows]


@pytest.fixture(params=["stateless", "stateless-5", "lstm"])
def decoder_kind(request):
    return request.param


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread (servers run the model in a worker thread beside the event loop)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def one_torch_thread_module():
    """One torch thread for a whole test module (tiny models on 2 shared cores: intra-op threads only add
    contention); use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread_module")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def chars() -> TokenTable:
    """A char token table: blank, space (the separator), a-z and the apostrophe (helpers.CHARS)."""
    return TokenTable(tuple(CHARS))


@pytest.fixture
def bpe() -> TokenTable:
    """A small bpe token table (helpers.PIECES)."""
    return TokenTable(tuple(PIECES))


# the Tensor methods that copy device data to the host (host_syncs counts their calls)
SYNC_METHODS = ("item", "__bool__", "nonzero", "tolist", "cpu", "numpy", "__int__", "__float__", "__index__")


@pytest.fixture
def host_syncs(monkeypatch):
    """Counter of calls to Tensor methods that copy device data to the host."""
    counts = collections.Counter()

    def wrap(name, orig):
        def counted(self, *a, **kw):
            counts[name] += 1
            return orig(self, *a, **kw)
        return counted

    for name in SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))
    return counts
