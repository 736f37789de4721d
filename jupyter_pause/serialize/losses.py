"""What stands in for the objects of a variable that failed to load, and how a loss is worded.

Variables are loaded with one shared memo (``pickler``): when one fails, the objects its segment
memoised are replaced by a ``Lost`` naming it, and a later variable that reaches one of them is
not restored either. It is reported with the variable it was lost with, and why that one was
("lost with `raw`: FileNotFoundError: ... json-train.arrow"), so the one cause to fix is named
once, not hidden behind every variable that shared an object with it.
"""

from __future__ import annotations

import pickletools
import struct
from typing import Any

#: Why a variable that reaches an array whose bytes are missing is not restored.
MISSING_DATA = "it holds data that is missing or damaged in the store"


class Lost:
    """Stands in for objects of a segment that failed to load; whatever reaches it is not restored.

    ``variable`` is the variable whose segment failed."""

    def __init__(self, variable: str = "") -> None:
        self.variable = variable

    def __repr__(self) -> str:
        return f"<lost with {self.variable}: part of a variable that could not be restored>"


def lost_ops(variable: str) -> bytes:
    """Pickle opcodes that push a new ``Lost(variable)``."""
    name = variable.encode("utf-8")
    return b"c" + f"{__name__}\nLost\n".encode() + b"X" + struct.pack("<I", len(name)) + name + b"\x85R"


def lost_with(lost: Lost, failed: dict[str, str]) -> str:
    """Why a variable that reaches ``lost`` is not restored: the variable lost, and why it was."""
    return f"lost with `{lost.variable}`: {failed.get(lost.variable, 'it could not be restored')}"


def cause(data: bytes | bytearray, failed_at: int, memo: dict[int, Any]) -> Lost | None:
    """The first lost object a failed segment's stream took from ``memo`` before ``failed_at``
    (where reading stopped): the segment failed with that object's variable (it called it, or
    gave it to an object as its state...)."""
    try:
        for op, arg, position in pickletools.genops(bytes(data)):
            if position >= failed_at:
                return None
            if "GET" in op.name and isinstance(memo.get(arg), Lost):
                return memo[arg]  # type: ignore[no-any-return]
    except Exception:  # the stream ends where it was cut: what it referred to before counts
        return None
    return None
