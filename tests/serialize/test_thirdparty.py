"""jupyter_pause.serialize.thirdparty: library objects whose own pickling does not bring them back
as they were are saved the library's other way, or named with what to do instead."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.serialize.thirdparty import storage_file
from tests.support.dumping import restore_elsewhere, resume_elsewhere, roundtrip


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


def _file_study(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A seeded study with three trials in ``study.db`` of ``folder``, made from there (a relative URL)."""
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir()
    monkeypatch.chdir(folder)
    study = optuna.create_study(storage="sqlite:///study.db", sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(lambda trial: trial.suggest_float("x", -1, 1) ** 2, n_trials=3)
    return study


NEXT = "out = [len(study.trials), study.best_value, study.ask().suggest_float('x', -1, 1)]"


def test_a_study_in_a_sqlite_file_resumed_from_another_folder_has_its_trials(tmp_path, monkeypatch) -> None:
    study = _file_study(tmp_path / "notebook", monkeypatch)
    twin = [len(study.trials), study.best_value]
    out = resume_elsewhere({"study": study}, NEXT, tmp_path)  # runs in tmp_path, where no study.db is
    assert out[:2] == twin and -1 <= out[2] <= 1
    assert not (tmp_path / "study.db").exists(), "the resume made an empty database instead of opening the file"


def test_a_study_whose_sqlite_file_is_gone_is_named_with_where_it_was(tmp_path, monkeypatch) -> None:
    study = _file_study(tmp_path / "notebook", monkeypatch)
    values = {"study": study}
    (tmp_path / "notebook" / "study.db").rename(tmp_path / "moved.db")
    report = restore_elsewhere(values, "out = None", tmp_path)
    assert "is not on this node" in report["failed"]["study"]
    assert str(tmp_path / "notebook" / "study.db") in report["failed"]["study"]


def test_a_study_in_a_sqlite_file_digests_the_same_after_a_round_trip(tmp_path, monkeypatch) -> None:
    study = _file_study(tmp_path / "notebook", monkeypatch)
    monkeypatch.chdir(tmp_path)  # the digest does not depend on the folder it is taken from
    _, loaded, failed = roundtrip({"study": study})
    assert failed == {} and value_digest(loaded["study"]) == value_digest(study)
    assert len(loaded["study"].trials) == 3
    assert storage_file(loaded["study"]) == storage_file(study) == str(tmp_path / "notebook" / "study.db")
    assert storage_file(object()) is None


def test_an_indexed_table_of_an_older_checkpoint_gets_its_indices_built_again() -> None:
    """Checkpoints written before ``astronomy`` saved tables by their attributes name ``make_indexed_table``."""
    table_module = pytest.importorskip("astropy.table")
    from astropy.table.sorted_array import SortedArray

    from jupyter_pause.serialize.thirdparty import make_indexed_table

    plain = table_module.Table({"id": [3, 1, 2], "band": ["g", "r", "i"]})
    table = make_indexed_table(plain, [(["id"], SortedArray, False), (["band"], SortedArray, True)])
    assert table.loc[2]["band"] == "i" and table.loc.with_index("band")["r"]["id"] == 1
    assert table.primary_key == ("id",) and [i.index.data.unique for i in table.indices] == [False, True]
