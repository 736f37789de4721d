"""Sizes and durations as a person reads them, in one convention everywhere (decimal units),
and durations as a person writes them (``seconds``).

Short figures, never a long tail: ``999 B``, ``150 kB``, ``1.5 MB``,
``12 GB``; ``250 ms``, ``4.50 s``, ``2.4 min``, ``1.5 h``. A value that would round up to the
next unit's threshold is shown in that unit (``1.0 MB``, never ``1000 kB``).
"""

from __future__ import annotations

import re

#: Decimal multiples of a byte, as the SI writes them.
BYTE_UNITS = ("kB", "MB", "GB", "TB", "PB")


def size(n: float) -> str:
    """``n`` bytes in decimal units: ``0 B``, ``999 B``, ``150 kB``, ``1.5 MB``, ``12 GB``."""
    if n < 0:
        return "-" + size(-n)
    value, unit = float(n), "B"
    for bigger in BYTE_UNITS:
        if round(value) < 1000:
            break
        value, unit = value / 1000, bigger
    if unit == "B" or round(value, 1) >= 10:
        return f"{value:.0f} {unit}"
    return f"{value:.1f} {unit}"


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ``250 ms``, ``4.50 s``, ``2.4 min``, ``1.5 h``."""
    if seconds < 0:
        return "-" + duration(-seconds)
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 2) < 60:
        return f"{seconds:.2f} s"
    if round(seconds / 60, 1) < 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


_WRITTEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
_SECONDS_IN = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(text: str, *, bare: str | None = "s") -> float:
    """Seconds in a written duration: ``90s``, ``10m``, ``10min``, ``1.5h``, ``7d``, ``2w``; a bare
    number is in ``bare`` units (``None``: a unit is required). ``ValueError`` for anything else."""
    match = _WRITTEN.fullmatch(text)
    unit = (match.group(2).lower() or bare) if match else None
    if match is None or unit not in _SECONDS_IN:
        raise ValueError(f"{text!r} is not a duration; write it with its unit, e.g. 90s, 10m, 1.5h, 7d")
    return float(match.group(1)) * _SECONDS_IN[unit]
