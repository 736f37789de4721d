"""jupyter_pause.serialize.byteorder: an array of a non-native byte order (FITS data is
big-endian) comes back in that byte order, with its values, whatever array class holds it."""

from __future__ import annotations

import numpy as np
import pytest

from jupyter_pause.serialize.arrays import NUMPY_OUT_OF_BAND_BYTES
from jupyter_pause.serialize.digests import value_digest
from tests.support.dumping import roundtrip


def test_big_endian_arrays_come_back_big_endian_with_their_values() -> None:
    values = {
        "small": np.arange(6, dtype=">f4").reshape(2, 3),
        "column_order": np.asfortranarray(np.arange(6, dtype=">i8").reshape(2, 3)),
        "large": np.arange(NUMPY_OUT_OF_BAND_BYTES // 4, dtype=">i4"),
        "masked": np.ma.masked_array(np.arange(4, dtype=">f8"), mask=[0, 1, 0, 0]),
        "record": np.zeros(2, dtype=[("a", ">i4"), ("b", "<f8")]),
        "native": np.arange(3, dtype="<i2"),
    }
    _, loaded, failed = roundtrip(values)
    assert failed == {}
    for name, value in values.items():
        back = loaded[name]
        assert (type(back), back.dtype.str, back.shape) == (type(value), value.dtype.str, value.shape), name
        assert back.tolist() == value.tolist() and value_digest(back) == value_digest(value), name
    assert loaded["masked"].mask.tolist() == [False, True, False, False]
    assert loaded["column_order"].flags.f_contiguous


def test_an_astropy_column_read_from_fits_keeps_its_byte_order() -> None:
    table_module = pytest.importorskip("astropy.table")
    column = table_module.Column(np.array([1.5, 2.5], dtype=">f8"), name="flux", unit="Jy")
    _, loaded, failed = roundtrip({"column": column})
    assert failed == {}
    back = loaded["column"]
    assert (back.dtype.str, back.name, str(back.unit), back.tolist()) == (">f8", "flux", "Jy", [1.5, 2.5])
