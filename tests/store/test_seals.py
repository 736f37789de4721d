"""Seals: a key per kind of record, a signature bound to where the record belongs; and checkpoints
bound to their session (a signed checkpoint of notebook B copied into notebook A's folder is
refused by name, A resumes its own)."""

from __future__ import annotations

import json
import shutil

import pytest

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import CheckpointDamaged
from jupyter_pause.hub.keys import user_key
from jupyter_pause.store import seals, signing
from jupyter_pause.store.layout import manifest_key
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

SECRET = "a hub secret of at least thirty-two characters 5e1d"
ALICE, MALLORY = user_key(SECRET, "alice"), user_key(SECRET, "mallory")
PLACE = {"user": "alice", "session": "train"}


def test_a_seal_verifies_only_for_its_kind_its_place_and_its_key():
    body = b'{"state": "paused"}'
    block = seals.seal(body, seals.STATUS, PLACE, ALICE)
    assert seals.problem(body, block, seals.STATUS, PLACE, ALICE) is None
    assert "not a lease record" in seals.problem(body, block, seals.LEASE, PLACE, ALICE)
    moved = {"user": "alice", "session": "other"}
    why = seals.problem(body, block, seals.STATUS, moved, ALICE)
    assert why == "signed for session train, user alice, found at session other, user alice (a copy from elsewhere)"
    assert "signed with another key" in seals.problem(body, block, seals.STATUS, PLACE, MALLORY)
    assert "changed after it was signed" in seals.problem(b'{"state": "ready"}', block, seals.STATUS, PLACE, ALICE)
    assert "not signed" in seals.problem(body, None, seals.STATUS, PLACE, ALICE)


def test_each_kind_has_its_own_key_and_none_is_the_users_key():
    keys = {kind: signing.derive(ALICE, kind) for kind in seals.KINDS}
    assert len(set(keys.values())) == len(seals.KINDS)
    assert ALICE.encode() not in keys.values() and bytes.fromhex(ALICE) not in keys.values()
    with pytest.raises(ValueError, match="unknown kind of record"):
        signing.derive(ALICE, "anything")


def test_without_a_key_every_record_is_accepted_and_nothing_is_sealed():
    assert seals.problem(b"x", None, seals.JOURNAL, PLACE, None) is None
    record = json.loads(seals.sealed_json({"a": 1}, seals.STATUS, PLACE, None))
    assert record == {"a": 1} and seals.opened_json(record, seals.STATUS, PLACE, None) is None


def test_a_json_record_round_trips_and_an_edit_is_named():
    record = json.loads(seals.sealed_json({"state": "paused", "checkpoint": "c1"}, seals.STATUS, PLACE, ALICE))
    assert seals.opened_json(record, seals.STATUS, PLACE, ALICE) is None
    record["checkpoint"] = "c0"
    assert "changed after it was signed" in seals.opened_json(record, seals.STATUS, PLACE, ALICE)


def _take(store, session, key, **ns):
    another_process()
    config = PauseConfig(signing_key=key or "", encrypt=False)
    return jp.checkpoint(store=str(store), session=session, namespace=ns, config=config).manifest


def _resume(store, session, key, ref="latest"):
    another_process()
    target: dict = {}
    config = PauseConfig(signing_key=key or "", encrypt=False)
    return jp.resume(ref, store=str(store), session=session, namespace=target, config=config), target


def _splice(store, manifest, into: str) -> None:
    """Copy checkpoint ``manifest`` (of another session) into session ``into``, blobs and all."""
    source = store / manifest_key(manifest.session, manifest.id)
    target = store / manifest_key(into, manifest.id)
    shutil.copyfile(source, target)
    own = store / f"sessions/{manifest.session}/blobs"  # its blobs are in the store's pool, shared already
    if own.exists():  # a checkpoint from before the pool keeps them in its session's folder
        shutil.copytree(own, store / f"sessions/{into}/blobs", dirs_exist_ok=True)


@pytest.mark.parametrize("key", [ALICE, None], ids=["signed", "unsigned"])
def test_a_checkpoint_of_another_session_copied_into_this_one_is_refused_by_name(tmp_path, key):
    """Attack 2 (splice): alice's signed checkpoint of notebook B, copied into notebook A's folder
    (blobs too), never restores in A: it is named, and A's own checkpoint comes back."""
    own = _take(tmp_path, "a", key, marker="A")
    spliced = _take(tmp_path, "b", key, marker="B")
    _splice(tmp_path, spliced, "a")

    result, target = _resume(tmp_path, "a", key)
    assert target["marker"] == "A" and result.manifest.id == own.id
    why = result.damaged[spliced.id]
    assert "checkpoint of session 'b', found under session 'a'" in why, why
    with pytest.raises(CheckpointDamaged, match=f"{spliced.id} of session 'a' is damaged: misplaced: .*session 'b'"):
        _resume(tmp_path, "a", key, spliced.id)


def test_a_checkpoint_copied_under_another_id_is_refused(tmp_path):
    own = _take(tmp_path, "a", ALICE, marker="A")
    copy_id = "29991231-235959-abcdef"
    shutil.copyfile(tmp_path / manifest_key("a", own.id), tmp_path / manifest_key("a", copy_id))
    with pytest.raises(CheckpointDamaged, match=f"it is checkpoint {own.id}, found as {copy_id}"):
        _resume(tmp_path, "a", ALICE, copy_id)


def test_a_manifest_names_its_user_and_another_users_is_refused_even_under_a_shared_key(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "mallory")
    theirs = _take(tmp_path, "a", "one key for everybody", marker="M")
    assert theirs.user == "mallory"
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    with pytest.raises(CheckpointDamaged, match="written by the server of user 'mallory', read by 'alice'"):
        _resume(tmp_path, "a", "one key for everybody", theirs.id)


def test_a_ledger_signature_never_passes_as_a_manifest():
    body = b'{"manifest": 1}'
    as_ledger = seals.seal(body, seals.LEDGER, {}, ALICE)
    why = seals.problem(body, as_ledger, seals.MANIFEST, {}, ALICE)
    assert why == "signed as a ledger-event, not a manifest record"


def test_every_test_the_threat_model_names_exists():
    """docs/security.md ties each row to a test: each one named there is a test of that file."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", (root / "docs" / "security.md").read_text())
    assert len(named) >= 20
    for path, name in named:
        tree = ast.parse((root / path).read_text())
        tests = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in tests, f"docs/security.md names {path}::{name}, which does not exist"
