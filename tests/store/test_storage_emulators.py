"""GCS (gcsfs) and Azure Blob (adlfs) stores, against local emulators the tests start and stop.

Each store gets what the S3 store gets against SeaweedFS: a checkpoint and a resume, the lease's
conditional create, and a plain gc. Where an emulator lacks something the backend relies on, that
part alone is skipped, saying what is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.config import ENV_VARS, PauseConfig
from jupyter_pause.server import lease
from jupyter_pause.store.layout import blob_key
from jupyter_pause.store.storage import ALIGNMENT, REMOTE_BLOCK, Store
from tests.support.emulators import azure_env, azurite, gcs_emulator, gcs_env  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process", "no_pause_env_but_options")]

#: What each emulator does not do that the real store does.
MISSING = {
    "gcs": "gcp-storage-emulator ignores ifGenerationMatch=0 (a second create overwrites the first), so the "
    "lease's create-if-absent cannot be tested against it; against real GCS the probe finds it",
}
#: Elements in the test's tensor: 24 MB, more than one 16 MiB part.
LARGE = 6_000_000


@pytest.fixture
def no_pause_env_but_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """No developer's JUPYTER_PAUSE_STORE or signing key: only the storage options the fixture sets."""
    for name, var in ENV_VARS.items():
        if name != "storage_options":
            monkeypatch.delenv(var, raising=False)


def store_at(url: str) -> Store:
    """The store at ``url`` with the storage options the environment gives, as the CLI opens it."""
    return Store(url, dict(PauseConfig().storage_options))


@pytest.fixture(params=["gcs", "azure"])
def emulated(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(kind, url)``: a fresh store URL on each emulated object store."""
    return request.param, request.getfixturevalue(f"{request.param}_env")


def test_checkpoint_and_resume_round_trip(emulated: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, url = emulated
    ns = {"weights": torch.randn(LARGE), "step": 41, "note": "hello"}
    taken = jp.checkpoint(store=url, session="s", namespace=ns).manifest
    ns["step"] = 42
    second = jp.checkpoint(store=url, session="s", namespace=ns).manifest  # the large blob is reused
    target: dict = {}
    assert jp.resume(store=url, session="s", namespace=target).manifest.id == second.id
    assert torch.equal(target["weights"], ns["weights"]) and (target["step"], target["note"]) == (42, "hello")
    assert main(["verify", "--store", url]) == 0
    assert "2 verified, 0 damaged" in capsys.readouterr().out
    assert set(taken.blobs) & set(second.blobs)


@pytest.mark.parametrize(
    "size", [0, 1000, REMOTE_BLOCK, REMOTE_BLOCK + 17], ids=["empty", "small", "one-part", "more-parts"]
)
def test_bytes_come_back_aligned_and_writable_with_or_without_their_size(emulated: tuple[str, str], size: int) -> None:
    _, url = emulated
    store, data = store_at(url), os.urandom(size)
    store.write("blobs/x", memoryview(data))
    for back in (store.read("blobs/x"), store.read("blobs/x", size=size)):
        assert not back.readonly and back == data
        assert not data or np.frombuffer(back, np.uint8).__array_interface__["data"][0] % ALIGNMENT == 0


def test_the_lease_is_a_conditional_create(emulated: tuple[str, str]) -> None:
    kind, url = emulated
    store = store_at(url)
    if not store.atomic_create:
        assert lease.protocol(store) == lease.SETTLE  # still one holder at a time, by settling
        pytest.skip(MISSING.get(kind, f"the {kind} emulator does not refuse a second create"))
    assert kind not in MISSING, f"the {kind} emulator now refuses a second create: drop it from MISSING"
    assert store.create("sessions/s/x", b"first") and not store.create("sessions/s/x", b"second")
    assert bytes(store.read("sessions/s/x")) == b"first"
    held = asyncio.run(lease.acquire(store, "s", "server pid 7", "node-a", "resumed", 600, 0.2))
    with pytest.raises(lease.LeaseHeld, match="server pid 7 on node-a"):
        asyncio.run(lease.acquire(store_at(url), "s", "server pid 8", "node-b", "resumed", 600, 0.2))
    lease.release(store, "s", held)
    again = asyncio.run(lease.acquire(store_at(url), "s", "server pid 8", "node-b", "resumed", 600, 0.2))
    assert again.epoch == held.epoch + 1


def test_plain_gc_removes_an_orphan_and_keeps_the_checkpoint(
    emulated: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    kind, url = emulated
    kept = jp.checkpoint(store=url, session="s", namespace={"t": torch.ones(1000)}).manifest
    orphan = blob_key("s", "ab" * 16)
    store_at(url).write(orphan, b"x" * 1000)
    time.sleep(0.01)  # the orphan must be older than --grace 0 by the store's clock
    assert main(["gc", "--store", url, "--grace", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["blob"] == 1 and result["counts"]["checkpoint"] == 0
    assert not store_at(url).exists(orphan)
    # neither store lists unfinished uploads: gc says so, and what becomes of them
    assert "a week" in result["uploads_unlisted"]
    assert main(["gc", "--store", url, "--grace", "0"]) == 0
    assert "incomplete uploads not looked for" in capsys.readouterr().out
    target: dict = {}
    assert jp.resume(store=url, session="s", namespace=target).manifest.id == kept.id
