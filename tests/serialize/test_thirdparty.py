"""jupyter_pause.serialize.thirdparty: library objects whose own pickling does not bring them back
as they were are saved the library's other way, or named with what to do instead."""

from __future__ import annotations

import io

import pytest

from jupyter_pause.serialize.digests import value_digest
from tests.support.dumping import roundtrip


def test_a_font_read_from_a_file_object_comes_back() -> None:
    image_font = pytest.importorskip("PIL.ImageFont")
    fonts = {"default": image_font.load_default(size=14), "bytes": None}
    fonts["bytes"] = image_font.truetype(io.BytesIO(fonts["default"].font_bytes), 20)
    _, loaded, failed = roundtrip(fonts)
    assert failed == {}
    for name, font in fonts.items():
        back = loaded[name]
        assert type(back) is type(font)
        assert back.getbbox("hello") == font.getbbox("hello") and back.getname() == font.getname()
        assert value_digest(back) == value_digest(font)


def test_a_study_in_an_in_memory_sqlite_database_is_refused_with_what_to_use() -> None:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    in_memory = optuna.create_study(storage="sqlite:///:memory:")
    in_memory.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    default = optuna.create_study()
    default.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    result, loaded, _ = roundtrip({"in_memory": in_memory, "default": default})
    assert "in-memory SQLite database" in result.failed["in_memory"]
    assert "storage=None" in result.failed["in_memory"]
    assert len(loaded["default"].trials) == 1


def test_an_indexed_table_of_an_older_checkpoint_gets_its_indices_built_again() -> None:
    """Checkpoints written before ``astronomy`` saved tables by their attributes name ``make_indexed_table``."""
    table_module = pytest.importorskip("astropy.table")
    from astropy.table.sorted_array import SortedArray

    from jupyter_pause.serialize.thirdparty import make_indexed_table

    plain = table_module.Table({"id": [3, 1, 2], "band": ["g", "r", "i"]})
    table = make_indexed_table(plain, [(["id"], SortedArray, False), (["band"], SortedArray, True)])
    assert table.loc[2]["band"] == "i" and table.loc.with_index("band")["r"]["id"] == 1
    assert table.primary_key == ("id",) and [i.index.data.unique for i in table.indices] == [False, True]
