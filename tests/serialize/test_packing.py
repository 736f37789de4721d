"""Giving arrays their blobs (``serialize.packing``): which arrays a checkpoint hashes at once and
which it leaves for the writer to hash as it writes them."""

from __future__ import annotations

import numpy as np
import pytest

from jupyter_pause.serialize import packing
from jupyter_pause.serialize.pickler import dump_variables
from jupyter_pause.store import signing


def _arrays(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"a{i}": rng.standard_normal(packing.OWN_BLOB_BYTES // 8 * 2) for i in range(n)}  # 2 MiB each


def test_a_few_megabytes_to_hash_are_hashed_at_once_even_where_the_writer_could_hash_them():
    values = _arrays(3)
    plan = packing.plan_arrays(dump_variables(values), "xxh3_128", defer=True)
    assert plan.unhashed == {}
    blobs = {r.blob for r in plan.arrays.values()}
    assert blobs == {signing.digest(v.tobytes(), "xxh3_128") for v in values.values()}
    assert len(plan.known) == 3  # the value digests reuse them


def test_more_than_the_limit_to_hash_is_left_for_the_writer(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(packing, "HASH_NOW_BYTES", 5 << 20)
    values = _arrays(3)  # 6 MiB
    plan = packing.plan_arrays(dump_variables(values), "xxh3_128", defer=True)
    assert len(plan.unhashed) == 3
    assert all(r.blob == "" for r in plan.arrays.values())
    without_defer = packing.plan_arrays(dump_variables(values), "xxh3_128", defer=False)
    assert without_defer.unhashed == {}
