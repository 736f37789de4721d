"""A co-tenant on a real S3 bucket behind a real JupyterHub, configured as the README says: one
bucket and one credential for the team, a ``{user}`` prefix each, per-user keys from the Hub's
secret (issue 54).

mallory holds the shared credential and runs her own server. She cannot read alice's notebook or
tensors in the bucket (everything alice's server writes is encrypted with her key), cannot make
alice lose a blob by planting garbage under the name alice's next checkpoint would compute (alice's
pool names are keyed), and cannot load alice's checkpoint into her own kernel.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from types import SimpleNamespace

import numpy as np
import pytest

from jupyter_pause.store.encryption import is_sealed
from jupyter_pause.store.layout import pool_key
from tests.support.hub import readme_hub_config, run_hub
from tests.support.sharedstore import (
    NOTEBOOK,
    SESSION,
    jupyter_pause_list,
    kernel_of,
    pause_and_stop,
    pause_one,
    planted_blobs,
    resume,
    resume_from,
    value_of,
)
from tests.support.teambucket import team_bucket

pytestmark = pytest.mark.integration

#: alice's marker tensor (320 KB of float64 no other object holds), and the same bytes here.
MARKER = "torch.arange(40000, dtype=torch.float64) * 1.000000123"
MARKER_BYTES = (np.arange(40000, dtype=np.float64) * 1.000000123).tobytes()
#: Pieces of it that a store holding it in plaintext would hold.
WINDOWS = [MARKER_BYTES[at : at + 64] for at in (4096, len(MARKER_BYTES) // 2, len(MARKER_BYTES) - 64)]
#: A tensor of zeros large enough to be a blob of its own: anyone can compute its digest.
ZEROS = bytes(2 << 20)
MARKER_DIGEST = "__import__('hashlib').sha256(marker.numpy().tobytes()).hexdigest()"


@pytest.fixture(scope="module")
def team(s3_server, tmp_path_factory):
    """A Hub whose configuration starts with the README's block; its servers' store the README's
    on the test S3 server, every user's key derived from the Hub's secret."""
    root = tmp_path_factory.mktemp("hub")
    with team_bucket(s3_server, secrets.token_hex(32)) as bucket:
        with run_hub(root, first=readme_hub_config(), config=bucket.hub_config()) as hub:
            yield SimpleNamespace(hub=hub, bucket=bucket)


@pytest.fixture(scope="module")
def mallory(team) -> str:
    """mallory's own server and notebook, the shared credential in its environment; her kernel's id."""
    team.hub.create_user("mallory")
    team.hub.start_server("mallory")
    return team.hub.open_notebook("mallory", "mine.ipynb")


@pytest.fixture(scope="module")
def alice_paused(team) -> str:
    """alice's notebook, holding the marker and a private note in a cell, paused and her server
    stopped (Pause All and Stop Server); the note."""
    hub = team.hub
    note = f"alice's private note {secrets.token_hex(8)}"
    cell = f"NOTE = {note!r}\nimport torch\nmarker = {MARKER}"
    hub.create_user("alice")
    hub.start_server("alice")
    kernel = hub.open_notebook("alice", NOTEBOOK, cell)
    hub.execute("alice", kernel, cell)
    pause_and_stop(hub, "alice")
    return note


def test_the_bucket_holds_none_of_alices_plaintext_and_her_resume_is_restored(team, alice_paused):
    """What the bucket's owner, or mallory with the shared credential, reads of alice's paused
    session: sealed objects, in none of which her marker tensor's bytes or her notebook's text
    appear (both are there for her key); her resume is ``restored`` all the same."""
    hub, bucket, note = team.hub, team.bucket, alice_paused.encode()
    stored = bucket.objects()
    alices = {path: data for path, data in stored.items() if path.startswith(f"{bucket.bucket}/pause/alice/")}
    assert len(alices) >= 3, sorted(stored)  # a manifest, its blobs, the session's status...
    assert [path for path, data in alices.items() if not is_sealed(data)] == []
    for path, data in stored.items():
        assert note not in data, f"alice's note is readable in {path}"
        assert not any(window in data for window in WINDOWS), f"alice's marker tensor is readable in {path}"
    # with alice's key both are there: what was looked for is what her checkpoint holds
    store = bucket.opened("alice")
    opened = [bytes(store.read(key)) for key in store.list("")]
    assert any(note in data for data in opened) and any(WINDOWS[1] in data for data in opened)

    hub.start_server("alice")
    status = resume(hub, "alice")
    assert status["state"] == "ready" and status["verdict"] == "restored", status
    assert value_of(hub, "alice", MARKER_DIGEST) == hashlib.sha256(MARKER_BYTES).hexdigest()
    assert value_of(hub, "alice", "NOTE") == alice_paused


def test_garbage_planted_under_the_names_anyone_can_compute_costs_alice_nothing(team, mallory):
    """Issue 54, item 1: mallory plants same-size garbage under the plain pool name of every blob
    of alice's checkpoint and of a tensor of zeros alice makes next; alice's next checkpoint
    writes her own blobs under her keyed names, and resumes whole."""
    hub, bucket, alice = team.hub, team.bucket, "p-alice"
    hub.create_user(alice)
    hub.start_server(alice)
    kernel = hub.open_notebook(alice, NOTEBOOK)
    hub.execute(alice, kernel, f"import torch\nmarker = {MARKER}")
    assert pause_one(hub, alice, NOTEBOOK)["state"] == "paused"
    (first,) = bucket.manifests(alice, SESSION)
    zeros = hashlib.sha256(ZEROS).hexdigest()  # a signed checkpoint's blob digest: sha256
    predicted = {**first.blobs, zeros: len(ZEROS)}
    planted = set(hub.execute("mallory", mallory, planted_blobs(bucket.url(alice), predicted)).split())
    assert planted == {pool_key(d) for d in predicted}

    assert resume(hub, alice)["verdict"] == "restored"
    hub.execute(alice, kernel_of(hub, alice), f"zeros = torch.zeros({len(ZEROS) // 4})")
    assert pause_one(hub, alice, NOTEBOOK)["state"] == "paused"
    status = resume(hub, alice)
    assert status["state"] == "ready" and status["verdict"] == "restored", status
    assert value_of(hub, alice, MARKER_DIGEST) == hashlib.sha256(MARKER_BYTES).hexdigest()
    assert value_of(hub, alice, "[zeros.numel(), bool((zeros == 0).all())]") == [len(ZEROS) // 4, True]

    latest = bucket.manifests(alice, SESSION)[-1]
    assert zeros in latest.blobs, "mallory's prediction missed: the test plants nothing alice's checkpoint computes"
    names = bucket.opened(alice).names
    used = latest.blob_keys(latest.blobs, names)
    assert used[names.pool_key(zeros)] == zeros and names.pool_key(zeros) != pool_key(zeros)
    assert planted.isdisjoint(used), "alice's checkpoint points at what mallory planted"


def test_mallory_cannot_load_alices_checkpoint_into_her_kernel(team, mallory, alice_paused):
    """With the shared credential and her own key, mallory sees alice's checkpoint only as one
    encrypted with another key (``jupyter pause list``), and her ``%resume`` of it is refused,
    saying so: nothing of alice's reaches her kernel."""
    hub, alices = team.hub, team.bucket.url("alice")
    hub.execute("mallory", mallory, "marker = 'her own'")
    listed = hub.execute("mallory", mallory, jupyter_pause_list(alices))
    assert "train" in listed and "encrypted with another key" in listed, listed

    outcome = json.loads(hub.execute("mallory", mallory, resume_from(alices)))
    assert outcome["refused"] and "encrypted with another key" in outcome["refused"], outcome
    assert "nothing to resume" in outcome["refused"], outcome
    assert value_of(hub, "mallory", "[marker, 'NOTE' in globals()]") == ["her own", False]
