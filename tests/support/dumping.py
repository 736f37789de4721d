"""Laying out a dump as a checkpoint would, for tests that go below the public API: cells run as
a notebook would (``notebook``), values dumped and loaded here (``roundtrip``) or in a new process
(``restore_elsewhere``, ``resume_elsewhere``)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import xxhash

from jupyter_pause.serialize.arrays import ArrayLoader
from jupyter_pause.serialize.pickler import DumpResult, dump_variables, load_variables
from jupyter_pause.store.manifest import ArrayRecord


def dump(values: dict[str, Any]) -> tuple[DumpResult, list, dict[str, ArrayRecord], dict[str, bytearray]]:
    """Dump ``values`` and lay the result out as a checkpoint would: segments, records, blobs."""
    result = dump_variables(values)
    records: dict[str, ArrayRecord] = {}
    blobs: dict[str, bytearray] = {}
    for key, found in result.collector.found.items():
        data = bytes(found.data)
        digest = xxhash.xxh3_128_hexdigest(data)
        blobs[digest] = bytearray(data)
        records[key] = ArrayRecord(
            found.kind, found.dtype, found.shape, found.device, digest, 0, len(data), found.order
        )
    segments = [(name, seg.pickler, seg.data) for name, seg in result.segments.items()]
    return result, segments, records, blobs


ROOT = Path(__file__).resolve().parents[2]


def notebook(code: str) -> dict[str, Any]:
    """Run ``code`` as notebook cells would: in a namespace whose ``__name__`` is ``__main__``."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    # dont_inherit: the cell must not pick up this file's ``from __future__ import annotations``.
    exec(compile(textwrap.dedent(code), "<cell>", "exec", dont_inherit=True), ns)
    return ns


def pick(ns: dict[str, Any], names: str) -> dict[str, Any]:
    return {name: ns[name] for name in names.split()}


def roundtrip(values: dict[str, Any]) -> tuple[DumpResult, dict[str, Any], dict[str, str]]:
    """Dump and load in this process; returns the dump, the loaded values and load failures."""
    result, segments, records, blobs = dump(values)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), namespace)
    namespace.update(loaded)
    return result, loaded, failed


RUNNER = r"""
import builtins, json, pickle, sys
from jupyter_pause.serialize.arrays import ArrayLoader
from jupyter_pause.serialize.pickler import load_variables

with open(sys.argv[1], "rb") as f:
    payload = pickle.load(f)
ns = {"__name__": "__main__", "__builtins__": builtins}
loaded, failed = load_variables(payload["segments"], ArrayLoader(payload["records"], payload["blobs"]), ns)
ns.update(loaded)
if not failed or payload["cell_even_if_failed"]:
    exec(payload["cell"], ns)
print(json.dumps({"failed": failed, "out": ns.get("out")}))
"""


def restore_elsewhere(
    values: dict[str, Any],
    cell: str,
    tmp_path: Path,
    damage: Callable[[list], None] | None = None,
    expect_all: bool = False,
) -> dict[str, Any]:
    """Save ``values`` here, restore them in a new process, run ``cell`` there.

    The cell runs in the restored namespace, like the next cell a user runs after resuming, and
    sets ``out``. ``damage`` may edit the segment list first. With ``expect_all`` the cell runs
    only when every variable loaded. Returns ``{"failed", "out"}``.
    """
    result, segments, records, blobs = dump(values)
    assert result.failed == {}
    if damage is not None:
        damage(segments)
    payload = tmp_path / "checkpoint.pkl"
    payload.write_bytes(
        pickle.dumps(
            {
                "segments": segments,
                "records": records,
                "blobs": blobs,
                "cell": textwrap.dedent(cell),
                "cell_even_if_failed": not expect_all,
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(payload)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def resume_elsewhere(values: dict[str, Any], cell: str, tmp_path: Path) -> Any:
    """``restore_elsewhere`` where every variable must come back; returns the cell's ``out``."""
    report = restore_elsewhere(values, cell, tmp_path, expect_all=True)
    assert report["failed"] == {}
    return report["out"]
