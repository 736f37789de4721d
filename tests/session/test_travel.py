"""jupyter_pause.session.travel: what will not come back on another node is named when the
checkpoint is taken, by %checkpoint, by the manifest (so ``jupyter pause show`` and the status line)."""

from __future__ import annotations

import pytest

import jupyter_pause as jp
from jupyter_pause.session import activity, travel
from jupyter_pause.store.manifest import RecipeRecord, SkippedRecord

pytestmark = pytest.mark.usefixtures("new_process")


def test_each_kind_of_loss_is_one_line(tmp_path):
    folder, outside = tmp_path / "project", tmp_path / "elsewhere.log"
    folder.mkdir()
    (folder / "inside.log").write_text("x")
    outside.write_text("x")
    skipped = [SkippedRecord("lock", "_thread.lock", "cannot be pickled")] + [
        SkippedRecord(n, t, "cannot be pickled") for n, t in (("cur", "sqlite3.Cursor"), ("h", "_hashlib.HASH"))
    ]
    recipes = [
        RecipeRecord("lock", "_thread.lock", "outside", missing="no recorded cell assigns it"),
        RecipeRecord("cur", "sqlite3.Cursor", "outside"),
        RecipeRecord("h", "_hashlib.HASH", "memory", observed="hexdigest 00"),
    ]
    with open(outside) as far, open(folder / "inside.log") as near:
        found = travel.lines(
            ["local module loner (/x/loner.py) NOT kept: ..."],
            skipped,
            recipes,
            {"far": far, "near": near},
            {"cwd": {"path": "/srv/data", "in_notebook_folder": False}},
            str(folder),
            "the notebook's folder",
        )
    assert found == [
        "local module loner (/x/loner.py) NOT kept: ...",
        "lock (_thread.lock): not saved, and cannot be rebuilt: no recorded cell assigns it",
        "cur (sqlite3.Cursor): rebuilt by replay, unproven: only the statement that opened it is replayed, "
        "and nothing can check its state against the one it has now",
        f"far (open file {outside}): lies outside the notebook's folder; it comes back only where that path exists",
        "working directory /srv/data: lies outside the notebook's folder; another node may not have it",
    ]  # h is checkable, near lies inside: neither is named


def test_the_checkpoint_and_show_name_an_open_file_outside_the_folder(tmp_path, capsys):
    from jupyter_pause.cli.main import main

    log = tmp_path / "outside" / "run.log"
    log.parent.mkdir()
    log.write_text("step 1\n")
    with open(log) as handle:
        result = jp.checkpoint(store=str(tmp_path / "store"), session="s", namespace={"handle": handle, "n": 1})
    line = (
        f"handle (open file {log}): lies outside the kernel's start folder; it comes back only where that path exists"
    )
    assert result.manifest.elsewhere == [line]
    assert activity.current.detail == f"not on another node, or not provably: handle (open file {log})"  # the widget
    assert "will not come back on another node, or not provably (1):\n    " + line in result.summary()
    assert main(["show", result.manifest.id, "--store", str(tmp_path / "store")]) in (0, None)
    assert f"not on another node: {line}" in capsys.readouterr().out


def test_an_optuna_study_kept_in_a_sqlite_file_outside_the_folder_is_named(tmp_path, monkeypatch):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder, scratch = tmp_path / "project", tmp_path / "scratch"
    folder.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    away = optuna.create_study(storage="sqlite:///away.db")
    near = optuna.create_study(storage=f"sqlite:///{folder / 'near.db'}")
    found = travel.lines([], [], [], {"away": away, "near": near}, {}, str(folder), "the notebook's folder")
    assert found == [
        f"away (optuna study in {scratch / 'away.db'}): its trials are in that file, outside the notebook's "
        "folder; it comes back only where that file is"
    ]


def test_a_dead_weak_proxy_is_looked_at_without_touching_it(tmp_path):
    import weakref

    class Thing:
        pass

    thing = Thing()
    proxy = weakref.proxy(thing)
    del thing  # the proxy is dead: any attribute of it raises ReferenceError
    assert travel.lines([], [], [], {"p": proxy}, {}, str(tmp_path), "the notebook's folder") == []
