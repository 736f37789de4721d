"""SIGKILL of a real kernel at seeded random moments inside ``%checkpoint`` (sync and --async), on the
SeaweedFS S3 server, with blobs large enough to go up as multipart uploads.

After each kill: no committed checkpoint is damaged or lost, a new kernel resumes exactly the
newest committed one (every 3rd kill), and a plain ``jupyter pause gc --grace 0`` leaves no
incomplete upload and no orphan blob behind, after which everything committed still verifies.

A kill at a random moment seldom lands while a part is in flight, so the last kills are aimed:
each waits until the store lists a multipart upload begun by the checkpoint, then kills, so that
gc is seen to find and abort uploads a kill really left.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from jupyter_pause.cli import main
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import any_blob_digest, blob_prefix, pool_prefix
from jupyter_pause.store.storage import REMOTE_BLOCK, Store
from jupyter_pause.store.uploads import incomplete
from tests.support.verifying import check_verify_rows, cli_verify

pytestmark = [pytest.mark.integration, pytest.mark.s3, pytest.mark.timeout(600)]

KILLS = 4
#: Kills aimed at an upload in flight (after the random ones), with more arrays so one is in flight long.
AIMED_KILLS = 2
AIMED_ARRAYS = 8
#: Seconds an aimed kill waits for a multipart upload to show in the store's listing.
AIMED_WAIT = 60.0
SEED = 20261202
SESSION = "killed"
#: Float64 elements per array: 24 MB, over one part (``REMOTE_BLOCK``), so each blob is a multipart upload.
ELEMENTS = 3_000_000
SETUP = "%load_ext jupyter_pause\nimport numpy as np\nmarker = 'first'\n%checkpoint marker --tag first\n"
BIG = (
    "g = np.random.default_rng({seed}); big = [g.random(" + str(ELEMENTS) + ") for _ in range({arrays})]\n"
    "big_sum = float(sum(float(a.sum()) for a in big)); marker = 'second'\n"
    "%checkpoint --tag second{flags}\n"
)


def test_sigkill_during_checkpoint_on_s3_leaves_nothing_gc_cannot_clean(
    start_kernel, tmp_path, tally, s3_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ELEMENTS * 8 > REMOTE_BLOCK
    calibrate = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=f"{s3_env}/calibrate", JUPYTER_PAUSE_SESSION=SESSION)
    calibrate.run(SETUP).ok()
    began = time.perf_counter()
    calibrate.run(BIG.format(seed=0, arrays=2, flags="")).ok()
    span = min(3.0, max(0.3, 1.3 * (time.perf_counter() - began)))
    calibrate.close()
    rng = random.Random(SEED)
    seen = {"killed before commit": 0, "killed after commit": 0}
    aimed_left = 0
    for i in range(KILLS + AIMED_KILLS):
        delay, background, aimed = rng.uniform(0, span), i % 2 == 1, i >= KILLS
        url = f"{s3_env}/kill{i}"
        work = tmp_path / f"a{i}"
        work.mkdir()
        a = start_kernel(work, JUPYTER_PAUSE_STORE=url, JUPYTER_PAUSE_SESSION=SESSION)
        a.run(SETUP).ok()
        flags = " --async" if background else ""
        a.send(BIG.format(seed=i + 1, arrays=AIMED_ARRAYS if aimed else 2, flags=flags))
        if aimed:
            delay = _wait_for_upload(Store(url), AIMED_WAIT)
        else:
            time.sleep(delay)
        a.kill()
        kind = "SIGKILL during %checkpoint on S3" + (" --async" if background else "")
        tally.fault(kind + (", aimed at an upload in flight" if aimed else ""))
        where = f"kill {i} at {delay:.3f} s ({'async' if background else 'sync'}{', aimed' if aimed else ''})"

        listing = Catalog(Store(url)).listing(SESSION)
        sizes = {m.id: m.stats.get("bytes_total", 0) for m in listing.checkpoints}
        tags = [m.tag for m in listing.checkpoints]
        assert tags in (["first"], ["second", "first"]), f"{where}: unexpected checkpoints {tags}"
        seen["killed after commit" if tags[0] == "second" else "killed before commit"] += 1
        left = incomplete(Store(url), "")
        if left:
            tally.outcome("incomplete multipart uploads left by a kill", len(left))
        aimed_left += len(left) if aimed else 0

        assert main(["gc", "--store", url, "--grace", "0", "--json"]) == 0
        counts = json.loads(capsys.readouterr().out)["counts"]
        assert counts["checkpoint"] == 0 and counts["upload"] == len(left), f"{where}: {counts}"
        assert incomplete(Store(url), "") == [], f"{where}: gc left an incomplete upload"
        kept = Catalog(Store(url)).checkpoints(SESSION)
        referenced = {key for m in kept for key in m.blobs}
        listed = {**Store(url).list(blob_prefix(SESSION)), **Store(url).list(pool_prefix())}
        orphans = [k for k in listed if k.rsplit("/", 1)[-1] not in referenced]
        assert orphans == [], f"{where}: gc left orphan blobs {orphans}"
        assert referenced <= {any_blob_digest(k) for k in listed}, f"{where}: gc removed a blob a checkpoint names"
        code, rows = cli_verify(url, SESSION)
        committed, _ = check_verify_rows(rows, sizes)
        assert code == 0 and {r["id"] for r in committed} == set(sizes), f"{where}: {rows}"
        assert all(r["ok"] for r in committed), f"{where}: a committed checkpoint does not verify: {rows}"

        if i % 3 == 2:
            work_b = tmp_path / f"b{i}"
            work_b.mkdir()
            b = start_kernel(work_b, JUPYTER_PAUSE_STORE=url, JUPYTER_PAUSE_SESSION=SESSION)
            out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
            assert b.value("marker") == tags[0], f"{where}: resumed another checkpoint than the newest\n{out}"
            if tags[0] == "second":
                assert b.value("float(sum(float(a.sum()) for a in big)) == big_sum") is True
            tally.resumed("verdict: restored" in out)
            assert "verdict: restored" in out, out
            b.close()
    for name, n in seen.items():
        tally.outcome(f"{name} (S3)", n)
    assert aimed_left > 0, "no aimed kill left an incomplete upload: gc's aborting was not exercised"


def _wait_for_upload(store: Store, timeout: float) -> float:
    """Seconds until ``store`` lists an incomplete multipart upload; fails after ``timeout``."""
    began = time.perf_counter()
    while time.perf_counter() - began < timeout:
        if incomplete(store, ""):
            return time.perf_counter() - began
    pytest.fail(f"no multipart upload showed in {store.display_url} within {timeout:.0f} s of the checkpoint")
