"""jupyter_pause.process.localmodules: the notebook's own .py files come back with a resume on a node
that lacks them; a different file there is named, and replaced only with ``--overwrite``."""

from __future__ import annotations

import importlib
import shutil
import sys
import weakref
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.cli.drill import load_notebook
from jupyter_pause.process import localmodules, places
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
def fresh_imports(monkeypatch, tmp_path):
    """Modules a test imported from its own folders are forgotten after it (other tests import the
    same names); jupyter_pause's own, imported lazily meanwhile, stay (tests look them up by name)."""
    before = set(sys.modules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    # What is on sys.path now is the interpreter's, as in a kernel that just started (pytest puts
    # the checkout there when the package is not installed from it): only what the test adds is the user's.
    interpreter = places.startup_path() | set(sys.path)
    monkeypatch.setattr(places, "startup_path", lambda: interpreter)
    yield
    for name in set(sys.modules) - before:
        path = getattr(sys.modules[name], "__file__", None)
        if isinstance(path, str) and localmodules.relative_to(path, str(tmp_path)) is not None:
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


# -- issue 39: modules imported from a sys.path folder travel, whatever the working directory --

#: The corpus notebook: it puts ``lib`` on sys.path, imports ``helpers`` from it, then changes into ``data``.
PROJECT = Path(__file__).resolve().parents[1] / "corpus" / "replay" / "project"
HELPERS = (PROJECT / "lib" / "helpers.py").read_text()
CELLS = load_notebook(PROJECT / "local_modules.ipynb")


def _project(root: Path) -> Path:
    """The corpus notebook's folder, copied: ``lib/helpers.py`` and ``data/``."""
    folder = root / "project"
    shutil.copytree(PROJECT, folder)
    (folder / "data").mkdir()
    return folder


def _helpers_cells(chdir: bool) -> str:
    """The notebook's cells as one, without its last (the ``os.chdir``) unless ``chdir``."""
    assert CELLS[-1].startswith("os.chdir(")
    return "\n".join(CELLS if chdir else CELLS[:-1])


@pytest.mark.integration
@pytest.mark.parametrize("chdir", [True, False], ids=["chdir", "no-chdir"])
@pytest.mark.parametrize("notebook", ["absolute", "api-path", "none"])
def test_a_module_from_an_added_sys_path_folder_travels_whatever_the_working_directory(
    start_kernel, tmp_path, notebook, chdir
):
    """The notebook puts ``lib`` on sys.path, imports from it, changes into ``data`` and pauses;
    the other node has ``data/`` but not ``lib/helpers.py``, and A's folder is gone."""
    store = tmp_path / "store"
    a_dir, b_dir = _project(tmp_path / "node-a"), tmp_path / "node-b" / "project"
    (b_dir / "data").mkdir(parents=True)

    def env(folder: Path) -> dict[str, str]:
        names = {"absolute": str(folder / "nb.ipynb"), "api-path": "project/nb.ipynb"}
        return {
            "JUPYTER_PAUSE_STORE": str(store),
            **({"JPY_SESSION_NAME": names[notebook]} if notebook in names else {}),
        }

    a = start_kernel(a_dir, **env(a_dir))
    a.run(_helpers_cells(chdir)).ok()
    out = a.run("%checkpoint --session local").ok().stdout
    assert "local modules kept: lib/helpers.py" in out, out
    assert "NOT kept" not in out, out
    a.kill()
    shutil.rmtree(a_dir)

    b = start_kernel(b_dir, **env(b_dir))
    out = b.run("%load_ext jupyter_pause\n%resume --session local").ok().stdout
    assert "local modules put back (missing here): lib/helpers.py" in out, out
    assert "verdict: restored" in out, out
    assert b.value("[box.v, f(2), os.path.basename(os.getcwd())]") == [21, 6, "data" if chdir else "project"]
    assert (b_dir / "lib" / "helpers.py").read_text() == HELPERS


@pytest.mark.integration
def test_a_module_from_a_folder_outside_the_notebooks_is_put_aside_where_that_folder_is_missing(start_kernel, tmp_path):
    store, shared = tmp_path / "store", tmp_path / "shared-code"
    shared.mkdir()
    (shared / "helpers.py").write_text(HELPERS)
    a_dir = _project(tmp_path / "node-a")
    (a_dir / "lib" / "helpers.py").unlink()
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(a_dir / "nb.ipynb"))
    a.run(f"%load_ext jupyter_pause\nimport sys\nsys.path.append({str(shared)!r})\nfrom helpers import scale").ok()
    out = a.run("g = scale\n%checkpoint --session local").ok().stdout
    assert f"local modules kept: {shared.as_posix()}/helpers.py" in out, out
    a.kill()
    shutil.rmtree(shared)

    b_dir = tmp_path / "node-b"
    b_dir.mkdir()
    b = start_kernel(b_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(b_dir / "nb.ipynb"))
    out = b.run("%load_ext jupyter_pause\n%resume --session local").ok().stdout
    assert "(their folder is missing here): " + f"{shared.as_posix()}/helpers.py" in out, out
    assert "verdict: restored" in out, out
    assert b.value("g(5)") == 15
    assert not shared.exists()  # nothing written outside the notebook's folder but jupyter-pause's own


