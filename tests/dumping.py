"""Laying out a dump as a checkpoint would, for tests that go below the public API."""

from __future__ import annotations

from typing import Any

import xxhash

from jupyter_pause.serialize.pickler import DumpResult, dump_variables
from jupyter_pause.store.manifest import ArrayRecord


def dump(values: dict[str, Any]) -> tuple[DumpResult, list, dict[str, ArrayRecord], dict[str, bytearray]]:
    """Dump ``values`` and lay the result out as a checkpoint would: segments, records, blobs."""
    result = dump_variables(values)
    records: dict[str, ArrayRecord] = {}
    blobs: dict[str, bytearray] = {}
    for key, found in result.collector.found.items():
        data = bytes(found.data)
        digest = xxhash.xxh3_128_hexdigest(data)
        blobs[digest] = bytearray(data)
        records[key] = ArrayRecord(
            found.kind, found.dtype, found.shape, found.device, digest, 0, len(data), found.order
        )
    segments = [(name, seg.pickler, seg.data) for name, seg in result.segments.items()]
    return result, segments, records, blobs
