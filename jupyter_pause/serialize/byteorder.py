"""NumPy arrays in the byte order they had: big-endian data (every FITS image and table column)
stays big-endian.

NumPy's unpickling of a stream below pickle protocol 5 (checkpoints write protocol 3) makes an
array of a non-native plain dtype native: the values survive, but ``data.dtype`` reads
``float32`` where the notebook had ``>f4``, and the restore test finds another value. Such an
array (or an array subclass: an astropy ``Column``, a masked array) is saved by its own
reduction and put back in its byte order after loading. Large plain arrays go out of band with
their dtype (``arrays``), and structured dtypes keep their fields' order; neither needs this.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def make_in_byte_order(reconstruct: Callable[..., Any], args: tuple[Any, ...], state: Any, dtype: np.dtype[Any]) -> Any:
    """An array made by its own reduction, then given back the byte order of ``dtype``."""
    array = reconstruct(*args)
    if state is not None:
        array.__setstate__(state)
    if array.dtype != dtype and array.dtype == dtype.newbyteorder("="):
        array.byteswap(inplace=True)
        array.dtype = dtype
    return array


def reduce_in_byte_order(array: Any) -> Any:
    """An array of a non-native plain dtype by its own reduction and that dtype; others as pickle does."""
    dtype = array.dtype
    if dtype.isnative or dtype.fields is not None or dtype.hasobject:
        return NotImplemented
    reduced = array.__reduce__()
    if not (isinstance(reduced, tuple) and len(reduced) == 3):
        return NotImplemented
    reconstruct, args, state = reduced
    return (make_in_byte_order, (reconstruct, args, state, dtype))
