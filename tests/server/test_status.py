"""jupyter_pause.server.status: a session's status in the store, sealed by the user's servers; one
another user wrote is ignored (named in the status) and blocks, redirects or relabels nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_pause.server.status import StatusBoard
from jupyter_pause.store.catalog import GONE, Decision, Listing, passed_over_note
from jupyter_pause.store.layout import status_key
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store

ALICE_KEY = "alice's signing key, as the Hub derives it 51c0"
MALLORY_KEY = "mallory's signing key, as the Hub derives it 9e2a"


@pytest.fixture(autouse=True)
def on_a_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")


def test_alices_own_status_reads_back(tmp_path: Path) -> None:
    StatusBoard(Store(str(tmp_path)), "node-a", ALICE_KEY).set("train", "paused", "kernel shut down", checkpoint="c2")
    status = StatusBoard(Store(str(tmp_path)), "node-b", ALICE_KEY).get("train")
    assert status.state == "paused" and status.checkpoint == "c2" and status.ignored == ""


def test_a_state_written_late_never_replaces_a_newer_one_in_the_store(tmp_path: Path) -> None:
    board = StatusBoard(Store(str(tmp_path)), "node-a")
    board.record("s", "restoring", "starting a python3 kernel")  # its write is left to run beside the resume
    board.record("s", "ready", "restored")
    board.persist("s")  # the final state's write
    board.persist("s")  # the progress's write, ending last
    assert (board.read("s", fresh=True).state, board.read("s", fresh=True).detail) == ("ready", "restored")
    board.record("s", "checkpointing", "pausing")
    board.persist("s")  # a later state is written as ever
    assert board.read("s", fresh=True).state == "checkpointing"


@pytest.mark.parametrize("forged_with", [None, MALLORY_KEY], ids=["unsigned", "mallory's key"])
def test_a_status_another_user_wrote_is_ignored_and_named(tmp_path: Path, forged_with: str | None) -> None:
    """Attack 3: mallory's status.json ("restoring on another node", alice's newest checkpoint
    called damaged) steers nothing: alice's server reads no status from it, and says it ignored it."""
    StatusBoard(Store(str(tmp_path)), "node-a", ALICE_KEY).set("train", "paused", "kernel shut down", checkpoint="c2")
    StatusBoard(Store(str(tmp_path)), "elsewhere", forged_with).set(
        "train", "restoring", "restoring on another node", damaged={"c2": "mallory's invented reason"}
    )
    board = StatusBoard(Store(str(tmp_path)), "node-a", ALICE_KEY)
    assert board.read("train", fresh=True) is None
    status = board.get("train")
    assert status.state == "ready" and status.damaged == {}
    assert status.ignored.startswith("status.json of this session in the store ignored: ")
    assert ("another key" if forged_with else "not signed") in status.ignored
    assert "which checkpoint this session was paused from is not known here" in status.ignored
    assert StatusBoard(Store(str(tmp_path)), "node-a").read("train").state == "restoring"  # no key: as before


def test_a_status_copied_from_another_session_is_ignored(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    StatusBoard(store, "node-a", ALICE_KEY).set("other", "restoring", "busy")
    store.write(status_key("train"), bytes(store.read(status_key("other"))))
    board = StatusBoard(store, "node-a", ALICE_KEY)
    assert board.read("train") is None and "a copy from elsewhere" in board.get("train").ignored


def test_the_key_is_not_in_the_status(tmp_path: Path) -> None:
    StatusBoard(Store(str(tmp_path)), "node-a", ALICE_KEY).set("train", "paused")
    written = json.loads((tmp_path / status_key("train")).read_text())
    assert ALICE_KEY not in json.dumps(written) and written["seal"]["kind"] == "status"


def _manifest(checkpoint_id: str, created: float) -> Manifest:
    return Manifest(checkpoint_id, "train", "lin", None, created, "manual", "node")


def test_a_resume_whose_paused_from_checkpoint_is_gone_says_so_loudly() -> None:
    """Attack 3 (rollback): the checkpoint the signed status names is deleted; "latest" is the
    older one, and the note says which was gone and which was resumed instead."""
    older = _manifest("20270101-000000-aaaaaa", 1.0)
    listing = Listing(checkpoints=[older], session="train")
    choice = listing.resolve("latest")
    decision = Decision.of(listing, choice, by_id=False).missing(listing, "20270102-000000-bbbbbb")
    assert decision.newer(older) == {"20270102-000000-bbbbbb": GONE}
    note = passed_over_note(decision.newer(older), older.id)
    assert note == (
        "the checkpoint this session was paused from, 20270102-000000-bbbbbb, is gone; "
        "resumed 20270101-000000-aaaaaa, older"
    )
    assert Decision.of(listing, choice, by_id=False).missing(listing, older.id).passed_over == {}
