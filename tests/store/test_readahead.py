"""Reading a local store's files into the page cache ahead of their use (store/readahead.py)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from jupyter_pause.store import memory, readahead

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")


def test_the_files_that_fit_are_read_one_after_another_and_a_missing_one_is_passed_over(tmp_path, monkeypatch):
    files = [tmp_path / "a", tmp_path / "b"]
    for f, size in zip(files, (4096, 3 * 4096), strict=True):
        f.write_bytes(b"x" * size)
    monkeypatch.setattr(readahead, "SEND", 8192)  # several sends to a file
    sent = []
    real = os.sendfile

    def sendfile(out, fd, offset, count):  # what is asked of the operating system, passed on
        sent.append((os.readlink(f"/proc/self/fd/{out}"), os.readlink(f"/proc/self/fd/{fd}"), offset, count))
        return real(out, fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)
    asking = readahead.advise([str(files[0]), str(tmp_path / "gone"), str(files[1])], 4 * 4096)
    assert asking is not None
    asking.join(30)
    a, b = (str(f) for f in files)
    assert sent == [
        (os.devnull, a, 0, 8192),
        (os.devnull, a, 4096, 8192),  # 0: the end
        (os.devnull, b, 0, 8192),
        (os.devnull, b, 8192, 8192),
        (os.devnull, b, 3 * 4096, 8192),
    ]


def test_where_files_cannot_be_sent_to_the_null_device_the_rest_are_asked_for_at_once(tmp_path, monkeypatch):
    files = [tmp_path / "a", tmp_path / "b"]
    for f in files:
        f.write_bytes(b"x" * 4096)

    def sendfile(out, fd, offset, count):  # as on macOS: only to a socket
        raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")

    advised = []
    real = os.posix_fadvise

    def posix_fadvise(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "sendfile", sendfile)
    monkeypatch.setattr(os, "posix_fadvise", posix_fadvise)
    assert readahead.read_through([str(f) for f in files]) == 2
    assert advised == [(str(f), os.POSIX_FADV_WILLNEED) for f in files]


def test_files_larger_than_the_memory_can_spare_are_not_read_ahead(tmp_path, monkeypatch):
    assert memory.available() > 0
    monkeypatch.setattr(memory, "available", lambda: 1000)
    assert readahead.advise([str(tmp_path / "a")], 501) is None
    assert readahead.advise([str(tmp_path / "a")], 500) is not None


RESUME = """
import json, sys
if sys.argv[2] == "imported":
    import torch
from jupyter_pause.store import readahead
asked = []
real = readahead.advise
def advise(paths, size):
    asked.append({"paths": sorted(paths), "size": size, "torch_imported": "torch" in sys.modules})
    return real(paths, size)
readahead.advise = advise
import jupyter_pause as jp
ns = {"__name__": "__main__"}
cycle = jp.resume_and_verify(store=sys.argv[1], session="s", namespace=ns, write_report=False)
print(json.dumps({"verdict": cycle.verdict.kind, "asked": asked}))
"""


@pytest.mark.parametrize("torch_was", ["not imported", "imported"])
def test_a_resume_from_a_local_store_reads_ahead_while_it_imports_torch(tmp_path, torch_was):
    import torch

    import jupyter_pause as jp
    from jupyter_pause.store.storage import Store

    store = tmp_path / "store"
    manifest = jp.checkpoint(store=str(store), session="s", namespace={"w": torch.arange(100_000.0)}).manifest
    run = [sys.executable, "-c", RESUME, str(store), torch_was]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sorted(Store(str(store)).path(k) for k in manifest.blob_keys(manifest.blobs))
    assert out["verdict"] == "restored"
    asked = [a for a in out["asked"] if a["paths"] == expected]
    if torch_was == "imported":  # nothing to read beside: the reads begin at once, read once
        assert asked == []
    else:
        assert len(asked) == 1 and not asked[0]["torch_imported"]
        assert asked[0]["size"] == sum(manifest.blobs.values())
