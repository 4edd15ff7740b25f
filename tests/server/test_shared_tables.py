"""streamd.server.lane.share_tensor / share_tables: engine processes keep one copy of their read-only tables (the
fusion n-gram's) in files on a tmpfs, mapped copy-on-write."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from streamd.server.lane import drop_shared_folder, share_tables, share_tensor, shared_folder

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a tmpfs at /dev/shm")


def test_equal_tables_map_one_file_and_keep_their_identity():
    folder = shared_folder()
    try:
        a = torch.randn(50, 7)
        b, ref = a.clone(), a
        c = torch.arange(10, dtype=torch.int32)
        assert share_tensor(a, folder) and share_tensor(b, folder) and share_tensor(c, folder)
        assert len(os.listdir(folder)) == 2  # a and b: one file
        assert a is ref and torch.equal(a, b) and a.shape == (50, 7) and c.tolist() == list(range(10))
        b[0, 0] = 123.0  # copy-on-write: a write stays in its process's own copy
        assert a[0, 0] != 123.0 and not share_tensor(a[:, 1:], folder)  # not contiguous: left alone
    finally:
        drop_shared_folder(folder)
    assert not os.path.exists(folder) and float(a.sum()) == float(ref.sum())  # mapped after the removal


def test_an_unusable_folder_changes_nothing(tmp_path):
    a = torch.randn(4, 4)
    before = a.clone()
    assert not share_tensor(a, str(tmp_path / "missing"))
    assert torch.equal(a, before)


def test_share_tables_maps_the_ngram_and_the_fused_table():
    lm = SimpleNamespace(logp=torch.randn(30, 5), next=torch.randint(0, 30, (30, 5), dtype=torch.int32),
                         eos=torch.randn(30))
    rec = SimpleNamespace(lm=lm, searches={"modified_beam": SimpleNamespace(_lm_table=torch.randn(30, 5))})
    folder = shared_folder()
    try:
        assert share_tables(rec, folder) == 4 * (30 * 5 * 3 + 30)
        assert len(os.listdir(folder)) == 4
        assert share_tables(SimpleNamespace(lm=None, searches={}), folder) == 0  # no n-gram: nothing to share
    finally:
        drop_shared_folder(folder)


def test_two_processes_map_the_same_pages():
    """Two processes that build the same table and share the folder: both map the one file."""
    folder = shared_folder()
    code = ("import sys, torch; from streamd.server.lane import share_tensor; "
            "t = torch.arange(100000, dtype=torch.float32); assert share_tensor(t, sys.argv[1]); "
            "maps = open('/proc/self/maps').read(); print(sum(sys.argv[1] in l for l in maps.splitlines()))")
    try:
        outs = [subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, check=True,
                               env=dict(os.environ)).stdout.strip() for _ in range(2)]
        assert outs == ["1", "1"] and len(os.listdir(folder)) == 1
    finally:
        drop_shared_folder(folder)
