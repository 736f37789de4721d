"""jupyter_pause.process.settings: process settings that change results come back with a resume, in
another kernel and another folder; what cannot be applied there is named, never an error."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import sysconfig
import types
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.process import places, settings
from jupyter_pause.store.manifest import Manifest

RELEASES = Path(__file__).resolve().parents[1] / "data"

SET_UP = r"""
%load_ext jupyter_pause
import os, sys
import torch, sklearn, matplotlib
torch.set_num_interop_threads(1)
torch.set_default_dtype(torch.float64)
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("medium")
torch.set_num_threads(THREADS)
sklearn.set_config(assume_finite=True, working_memory=256)
matplotlib.rcParams["lines.linewidth"] = 3.5
matplotlib.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=["r", "k"])
sys.path.append(os.path.abspath("lib"))
os.chdir("runs/one")
x = torch.ones(3).sum().item()
"""

READ = r"""
import json, os, sys, torch, sklearn, matplotlib
print(json.dumps({
    "dtype": str(torch.get_default_dtype()),
    "deterministic": [torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled()],
    "cudnn": [torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32],
    "matmul": torch.get_float32_matmul_precision(),
    "threads": torch.get_num_threads(),
    "interop": torch.get_num_interop_threads(),
    "sklearn": [sklearn.get_config()["assume_finite"], sklearn.get_config()["working_memory"]],
    "rc": [matplotlib.rcParams["lines.linewidth"], matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]],
    "cwd": os.getcwd(),
    "lib": [p for p in sys.path if p.endswith("lib")],
}))
"""


def _folder(root: Path, name: str, *, runs: bool = True, lib: bool = True) -> Path:
    folder = root / name
    (folder / "runs" / "one").mkdir(parents=True) if runs else folder.mkdir()
    if lib:
        (folder / "lib").mkdir()
    return folder


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.integration
def test_settings_come_back_in_another_kernel_and_folder(start_kernel, tmp_path):
    store = tmp_path / "store"
    a_dir, b_dir = _folder(tmp_path, "a"), _folder(tmp_path, "b")
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(a_dir / "nb.ipynb"))
    a.run(SET_UP.replace("THREADS", "1")).ok()
    a.run("%checkpoint --session settings").ok()
    saved = _last_json(a.run(READ).ok().stdout)
    a.kill()

    b = start_kernel(b_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(b_dir / "nb.ipynb"))
    before = _last_json(b.run(READ).ok().stdout)
    assert before["dtype"] == "torch.float32" and before["cwd"] == str(b_dir)  # a fresh kernel differs
    out = b.run("%load_ext jupyter_pause\n%resume --session settings").ok().stdout
    got = _last_json(b.run(READ).ok().stdout)

    assert "settings restored:" in out and "NOT applied" not in out, out
    assert "working directory runs/one (in the notebook's folder)" in out
    assert saved["interop"] == 1
    for key in ("dtype", "deterministic", "cudnn", "matmul", "threads", "interop", "sklearn", "rc"):
        assert got[key] == saved[key], key
    assert got["cwd"] == str(b_dir / "runs" / "one")  # the same place, in this kernel's folder
    assert got["lib"] == [str(b_dir / "lib")]


@pytest.mark.integration
def test_settings_this_node_cannot_take_are_listed_and_the_rest_resumes(start_kernel, tmp_path):
    store = tmp_path / "store"
    a_dir = _folder(tmp_path, "a")
    b_dir = _folder(tmp_path, "b", runs=False, lib=False)
    a = start_kernel(a_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(a_dir / "nb.ipynb"))
    cpus = len(os.sched_getaffinity(0))
    a.run(SET_UP.replace("THREADS", str(cpus + 3))).ok()
    a.run("%checkpoint --session settings").ok()
    a.kill()

    b = start_kernel(b_dir, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(b_dir / "nb.ipynb"))
    out = b.run("%load_ext jupyter_pause\n%resume --session settings").ok().stdout
    assert "restored 1 variable(s): x" in out
    assert (
        f"setting NOT applied: working directory runs/one (in the notebook's folder): no such folder on this node; "
        f"left at {b_dir}"
    ) in out
    assert "setting NOT applied: sys.path entry lib (in the notebook's folder): no such folder on this node" in out
    assert f"setting NOT applied: torch threads {cpus + 3}: this node has {cpus} CPU(s)" in out
    assert "torch default dtype float64" in out  # what can be applied still is
    assert b.value("str(torch.get_default_dtype())") == "torch.float64"
    assert b.value("os.getcwd()") == str(b_dir)


def test_libraries_the_session_never_imported_are_not_read(monkeypatch, tmp_path):
    for name in ("torch", "sklearn", "matplotlib"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    kept, notes = settings.capture(str(tmp_path / "nb.ipynb"))
    assert not notes
    assert {"torch", "sklearn", "matplotlib"}.isdisjoint(kept)
    assert "cwd" in kept and "sys_path" in kept


def test_a_checkpoint_reads_what_the_process_loaded_once(monkeypatch, tmp_path):
    """Which files are local modules, which ``sys.path`` entries are the user's and which modules
    variables need that are not kept: one walk of ``sys.modules`` and one look at the
    installation's folders answer them all (a kernel holds thousands of modules)."""
    walks: list[int] = []
    looks: list[int] = []

    class Watched(types.ModuleType):
        @property
        def __dict__(self) -> dict:  # type: ignore[override]  # what a walk of sys.modules reads of each module
            walks.append(1)
            return {}

    monkeypatch.setitem(sys.modules, "watched_by_the_test", Watched("watched_by_the_test"))
    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: looks.append(1) or real(*a, **k))
    (tmp_path / "helpers_once.py").write_text("def scale(x):\n    return 2 * x\n")
    interpreter = places.startup_path() | set(sys.path)  # as a kernel that just started: only tmp_path is added
    monkeypatch.setattr(places, "startup_path", lambda: interpreter)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "helpers_once", raising=False)  # forgotten again after the test
    helpers = importlib.import_module("helpers_once")

    kept = settings.keep(str(tmp_path / "nb.ipynb"), "xxh3_128", {"scale": helpers.scale})
    assert [r.path for r in kept.local_modules.records] == ["helpers_once.py"]
    assert "cwd" in kept.settings and "sys_path" in kept.settings
    assert (len(walks), len(looks)) == (1, 1)


