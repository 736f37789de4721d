"""No silent loss: every kind in a large registry comes back in a new process with the same type
and value, or the checkpoint (or the resume) names it with a reason; and at least as many kinds
come back as dill manages object by object.

The registry (``tests/support/registry.py``) is notebook code. It runs here in folder a and is
checkpointed; a new process resumes it in folder c and observes what it got (observing consumes
iterators and writes to files), then runs the same cell uninterrupted in folder b, observes that
twin for what is expected, and counts the twin's kinds whose type dill keeps object by object.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import jupyter_pause as jp
from tests.support.elsewhere import build, resume_elsewhere
from tests.support.registry import BATCHES

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process")]


RESUME = r"""
import __main__, json, os, sys, warnings
warnings.filterwarnings("ignore")
import dill
import jupyter_pause as jp
from tests.support.registry import BATCHES, observe

def type_name(value):
    return type(value).__module__ + "." + type(value).__qualname__

def dill_keeps_type(value):
    try:
        return type(dill.loads(dill.dumps(value))) is type(value)
    except Exception:  # dill cannot: not counted for dill
        return False

store, batch, twin_folder = sys.argv[1:]
ns = {"__name__": "__main__"}
result = jp.resume(store=store, session=batch, namespace=ns)
names = [n for n in ns if n.startswith("k_")]
report = {
    "types": {n: type_name(ns[n]) for n in names},
    "observed": {n: observe(ns[n], ns) for n in names},
    "not_restored": result.skipped,
}
# The uninterrupted twin: the same cell run in the real __main__ of this process, in its own folder.
os.chdir(twin_folder)
twin = vars(__main__)
exec(compile(BATCHES[batch], "<cell>", "exec", dont_inherit=True), twin)
twin_names = [n for n in twin if n.startswith("k_")]
report["expected_types"] = {n: type_name(twin[n]) for n in twin_names}
report["expected"] = {n: observe(twin[n], twin) for n in twin_names}
# dill object by object, on the twin after observing it (dill reopens files with their mode: "w" truncates).
report["dill"] = sorted(n for n in twin_names if dill_keeps_type(twin[n]))
print("REPORT " + json.dumps(report, default=str))
"""


def _resume_elsewhere(store: Path, batch: str, tmp_path: Path) -> dict[str, Any]:
    return resume_elsewhere(RESUME, store, batch, tmp_path, timeout=120)


@pytest.mark.parametrize("batch", list(BATCHES))
def test_every_kind_is_restored_or_named(batch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = build(BATCHES[batch], tmp_path / "a", monkeypatch)
    names = [n for n in saved if n.startswith("k_")]
    result = jp.checkpoint(names, store=str(tmp_path / "store"), session=batch, namespace=saved)
    named = {r.name: r.reason for r in result.manifest.skipped}

    got = _resume_elsewhere(tmp_path / "store", batch, tmp_path)
    assert sorted(got["expected"]) == sorted(names)
    named.update(got["not_restored"])
    restored, wrong = [], []
    for name in names:
        if name in named:
            assert named[name].strip(), f"{name} is named without a reason"
            continue
        expected_type, came = got["expected_types"][name], got["types"].get(name, "nothing")
        if came != expected_type:
            wrong.append(f"{name}: {expected_type} came back as {came}")
        elif got["observed"][name] != got["expected"][name]:
            wrong.append(f"{name}: expected {got['expected'][name]!r}, got {got['observed'][name]!r}")
        else:
            restored.append(name)
    report = "\n  ".join(wrong)
    assert not wrong, f"{len(wrong)} kind(s) came back different and unnamed:\n  {report}"
    dill_count = len(got["dill"])
    print(
        f"{batch}: {len(restored)} restored, {len(named)} named, dill keeps the type of {dill_count}, of {len(names)}"
    )
    assert len(restored) >= dill_count, f"restored {len(restored)} kinds; dill object by object keeps {dill_count}"


def test_the_registry_names_what_cannot_come_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kinds that must be named are named, each with the reason a user can act on."""
    saved = build(BATCHES["stdlib"], tmp_path / "a", monkeypatch)
    names = [n for n in saved if n.startswith("k_")]
    result = jp.checkpoint(names, store=str(tmp_path / "store"), session="named", namespace=saved)
    named = {r.name: r.reason for r in result.manifest.skipped}
    assert "paused Python frame" in named["k_generator"]
    assert "an archive being written cannot be continued" in named["k_tar_write"]
    assert "no saved variable holds" in named["k_weakref_to_unsaved"]
    for kept in ("k_bytesio", "k_stringio", "k_file_write", "k_dict_keyiter", "k_super", "k_weak_proxy"):
        assert kept not in named, named.get(kept)


TYPES = "{k: type(v).__module__ + '.' + type(v).__qualname__ for k, v in globals().items() if k.startswith('k_')}"


def test_standard_library_kinds_in_real_kernels(start_kernel: Any, tmp_path: Path) -> None:
    """The same promise through %checkpoint, SIGKILL and %resume in another kernel, where sys.stdout
    is ipykernel's stream: every kind comes back with its type or is named by one of the two."""
    store = tmp_path / "store"
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store))
    a.run("%load_ext jupyter_pause").ok()
    a.run(BATCHES["stdlib"]).ok()
    expected = a.value(TYPES)
    saved = a.run("%checkpoint --session kernels").ok().stdout
    a.kill()
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store))
    resumed = b.run("%load_ext jupyter_pause\n%resume --session kernels").ok().stdout
    got = b.value(TYPES)
    # Named as skipped or as not coming back exactly; not the list of what another node may lack.
    saved = re.sub(r"^  will not come back on another node.*?(?=^  \S|\Z)", "", saved, flags=re.M | re.S)
    named = set(re.findall(r"^\s+(k_\w+) \(", saved, re.M)) | set(re.findall(r"not restored: (k_\w+):", resumed))
    wrong = {n: (t, got.get(n)) for n, t in expected.items() if n not in named and got.get(n) != t}
    assert wrong == {}, f"came back as another type, or not at all, and not named: {wrong}"
    assert "k_generator" in named and "k_dict_keyiter" not in named and "k_stream_handler" not in named
    assert len(expected) - len(named) >= 150, (len(expected), sorted(named))
