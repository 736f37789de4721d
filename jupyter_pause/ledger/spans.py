"""Packed activity spans: the busy ``[start, end]`` pairs of a roll-up's merged record, as one array
(and its ``parts``, the ``[time, spans]`` of each record it stands for, likewise).

A month of a busy Hub is hundreds of thousands of spans. As JSON lists of pairs each one is parsed,
checked and copied again on its way to the report, which then adds them up one by one. A roll-up
(format 3) holds a merged record's spans as one string instead: the base64 of their values as
little-endian float64 (start, end, start, end, ...), exact, decoded in one step and checked once
(finite, start <= end) when read; its ``parts`` too (``Parts``: finite times, whole counts). A
``Spans`` is immutable, so it is never checked again; it reads
as a sequence of ``[start, end]`` lists wherever one is expected, and the report's interval
arithmetic takes its ``array`` whole.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

#: How the values are laid out in a packed string.
DTYPE = np.dtype("<f8")


class Packed:
    """Validated pairs of numbers, an (n, 2) float64 array that cannot change (``Spans``, ``Parts``)."""

    __slots__ = ("_array", "_text")

    def __init__(self, array: np.ndarray, text: str | None = None) -> None:
        """Use ``of_pairs`` or ``decode``: ``array`` must already be checked."""
        array.flags.writeable = False
        self._array = array
        self._text = text

    @classmethod
    def of_pairs(cls, pairs: Iterable[Any]) -> Spans:
        """Spans from ``[start, end]`` pairs; ``ValueError`` when they are not finite times, start <= end."""
        try:
            array = np.array(list(pairs), dtype=np.float64).reshape(-1, 2)
        except (TypeError, ValueError) as e:
            raise ValueError(f"spans are not [start, end] pairs of times ({e})") from e
        return cls(cls._checked(array))

    @classmethod
    def decode(cls, text: str) -> Spans:
        """Spans from ``encode``'s string; ``ValueError`` when it is not one."""
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, AttributeError) as e:
            raise ValueError(f"packed spans are not base64 ({e})") from e
        if len(raw) % (2 * DTYPE.itemsize):
            raise ValueError("packed spans do not hold whole [start, end] pairs")
        array = np.frombuffer(raw, dtype=DTYPE).astype(np.float64).reshape(-1, 2)
        return cls(cls._checked(array), text)

    @staticmethod
    def _checked(array: np.ndarray) -> np.ndarray:
        """``array`` when every value in it is finite (each kind adds its own rule to this one)."""
        if not np.isfinite(array).all():
            raise ValueError("packed pairs hold a value that is not a finite number")
        return array

    def encode(self) -> str:
        """The packed string: base64 of the values as little-endian float64, in order."""
        if self._text is None:
            self._text = base64.b64encode(self._array.astype(DTYPE).tobytes()).decode("ascii")
        return self._text

    @property
    def array(self) -> np.ndarray:
        """The spans, (n, 2) float64, read-only."""
        return self._array

    def tolist(self) -> list[list[float]]:
        return self._array.tolist()

    def __len__(self) -> int:
        return len(self._array)

    def __iter__(self) -> Iterator[list[float]]:
        return iter(self._array.tolist())

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return type(self)(self._array[index])
        return self._array[index].tolist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Packed):
            return type(other) is type(self) and np.array_equal(self._array, other._array)
        if isinstance(other, (list, tuple)):
            return self.tolist() == [list(p) for p in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} pairs)"


class Spans(Packed):
    """Busy ``[start, end]`` spans: finite times, start <= end."""

    @staticmethod
    def _checked(array: np.ndarray) -> np.ndarray:
        if (Packed._checked(array)[:, 0] > array[:, 1]).any():
            raise ValueError("spans are not [start, end] times with start <= end")
        return array


class Parts(Packed):
    """A merged record's ``[time, spans]`` of each record it stands for: finite times, whole counts."""

    @staticmethod
    def _checked(array: np.ndarray) -> np.ndarray:
        counts = Packed._checked(array)[:, 1]
        if (counts < 0).any() or (counts != np.floor(counts)).any():
            raise ValueError("parts are not [time, number of spans] pairs")
        return array

    def counts(self) -> np.ndarray:
        """How many spans each record has, as integers."""
        return self._array[:, 1].astype(np.int64)


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default`` for records that may hold ``Spans`` or ``Parts``: their packed string."""
    if isinstance(value, Packed):
        return value.encode()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
