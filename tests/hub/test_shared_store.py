"""A shared store on a real JupyterHub: one writable store, a ``{user}`` prefix per user, and what
keeps one user from running code in another user's server through it.

The attack: mallory writes a checkpoint into alice's session (``%checkpoint --store <alice's
prefix> --session train``), holding an object whose unpickling runs a shell command. With per-user
signing keys (``jupyter_pause.hub.keys``) alice's server refuses it before a byte is unpickled and
resumes her own checkpoint. Without keys the server keeps to the lineage alice paused (mallory's
checkpoint starts another). With one key shared by everybody it is loaded: the README says so.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import pytest

from jupyter_pause.hub.keys import user_key
from jupyter_pause.store.layout import manifest_key, status_key
from jupyter_pause.store.signing import key_id
from tests.support.hub import run_hub, wait_for
from tests.support.sharedstore import (
    NOTEBOOK,
    SESSION,
    SHARED_KEY,
    checkpoint_ids,
    hub_config,
    marker_of,
    pause_and_stop,
    pause_one,
    planted,
    resume,
    run_report,
)

pytestmark = pytest.mark.integration


def alice_works_then_mallory_plants(hub, team: Path, alice: str, mallory: str, pose: bool = False) -> tuple[str, Path]:
    """alice pauses her notebook (marker 1); mallory writes her gift into alice's session. The id of
    mallory's checkpoint, and the file its unpickling would create."""
    canary = hub.root / f"PWNED-{alice}"
    hub.start_server(alice)
    kernel = hub.open_notebook(alice, NOTEBOOK)
    hub.execute(alice, kernel, "marker = 1")
    pause_and_stop(hub, alice)
    (alices,) = checkpoint_ids(team, alice)

    hub.start_server(mallory)
    kernel = hub.open_notebook(mallory, "mine.ipynb")
    said = hub.execute(mallory, kernel, planted(team / alice, canary, alice if pose else None))
    assert "Checkpoint" in said or "checkpoint" in said, said
    hub.stop_server(mallory)
    new = set(checkpoint_ids(team, alice)) - {alices}
    assert len(new) == 1, said
    (planted_id,) = new
    assert not canary.exists()
    return planted_id, canary


@pytest.fixture(scope="module")
def team_hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    team = root / "team-store"
    secret = secrets.token_hex(32)
    with run_hub(root, config=hub_config(team, secret)) as hub:
        hub.team = team
        hub.secret = secret
        yield hub


def test_a_checkpoint_planted_by_another_user_is_refused_unread_and_her_own_resumed(team_hub):
    hub, team = team_hub, team_hub.team
    hub.create_user("alice")
    hub.create_user("mallory")
    planted_id, canary = alice_works_then_mallory_plants(hub, team, "alice", "mallory")

    hub.start_server("alice")
    rows = hub.server_fetch("alice", "jupyter-pause/api/sessions").body["sessions"]
    (row,) = [r for r in rows if r["session"] == SESSION]
    assert planted_id in json.dumps(row) and "encrypted with another key" in json.dumps(row), row

    status = resume(hub, "alice")
    assert status["state"] == "ready" and status["verdict"] == "restored", status
    assert not canary.exists(), "mallory's checkpoint was unpickled in alice's server"
    assert marker_of(hub, "alice") == 1
    assert planted_id in status["detail"] and "encrypted with another key" in status["detail"], status
    assert status["checkpoint"] != planted_id

    report = run_report(team, "alice", status["checkpoint"], user_key(hub.secret, "alice"))
    assert planted_id in report["damaged"] and "encrypted with another key" in report["damaged"][planted_id], report
    assert report["signature"] == f"signature checked (key id {key_id(user_key(hub.secret, 'alice'))})"
    assert (team / "alice").is_dir() and not (team / "{user}").exists()
    hub.stop_server("alice")


