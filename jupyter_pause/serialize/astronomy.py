"""astropy objects whose own pickling does not bring them back as they were, saved astropy's way
plus what that way leaves out.

- A ``WCS``: astropy pickles it as the FITS header ``to_header`` writes, which always spells the
  linear transform as ``PC`` and ``CDELT`` and fills in ``DATEREF``. A WCS read from a header
  with a ``CD`` matrix (most images) or ``CROTA`` came back with ``wcs.wcs.cd`` raising, another
  ``print(wcs)`` and, for ``CROTA``, matrices a last bit off. It is saved by astropy's own
  reduction, with the ``CD``/``CROTA``/``PC`` it had and its ``DATEREF``, set again on load.
- A ``Table``: astropy pickles its columns and meta and calls ``__init__`` on load, which copies
  them. A column or mixin held by a variable (``mag = table["mag"]``) came back detached from
  its table, a ``group_by`` table without its groups, a ``Table(masked=True)`` unmasked, and
  indices pointing at columns the table no longer held. It is saved by its attributes (columns
  as they are, groups, flags, indices), and each column is attached to it again on load.
- A named unit (``u.deg``, ``u.Jy``): astropy pickles it by value, so it came back equal but
  not the registry's own object; a table written to ECSV then spelled its units otherwise. It is
  saved by name when the unit registry holds it, and by value when that registry lacks it then.
- A FITS file opened by ``fits.open``: once data is read, its ``_File`` holds the file's memory
  map, which pickle refuses, so the whole ``HDUList`` was not saved. It is saved without the map
  (astropy maps the file again at its next read); the open file itself goes as every open file
  does (``openfiles``), and data already read is saved with the HDU.

Reducers are named by class (astropy is imported only where a notebook uses it).
"""

from __future__ import annotations

import copyreg
from typing import Any, Callable

#: The linear-transform spellings of a WCS, each with the test that says it has one.
_LINEAR = (("cd", "has_cd"), ("crota", "has_crota"), ("pc", "has_pc"))


def make_wcs(unpickle: Callable[..., Any], args: tuple[Any, ...], linear: dict[str, Any], dateref: str) -> Any:
    """A WCS made by astropy's unpickling, then given the linear transform and DATEREF it had."""
    wcs = unpickle(*args)
    prm = wcs.wcs
    for name, value in linear.items():
        setattr(prm, name, value)
    if "pc" not in linear and prm.has_pc():
        del prm.pc  # the header astropy wrote had PC; the WCS it came from had CD or CROTA only
    prm.dateref = dateref
    return wcs


def reduce_wcs(wcs: Any) -> Any:
    """A WCS: astropy's reduction (its FITS header and attributes), its linear form and DATEREF."""
    reduced = wcs.__reduce__()
    if not (isinstance(reduced, tuple) and len(reduced) == 2):
        return NotImplemented  # a subclass pickling its own way
    prm = wcs.wcs
    linear = {name: getattr(prm, name).copy() for name, has in _LINEAR if getattr(prm, has)()}
    return (make_wcs, (*reduced, linear, prm.dateref))


def set_table_state(table: Any, state: dict[str, Any]) -> Any:
    """A table's attributes as saved, each column attached to it again (astropy keeps that link
    as a weak reference, which its columns do not pickle), and each mixin column's ``info`` given
    the empty cache of print formats that astropy makes with it and does not pickle."""
    from astropy.utils.data_info import BaseColumnInfo

    table.__dict__.update(state)
    for column in table.columns.values():
        info = column.info
        info.parent_table = table
        if isinstance(info, BaseColumnInfo) and not hasattr(info, "_format_funcs"):
            info._format_funcs = {}
    return table


def reduce_table(table: Any) -> Any:
    """An astropy table by its attributes: its columns, groups, flags and indices as they are."""
    from astropy.table import Table

    kind = type(table)
    own = all(getattr(kind, m) is getattr(Table, m) for m in ("__getstate__", "__setstate__", "__reduce_ex__"))
    if not own:
        return NotImplemented  # a subclass with a pickling of its own
    return (copyreg.__newobj__, (kind,), dict(vars(table)), None, None, set_table_state)


def registered_unit(name: str, kind: type, state: dict[str, Any]) -> Any:
    """The unit registry's unit ``name`` when it is the one saved, else the unit made from ``state``."""
    from astropy.units import get_current_unit_registry

    found = get_current_unit_registry().registry.get(name)
    if found is not None and type(found) is kind and list(found.names) == list(state.get("_names", ())):
        return found
    unit = kind.__new__(kind)
    unit.__dict__.update(state)
    return unit


def reduce_unit(unit: Any) -> Any:
    """A named unit the registry holds: by its name (and its state, for a registry without it)."""
    from astropy.units import get_current_unit_registry

    name = getattr(unit, "name", None)
    if not isinstance(name, str) or get_current_unit_registry().registry.get(name) is not unit:
        return NotImplemented
    return (registered_unit, (name, type(unit), unit.__getstate__()))


def reduce_fits_file(file: Any) -> Any:
    """A FITS ``_File`` without its memory map, which astropy makes again when it next reads."""
    state = dict(vars(file))
    if state.get("_mmap") is None:
        return NotImplemented
    state["_mmap"] = None
    return (copyreg.__newobj__, (type(file),), state)


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "astropy.wcs.wcs.WCS": reduce_wcs,
    "astropy.table.table.Table": reduce_table,
    "astropy.units.core.NamedUnit": reduce_unit,
    "astropy.io.fits.file._File": reduce_fits_file,
}
