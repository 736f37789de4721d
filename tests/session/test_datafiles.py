"""Datasets read from Arrow files by path come back on another node (``session.datafiles``).

A dataset loaded from the Hugging Face cache and mapped is checkpointed on one node; a new process
on a node with another HOME, Hugging Face cache and temporary folder, the first node's folders
gone, resumes it with the same rows, its files staged from the store's pool and verified. An
object planted under the pool's name is refused, and only the variable that needs it is lost; a
file over the size limit is named at the checkpoint; two sessions share one pool object.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.hub.keys import user_key
from jupyter_pause.store import signing
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import pool_key
from jupyter_pause.store.retention import sweep_pool
from jupyter_pause.store.storage import Store
from tests.support.nodes import Node
from tests.support.processes import another_process
from tests.support.stores import stored_bytes

datasets = pytest.importorskip("datasets")

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

ALICE = user_key("a hub secret of at least thirty-two characters 5a2c", "alice")

#: Node A: a JSON file loaded into the Hugging Face cache, mapped, shuffled; checkpointed.
CHECKPOINT = """
import json, sys
import jupyter_pause as jp
from datasets import load_dataset
with open("train.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"text": "row " * (i % 5 + 1), "label": i % 2}) + "\\n")
raw = load_dataset("json", data_files="train.jsonl", split="train")
lengths = raw.map(lambda b: {"n": [len(t) for t in b["text"]]}, batched=True)
shuffled = lengths.shuffle(seed=3)
ns = {"__name__": "__main__", "raw": raw, "lengths": lengths, "shuffled": shuffled, "other": 41}
m = jp.checkpoint(store=sys.argv[1], session="data", namespace=ns).manifest
files = [c["filename"] for d in (raw, lengths, shuffled) for c in d.cache_files]
rows = {k: ns[k][:] for k in ("raw", "lengths", "shuffled")}
print("REPORT " + json.dumps({"files": files, "kept": {k: v.path for k, v in m.data_files.items()}, "rows": rows}))
"""

#: Node B: the resume and its restore test.
RESUME = """
import json, sys
import jupyter_pause as jp
ns = {"__name__": "__main__"}
cycle = jp.resume_and_verify(store=sys.argv[1], session="data", namespace=ns, write_report=False)
rows = {k: ns[k][:] for k in ("raw", "lengths", "shuffled") if k in ns}
files = [c["filename"] for c in ns["shuffled"].cache_files] if "shuffled" in ns else []
print("REPORT " + json.dumps({"verdict": cycle.verdict.kind, "skipped": cycle.result.skipped, "rows": rows,
                             "files": files, "other": ns.get("other")}))
"""


@pytest.mark.integration
def test_a_mapped_dataset_resumes_on_another_node_from_the_files_the_checkpoint_kept(tmp_path):
    a, b = Node(tmp_path / "a"), Node(tmp_path / "b")
    store = str(tmp_path / "store")
    taken = a.run(CHECKPOINT, store)
    assert sorted(taken["kept"].values()) == sorted(set(taken["files"]))  # every Arrow file, once
    a.leave()
    resumed = b.run(RESUME, store)
    assert resumed["verdict"] == "restored", resumed
    assert resumed["rows"] == taken["rows"]
    staged = tmp_path / "b" / "home" / ".cache" / "jupyter-pause" / "files"
    assert resumed["files"] and all(Path(f).is_relative_to(staged) for f in resumed["files"])


def _saved_dataset(folder: Path) -> object:
    """A dataset saved to disk and loaded back: memory-mapped from ``folder``'s Arrow file."""
    made = datasets.Dataset.from_dict({"a": list(range(30))}).map(lambda r: {"b": r["a"] * 2})
    made.save_to_disk(str(folder))
    return datasets.load_from_disk(str(folder))


def _config(tmp_path: Path, **settings: object) -> PauseConfig:
    return PauseConfig(data_files_cache=str(tmp_path / "staged"), **settings)


def test_an_object_planted_under_the_pool_name_is_refused_and_nothing_else_is_lost(tmp_path):
    url = str(tmp_path / "store")
    ds = _saved_dataset(tmp_path / "saved")
    want = ds[:]
    manifest = jp.checkpoint(
        store=url, session="s", namespace={"ds": ds, "other": 41}, config=_config(tmp_path)
    ).manifest
    ((digest, record),) = manifest.data_files.items()
    del ds
    (arrow,) = (tmp_path / "saved").glob("*.arrow")
    kept = arrow.read_bytes()
    for f in (tmp_path / "saved").iterdir():
        f.unlink()  # its node's folder is gone
    planted = Store(url).path(pool_key(digest))
    Path(planted).write_bytes(b"x" * record.size)  # same name, same size, other bytes
    another_process()
    ns: dict[str, object] = {}
    result = jp.resume(store=url, session="s", namespace=ns, config=_config(tmp_path))
    assert ns["other"] == 41
    assert "ds" not in ns
    assert "does not hold data file" in result.skipped["ds"], result.skipped
    assert not list((tmp_path / "staged").rglob("*.arrow"))  # nothing unverified left to use
    Store(url).write(pool_key(digest), kept)  # the right bytes back: the same checkpoint resumes whole
    another_process()
    again: dict[str, object] = {}
    assert not jp.resume(store=url, session="s", namespace=again, config=_config(tmp_path)).skipped
    assert again["ds"][:] == want  # type: ignore[index]


def test_with_a_key_a_copy_planted_under_the_public_name_is_never_read(tmp_path):
    """A co-tenant plants garbage under the public name of the dataset's Arrow file before the
    checkpoint; with alice's key the file goes under a keyed, encrypted name, and a resume on a node
    without the file stages it from there: the dataset comes back whole."""
    url = str(tmp_path / "store")
    ds = _saved_dataset(tmp_path / "saved")
    want = ds[:]
    (arrow,) = (tmp_path / "saved").glob("*.arrow")
    digest = signing.digest(arrow.read_bytes(), "sha256")
    Store(url).write(pool_key(digest), b"x" * arrow.stat().st_size)  # the shared credential, no key of alice's
    config = _config(tmp_path, signing_key=ALICE)
    manifest = jp.checkpoint(store=url, session="s", namespace={"ds": ds}, config=config).manifest
    assert list(manifest.data_files) == [digest]
    assert stored_bytes(url, pool_key(digest)) == b"x" * arrow.stat().st_size  # the plant, untouched and unread
    del ds
    for f in (tmp_path / "saved").iterdir():
        f.unlink()
    another_process()
    ns: dict[str, object] = {}
    result = jp.resume(store=url, session="s", namespace=ns, config=config)
    assert not result.skipped and ns["ds"][:] == want  # type: ignore[index]


def test_a_file_over_the_size_limit_is_named_at_the_checkpoint(tmp_path):
    ds = _saved_dataset(tmp_path / "saved")
    config = _config(tmp_path, data_files_max=100)
    manifest = jp.checkpoint(store=str(tmp_path / "store"), session="s", namespace={"ds": ds}, config=config).manifest
    assert not manifest.data_files
    (arrow,) = (tmp_path / "saved").glob("*.arrow")
    named = [line for line in manifest.elsewhere if str(arrow) in line]
    assert named and "over the limit" in named[0] and "data_files_max" in named[0], manifest.elsewhere


def test_two_sessions_write_the_pool_object_once_and_cleanup_keeps_it(tmp_path):
    url = str(tmp_path / "store")
    ds = _saved_dataset(tmp_path / "saved")
    first = jp.checkpoint(store=url, session="one", namespace={"ds": ds}, config=_config(tmp_path)).manifest
    ((digest, record),) = first.data_files.items()
    pooled = Store(url).path(pool_key(digest))
    written = os.stat(pooled)
    another_process()
    second = jp.checkpoint(store=url, session="two", namespace={"ds": ds}, config=_config(tmp_path)).manifest
    assert second.data_files == first.data_files and digest in second.blobs
    again = os.stat(pooled)
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert second.stats["bytes_written"] < record.size
    sweep_pool(Catalog(Store(url)), grace=0)  # cleanup keeps what a checkpoint names
    assert os.path.getsize(pooled) == record.size