def test_with_one_key_shared_by_every_user_the_planted_checkpoint_is_loaded(team_hub):
    """Why the README says a shared key is not safe on a shared store: mallory's checkpoint carries
    a valid signature; claiming to be alice's (the user its manifest names), it is loaded in
    alice's server (and runs its code)."""
    hub, team = team_hub, team_hub.team
    shared = {"JUPYTER_PAUSE_SIGNING_KEY": SHARED_KEY, "JUPYTER_PAUSE_VERIFY_KEYS": ""}
    hub.create_user("shared-alice", environment=shared)
    hub.create_user("shared-mallory", environment=shared)
    planted_id, canary = alice_works_then_mallory_plants(hub, team, "shared-alice", "shared-mallory", pose=True)

    hub.start_server("shared-alice")
    status = resume(hub, "shared-alice")
    assert status["checkpoint"] == planted_id, status
    wait_for(canary.exists, bool, 30, "the planted command's file")
    assert marker_of(hub, "shared-alice") == 666
    hub.stop_server("shared-alice")


def test_with_signing_off_the_resume_keeps_to_the_paused_lineage_and_names_the_planted_one(team_hub):
    """Without keys nothing proves who wrote a checkpoint; the server still resumes the lineage
    the session was paused from, and the planted checkpoint (a new lineage) is named, not loaded."""
    hub, team = team_hub, team_hub.team
    unsigned = {"JUPYTER_PAUSE_SIGNING_KEY": "", "JUPYTER_PAUSE_VERIFY_KEYS": ""}
    hub.create_user("open-alice", environment=unsigned)
    hub.create_user("open-mallory", environment=unsigned)
    planted_id, canary = alice_works_then_mallory_plants(hub, team, "open-alice", "open-mallory")

    hub.start_server("open-alice")
    status = resume(hub, "open-alice")
    assert status["verdict"] == "restored" and status["checkpoint"] != planted_id, status
    assert f"checkpoint {planted_id} was passed over: not resumed as latest" in status["detail"], status
    assert not canary.exists()
    assert marker_of(hub, "open-alice") == 1
    report = run_report(team, "open-alice", status["checkpoint"])
    assert report["signature"].startswith("UNSIGNED, on a JupyterHub: every user with the store's credentials")
    assert planted_id in report["damaged"], report
    assert "UNSIGNED, on a JupyterHub" in status["detail"]
    hub.stop_server("open-alice")


def test_an_unknown_placeholder_in_the_store_url_is_named_and_nothing_is_written(team_hub):
    hub = team_hub
    hub.create_user("typo", environment={"JUPYTER_PAUSE_STORE": str(hub.team / "{username}")})
    hub.start_server("typo")
    assert hub.server_fetch("typo", "jupyter-pause/api/status").code == 404  # the extension did not load
    log = hub.log_tail(60000)
    assert "{username}" in log and "does not know" in log and "{user}" in log, log[-3000:]
    assert not (hub.team / "{username}").exists()
    hub.stop_server("typo")


# -- the other records read from the store (issue 37): journal, splice, status, rollback ------------


def planted_journal_record(alice_store: Path, canary: Path) -> str:
    """The cell mallory runs: a done record for item doc-2 of alice's journal, signed with
    mallory's own key, whose result's unpickling touches ``canary``."""
    return (
        "import os\n"
        "from jupyter_pause.config import PauseConfig\n"
        "from jupyter_pause.journal.journal import Journal\n"
        "from jupyter_pause.journal.records import encode_done, item_name\n"
        "from jupyter_pause.store import layout\n"
        "from jupyter_pause.store.storage import Store\n"
        "class Gift:\n"
        "    def __reduce__(self):\n"
        f"        return (os.system, ('touch {canary}',))\n"
        f"store = Store({str(alice_store)!r})\n"
        f"j = Journal(store, {SESSION!r}, 'ocr', '1', 'mallory-node', PauseConfig().keyring)\n"
        "i = item_name('doc-2')\n"
        f"key = layout.journal_done_key({SESSION!r}, 'ocr', '1', i)\n"
        "store.write(key, encode_done('doc-2', j.run, 'mallory-node', Gift(), j.keys, j._place(i)))\n"
        "print(key)\n"
    )


