"""Small ``safetensors`` files written byte by byte, for tests of model files that need no torch."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path


def tiny_safetensors(path: Path, seed: int) -> Path:
    """A ``safetensors`` file at ``path`` of three byte tensors drawn from ``seed`` (the same
    layout for every seed, other bytes)."""
    tensors = {f"w{i}": hashlib.sha256(f"{seed}-{i}".encode()).digest() * (64 + 32 * i) for i in range(3)}
    header, at = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [at, at + len(data)]}
        at += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(tensors.values()))
    return path