@pytest.mark.integration
def test_checkpoint_names_a_local_module_it_cannot_keep(start_kernel, tmp_path):
    """A module loaded from a file of no kept folder: %checkpoint says, on this node, what will not load elsewhere."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "loner.py").write_text(HELPERS)
    a_dir = _project(tmp_path / "node-a")
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(a_dir / "nb.ipynb"))
    load = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('loner', {str(elsewhere / 'loner.py')!r})\n"
        "loner = importlib.util.module_from_spec(spec)\nsys.modules['loner'] = loner\nspec.loader.exec_module(loner)\n"
        "box = loner.Box(2)\nh = loner.scale\ndel spec"
    )
    a.run("%load_ext jupyter_pause\n" + load).ok()
    out = a.run("%checkpoint --session local").ok().stdout
    assert f"local module loner ({elsewhere / 'loner.py'}) NOT kept" in out, out
    assert "box, h will not come back on a node without it" in out, out


def test_a_module_a_variable_needs_but_not_kept_is_named(tmp_path, fresh_imports):
    (tmp_path / "stray_helpers.py").write_text(HELPERS)
    sys.path.insert(0, str(tmp_path))
    module = importlib.import_module("stray_helpers")
    values = {"box": module.Box(1), "f": module.scale, "n": 3, "json": importlib.import_module("json")}
    (note,) = localmodules.unkept(values, set(), "the notebook's folder")
    assert note.startswith(f"local module stray_helpers ({tmp_path / 'stray_helpers.py'}) NOT kept: it lies outside")
    assert "box, f will not come back" in note
    assert localmodules.unkept(values, {"stray_helpers"}, "the notebook's folder") == []
    gone = module.Box(2)
    proxy = weakref.proxy(gone)
    del gone
    assert localmodules.unkept({"proxy": proxy}, set(), "the notebook's folder") == []  # a dead proxy raises when asked


def test_a_relative_session_name_is_taken_from_the_start_folder_not_the_working_directory(tmp_path, monkeypatch):
    from jupyter_pause import notebook

    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    monkeypatch.setattr(notebook, "kernel_start_folder", lambda: str(tmp_path / "project"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", "project/nb.ipynb")
    assert notebook.notebook_path() == str(tmp_path / "project" / "nb.ipynb")
    monkeypatch.setenv("JPY_SESSION_NAME", "nb.ipynb")
    assert notebook.notebook_path() == str(tmp_path / "project" / "nb.ipynb")


@pytest.mark.integration
def test_a_relative_sys_path_entry_is_the_folder_it_was_imported_from(start_kernel, tmp_path):
    """``sys.path.insert(0, "lib")`` then ``os.chdir("data")``, in a kernel without a notebook: the
    entry names ``data/lib`` now, but the module came from ``lib``, and travels."""
    store = tmp_path / "store"
    a_dir, b_dir = _project(tmp_path / "node-a"), tmp_path / "node-b" / "project"
    (b_dir / "data").mkdir(parents=True)
    cells = _helpers_cells(chdir=True).replace('os.path.abspath("lib")', '"lib"')
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store))
    a.run(cells).ok()
    assert "local modules kept: lib/helpers.py" in a.run("%checkpoint --session local").ok().stdout
    a.kill()
    shutil.rmtree(a_dir)
    b = start_kernel(b_dir, JUPYTER_PAUSE_STORE=str(store))
    out = b.run("%load_ext jupyter_pause\n%resume --session local").ok().stdout
    assert "verdict: restored" in out, out
    assert b.value("[box.v, f(2)]") == [21, 6]


def test_a_module_put_aside_is_the_checkpoints_even_over_an_older_copy(tmp_path, monkeypatch, fresh_imports):
    """The folder aside is jupyter-pause's own: a copy left there by an earlier resume is replaced."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data-dir"))
    shared, store = tmp_path / "shared", tmp_path / "store"
    shared.mkdir()
    (shared / "shared_helpers.py").write_text(HELPERS)
    sys.path.append(str(shared))
    from shared_helpers import scale

    (tmp_path / "a").mkdir()
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "a" / "nb.ipynb"))
    manifest = jp.checkpoint(store=str(store), session="aside", namespace={"f": scale}).manifest
    assert [r.path for r in manifest.local_modules] == [(shared / "shared_helpers.py").as_posix()]
    shutil.rmtree(shared)
    sys.path.remove(str(shared))
    del sys.modules["shared_helpers"]
    stale = Path(localmodules._aside(manifest.local_modules[0]))
    stale.parent.mkdir(parents=True)
    stale.write_text("def scale(x):\n    return 0\n")

    ns: dict = {}
    result = jp.resume(store=str(store), session="aside", namespace=ns)
    assert f"local modules put back in {localmodules.aside_folder()} (their folder is missing here)" in result.summary()
    assert stale.read_text() == HELPERS and ns["f"](2) == 6
