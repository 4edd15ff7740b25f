"""streamd.device: ``auto`` picks CUDA when there is one, an explicit CUDA device without one is a clear error."""

import pytest
import torch

from streamd.device import resolve_device


def test_cpu_and_auto_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    for name in ("cuda", "cuda:1"):
        with pytest.raises(RuntimeError, match=rf"device '{name}' requested but CUDA is not available \(use 'auto'"):
            resolve_device(name)


def test_auto_and_cuda_with_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # devices are names: nothing touches a GPU
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def test_the_real_machine():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert isinstance(resolve_device("cpu"), torch.device)
