"""Objects of other libraries whose own pickling does not bring them back as they were.

- A Pillow ``FreeTypeFont`` read from a file object (``ImageFont.load_default()``, or
  ``truetype(BytesIO(...))``): Pillow pickles it as the file object it was read from, and
  unpickling reads that object again, from where the first reading left it: its end. The restore
  then fails ("cannot open resource"). It is saved as the font bytes Pillow keeps, and made again
  from a file object over them, as Pillow made it.
- An optuna storage in an in-memory SQLite database (``sqlite:///:memory:``): optuna pickles the
  database's URL and connects again on load, to a new, empty database; the study comes back
  without its trials and fails on first use. It is refused, with what to use instead.
- An optuna storage in a SQLite file: its trials live in the file, and optuna pickles the URL as
  written. A relative one (``sqlite:///study.db``) reconnects from whatever folder the resume runs
  in, and SQLite creates an empty database where the file is missing: the study came back
  "restored" and failed on first use. It is saved with the file's absolute path beside the URL; on
  load the file is found at that path or where the URL says from the resume's folder, and a
  missing file fails the load with where it was (``storage_file`` lets the checkpoint name a file
  outside the notebook's folder).
- An astropy ``Table`` with indices, in checkpoints written before ``astronomy`` saved tables by
  their attributes: those name ``make_indexed_table``, which builds each index again with
  ``add_index`` (``astronomy`` has astropy's objects now).

Reducers are named by class (these libraries are imported only where a notebook uses them).
"""

from __future__ import annotations

import io
import os
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np


def make_font(kind: type, data: bytes, size: float, index: int, encoding: str, layout_engine: Any) -> Any:
    """A FreeTypeFont of ``kind`` read from a file object over ``data``, as Pillow read it."""
    font = kind.__new__(kind)
    kind.__init__(font, io.BytesIO(data), size, index, encoding, layout_engine)
    return font


def reduce_font(font: Any) -> Any:
    """A font read from a file object, by its bytes; one read from a path as Pillow saves it."""
    data = getattr(font, "font_bytes", None)
    if isinstance(font.path, (str, bytes)) or not isinstance(data, bytes):
        return NotImplemented
    return (make_font, (type(font), data, font.size, font.index, font.encoding, font.layout_engine))


def _in_memory_sqlite(url: Any) -> bool:
    if not isinstance(url, str) or not url.startswith("sqlite"):
        return False
    path = url.split("://", 1)[-1]
    return path in ("", "/") or ":memory:" in path or "mode=memory" in path


def _sqlite_file(url: Any) -> str | None:
    """The database file of a SQLite URL, as written (relative or absolute); None for another database."""
    if not isinstance(url, str) or not url.startswith("sqlite") or _in_memory_sqlite(url):
        return None
    return url.split("://", 1)[-1][1:].split("?", 1)[0] or None  # sqlite:///x.db -> x.db; sqlite:////a/x.db -> /a/x.db


def make_rdb_storage(kind: type, state: dict[str, Any], absolute: str) -> Any:
    """An optuna RDB storage over the SQLite file at ``absolute`` (where it was at the checkpoint),
    else the one its URL names from here (a node whose folders lie elsewhere); a missing file is an
    error, not a new empty database."""
    written = _sqlite_file(state["url"])
    if Path(absolute).is_file():
        found = absolute
    elif written is not None and Path(written).is_file():
        found = os.path.abspath(written)
    else:
        raise FileNotFoundError(
            f"the SQLite file of an optuna study, {absolute} ({state['url']!r}), is not on this node: it holds "
            "the study's trials; copy it there and resume again"
        )
    storage = kind.__new__(kind)
    storage.__setstate__({**state, "url": "sqlite:///" + found})  # connects to that file
    storage.url = state["url"]  # as the notebook wrote it
    _files[storage] = absolute  # the file as the checkpoint named it: saved again, the storage is the same
    return storage


#: The file each storage works on, once known: the one a storage loaded here was found from
#: (``make_rdb_storage``), or the one SQLite said it has open (``_file_of``).
_files: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def reduce_rdb_storage(storage: Any) -> Any:
    """An optuna RDB storage: a SQLite file one with the file's absolute path (see the module's
    docstring); one in an in-memory SQLite database is refused; any other by optuna's own pickling."""
    url = getattr(storage, "url", None)
    if _in_memory_sqlite(url):
        raise TypeError(
            f"an optuna study stored in an in-memory SQLite database ({url!r}) is not saved: its trials "
            "live in this process only and would come back empty; use the default storage (storage=None) "
            "or a database file (storage='sqlite:///study.db')"
        )
    path = _sqlite_file(url)
    if path is None:
        return NotImplemented
    return (make_rdb_storage, (type(storage), storage.__getstate__(), _file_of(storage, path)))


def _file_of(storage: Any, written: str) -> str:
    """The absolute path of the file ``storage`` works on: the one it was loaded from, else the one
    SQLite has open (the folder a relative URL was opened from may not be the current one)."""
    if storage in _files:
        return _files[storage]
    try:
        with storage.engine.connect() as connection:
            rows = connection.exec_driver_sql("PRAGMA database_list").fetchall()
        opened = next((row[2] for row in rows if row[1] == "main"), "")
    except Exception:  # no connection to ask: where the URL points from here
        opened = ""
    if opened:
        _files[storage] = opened  # asked once: every later checkpoint (and its digest) names the same file
    return opened or os.path.abspath(written)


def storage_file(value: Any) -> str | None:
    """The absolute path of the SQLite file an optuna study (or its storage) keeps its trials in;
    None for anything else."""
    if type(value).__module__.split(".")[0] != "optuna":  # looks at nothing else (a dead weak proxy raises)
        return None
    storage = getattr(value, "_storage", value)
    storage = getattr(storage, "_backend", storage)  # optuna wraps an RDB storage in a cache
    path = _sqlite_file(getattr(storage, "url", None))
    return None if path is None else _file_of(storage, path)


def make_indexed_table(table: Any, indices: list[tuple[list[str], Any, bool]]) -> Any:
    """``table`` with its indices built again, in the order they were added (the first is the primary key).

    A column loaded back holds a dtype object of its own, where a column made in the notebook holds
    numpy's one ``int64``, which its index shares: each plain dtype is made numpy's own again first,
    so the table's structure (and its digest) is the one the notebook had."""
    for column in table.columns.values():
        dtype = getattr(column, "dtype", None)
        if isinstance(dtype, np.dtype) and dtype.names is None and dtype.str != "|O":
            canonical = np.dtype(dtype.str)
            if canonical == dtype and canonical is not dtype:
                column.dtype = canonical
    for names, engine, unique in indices:
        table.add_index(names, engine=engine, unique=unique)
    return table


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "PIL.ImageFont.FreeTypeFont": reduce_font,
    "optuna.storages._rdb.storage.RDBStorage": reduce_rdb_storage,
}
