"""jupyter_pause.process.places: the working directory and the user's ``sys.path`` entries come
back with a resume, relative to the notebook's folder or, without a notebook, to the kernel's
start folder; what a library added while being imported is not kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jupyter_pause.process import places

#: A library that, like setuptools, puts a folder of its own on ``sys.path`` when imported.
VENDORING = """\
import os, sys
sys.path.append(os.path.join(os.path.dirname(__file__), "_vendor"))
"""

#: A script of the user's, run with %run, that adds one of the user's folders.
ADD_LIB = """\
import os, sys
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
"""


def _console(start_kernel, folder: Path, store: Path):
    """A kernel that knows of no notebook, as a console or a script starts one."""
    return start_kernel(folder, JUPYTER_PAUSE_STORE=str(store))


@pytest.mark.integration
def test_a_kernel_without_a_notebook_gets_its_working_directory_back(start_kernel, tmp_path):
    store, start = tmp_path / "store", tmp_path / "start"
    (start / "data").mkdir(parents=True)
    a = _console(start_kernel, start, store)
    # The chdir comes before %load_ext: the start folder is the kernel's, not the one at %load_ext.
    a.run("import os\nos.chdir('data')").ok()
    a.run("%load_ext jupyter_pause\nx = 1\n%checkpoint --session console").ok()
    a.kill()

    b = _console(start_kernel, start, store)
    assert b.value("__import__('os').getcwd()") == str(start)
    out = b.run("%load_ext jupyter_pause\n%resume --session console").ok().stdout
    assert "settings restored: working directory data (in the kernel's start folder)" in out, out
    assert b.value("os.getcwd()") == str(start / "data")
    assert b.value("x") == 1

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    c = _console(start_kernel, elsewhere, store)
    out = c.run("%load_ext jupyter_pause\n%resume --session console").ok().stdout
    assert (
        "setting NOT applied: working directory data (in the kernel's start folder): no such folder on this node; "
        f"left at {elsewhere}"
    ) in out, out
    assert c.value("os.getcwd()") == str(elsewhere)
    assert c.value("x") == 1


@pytest.mark.integration
def test_only_the_sys_path_entries_the_user_added_are_kept(start_kernel, tmp_path):
    store, site = tmp_path / "store", tmp_path / "libs"
    (site / "vendoring_lib" / "_vendor").mkdir(parents=True)
    (site / "vendoring_lib" / "__init__.py").write_text(VENDORING)
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    for folder in (a_dir, b_dir):
        (folder / "mine").mkdir(parents=True)
        (folder / "tools" / "lib").mkdir(parents=True)
    (a_dir / "tools" / "add_lib.py").write_text(ADD_LIB)
    env = {"JUPYTER_PAUSE_STORE": str(store), "PYTHONPATH": str(site)}  # the library is installed
    a = start_kernel(a_dir, JPY_SESSION_NAME=str(a_dir / "nb.ipynb"), **env)
    # Imported, not bound: a module bound to a name is imported again on resume, adding its entry again.
    a.run("%load_ext jupyter_pause\nimport os, sys\n__import__('setuptools'), __import__('vendoring_lib')").ok()
    a.run("sys.path.append(os.path.abspath('mine'))\n%run tools/add_lib.py").ok()
    added = [p for p in a.value("sys.path") if "_vendor" in p]
    assert os.path.join(vendoring_folder := str(site / "vendoring_lib"), "_vendor") in added  # the test can fail
    assert any(os.path.join("setuptools", "_vendor") in p for p in added)
    a.run("x = 1\n%checkpoint --session paths").ok()
    a.kill()

    b = start_kernel(b_dir, JPY_SESSION_NAME=str(b_dir / "nb.ipynb"), **env)
    out = b.run("%load_ext jupyter_pause\n%resume --session paths").ok().stdout
    assert "sys.path + mine (in the notebook's folder)" in out, out
    assert "sys.path + tools/lib (in the notebook's folder)" in out, out
    assert "_vendor" not in out, out
    path = b.value("sys.path")
    assert str(b_dir / "mine") in path and str(b_dir / "tools" / "lib") in path
    assert not any(p.startswith(vendoring_folder) for p in path)


def test_entries_under_the_installation_or_inside_a_package_are_not_the_users(tmp_path, monkeypatch):
    package = tmp_path / "libs" / "vendoring_lib"
    (package / "_vendor" / "deeper").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "vendoring_lib", raising=False)
    sys.path.append(str(tmp_path / "libs"))
    __import__("vendoring_lib")
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    sys.path += [str(package / "_vendor"), str(package / "_vendor" / "deeper"), f"{site_packages}/x/_vendor"]
    sys.path.append(str(mine))
    kept = places.capture_sys_path(str(tmp_path))
    assert [k["path"] for k in kept] == ["libs", "mine"]
