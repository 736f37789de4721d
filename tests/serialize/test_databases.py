"""duckdb connections and relations: their tables come back in a new process, or the file is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.dumping import resume_elsewhere, roundtrip

duckdb = pytest.importorskip("duckdb")

NEXT = """
out = [
    con.execute("SELECT sum(j) FROM t").fetchall(),
    con.execute("SELECT count(*) FROM v").fetchall(),
    rel.fetchall()[:2],
    rel.fetchall() == con.sql("SELECT * FROM t WHERE i > 3").fetchall(),
]
con.execute("INSERT INTO t VALUES (100, 200)")
out.append(con.execute("SELECT max(j) FROM t").fetchall())
"""


@pytest.mark.integration  # a new process
def test_an_in_memory_connection_comes_back_with_its_tables_views_and_relations(tmp_path: Path) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range AS i, range * 2 AS j FROM range(10)")
    con.execute("CREATE VIEW v AS SELECT i FROM t WHERE i > 5")
    rel = con.sql("SELECT * FROM t WHERE i > 3")
    out = resume_elsewhere({"con": con, "rel": rel}, NEXT, tmp_path)
    assert out == [[[90]], [[4]], [[4, 8], [5, 10]], True, [[200]]]


def test_a_closed_connection_comes_back_closed() -> None:
    closed = duckdb.connect()
    closed.close()
    _, loaded, failed = roundtrip({"closed": closed})
    assert failed == {}
    with pytest.raises(duckdb.ConnectionException):
        loaded["closed"].execute("SELECT 1")


def test_a_connection_to_a_database_file_is_named_with_its_file(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.db"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS i")
    result, _, _ = roundtrip({"con": con, "n": 1})
    assert set(result.failed) == {"con"}
    assert str(path) in result.failed["con"] and "connect again after resume" in result.failed["con"]


def test_a_file_attached_to_an_in_memory_connection_is_named(tmp_path: Path) -> None:
    con = duckdb.connect()
    con.execute(f"ATTACH '{tmp_path / 'side.db'}' AS side")
    result, _, _ = roundtrip({"con": con})
    assert str(tmp_path / "side.db") in result.failed["con"]
