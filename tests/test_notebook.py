"""jupyter_pause.notebook: the session name a notebook gets, and the notebook file itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jupyter_pause.notebook import (
    DEFAULT_SESSION,
    default_session,
    read_notebook,
    relative_path,
    session_from_path,
)
from jupyter_pause.store.layout import check_session


@pytest.mark.parametrize(
    ("path", "session"),
    [
        ("Train.ipynb", "Train"),
        ("dir/sub/Train 1.ipynb", "dir--sub--Train-1"),
        ("/abs/dir/x.ipynb", "abs--dir--x"),
        ("My  Notebook (copy).ipynb", "My-Notebook-copy"),
        (".hidden.ipynb", "hidden"),
        (".config/.nb.ipynb", "config--nb"),
        ("_scratch.ipynb", "nb_scratch"),
        ("x.ipynb.ipynb", "x.ipynb"),
    ],
)
def test_session_from_path(path: str, session: str) -> None:
    assert session_from_path(path) == session
    assert check_session(session) == session  # usable as a store name


def test_names_that_lose_letters_get_a_hash_that_keeps_them_apart() -> None:
    accented, plain = session_from_path("données/résumé.ipynb"), session_from_path("donn-es/r-sum.ipynb")
    assert accented.startswith("donn-es--r-sum-") and plain == "donn-es--r-sum"
    assert session_from_path("..ipynb").startswith("nb-")
    assert session_from_path("..ipynb") != DEFAULT_SESSION


def test_long_paths_give_valid_session_names() -> None:
    name = session_from_path("/".join(["deep" * 10] * 10) + "/nb.ipynb")
    assert len(name) == 128
    assert check_session(name) == name


def test_notebooks_named_in_other_scripts_get_their_own_sessions() -> None:
    names = {session_from_path(p) for p in ["实验.ipynb", "訓練.ipynb", "Эксперимент.ipynb"]}
    assert len(names) == 3
    assert DEFAULT_SESSION not in names
    for name in names:
        assert check_session(name) == name


def test_relative_path_inside_and_outside_the_server_root() -> None:
    assert relative_path("/srv/notebooks/team/a b.ipynb", "/srv/notebooks") == "team/a b.ipynb"
    assert relative_path("/srv/notebooks/x.ipynb", "/srv/notebooks/") == "x.ipynb"
    assert relative_path("/srv/other/team/x.ipynb", "/srv/notebooks") == "x.ipynb"
    assert relative_path("/srv/notebooks2/x.ipynb", "/srv/notebooks") == "x.ipynb"


def test_relative_path_without_a_server_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    assert relative_path("/srv/notebooks/team/x.ipynb") == "x.ipynb"
    assert relative_path("/srv/notebooks/team/x.ipynb", "") == "x.ipynb"


def test_relative_path_finds_the_root_of_the_server_that_started_the_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-4242.json").write_text(json.dumps({"root_dir": "/srv/notebooks"}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JPY_PARENT_PID", "4242")
    assert relative_path("/srv/notebooks/team/x.ipynb") == "team/x.ipynb"
    monkeypatch.setenv("JPY_PARENT_PID", "4343")  # no such server file: file name only
    assert relative_path("/srv/notebooks/team/x.ipynb") == "x.ipynb"


def test_default_session_without_a_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert default_session() == "default"


def test_default_session_from_the_kernels_notebook(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    root = tmp_path / "root"
    (runtime / "jpserver-77.json").write_text(json.dumps({"root_dir": str(root)}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JPY_PARENT_PID", "77")
    monkeypatch.setenv("JPY_SESSION_NAME", str(root / "exp" / "Run 2.ipynb"))
    assert default_session() == "exp--Run-2"
    monkeypatch.delenv("JPY_PARENT_PID")
    assert default_session() == "Run-2"


def test_read_notebook_returns_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_bytes(b'{"cells": []}')
    data, note = read_notebook(str(path))
    assert data == b'{"cells": []}'
    assert "nb.ipynb" in note


def test_read_notebook_of_a_missing_path_returns_none_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "gone.ipynb"
    data, note = read_notebook(str(path))
    assert data is None
    assert str(path) in note and "not saved" in note
    assert os.strerror(2) in note  # "No such file or directory"


def test_read_notebook_without_a_notebook() -> None:
    data, note = read_notebook(None)
    assert data is None and "no notebook" in note