def test_what_cannot_be_applied_is_named_and_the_rest_is_applied(tmp_path, monkeypatch):
    import matplotlib
    import sklearn

    monkeypatch.chdir(tmp_path)
    before = sklearn.get_config()
    saved = {
        "cwd": {"path": "gone/here", "in_notebook_folder": True},
        "sys_path": [{"path": "/nowhere/jupyter-pause-lib", "in_notebook_folder": False, "front": True}],
        "sklearn": {"assume_finite": True, "a_key_from_the_future": 3},
        "matplotlib": {"lines.linewidth": 4.0, "no.such.param": 1, "lines.linestyle": "not a style"},
    }
    try:
        with matplotlib.rc_context():  # puts this process's rcParams back after
            outcome = settings.apply(saved, str(tmp_path))
            assert matplotlib.rcParams["lines.linewidth"] == 4.0
        assert sklearn.get_config()["assume_finite"] is True
    finally:
        sklearn.set_config(**before)
    lines = "\n".join(outcome.notes())
    assert "settings restored: scikit-learn assume_finite=True; matplotlib rcParams lines.linewidth" in lines
    assert "working directory gone/here (in the notebook's folder): no such folder on this node" in lines
    assert "sys.path entry /nowhere/jupyter-pause-lib: no such folder on this node" in lines
    assert f"scikit-learn a_key_from_the_future=3: unknown to scikit-learn {sklearn.__version__}" in lines
    assert "matplotlib rcParams['no.such.param']: unknown to matplotlib" in lines
    assert "matplotlib rcParams['lines.linestyle'] = 'not a style':" in lines
    assert os.getcwd() == str(tmp_path)


def test_a_library_missing_here_is_named_not_raised(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    outcome = settings.apply({"sklearn": {"assume_finite": True}}, str(tmp_path))
    assert outcome.applied == []
    assert outcome.not_applied and outcome.not_applied[0].startswith(
        "scikit-learn config: sklearn cannot be imported here"
    )


def test_old_checkpoints_hold_no_settings_and_resume_without_any(tmp_path, new_process):
    store = tmp_path / "release"
    shutil.copytree(RELEASES / "release-0.1.0", store)
    manifest = Manifest.from_bytes(next(store.glob("sessions/*/checkpoints/*.json")).read_bytes())
    assert manifest.settings == {} and manifest.local_modules == []
    result = jp.resume(store=str(store), session="release", namespace={})
    assert result.complete
    assert not any("setting" in note or "local module" in note for note in result.notes), result.notes


def test_torch_settings_this_process_refuses_are_named_and_the_rest_applied(monkeypatch):
    import torch

    def refuse(n: int) -> None:
        raise RuntimeError("cannot set number of interop threads after parallel work has started")

    monkeypatch.setattr(torch, "set_num_interop_threads", refuse)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)  # put back after
    saved = settings._torch()
    assert saved is not None
    now = torch.get_num_interop_threads()
    cpus = saved["cpus"]
    if cpus < 2:
        pytest.skip("a different inter-op thread count this node has needs two CPUs")
    saved |= {"default_dtype": "float128", "threads": cpus + 5, "interop_threads": 2 if now == 1 else 1}
    saved["cudnn"] = {**saved["cudnn"], "benchmark": not torch.backends.cudnn.benchmark}
    outcome = settings.apply({"torch": saved}, ".")
    assert outcome.applied == [f"cudnn.benchmark {saved['cudnn']['benchmark']}"]
    assert outcome.not_applied == [
        f"torch default dtype float128: unknown to torch {torch.__version__}",
        f"torch threads {cpus + 5}: this node has {cpus} CPU(s); left at {torch.get_num_threads()}",
        f"torch inter-op threads {saved['interop_threads']}: RuntimeError: cannot set number of interop threads "
        f"after parallel work has started; left at {now}",
    ]
