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
