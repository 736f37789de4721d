"""Values that read a file by path are pickled with the file's content kept (``serialize.datafiles``)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from jupyter_pause.serialize import datafiles
from jupyter_pause.serialize.arrays import ArrayLoader
from jupyter_pause.serialize.datafiles import Files
from jupyter_pause.serialize.pickler import dump_variables, load_variables

datasets = pytest.importorskip("datasets")


def _dump(values: dict[str, object], limit: int = 1 << 30, fixed: tuple[str, ...] = ()) -> tuple[Files, dict]:
    with datafiles.collecting(Files("xxh3_128", limit, fixed)) as files:
        dump = dump_variables(values)
    assert not dump.failed, dump.failed
    return files, dump


def _load(dump: object, resolver: datafiles.Resolver) -> tuple[dict, dict]:
    segments = [(n, s.pickler, s.data) for n, s in dump.segments.items()]  # type: ignore[attr-defined]
    with datafiles.resolving(resolver):
        return load_variables(segments, ArrayLoader({}, {}), {})


def _staged_from(files: Files, folder: Path) -> datafiles.Resolver:
    """A resolver that finds each kept file among ``files``' bytes, written into ``folder``."""

    def find(digest: str, size: int, path: str, algorithm: str) -> str:
        found = files.found[digest]
        assert (found.size, found.path, algorithm) == (size, path, "xxh3_128")
        target = folder / digest
        folder.mkdir(exist_ok=True)
        target.write_bytes(bytes(found.data))
        return str(target)

    return find


def test_a_dataset_loaded_from_disk_comes_back_from_its_kept_bytes_when_its_folder_is_gone(tmp_path):
    made = datasets.Dataset.from_dict({"a": list(range(50))}).map(lambda r: {"b": r["a"] * 3})
    made.save_to_disk(str(tmp_path / "saved"))
    ds = datasets.load_from_disk(str(tmp_path / "saved")).select(range(10, 40))
    want = ds[:]
    files, dump = _dump({"ds": ds})
    (found,) = files.found.values()
    assert found.how == "copied" and found.size == os.path.getsize(found.path)  # writable, outside any cache
    del ds
    for f in (tmp_path / "saved").iterdir():
        f.unlink()
    values, failed = _load(dump, _staged_from(files, tmp_path / "staged"))
    assert not failed
    assert values["ds"][:] == want
    assert values["ds"].cache_files[0]["filename"].startswith(str(tmp_path / "staged"))


def test_a_file_in_a_folder_that_never_changes_is_mapped_not_read(tmp_path):
    made = datasets.Dataset.from_dict({"a": list(range(50))})
    made.save_to_disk(str(tmp_path / "cache"))
    ds = datasets.load_from_disk(str(tmp_path / "cache"))
    files, _ = _dump({"ds": ds}, fixed=(os.path.realpath(tmp_path / "cache"),))
    (found,) = files.found.values()
    assert found.how == "mapped" and not isinstance(found.data, bytes)


def test_a_read_only_memmap_is_kept_and_one_open_for_writing_is_named(tmp_path):
    np.arange(100, dtype="f8").tofile(tmp_path / "r.dat")
    np.arange(10, dtype="i4").tofile(tmp_path / "w.dat")
    reading = np.memmap(tmp_path / "r.dat", dtype="f8", mode="r", shape=(10, 10))
    writing = np.memmap(tmp_path / "w.dat", dtype="i4", mode="r+")
    files, dump = _dump({"reading": reading, "writing": writing})
    assert [f.path for f in files.found.values()] == [str(tmp_path / "r.dat")]
    assert "open for writing" in files.unsaved[str(tmp_path / "w.dat")]
    values, failed = _load(dump, _staged_from(files, tmp_path / "staged"))
    assert not failed
    assert isinstance(values["reading"], np.memmap) and values["reading"].filename.startswith(str(tmp_path / "staged"))
    assert np.array_equal(values["reading"], reading) and np.array_equal(values["writing"], writing)


def test_a_file_over_the_limit_is_named_and_pickled_as_the_library_does(tmp_path):
    made = datasets.Dataset.from_dict({"a": list(range(50))})
    made.save_to_disk(str(tmp_path / "saved"))
    ds = datasets.load_from_disk(str(tmp_path / "saved"))
    files, dump = _dump({"ds": ds}, limit=10)
    assert not files.found
    (path,) = files.unsaved
    assert "over the limit" in files.unsaved[path]
    assert str(tmp_path / "saved").encode() in dump.segments["ds"].data  # its path, as datasets pickles it


def test_outside_a_checkpoint_a_table_pickles_as_datasets_does(tmp_path):
    made = datasets.Dataset.from_dict({"a": [1, 2]})
    made.save_to_disk(str(tmp_path / "saved"))
    ds = datasets.load_from_disk(str(tmp_path / "saved"))
    assert pickle.loads(pickle.dumps(ds))[:] == ds[:]
    assert datafiles.reduce_table(ds.data) is NotImplemented