ALICES_JOURNAL = (
    "import json, warnings\n"
    "import jupyter_pause\n"
    f"j = jupyter_pause.journal('ocr', session={SESSION!r})\n"
    "with warnings.catch_warnings(record=True) as said:\n"
    "    warnings.simplefilter('always')\n"
    "    results = dict(j.results())\n"
    "    pending = list(j.pending(['doc-1', 'doc-2']))\n"
    "print(json.dumps({'results': results, 'pending': pending, 'refused': j.refused,\n"
    "                  'said': [str(w.message) for w in said]}))\n"
)


def test_a_journal_record_planted_by_another_user_never_runs_in_her_kernel(team_hub):
    """Attack 1: mallory writes a done record into alice's journal from her own kernel; alice's
    kernel names it, never unpickles it, and offers the item again."""
    hub, team = team_hub, team_hub.team
    hub.create_user("j-alice")
    hub.create_user("j-mallory")
    canary = hub.root / "PWNED-j-alice"
    hub.start_server("j-alice")
    alice = hub.open_notebook("j-alice", NOTEBOOK)
    hub.execute(
        "j-alice",
        alice,
        f"import jupyter_pause; jupyter_pause.journal('ocr', session={SESSION!r}).done('doc-1', result='mine')",
    )

    hub.start_server("j-mallory")
    mallory = hub.open_notebook("j-mallory", "mine.ipynb")
    planted_key = hub.execute("j-mallory", mallory, planted_journal_record(team / "j-alice", canary)).strip()
    assert planted_key.endswith(tuple("0123456789abcdef")), planted_key
    hub.stop_server("j-mallory")

    seen = json.loads(hub.execute("j-alice", alice, ALICES_JOURNAL).strip().splitlines()[-1])
    assert not canary.exists(), "mallory's journal record was unpickled in alice's kernel"
    assert seen["results"] == {"doc-1": "mine"} and seen["pending"] == ["doc-2"]
    assert "signed with another key" in seen["refused"][planted_key]
    assert any(planted_key in said and "never loaded" in said for said in seen["said"]), seen
    hub.stop_server("j-alice")


def splice(team: Path, user: str, checkpoint: str, source: str, target: str) -> None:
    """Copy checkpoint ``checkpoint`` of session ``source`` into session ``target`` of ``user``'s
    prefix, blobs and all, as anyone with the store's credentials can."""
    root = team / user
    shutil.copyfile(root / manifest_key(source, checkpoint), root / manifest_key(target, checkpoint))
    own = root / f"sessions/{source}/blobs"  # its blobs are in the prefix's pool, shared already
    if own.exists():  # a checkpoint from before the pool keeps them in its session's folder
        shutil.copytree(own, root / f"sessions/{target}/blobs", dirs_exist_ok=True)


