"""Local-store faults: a full disk, every kind of damaged byte, and SIGTERM to a busy kernel."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import jupyter_pause
from jupyter_pause.session import lineage
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import manifest_key
from jupyter_pause.store.storage import Store
from tests.support.verifying import check_verify_rows, cli_verify

pytestmark = pytest.mark.integration

SESSION = "faults"


# ---------------------------------------------------------------- 3. disk full (tmpfs of 20 MB)


@pytest.fixture
def small_disk(tmp_path, tally):
    """A 20 MB tmpfs folder; skipped, with the reason, where it cannot be mounted."""
    where = tmp_path / "full"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = f"disk-full test: cannot mount a 20 MB tmpfs ({done.stderr.strip() or done.returncode}); needs root"
        tally.skipped.append(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_disk_full_keeps_previous_checkpoint(small_disk, start_kernel, tmp_path, tally):
    store = small_disk / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION=SESSION)
    a.run(
        "%load_ext jupyter_pause\nimport numpy as np\nmarker = 'fits'\n"
        "data = np.random.default_rng(1).random(500_000)\n%checkpoint"
    ).ok()  # 4 MB
    a.run("marker = 'too-big'\ndata = np.random.default_rng(2).random(4_000_000)").ok()  # 32 MB
    failed = a.run("%checkpoint")
    tally.fault("disk full during %checkpoint")
    assert failed.ename == "UsageError", (failed.ename, failed.error, failed.stdout)
    assert str(store) in failed.error and "No space left" in failed.error, failed.error
    assert a.value("marker") == "too-big"  # the kernel goes on

    listing = Catalog(Store(str(store))).listing(SESSION)
    assert [m.tag for m in listing.checkpoints] == [None] and len(listing.checkpoints) == 1
    sizes = {m.id: m.stats.get("bytes_total", 0) for m in listing.checkpoints}
    code, rows = cli_verify(store, SESSION)
    committed, _ = check_verify_rows(rows, sizes)
    assert code == 0 and [r["ok"] for r in committed] == [True], rows
    lineage.forget()
    ns: dict = {}
    result = jupyter_pause.resume(store=str(store), session=SESSION, namespace=ns)
    tally.resumed(ns.get("marker") == "fits")
    assert ns["marker"] == "fits" and result.manifest.id == listing.checkpoints[0].id
    assert float(ns["data"].sum()) == float(np.random.default_rng(1).random(500_000).sum())


# ------------------------------------------------ 4. every byte-position class of damage, in turn


def _flip(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A local store with C1 and a newer C2 whose blobs share nothing with C1's that we damage."""
    store = tmp_path_factory.mktemp("damage") / "store"
    ids = []
    for n, seed in (("c1", 1), ("c2", 2)):
        lineage.forget()
        ns = {"marker": n, "small": {"step": seed}, "large": np.random.default_rng(seed).random(1_000_000)}
        ids.append(jupyter_pause.checkpoint(store=str(store), session=SESSION, namespace=ns).manifest)
        time.sleep(0.01)
    return store, ids[0], ids[1]


def _damage(kind: str, store: Path, c1, c2) -> None:
    def path_of(key: str) -> Path:
        assert key not in c1.blobs, "the damaged blob is shared with C1"
        return store / c2.blob_key(key)

    small = next(v for v in c2.variables if v.name == "small").blob.key
    large = max(c2.blobs, key=c2.blobs.get)
    if kind == "manifest":
        _flip(store / manifest_key(SESSION, c2.id))
    elif kind == "small blob flipped":
        _flip(path_of(small))
    elif kind == "large blob flipped":
        _flip(path_of(large))
    elif kind == "large blob truncated":
        p = path_of(large)
        os.truncate(p, p.stat().st_size // 3)
    elif kind == "small blob missing":
        path_of(small).unlink()
    elif kind == "large blob missing":
        path_of(large).unlink()


@pytest.mark.parametrize(
    "kind",
    [
        "manifest",
        "small blob flipped",
        "large blob flipped",
        "large blob truncated",
        "small blob missing",
        "large blob missing",
    ],
)
def test_damage_is_found_before_restore(kind, two_checkpoints, tmp_path, tally):
    base, c1, c2 = two_checkpoints
    store = tmp_path / "copy"
    shutil.copytree(base, store)
    _damage(kind, store, c1, c2)
    tally.fault(f"damaged: {kind}")

    listing = Catalog(Store(str(store))).listing(SESSION)
    listed = [m.id for m in listing.checkpoints]
    if kind == "manifest":
        assert listed == [c1.id], "a damaged manifest is listed as a checkpoint"
        assert c2.id in listing.damaged, "a damaged manifest is hidden instead of named"
    else:
        assert listed == [c2.id, c1.id]
    lineage.forget()
    ns: dict = {}
    result = jupyter_pause.resume(store=str(store), session=SESSION, namespace=ns)
    tally.resumed(result.manifest.id == c1.id and ns.get("marker") == "c1")
    assert result.manifest.id == c1.id and ns["marker"] == "c1" and ns["small"] == {"step": 1}
    assert float(ns["large"].sum()) == float(np.random.default_rng(1).random(1_000_000).sum())
    assert c2.id in result.damaged, result.damaged
    # C1, committed and untouched, still verifies; C2 is DAMAGED (its blobs or its manifest).
    code, rows = cli_verify(store, SESSION)
    committed, incomplete = check_verify_rows([r for r in rows if r["id"] == c1.id], {c1.id: 1})
    assert [r["ok"] for r in committed] == [True]
    (row_c2,) = [r for r in rows if r["id"] == c2.id]
    assert not row_c2["ok"] and code == 1 and not row_c2.get("incomplete")
    assert bool(row_c2.get("damaged")) == (kind == "manifest")


# --------------------------------------------------------------- 5. SIGTERM to a busy kernel


def test_sigterm_to_busy_kernel_commits_or_keeps_previous(start_kernel, tmp_path, tally):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION=SESSION)
    a.run(
        "%load_ext jupyter_pause\nimport numpy as np\nmarker = 'before'\nprogress = []\n"
        "data = np.random.default_rng(3).random(2_000_000)\n%checkpoint --tag before"
    ).ok()
    a.send("import time\nmarker = 'busy'\nfor i in range(600):\n    progress.append(i)\n    time.sleep(0.05)")
    time.sleep(1.0)
    process = a.manager.provisioner.process
    os.kill(a.pid, signal.SIGTERM)
    tally.fault("SIGTERM to a busy kernel")
    assert process.wait(timeout=60) == -signal.SIGTERM
    a.close()

    listing = Catalog(Store(str(store))).listing(SESSION)
    sizes = {m.id: m.stats.get("bytes_total", 0) for m in listing.checkpoints}
    code, rows = cli_verify(store, SESSION)
    committed, _ = check_verify_rows(rows, sizes)
    assert code == 0 and committed and all(r["ok"] for r in committed), rows
    newest = listing.checkpoints[0]
    lineage.forget()
    ns: dict = {}
    jupyter_pause.resume(store=str(store), session=SESSION, namespace=ns)
    if newest.trigger == "sigterm":  # committed on SIGTERM, and it verifies
        tally.outcome("SIGTERM: checkpoint committed")
        assert ns["marker"] == "busy" and len(ns["progress"]) >= 10
    else:  # could not be saved: the previous one stays the newest, and valid
        tally.outcome("SIGTERM: previous checkpoint kept")
        assert newest.tag == "before" and ns["marker"] == "before"
    tally.resumed(True)
