"""SIGKILL of a real kernel at 20 seeded random moments inside ``%checkpoint`` (sync and --async).

After each kill, ``jupyter pause verify --json`` (a separate process) must list no half-written
checkpoint as a checkpoint (only as "incomplete", or as a manifest torn while it was committed) and
no damaged committed one; every 5th kill a new kernel
resumes and must get exactly the newest committed checkpoint, never a mix of two.

(Two resumes at once from two servers is covered in tests/server/test_nodes.py.)
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time

import pytest

from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.verifying import check_verify_rows, cli_verify

pytestmark = pytest.mark.integration

KILLS = 20
SEED = 20261129
SESSION = "killed"
#: The kernel is numpy only (no torch import): it starts fast. ~160 MB of fresh data per kill.
SETUP = "%load_ext jupyter_pause\nimport numpy as np\nmarker = 'first'\n%checkpoint marker --tag first\n"
# Made in the killed cell itself, so the kill also lands while the data is being made.
BIG = (
    "g = np.random.default_rng({seed}); big = [g.random(1_000_000) for _ in range(20)]\n"
    "big_sum = float(sum(float(a.sum()) for a in big)); marker = 'second'\n"
    "%checkpoint --tag second{flags}\n"
)


def _calibrate(start_kernel, tmp_path) -> float:
    """Seconds from sending the cell to its end (data made + checkpoint committed), here."""
    store = tmp_path / "calibrate"
    k = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION=SESSION)
    k.run(SETUP).ok()
    began = time.perf_counter()
    k.run(BIG.format(seed=0, flags="")).ok()
    took = time.perf_counter() - began
    k.close()
    shutil.rmtree(store)
    return took


def test_sigkill_at_random_moments_during_checkpoint(start_kernel, tmp_path, tally):
    # Kills spread from 0 to ~1.5 s, scaled down where a checkpoint is much faster than that, so
    # they fall before, during and after the write rather than all after the commit.
    span = min(1.5, max(0.3, 1.3 * _calibrate(start_kernel, tmp_path)))
    rng = random.Random(SEED)
    plan = [(rng.uniform(0, span), i % 2 == 1) for i in range(KILLS)]
    seen = {"killed before commit": 0, "killed after commit": 0}
    for i, (delay, background) in enumerate(plan):
        store = tmp_path / f"store{i}"
        work = tmp_path / f"a{i}"
        work.mkdir()
        a = start_kernel(work, JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION=SESSION)
        a.run(SETUP).ok()
        a.send(BIG.format(seed=i + 1, flags=" --async" if background else ""))
        time.sleep(delay)
        a.kill()
        tally.fault("SIGKILL during %checkpoint --async" if background else "SIGKILL during %checkpoint")

        listing = Catalog(Store(str(store))).listing(SESSION)
        sizes = {m.id: m.stats.get("bytes_total", 0) for m in listing.checkpoints}
        code, rows = cli_verify(store, SESSION)
        committed, incomplete = check_verify_rows(rows, sizes)
        where = f"kill {i} at {delay:.3f} s ({'async' if background else 'sync'})"
        torn = [r for r in incomplete if r.get("damaged", "").startswith("torn write")]
        assert code == (1 if torn else 0), f"{where}: verify found damage: {rows}"
        assert all(r["ok"] for r in committed), f"{where}: a committed checkpoint does not verify: {rows}"
        assert {r["id"] for r in committed} == set(sizes), f"{where}: verify and list disagree: {rows}"
        assert all(not r["ok"] for r in incomplete), rows
        tags = [m.tag for m in listing.checkpoints]
        assert tags in (["first"], ["second", "first"]), f"{where}: unexpected checkpoints {tags}"
        seen["killed after commit" if tags[0] == "second" else "killed before commit"] += 1
        if incomplete:
            tally.outcome("incomplete writes flagged (not listed)", len(incomplete))

        if i % 5 == 4:
            work_b = tmp_path / f"b{i}"
            work_b.mkdir()
            b = start_kernel(work_b, JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION=SESSION)
            out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
            marker = b.value("marker")
            # Exactly the newest committed checkpoint: its marker, and its data or none.
            assert marker == tags[0], f"{where}: resumed {marker!r}, newest committed is {tags[0]!r}\n{out}"
            if marker == "second":
                assert b.value("float(sum(float(a.sum()) for a in big)) == big_sum") is True
            else:
                assert b.value("'big' in dir() or 'big_sum' in dir()") is False
            tally.resumed("verdict: restored" in out)
            assert "verdict: restored" in out, out
            b.close()
        shutil.rmtree(store)
    for name, n in seen.items():
        tally.outcome(name, n)


SHARED = (
    "g = np.random.default_rng(0); big = [g.random(1_000_000) for _ in range(20)]\n"
    "big_sum = float(sum(float(a.sum()) for a in big)); marker = '{marker}'\n"
    "fresh = np.random.default_rng({seed}).random(1_000_000)\n"
    "%checkpoint --tag {marker}{flags}\n"
)
POOL_KILLS = 6


def test_sigkill_in_a_notebook_sharing_the_pool_loses_nothing_of_the_other(start_kernel, tmp_path, tally):
    """Two notebooks hold the same 160 MB; the store's pool keeps one copy. The second is killed
    at random moments of its checkpoints, and gc (grace 0) runs after each kill: every committed
    checkpoint of either notebook still verifies, and the first one's resumes whole."""
    span = min(1.5, max(0.3, 1.3 * _calibrate(start_kernel, tmp_path)))
    rng = random.Random(SEED + 1)
    store = tmp_path / "shared"
    env = {"JUPYTER_PAUSE_STORE": str(store)}
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_SESSION="first", **env)
    a.run("%load_ext jupyter_pause\nimport numpy as np\n" + SHARED.format(marker="a", seed=0, flags="")).ok()
    a.close()
    for i in range(POOL_KILLS):
        delay, background = rng.uniform(0, span), i % 2 == 1
        work = tmp_path / f"b{i}"
        work.mkdir()
        b = start_kernel(work, JUPYTER_PAUSE_SESSION="second", **env)
        b.run("%load_ext jupyter_pause\nimport numpy as np").ok()
        b.send(SHARED.format(marker=f"b{i}", seed=i + 1, flags=" --async" if background else ""))
        time.sleep(delay)
        b.kill()
        tally.fault("SIGKILL during %checkpoint of a notebook sharing the pool")
        where = f"kill {i} at {delay:.3f} s ({'async' if background else 'sync'})"

        done = subprocess.run(
            [sys.executable, "-m", "jupyter_pause.cli", "gc", "--grace", "0", "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{where}: gc failed: {done.stderr}"
        sizes = {
            m.id: m.stats.get("bytes_total", 0)
            for session in ("first", "second")
            for m in Catalog(Store(str(store))).checkpoints(session)
        }
        code, rows = cli_verify(store)
        committed, incomplete = check_verify_rows(rows, sizes)
        torn = [r for r in incomplete if r.get("damaged", "").startswith("torn write")]
        assert code == (1 if torn else 0), f"{where}: verify found damage: {rows}"
        assert all(r["ok"] for r in committed), f"{where}: a committed checkpoint does not verify: {rows}"
        assert {r["id"] for r in committed} == set(sizes), f"{where}: verify and list disagree: {rows}"
    work = tmp_path / "again"
    work.mkdir()
    again = start_kernel(work, JUPYTER_PAUSE_SESSION="first", **env)
    out = again.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert again.value("marker") == "a" and again.value("float(sum(float(a.sum()) for a in big)) == big_sum") is True
    tally.resumed("verdict: restored" in out)
    assert "verdict: restored" in out, out
    again.close()