def test_a_checkpoint_of_her_other_notebook_spliced_into_this_one_is_refused_and_never_pulled(team_hub):
    """Attack 2: alice's signed checkpoint of notebook B, copied into the folder of her notebook A
    (newer than A's own), on a fresh pod without A's file: the pull writes A's own notebook, the
    resume restores A's own variables, and the spliced checkpoint is named."""
    hub, team = team_hub, team_hub.team
    hub.create_user("s-alice")
    hub.start_server("s-alice")
    train = hub.open_notebook("s-alice", NOTEBOOK, "marker = 1  # notebook A")
    hub.execute("s-alice", train, "marker = 1")
    pause_one(hub, "s-alice", NOTEBOOK)
    other = hub.open_notebook("s-alice", "other.ipynb", "marker = 2  # notebook B")
    hub.execute("s-alice", other, "marker = 2")
    pause_one(hub, "s-alice", "other.ipynb")
    (spliced,) = checkpoint_ids(team, "s-alice", "other")
    splice(team, "s-alice", spliced, "other", SESSION)
    hub.stop_server("s-alice")
    (hub.home("s-alice") / NOTEBOOK).unlink()  # a fresh pod: the notebook is pulled from the store

    hub.start_server("s-alice")
    status = resume(hub, "s-alice")
    assert status["verdict"] == "restored" and status["checkpoint"] != spliced, status
    assert marker_of(hub, "s-alice") == 1
    # sealed for the other notebook's place: it does not open here (unencrypted, its signed body says whose it is)
    assert f"{spliced}" in status["detail"] and "a copy from another place" in status["detail"], status
    assert "notebook A" in (hub.home("s-alice") / NOTEBOOK).read_text()
    hub.stop_server("s-alice")


def test_a_deleted_checkpoint_and_a_forged_status_neither_roll_back_silently_nor_block(team_hub):
    """Attack 3: mallory deletes the checkpoint alice paused from: alice's resume takes the older
    one and says loudly that the one she paused from is gone (status and run report). Then mallory
    writes a status.json saying the session is restoring on another node, its newest checkpoint
    damaged: alice's resume is not refused, restores that newest one, and names the forged status."""
    hub, team = team_hub, team_hub.team
    hub.create_user("r-alice")
    hub.start_server("r-alice")
    kernel = hub.open_notebook("r-alice", NOTEBOOK)
    hub.execute("r-alice", kernel, "marker = 1")
    older = pause_one(hub, "r-alice", NOTEBOOK)["checkpoint"]
    resume(hub, "r-alice")
    hub.execute("r-alice", running_kernel(hub, "r-alice"), "marker = 2")
    newest = pause_one(hub, "r-alice", NOTEBOOK)["checkpoint"]
    hub.stop_server("r-alice")
    store = team / "r-alice"
    (store / manifest_key(SESSION, newest)).unlink()

    hub.start_server("r-alice")
    status = resume(hub, "r-alice")
    assert status["verdict"] == "restored" and status["checkpoint"] == older, status
    assert marker_of(hub, "r-alice") == 1
    gone = f"the checkpoint this session was paused from, {newest}, is gone; resumed {older}, older"
    assert gone in status["detail"], status
    report = run_report(team, "r-alice", older, user_key(hub.secret, "r-alice"))
    assert report["damaged"][newest].startswith("gone"), report

    hub.execute("r-alice", running_kernel(hub, "r-alice"), "marker = 3")
    third = pause_one(hub, "r-alice", NOTEBOOK)["checkpoint"]
    hub.stop_server("r-alice")
    forged = {
        "session": SESSION,
        "state": "restoring",
        "detail": "restoring on another node",
        "node": "another-node",
        "checkpoint": third,
        "updated": 4102444800.0,
        "damaged": {third: "mallory's invented reason"},
    }
    (store / status_key(SESSION)).write_text(json.dumps(forged))

    hub.start_server("r-alice")
    status = resume(hub, "r-alice")  # 202, not 409 "restoring on another-node"
    assert status["verdict"] == "restored" and status["checkpoint"] == third, status
    assert marker_of(hub, "r-alice") == 3
    assert "mallory's invented reason" not in json.dumps(status)
    assert "status.json of this session in the store ignored: not signed" in status["ignored"], status
    rows = hub.server_fetch("r-alice", "jupyter-pause/api/sessions").body["sessions"]
    (row,) = [r for r in rows if r["session"] == SESSION]
    assert "status.json of this session in the store ignored" in row["detail"], row  # the Paused sessions panel
    hub.stop_server("r-alice")


def running_kernel(hub, user: str) -> str:
    (session,) = hub.server_fetch(user, "api/sessions").body
    return session["kernel"]["id"]
