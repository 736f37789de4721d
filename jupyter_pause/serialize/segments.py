"""Byte streams for the pickler: one written and read a segment (one variable) at a time."""

from __future__ import annotations

import io
from typing import Any


class SegmentWriter(io.RawIOBase):
    """A write target whose bytes are taken out one segment at a time."""

    def __init__(self) -> None:
        super().__init__()
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._chunks.append(chunk)
        return len(chunk)

    def take(self) -> bytes:
        """The bytes written since the last call."""
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


class SegmentReader:
    """A read source that is fed one segment at a time (no read-ahead past a segment)."""

    def __init__(self) -> None:
        self._view = memoryview(b"")
        self._pos = 0

    def feed(self, data: bytes | bytearray) -> None:
        self._view, self._pos = memoryview(data), 0

    def tell(self) -> int:
        """How far into the current segment reading has come."""
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n < 0 else self._pos + n
        chunk = self._view[self._pos : end]
        self._pos += len(chunk)
        return chunk.tobytes()

    def readinto(self, buf: Any) -> int:
        chunk = self._view[self._pos : self._pos + len(buf)]
        buf[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)

    def readline(self) -> bytes:
        rest = self._view[self._pos :].tobytes()
        cut = rest.find(b"\n")
        line = rest if cut < 0 else rest[: cut + 1]
        self._pos += len(line)
        return line


class NullSink(io.RawIOBase):
    """A write target that keeps nothing."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)
