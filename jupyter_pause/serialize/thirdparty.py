"""Objects of other libraries whose own pickling does not bring them back as they were.

- A Pillow ``FreeTypeFont`` read from a file object (``ImageFont.load_default()``, or
  ``truetype(BytesIO(...))``): Pillow pickles it as the file object it was read from, and
  unpickling reads that object again, from where the first reading left it: its end. The restore
  then fails ("cannot open resource"). It is saved as the font bytes Pillow keeps, and made again
  from a file object over them, as Pillow made it.
- An optuna storage in an in-memory SQLite database (``sqlite:///:memory:``): optuna pickles the
  database's URL and connects again on load, to a new, empty database; the study comes back
  without its trials and fails on first use. It is refused, with what to use instead.
- An astropy ``Table`` with indices, in checkpoints written before ``astronomy`` saved tables by
  their attributes: those name ``make_indexed_table``, which builds each index again with
  ``add_index`` (``astronomy`` has astropy's objects now).

Reducers are named by class (these libraries are imported only where a notebook uses them).
"""

from __future__ import annotations

import io
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


def refuse_memory_storage(storage: Any) -> Any:
    """An optuna RDB storage is saved by its URL; one in an in-memory SQLite database is refused."""
    if not _in_memory_sqlite(getattr(storage, "url", None)):
        return NotImplemented
    raise TypeError(
        f"an optuna study stored in an in-memory SQLite database ({storage.url!r}) is not saved: its trials "
        "live in this process only and would come back empty; use the default storage (storage=None) "
        "or a database file (storage='sqlite:///study.db')"
    )


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
    "optuna.storages._rdb.storage.RDBStorage": refuse_memory_storage,
}
