"""Damaging a checkpoint's manifest in each way a store can: what the damage tests share.

Each kind, and the words every place (catalog, ``%resume``, ``jupyter pause list``/``verify``,
the server's sessions) must use for it after "damaged: ".
"""

from __future__ import annotations

import json
from pathlib import Path

import xxhash

from jupyter_pause.store.layout import manifest_key

#: The signing key of the "signature" and "sealed" kinds: their checkpoints are signed (and, for
#: "sealed", encrypted) with it, and read with it.
KEY = "damage tests signing key 3c9a"

#: Each kind of damage and what its "why" starts with.
WHY = {
    "checksum": "checksum mismatch",
    "signature": "signature: does not match",
    "sealed": "encryption: does not open here",
    "torn": "torn write (truncated JSON",
    "garbage": "unreadable JSON",
}
KINDS = tuple(WHY)


def key_for(kind: str) -> str | None:
    """The signing key a test of ``kind`` writes and reads with (the signature and sealed kinds have one)."""
    return KEY if kind in ("signature", "sealed") else None


def manifest_path(store: Path, session: str, checkpoint_id: str) -> Path:
    return Path(store) / manifest_key(session, checkpoint_id)


def damage(store: Path, session: str, checkpoint_id: str, kind: str) -> None:
    """Damage the manifest of ``checkpoint_id`` in the local ``store`` in the way ``kind`` names."""
    path = manifest_path(store, session, checkpoint_id)
    data = path.read_bytes()
    if kind == "checksum":  # valid JSON, edited after it was written
        outer = json.loads(data)
        outer["manifest"]["tag"] = "edited"
        path.write_text(json.dumps(outer))
    elif kind == "signature":  # edited with the checksum made to match: only the signature tells
        outer = json.loads(data)
        outer["manifest"]["tag"] = "edited by someone"
        canonical = json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":")).encode()
        outer["checksum"] = xxhash.xxh3_128_hexdigest(canonical)
        path.write_text(json.dumps(outer))
    elif kind == "sealed":  # one byte of an encrypted manifest changed: it no longer opens
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])
    elif kind == "torn":  # a write cut short on a local disk
        path.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        raise ValueError(f"no damage kind {kind!r}")
