"""``jupyter pause list | show | verify | gc``: readable output, JSON for programs, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.layout import blob_key, pool_key
from tests.support.damage import KINDS, WHY, damage, key_for
from tests.support.dumping import notebook
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


@pytest.fixture
def store(tmp_path):
    ns = {"model": torch.nn.Linear(200, 200), "note": "hello", "api_key": "k"}
    first = jp.checkpoint(store=str(tmp_path), session="exp", namespace=ns, tag="baseline").manifest
    ns["note"] = "changed"
    second = jp.checkpoint(store=str(tmp_path), session="exp", namespace=ns).manifest
    another_process()
    return tmp_path, first, second


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_jupyter_pause_is_a_jupyter_subcommand(store):
    path, first, second = store
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(
        [os.path.join(bindir, "jupyter"), "pause", "list", "--store", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert first.id in done.stdout and second.id in done.stdout and "baseline" in done.stdout


def test_list_json_and_text(store, capsys):
    path, first, second = store
    code, out, _ = _run(capsys, "list", "--store", str(path), "--json")
    rows = json.loads(out)
    assert code == 0 and [r["id"] for r in rows] == [second.id, first.id]
    assert rows[1]["tag"] == "baseline" and rows[0]["variables"] == 2
    code, out, _ = _run(capsys, "list", "--store", str(path), "--session", "exp")
    assert code == 0 and "SESSION" in out.splitlines()[0] and out.count("exp ") == 2


def test_show_names_variables_and_skips(store, capsys):
    path, first, second = store
    prefix = next(first.id[:n] for n in range(8, 23) if not second.id.startswith(first.id[:n]))
    code, out, _ = _run(capsys, "show", prefix, "--store", str(path))
    assert code == 0 and f"checkpoint {first.id}" in out
    assert "model" in out and "module" in out and "torch.nn.modules.linear.Linear" in out
    assert "skipped api_key (str): looks like a secret" in out


def test_show_and_verify_take_a_session_name_as_list_prints_it(store, capsys):
    """The first column of ``jupyter pause list`` is a session: ``show`` and ``verify`` of it
    mean its newest checkpoint."""
    path, first, second = store
    _, listed, _ = _run(capsys, "list", "--store", str(path))
    session = listed.splitlines()[1].split()[0]
    assert session == "exp"
    code, out, _ = _run(capsys, "show", session, "--store", str(path))
    assert code == 0 and out.startswith(f"checkpoint {second.id}  session 'exp'")
    code, out, _ = _run(capsys, "verify", session, "--store", str(path), "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [second.id]
    code, _, err = _run(capsys, "show", "nosuchsession", "--store", str(path))
    assert code != 0 and "no checkpoint 'nosuchsession'" in err


def test_show_names_what_will_not_come_back_exactly(tmp_path, capsys):
    ns = notebook(
        "class Forgetful:\n"
        "    def __init__(self):\n"
        "        self.seen = 0\n"
        "    def __reduce__(self):  # drops seen\n"
        "        return (Forgetful, ())\n"
        "f = Forgetful()\n"
        "f.seen = 3\n"
    )
    taken = jp.checkpoint(store=str(tmp_path), session="exp", namespace={"f": ns["f"]}).manifest
    assert "f" in taken.inexact
    code, out, _ = _run(capsys, "show", taken.id, "--store", str(tmp_path))
    assert code == 0 and "named f (saved all the same): will not come back exactly" in out


def test_verify_reports_damage_with_exit_code(store, capsys):
    path, first, second = store
    code, out, _ = _run(capsys, "verify", "--store", str(path))
    assert code == 0 and "2 verified, 0 damaged" in out
    weights = second.arrays[next(v for v in second.variables if v.name == "model").arrays[0]].blob
    blob = path / second.blob_key(weights)
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x00")
    code, out, _ = _run(capsys, "verify", "--store", str(path))
    assert code == 1 and "DAMAGED" in out and "array data of model" in out
    assert "checksum mismatch" in out or "truncated" in out


def test_gc_keeps_newest(store, capsys):
    path, first, second = store
    code, out, _ = _run(capsys, "gc", "--keep", "1", "--grace", "0", "--store", str(path))
    assert code == 0 and "removed 1 checkpoint(s)" in out
    code, out, _ = _run(capsys, "list", "--store", str(path), "--json")
    assert [r["id"] for r in json.loads(out)] == [second.id]


def test_plain_gc_removes_garbage_and_never_a_checkpoint(store, capsys):
    path, first, second = store
    orphans = [blob_key("exp", "cd" * 16), pool_key("cd" * 16)]  # the session's own folder, and the pool
    for orphan in orphans:
        (path / orphan).parent.mkdir(parents=True, exist_ok=True)
        (path / orphan).write_bytes(b"x" * 1000)
    code, out, _ = _run(capsys, "gc", "--grace", "0", "--dry-run", "--store", str(path))
    assert code == 0 and all(f"would remove blob {orphan} (1.0 kB, " in out for orphan in orphans)
    assert all((path / orphan).exists() for orphan in orphans)
    code, out, _ = _run(capsys, "gc", "--grace", "0", "--json", "--store", str(path))
    result = json.loads(out)
    assert result["counts"] == {"checkpoint": 0, "blob": 2, "pending": 0, "torn": 0, "unverified": 0, "upload": 0}
    assert result["pool"]["blobs_removed"] == 1 and result["uploads_unlisted"] is None
    assert result["bytes_freed"] == 2000 and not any((path / orphan).exists() for orphan in orphans)
    code, out, _ = _run(capsys, "list", "--store", str(path), "--json")
    assert sorted(r["id"] for r in json.loads(out)) == sorted([first.id, second.id])


def test_bad_arguments_are_clear(store, capsys):
    path, _, _ = store
    code, _, err = _run(capsys, "show", "nope", "--store", str(path))
    assert code == 2 and "no checkpoint 'nope'" in err
    code, _, err = _run(capsys, "list", "--store", str(path), "--session", "../../etc")
    assert code == 2 and "invalid session name" in err
    with pytest.raises(SystemExit):
        main(["gc", "--older-than", "soon", "--store", str(path)])
    assert "not a duration" in capsys.readouterr().err


def test_empty_store(tmp_path, capsys):
    code, out, _ = _run(capsys, "list", "--store", str(tmp_path / "empty"))
    assert code == 0 and "no checkpoints in" in out


def test_sizes_read_in_decimal_units(tmp_path, capsys):
    ns = {"payload": b"\x01" * 150_000, "weights": torch.zeros(375_000)}  # 150 kB and 1.5 MB
    jp.checkpoint(store=str(tmp_path), session="sizes", namespace=ns)
    another_process()
    code, out, _ = _run(capsys, "show", "latest", "--session", "sizes", "--store", str(tmp_path))
    rows = {line.split()[0]: line.split()[-2:] for line in out.splitlines() if line.startswith("  ")}
    assert code == 0 and rows["payload"] == ["150", "kB"] and rows["weights"] == ["1.5", "MB"]


# -- damaged manifests: listed and verified as "damaged: <why>" --------------------------------


@pytest.fixture
def damaged_store(tmp_path, monkeypatch):
    """``make(kind)``: two checkpoints of session "exp", the newer one's manifest damaged that way."""
    monkeypatch.delenv("JUPYTER_PAUSE_SIGNING_KEY", raising=False)

    def make(kind: str):
        key = key_for(kind)
        config = PauseConfig(signing_key=key or "")
        first = jp.checkpoint(store=str(tmp_path), session="exp", namespace={"n": 1}, config=config).manifest
        second = jp.checkpoint(store=str(tmp_path), session="exp", namespace={"n": 2}, config=config).manifest
        damage(tmp_path, "exp", second.id, kind)
        if key:
            monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", key)
        another_process()
        return tmp_path, first, second

    return make


