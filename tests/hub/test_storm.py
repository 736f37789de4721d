"""The 9:00 storm on a real JupyterHub and a real S3 store (benchmarks/hub_storm.py, at 3 users):
every server released at once, then every one started and resumed at once; each comes back with
its values and a restored verdict, and the ledger counts each pause and resume once, signed."""

from __future__ import annotations

import math

import pytest

from benchmarks import hub_storm as bench

pytestmark = pytest.mark.integration


def test_three_users_release_and_resume_at_once_and_every_one_comes_back(tmp_path):
    storm = bench.run_storm(users=3, sequential=False, root=tmp_path)
    assert storm.problems == []
    (round_,) = storm.rounds.values()
    assert [(r.user, r.verdict, r.values_back) for r in round_.runs] == [
        (f"user{i:02d}", "restored", True) for i in range(3)
    ]
    assert all(r.release_state in ("stopping", "stopped") for r in round_.runs)
    assert all(0 < r.server_s < r.ready_s <= round_.all_ready_s for r in round_.runs)
    assert math.isclose(round_.all_ready_s, max(r.ready_s for r in round_.runs), rel_tol=0.2)
    for user, counted in storm.ledger.items():
        assert (counted["pauses"], counted["resumes"]) == (1, 1), (user, counted)
        assert set(counted["raw"].values()) == {1} and counted["unsigned"] == {}, (user, counted)
    assert "storm: all stopped" in bench.table(storm)
