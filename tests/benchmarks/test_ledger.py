"""benchmarks/ledger.py: the GPU-hours report benchmark runs end to end at a tiny size, on a real S3
server, so the script cannot rot (it checks that every way of building the report agrees)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_pause_env")]


@pytest.mark.parametrize(("direct", "signed"), [(False, True), (True, False)], ids=["raw and signed", "direct"])
def test_the_ledger_benchmark_builds_the_same_report_every_way(direct, signed):
    from benchmarks import ledger

    result = ledger.run(users=2, days=3, figures=[2, 4], direct=direct, signed=signed)
    assert [r["events_per_user_day"] for r in result["runs"]] == [2, 4]
    for row in result["runs"]:
        assert row["rollups"] >= 3 and row["held_gpu_hours"] > 0  # one roll-up per settled day, at least
        assert (row["raw_s"] is None) == direct
        if signed:
            assert row["signatures"]["verified"] == row["events"] and row["signatures"]["unsigned"] == 0
    assert result["warm_largest_over_smallest"] > 0
