"""jupyter_pause.process.loaded: one reading of what the process loaded (its modules' files, its
packages' folders, the installation's folders) answers every question a checkpoint asks of it."""

from __future__ import annotations

import importlib
import sys

from jupyter_pause.process.loaded import Loaded


def test_a_module_is_read_with_its_file_and_a_regular_package_with_its_folder(tmp_path, monkeypatch):
    package = tmp_path / "pkg_loaded"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text("X = 1\n")
    (tmp_path / "plain_loaded").mkdir()  # a plain folder, imported as a namespace package
    (tmp_path / "plain_loaded" / "train.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("pkg_loaded", "pkg_loaded.core", "plain_loaded", "plain_loaded.train"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # forgotten again after the test
    importlib.import_module("pkg_loaded.core")
    importlib.import_module("plain_loaded.train")

    loaded = Loaded.now()
    files = dict(loaded.files)
    assert files["pkg_loaded.core"] == str(package / "core.py")
    assert files["plain_loaded.train"] == str(tmp_path / "plain_loaded" / "train.py")
    assert str(package) in loaded.packages  # a package's own folder: a sys.path entry inside it is not the user's
    assert str(tmp_path / "plain_loaded") not in loaded.packages  # the user's folder stays the user's
    assert "__main__" not in files and not [n for n in files if n.split(".")[0] == "jupyter_pause"]
    assert sys.prefix in loaded.roots


def test_a_packages_files_are_named_relative_to_its_folder_as_their_imports_ended(tmp_path, monkeypatch):
    package = tmp_path / "pkg_files"
    (package / "nn").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import nn\n")
    (package / "nn" / "__init__.py").write_text("from . import linear\n")
    (package / "nn" / "linear.py").write_text("W = 1\n")
    (package / "unused.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("pkg_files", "pkg_files.nn", "pkg_files.nn.linear"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module("pkg_files")

    named = Loaded.now().package_files(["pkg_files", "json", "pkg_not_loaded"])
    assert named["pkg_files"] == ["nn/linear.py", "nn/__init__.py", "__init__.py"]  # never the unused one
    assert "__init__.py" in named["json"] and "decoder.py" in named["json"]
    assert "pkg_not_loaded" not in named
    assert Loaded.now().package_files([]) == {}


def test_an_extension_library_that_holds_several_modules_is_named_once():
    import torch

    files = Loaded.now().package_files(["torch"])["torch"]
    assert len(files) == len(set(files))
    shared = [m for m in sys.modules if m.startswith("torch._C.")]  # modules of torch's one library
    assert shared and sum(f.startswith("_C.") and f.endswith(torch._C.__file__.rpartition("_C")[2]) for f in files) == 1
