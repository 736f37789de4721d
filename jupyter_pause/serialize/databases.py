"""In-process databases saved by their own export: duckdb connections and the relations over them.

- An in-memory duckdb connection (``duckdb.connect()``): its tables, views, sequences and macros
  live in this process only, and duckdb refuses to pickle it. It is saved as the files duckdb's
  own ``EXPORT DATABASE ... (FORMAT parquet)`` writes (the schema, the load script and one
  Parquet file per table), packed as bytes into the checkpoint, and loaded with ``IMPORT
  DATABASE`` into a new in-memory connection. A closed connection comes back closed.
- A connection to a database file, or with a file attached: its data lives in the file, which the
  checkpoint does not carry; it is refused with the file named, so the notebook knows to
  connect again after the resume.
- A relation (``con.sql(...)``, ``con.table(...)``): saved as its query and its connection (shared
  with the variable that holds the connection), and made again on that connection at load; the
  rows are computed again from the restored tables, as a relation does each time it is read.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

#: duckdb's own databases, present in every connection.
_BUILT_IN = frozenset({"system", "temp"})


def _files(connection: Any) -> list[str]:
    """The database files ``connection`` works on (its own and attached ones); empty when in memory."""
    rows = connection.execute("SELECT path FROM duckdb_databases() WHERE NOT internal").fetchall()
    return [path for (path,) in rows if path]


def _is_closed(connection: Any, duckdb: Any) -> bool:
    try:
        connection.execute("SELECT 1")
    except duckdb.ConnectionException:
        return True
    return False


def _export(connection: Any) -> dict[str, bytes]:
    """What ``EXPORT DATABASE`` writes for ``connection``, by file name."""
    with tempfile.TemporaryDirectory(prefix="jupyter-pause-duckdb-") as folder:
        target = Path(folder) / "export"
        connection.execute(f"EXPORT DATABASE '{_quoted(str(target))}' (FORMAT parquet)")
        return {str(p.relative_to(target)): p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}


def _quoted(path: str) -> str:
    return path.replace("'", "''")


def reduce_connection(connection: Any) -> tuple[Any, ...]:
    """An in-memory duckdb connection as its exported files; one on a file is refused, naming it."""
    import duckdb

    if _is_closed(connection, duckdb):
        return (make_connection, ({},))
    files = _files(connection)
    if files:
        raise TypeError(
            f"a duckdb connection to {', '.join(files)} is not saved: its tables live in that file, which "
            f"the checkpoint does not carry; connect again after resume (duckdb.connect({files[0]!r})), "
            "with the file copied there when resuming on another node"
        )
    return (make_connection, (_export(connection),))


def make_connection(exported: dict[str, bytes]) -> Any:
    """A new in-memory duckdb connection holding what ``exported`` holds (closed when it is empty:
    a closed connection exports nothing)."""
    import duckdb

    connection = duckdb.connect()
    if not exported:
        connection.close()
        return connection
    with tempfile.TemporaryDirectory(prefix="jupyter-pause-duckdb-") as folder:
        for name, data in exported.items():
            path = Path(folder) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        connection.execute(f"IMPORT DATABASE '{_quoted(folder)}'")  # finds the files where they are now
    return connection


def reduce_relation(relation: Any) -> tuple[Any, ...]:
    """A duckdb relation as its query on its connection (saved once, shared)."""
    return (make_relation, (relation._con, relation.sql_query()))


def make_relation(connection: Any, query: str) -> Any:
    """The relation ``query`` is on ``connection``."""
    return connection.sql(query)


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "_duckdb.DuckDBPyConnection": reduce_connection,
    "duckdb.DuckDBPyConnection": reduce_connection,
    "duckdb._relation.DuckDBPyRelation": reduce_relation,
}
