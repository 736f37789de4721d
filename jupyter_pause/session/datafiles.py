"""Files values read by path, taken with a checkpoint and found again on resume (see ``serialize.datafiles``).

At checkpoint, ``dump`` pickles: each file kept becomes a blob of the checkpoint
(``payloads``: mapped from disk, never copied into memory, written into the pool once, like any
blob, before the manifest commits), recorded in ``Manifest.data_files``; each file not kept is one
line of ``Manifest.elsewhere`` (``lines``). On resume, ``staging`` wraps the unpickling: a file is
one the signed manifest names, with its size, or it is refused; it is used in place where its path
holds its bytes, else copied from the pool into ``PauseConfig.data_files_cache`` and verified there.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from ..config import PauseConfig
from ..errors import IntegrityError
from ..serialize import datafiles
from ..serialize.datafiles import Files
from ..serialize.pickler import DumpResult, dump_variables
from ..store import datafiles as stored
from ..store.manifest import DataFileRecord, Manifest
from ..store.storage import Store


def _fixed_folders(config: PauseConfig) -> tuple[str, ...]:
    """Folders whose files never change in place: ``datasets``' cache (where it is loaded) and the staging folder."""
    folders = [config.data_files_cache]
    library = sys.modules.get("datasets.config")
    cache = getattr(library, "HF_DATASETS_CACHE", None)
    if cache:
        folders.append(str(cache))
    return tuple(os.path.realpath(os.path.expanduser(f)) for f in folders)


def dump(values: dict[str, Any], config: PauseConfig, algorithm: str) -> tuple[DumpResult, Files]:
    """Pickle ``values`` (``dump_variables``), keeping the files they read by path: both."""
    files = Files(algorithm=algorithm, limit=config.data_files_max, fixed=_fixed_folders(config))
    with datafiles.collecting(files):
        return dump_variables(values), files


def payloads(files: Files | None) -> dict[str, Any]:
    """The blobs of the files kept, by digest."""
    return {} if files is None else {f.digest: f.data for f in files.found.values()}


def records(files: Files | None) -> dict[str, DataFileRecord]:
    """The manifest's ``data_files``."""
    return {} if files is None else {f.digest: DataFileRecord(f.size, f.path, f.how) for f in files.found.values()}


def lines(files: Files | None) -> list[str]:
    """A line of ``Manifest.elsewhere`` for each file a value reads that the checkpoint does not keep."""
    return [] if files is None else [f"data file {path}: {why}" for path, why in files.unsaved.items()]


def resolver(store: Store, manifest: Manifest, root: str) -> datafiles.Resolver:
    """What finds each file of ``manifest`` on this node (see the module's docstring)."""

    def find(digest: str, size: int, path: str, algorithm: str) -> str:
        record = manifest.data_files.get(digest)
        if record is None or record.size != size or algorithm != manifest.hash:
            raise IntegrityError(
                f"data file {path} ({digest[:12]}) is not one checkpoint {manifest.id} names with {size} bytes; "
                "its variable is not restored"
            )
        if stored.holds(path, digest, size, algorithm):
            return path
        try:
            key = manifest.blob_key(digest, store.names)
        except KeyError as e:
            raise IntegrityError(f"data file {path} ({digest[:12]}) cannot be found in the store: {e.args[0]}") from e
        return stored.stage(store, key, digest, size, algorithm, root, os.path.basename(path))

    return find


@contextlib.contextmanager
def staging(store: Store, manifest: Manifest, config: PauseConfig) -> Iterator[None]:
    """Within this block, loaded values find their files as ``resolver`` says."""
    root = os.path.expanduser(config.data_files_cache)
    with datafiles.resolving(resolver(store, manifest, root)):
        yield
