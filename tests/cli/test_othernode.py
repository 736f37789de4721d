"""``jupyter pause drill --another-node``: the resume is rehearsed where node A's HOME, caches,
temp folder and notebook folder are hidden, and names what a resume on another node would lose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from jupyter_pause.cli import othernode

#: A notebook holding a file opened under HOME and a file beside the notebook, read by path later.
CELLS = (
    "import os\n"
    "with open(os.path.expanduser('~/notes.txt'), 'w') as out:\n"
    "    out.write('kept on node A\\n')\n"
    "notes = open(os.path.expanduser('~/notes.txt'))",
    "total = sum(range(10))",
)


def test_node_folders_are_the_outermost_of_home_caches_temp_and_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cache, notebook = tmp_path / "home", tmp_path / "home" / ".cache" / "hf", tmp_path / "work" / "nb"
    temp = tmp_path / "temp"
    for folder in (home, cache, notebook, temp):
        folder.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    found = othernode.node_folders({"HOME": str(home), "HF_HOME": str(cache)}, str(notebook))
    assert sorted(found) == sorted(map(str, (home, notebook, temp)))
    assert str(cache) not in found, "a cache inside HOME is hidden with HOME, not on its own"


def test_what_the_kernel_needs_is_bound_back_over_a_hidden_folder(tmp_path: Path) -> None:
    script = othernode._script([str(tmp_path)], [str(tmp_path / "store"), "/usr"], "/stash")
    lines = script.splitlines()
    bind, cover, back = (
        next(i for i, x in enumerate(lines) if x.startswith(w))
        for w in ("mkdir -p /stash/0", "mount -t tmpfs", f"mkdir -p {tmp_path}/store")
    )
    assert bind < cover < back, "the store is stashed before the tmpfs covers it, and bound back after"
    assert "/usr" not in script, "a folder outside the hidden ones is left alone"


def _drill(
    notebook: Path, store: Path, env: dict[str, str], *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = notebook.parent / f"report{len(flags)}.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_pause.cli",
            "drill",
            str(notebook),
            "--store",
            str(store),
            "--report",
            str(report),
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return done, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.integration
def test_another_node_rehearsal_names_what_the_plain_drill_does_not(jupyter_dirs, tmp_path: Path) -> None:
    if othernode._namespace_command() is None:
        pytest.skip("no mount namespace can be made here")
    home, folder = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    folder.mkdir()
    notebook = folder / "notes.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, str(notebook))
    env = {**os.environ, **jupyter_dirs, "HOME": str(home)}

    done, report = _drill(notebook, tmp_path / "store", env)
    assert done.returncode == 0 and report["verdict"] == "restored", done.stdout + done.stderr

    done, report = _drill(notebook, tmp_path / "store", env, "--another-node")
    assert "another node: hidden " in done.stdout, done.stdout + done.stderr
    assert report.get("verdict") == "partial", done.stdout + done.stderr
    assert report["drill"]["another_node"] is True
    assert sorted(report["skipped"]) == ["notes"], "the rehearsal loses what another node would: the file under HOME"
    assert "will not come back on another node" in done.stdout and "notes (open file" in done.stdout
    assert (home / "notes.txt").read_text() == "kept on node A\n", "node A's own file is untouched"
