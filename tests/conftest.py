"""Shared fixtures (helpers live in tests/helpers.py, importable as ``helpers``)."""

import pytest
import torch

from helpers import write_checkpoint


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    """A small random model with a char token table and one keyword, saved once per session."""
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")


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
