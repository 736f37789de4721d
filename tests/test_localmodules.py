"""jupyter_pause.session.localmodules: the notebook's own .py files come back with a resume on a node
that lacks them; a different file there is named, and replaced only with ``--overwrite``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.session import localmodules
from jupyter_pause.store.manifest import BlobRef, LocalModuleRecord, Manifest
from jupyter_pause.store.storage import Store

pytestmark = pytest.mark.usefixtures("new_process")

UTILS = "def train(x):\n    return x * 2\n"
CORE = "SCALE = 10\n\ndef scaled(x):\n    return x * SCALE\n"


def _notebook_folder(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "pkg").mkdir(parents=True)
    (folder / "utils.py").write_text(UTILS)
    (folder / "pkg" / "__init__.py").write_text("from .core import scaled\n")
    (folder / "pkg" / "core.py").write_text(CORE)
    return folder


@pytest.fixture
def fresh_imports(monkeypatch):
    """Modules imported by a test are forgotten after it (other tests import the same names)."""
    before = set(sys.modules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]
    importlib.invalidate_caches()


def _checkpoint_in(folder: Path, store: Path, monkeypatch) -> Manifest:
    monkeypatch.setenv("JPY_SESSION_NAME", str(folder / "nb.ipynb"))
    monkeypatch.chdir(folder)
    sys.path.insert(0, str(folder))
    from pkg import scaled
    from utils import train

    ns = {"train": train, "scaled": scaled, "n": 3}
    return jp.checkpoint(store=str(store), session="local", namespace=ns).manifest


def _resume_in(folder: Path, store: Path, monkeypatch, **options) -> tuple[dict, jp.ResumeResult]:
    for name in ("utils", "pkg", "pkg.core"):
        sys.modules.pop(name, None)
    sys.path[:] = [p for p in sys.path if "notebook-" not in p]
    monkeypatch.setenv("JPY_SESSION_NAME", str(folder / "nb.ipynb"))
    monkeypatch.chdir(folder)
    ns: dict = {}
    return ns, jp.resume(store=str(store), session="local", namespace=ns, **options)


def test_missing_local_modules_are_put_back_before_variables_load(tmp_path, monkeypatch, fresh_imports):
    store = tmp_path / "store"
    manifest = _checkpoint_in(_notebook_folder(tmp_path, "notebook-a"), store, monkeypatch)
    assert sorted(m.path for m in manifest.local_modules) == ["pkg/__init__.py", "pkg/core.py", "utils.py"]

    b = tmp_path / "notebook-b"
    b.mkdir()
    ns, result = _resume_in(b, store, monkeypatch)
    assert result.complete, result.summary()
    assert "local modules put back (missing here): pkg/__init__.py, pkg/core.py, utils.py" in result.summary()
    assert (b / "utils.py").read_text() == UTILS and (b / "pkg" / "core.py").read_text() == CORE
    assert ns["train"](4) == 8 and ns["scaled"](2) == 20  # by reference, from the files put back


def test_a_different_local_file_is_named_and_kept_unless_overwrite(tmp_path, monkeypatch, fresh_imports):
    store = tmp_path / "store"
    _checkpoint_in(_notebook_folder(tmp_path, "notebook-a"), store, monkeypatch)
    c = _notebook_folder(tmp_path, "notebook-c")
    theirs = "def train(x):\n    return -1\n"
    (c / "utils.py").write_text(theirs)

    ns, result = _resume_in(c, store, monkeypatch)
    assert (
        "local module utils.py NOT put back: the file here differs from the checkpoint's; kept it "
        "(%resume --overwrite replaces it with the checkpoint's)"
    ) in result.summary()
    assert (c / "utils.py").read_text() == theirs and ns["train"](4) == -1  # this node's code, as asked
    assert "put back" not in result.summary().replace("NOT put back", "")  # the identical ones: nothing to say

    ns, result = _resume_in(c, store, monkeypatch, overwrite=True)
    assert "local modules replaced by the checkpoint's (--overwrite): utils.py" in result.summary()
    assert (c / "utils.py").read_text() == UTILS and ns["train"](4) == 8


def test_installed_code_is_never_a_local_module(tmp_path, fresh_imports):
    """A virtual environment inside the notebook's folder holds installed packages, not the notebook's."""
    folder = tmp_path / "project"
    site = folder / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "installed_thing.py").write_text("X = 1\n")
    (folder / "helpers_here.py").write_text("Y = 2\n")
    sys.path[:0] = [str(folder), str(site)]
    importlib.import_module("installed_thing")
    importlib.import_module("helpers_here")
    assert localmodules.imported_files(str(folder)) == {"helpers_here.py": "helpers_here"}


def test_a_kernel_without_a_notebook_keeps_no_local_modules(tmp_path, monkeypatch, fresh_imports):
    (tmp_path / "loose.py").write_text("Z = 3\n")
    sys.path.insert(0, str(tmp_path))
    importlib.import_module("loose")
    monkeypatch.setattr(localmodules, "START_FOLDER", str(tmp_path))
    assert localmodules.imported_files(str(tmp_path)) == {"loose.py": "loose"}
    assert localmodules.capture(None, "xxh3_128").records == []


def test_a_path_leaving_the_notebook_folder_is_refused(tmp_path):
    manifest = Manifest(
        id="x",
        session="s",
        lineage="l",
        parent=None,
        created=0.0,
        trigger="manual",
        node="n",
        local_modules=[LocalModuleRecord(path="../escape.py", module="escape", blob=BlobRef("0" * 32, 1))],
    )
    (tmp_path / "nb").mkdir()
    notes = localmodules.put_back(Store(str(tmp_path / "store")), manifest, str(tmp_path / "nb" / "nb.ipynb"), True)
    assert notes == ["local module ../escape.py NOT put back: its path leaves the notebook's folder"]
    assert not (tmp_path / "escape.py").exists()


def test_local_modules_survive_the_manifest_round_trip():
    record = LocalModuleRecord(path="pkg/core.py", module="pkg.core", blob=BlobRef("a" * 32, 12))
    manifest = Manifest(
        id="x", session="s", lineage="l", parent=None, created=0.0, trigger="manual", node="n", local_modules=[record]
    )
    back = Manifest.from_bytes(manifest.to_bytes())
    assert back.local_modules == [record] and isinstance(back.local_modules[0].blob, BlobRef)


TRAIN_NOTEBOOK = r"""
%load_ext jupyter_pause
from utils import train
from pkg import scaled
model = train
n = scaled(3)
%checkpoint --session local
"""


@pytest.mark.integration
def test_kernel_round_trip_puts_modules_back_and_overwrite_replaces(start_kernel, tmp_path):
    store = tmp_path / "store"
    a_dir = _notebook_folder(tmp_path, "a")
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(a_dir / "nb.ipynb"))
    out = a.run(TRAIN_NOTEBOOK).ok().stdout
    assert "local modules kept: pkg/__init__.py, pkg/core.py, utils.py" in out
    a.kill()

    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = start_kernel(b_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(b_dir / "nb.ipynb"))
    out = b.run("%load_ext jupyter_pause\n%resume --session local").ok().stdout
    assert "local modules put back (missing here): pkg/__init__.py, pkg/core.py, utils.py" in out
    assert "verdict: restored" in out, out
    assert b.value("model(5)") == 10 and b.value("n") == 30
    b.close()

    c_dir = tmp_path / "c"
    c_dir.mkdir()
    (c_dir / "utils.py").write_text("def train(x):\n    return 0\n")
    c = start_kernel(c_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(c_dir / "nb.ipynb"))
    out = c.run("%load_ext jupyter_pause\n%resume --session local").ok().stdout
    assert "local module utils.py NOT put back: the file here differs" in out
    assert "local modules put back (missing here): pkg/__init__.py, pkg/core.py" in out
    assert c.value("model(5)") == 0 and (c_dir / "utils.py").read_text() == "def train(x):\n    return 0\n"
    out = c.run("%resume --session local --overwrite").ok().stdout
    assert "local modules replaced by the checkpoint's (--overwrite): utils.py" in out
    assert c.value("model(5)") == 10 and (c_dir / "utils.py").read_text() == UTILS