@pytest.mark.parametrize("kind", KINDS)
def test_list_names_a_damaged_checkpoint_and_why(damaged_store, capsys, kind):
    path, first, second = damaged_store(kind)
    code, out, _ = _run(capsys, "list", "--store", str(path))
    assert code == 0 and f"{second.id}   damaged: {WHY[kind]}" in out
    assert "skips damaged checkpoints and uses the newest intact one" in out and "no checkpoints" not in out
    code, out, _ = _run(capsys, "list", "--store", str(path), "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows[second.id]["damaged"].startswith(WHY[kind]) and rows[first.id]["variables"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_verify_names_a_damaged_manifest_and_fails(damaged_store, capsys, kind):
    path, first, second = damaged_store(kind)
    code, out, _ = _run(capsys, "verify", "--store", str(path))
    assert code == 1 and f"DAMAGED exp {second.id}: damaged: {WHY[kind]}" in out
    assert f"ok      exp {first.id}" in out and "1 verified, 1 damaged, 0 incomplete" in out
    code, out, err = _run(capsys, "verify", second.id, "--store", str(path))
    assert code == 2 and f"checkpoint {second.id} of session 'exp' is damaged: {WHY[kind]}" in err
    assert f"the newest intact checkpoint is {first.id}" in err


def test_show_of_a_damaged_checkpoint_says_why_not_that_it_is_missing(damaged_store, capsys):
    path, first, second = damaged_store("torn")
    code, _, err = _run(capsys, "show", second.id, "--store", str(path))
    assert code == 2 and f"is damaged: {WHY['torn']}" in err and "no checkpoint" not in err
