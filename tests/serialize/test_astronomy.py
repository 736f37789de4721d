"""jupyter_pause.serialize.astronomy: astropy's WCS, tables, units and opened FITS files come back
as the notebook had them, where astropy's own pickling changes them."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from jupyter_pause.serialize.digests import value_digest
from tests.support.dumping import resume_elsewhere, roundtrip

pytest.importorskip("astropy")

from astropy import units as u  # noqa: E402
from astropy.coordinates import SkyCoord  # noqa: E402
from astropy.io import fits  # noqa: E402
from astropy.table import QTable, Table  # noqa: E402
from astropy.wcs import WCS  # noqa: E402

IMAGE = {
    "NAXIS": 2, "NAXIS1": 100, "NAXIS2": 50, "CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRPIX1": 50.0,
    "CRPIX2": 25.0, "CRVAL1": 150.0, "CRVAL2": 2.0, "RADESYS": "ICRS", "DATE-OBS": "2024-01-01T00:00:00",
}  # fmt: skip


def _wcs(**cards: float) -> WCS:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # astropy notes the DATE-OBS it turns into MJD-OBS
        return WCS(fits.Header({**IMAGE, **cards}))


def test_a_wcs_keeps_its_cd_matrix_or_crota_and_converts_to_the_last_bit() -> None:
    wcses = {
        "cd": _wcs(CD1_1=-0.0002, CD1_2=0.0, CD2_1=0.0, CD2_2=0.0002),
        "crota": _wcs(CDELT1=-0.0002, CDELT2=0.0002, CROTA2=30.0),
        "pc": _wcs(CDELT1=-0.0002, CDELT2=0.0002, PC1_1=0.9, PC1_2=0.1, PC2_1=-0.1, PC2_2=0.9),
    }
    _, loaded, failed = roundtrip(wcses)
    assert failed == {}
    for name, wcs in wcses.items():
        back = loaded[name].wcs
        forms = ("has_cd", "has_crota", "has_pc")
        assert [getattr(back, f)() for f in forms] == [getattr(wcs.wcs, f)() for f in forms], name
        assert str(loaded[name]) == str(wcs) and back.dateref == wcs.wcs.dateref
        assert back.piximg_matrix.tobytes() == wcs.wcs.piximg_matrix.tobytes(), name
        pixels = [[1.0, 2.0], [60.5, 30.25]]
        assert loaded[name].wcs_pix2world(pixels, 0).tobytes() == wcs.wcs_pix2world(pixels, 0).tobytes()
    np.testing.assert_array_equal(loaded["cd"].wcs.cd, wcses["cd"].wcs.cd)  # raised AttributeError: no CD
    np.testing.assert_array_equal(loaded["crota"].wcs.crota, wcses["crota"].wcs.crota)


def test_a_table_keeps_its_groups_its_mask_flag_and_the_columns_variables_hold() -> None:
    table = Table({"id": [1, 2, 3, 4], "band": ["g", "r", "g", "r"], "mag": [10.5, 11.0, 12.25, 9.0]})
    grouped = table.group_by("band")
    masked = Table({"x": [1, 2, 3]}, masked=True)
    mixins = QTable({"pos": SkyCoord([1, 2] * u.deg, [3, 4] * u.deg), "dist": [1.0, 2.0] * u.pc})
    values = {"table": table, "mag": table["mag"], "grouped": grouped, "masked": masked, "mixins": mixins}
    values["pos"] = mixins["pos"]
    _, loaded, failed = roundtrip(values)
    assert failed == {}
    assert loaded["grouped"].groups.indices.tolist() == [0, 2, 4]
    assert loaded["grouped"]["mag"].groups.indices.tolist() == [0, 2, 4]
    assert loaded["grouped"].groups.aggregate(np.mean).pformat() == grouped.groups.aggregate(np.mean).pformat()
    assert loaded["masked"].masked is True
    assert loaded["mag"] is loaded["table"]["mag"] and loaded["mag"].info.parent_table is loaded["table"]
    for name, value in values.items():
        assert value_digest(loaded[name]) == value_digest(value), name
    assert loaded["pos"] is loaded["mixins"]["pos"] and loaded["mixins"].pformat() == mixins.pformat()
    loaded["mag"][0] = 99.0  # a next cell changing the column changes the table, as it did before
    assert loaded["table"]["mag"][0] == 99.0


def test_an_indexed_table_is_looked_up_by_its_index_after_a_resume(tmp_path: Path) -> None:
    table = Table({"id": [3, 1, 2], "mag": [10.5, 11.0, 12.25], "band": ["g", "r", "i"]})
    table.add_index("id")
    table.add_index("band", unique=True)
    plain = QTable({"id": [1, 2]})
    cell = (
        "table.add_row([7, 1.5, 'z'])\n"
        "out = [float(table.loc[2]['mag']), table.loc.with_index('band')['r']['id'].item(), "
        "table.loc[1:2]['id'].tolist(), "
        "[(i.id, i.index.data.unique) for i in table.indices], table.primary_key, plain.indices == [], "
        "plain.pformat(), float(table.loc[7]['mag'])]"
    )
    got = resume_elsewhere({"table": table, "plain": plain}, cell, tmp_path)
    assert got == [12.25, 1, [1, 2], [[["id"], False], [["band"], True]], ["id"], True, plain.pformat(), 1.5]
    assert [i.id for i in table.indices] == [("id",), ("band",)]  # saving it left the live table's indices alone
    _, loaded, failed = roundtrip({"table": table})
    assert failed == {} and value_digest(loaded["table"]) == value_digest(table)


def test_a_named_unit_comes_back_as_the_registrys_own(tmp_path: Path) -> None:
    angle = [1.0, 2.0] * u.deg
    flux = u.def_unit("myflux", 2 * u.Jy)  # not in the registry: it comes back by value
    got = resume_elsewhere(
        {"angle": angle, "units": [u.deg, u.Jy, u.m], "mine": flux},
        "import astropy.units as u\n"
        "out = [angle.unit is u.deg, [a is b for a, b in zip(units, [u.deg, u.Jy, u.m])], "
        "mine.to_string(), (3 * mine).to(u.Jy).value]",
        tmp_path,
    )
    assert got == [True, [True, True, True], "myflux", 6.0]


def test_a_fits_file_opened_with_its_data_read_is_saved_and_reads_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    image = fits.ImageHDU(np.arange(12, dtype=np.float32).reshape(3, 4), name="SCI")
    table = fits.BinTableHDU.from_columns([fits.Column(name="id", format="J", array=np.arange(3))], name="CAT")
    fits.HDUList([fits.PrimaryHDU(), image, table]).writeto("multi.fits")
    hdul = fits.open("multi.fits")  # memory-mapped: reading data maps the file
    science = hdul["SCI"].data
    hdul["SCI"].header["EXPTIME"] = 30.0
    result, loaded, failed = roundtrip({"hdul": hdul, "science": science})
    assert result.failed == {} and failed == {}  # was: cannot pickle 'mmap.mmap' object
    back = loaded["hdul"]
    assert value_digest(back) == value_digest(hdul)
    assert back["SCI"].header["EXPTIME"] == 30.0 and back["SCI"].data.tolist() == science.tolist()
    assert back["CAT"].data["id"].tolist() == [0, 1, 2]  # read after the resume, through a new map
