"""Release on a real JupyterHub: a user's state survives the release, the Hub shows the server
stopped, and the next server (with an empty disk, as a fresh pod) resumes it; a server whose token
may not stop itself is paused, not stopped, and says which setting to add."""

from __future__ import annotations

import json
import shutil

import pytest

from jupyter_pause.notebook import session_from_path
from jupyter_pause.server.status import StatusBoard
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import release_key
from jupyter_pause.store.storage import Store
from tests.support.hub import run_hub, wait_for

pytestmark = pytest.mark.integration

# Users named "bounded-*" keep the Hub's default token scopes; everyone else's server may stop itself.
SCOPES = """
def _server_scopes(spawner):
    scopes = ["users:activity!user", "access:servers!server"]
    if not spawner.user.name.startswith("bounded-"):
        scopes.append("delete:servers!server")
    return scopes


c.Spawner.server_token_scopes = _server_scopes
"""

NOTEBOOK = "work/train.ipynb"
BUILD = (
    "import torch, json\ntorch.manual_seed(3)\nmodel = torch.nn.Linear(4, 2)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nnotes = {'epoch': 7}\n"
)
PROBE = "import json\nprint(json.dumps([model(torch.ones(1, 4)).tolist(), notes]))"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with run_hub(tmp_path_factory.mktemp("hub"), config=SCOPES) as hub:
        yield hub


def release(hub, user: str) -> dict:
    """POST a release to ``user``'s server; the release as it started."""
    answer = hub.server_fetch(user, "jupyter-pause/api/release", "POST", {})
    assert answer.code == 202, answer
    assert answer.body["state"] == "pausing", answer.body
    return answer.body


def test_state_survives_a_release_and_comes_back_on_the_next_server(hub):
    hub.create_user("ada")
    hub.start_server("ada")
    (hub.home("ada") / "work").mkdir()
    kernel = hub.open_notebook("ada", NOTEBOOK)
    hub.execute("ada", kernel, BUILD)
    before = json.loads(hub.execute("ada", kernel, PROBE))

    started = release(hub, "ada")
    wait_for(lambda: hub.server_model("ada"), lambda m: m is None, 120, "the Hub showing ada's server stopped")

    store = Store(str(hub.store("ada")))
    record = json.loads(bytes(store.read(release_key(started["id"]))))
    assert record["state"] in ("stopping", "stopped") and record["user"] == "ada", record
    assert [(s["path"], s["state"]) for s in record["sessions"]] == [(NOTEBOOK, "paused")]
    status = StatusBoard(store, "reader").read(session_from_path(NOTEBOOK))
    assert status.state == "paused" and status.release == started["id"], status

    shutil.rmtree(hub.home("ada") / "work")  # the next pod has no persistent volume
    hub.start_server("ada")
    listing = hub.server_fetch("ada", "jupyter-pause/api/sessions").body
    (row,) = [r for r in listing["sessions"] if r["path"] == NOTEBOOK]
    assert row["state"] == "paused" and row["release"] == started["id"], row

    answer = hub.server_fetch("ada", "jupyter-pause/api/resume", "POST", {"path": NOTEBOOK})
    assert answer.code == 202, answer
    resumed = wait_for(
        lambda: hub.server_fetch("ada", f"jupyter-pause/api/status?path={NOTEBOOK}").body,
        lambda s: s["state"] in ("ready", "failed"),
        120,
        "ada's resume",
    )
    assert resumed["verdict"] == "restored", resumed
    assert (hub.home("ada") / NOTEBOOK).exists()  # pulled from the store
    (session,) = hub.server_fetch("ada", "api/sessions").body
    assert json.loads(hub.execute("ada", session["kernel"]["id"], PROBE)) == before
    hub.stop_server("ada")


def test_a_server_whose_token_may_not_stop_it_is_paused_not_stopped_and_names_the_setting(hub):
    hub.create_user("bounded-bo")
    hub.start_server("bounded-bo")
    kernel = hub.open_notebook("bounded-bo", "b.ipynb")
    hub.execute("bounded-bo", kernel, "kept = 'yes'")

    release(hub, "bounded-bo")
    done = wait_for(
        lambda: hub.server_fetch("bounded-bo", "jupyter-pause/api/status").body["release"],
        lambda r: r["state"] not in ("pausing", "stopping"),
        120,
        "bo's release",
    )
    assert done["state"] == "paused" and done["server_stop"] == "missing-scope", done
    assert "delete:servers!server" in done["detail"] and "c.Spawner.server_token_scopes" in done["detail"], done
    assert [s["state"] for s in done["sessions"]] == ["paused"]
    assert hub.server_model("bounded-bo")["ready"]  # still running: nothing was stopped
    assert hub.server_fetch("bounded-bo", "api/sessions").body == []  # but its kernel is paused
    hub.stop_server("bounded-bo")


def test_a_release_mid_epoch_with_loader_workers_continues_exactly_on_the_next_server(hub):
    """The training loop's DataLoader has two worker processes; the release stops the cell at a
    safe point, the server stops, and the next server's resume continues it bit-identically."""
    from tests.support.training import LOSSES, STEPS, TRAIN, setup_with

    hub.create_user("wendy")
    hub.start_server("wendy")
    reference = hub.open_notebook("wendy", "reference.ipynb")
    hub.execute("wendy", reference, setup_with("workers"))
    hub.execute("wendy", reference, TRAIN)
    want = json.loads(hub.execute("wendy", reference, LOSSES))
    assert len(want) == STEPS
    hub.server_fetch("wendy", f"api/kernels/{reference}", "DELETE")

    kernel = hub.open_notebook("wendy", "train.ipynb")
    hub.execute("wendy", kernel, setup_with("workers") + "\npace = 0.2")
    hub.execute("wendy", kernel, TRAIN, wait=False)  # the release waits for the loop's next safe point
    release(hub, "wendy")
    wait_for(lambda: hub.server_model("wendy"), lambda m: m is None, 120, "the Hub showing wendy's server stopped")
    taken = Catalog(Store(str(hub.store("wendy")))).checkpoints(session_from_path("train.ipynb"))
    assert [m.trigger for m in taken] == ["release"] and 0 < taken[0].loops[-1]["done"] < STEPS, taken

    hub.start_server("wendy")
    answer = hub.server_fetch("wendy", "jupyter-pause/api/resume", "POST", {"path": "train.ipynb"})
    assert answer.code == 202, answer
    resumed = wait_for(
        lambda: hub.server_fetch("wendy", "jupyter-pause/api/status?path=train.ipynb").body,
        lambda s: s["state"] in ("ready", "failed"),
        120,
        "wendy's resume",
    )
    assert resumed["verdict"] == "restored", resumed
    (session,) = [s for s in hub.server_fetch("wendy", "api/sessions").body if s["path"] == "train.ipynb"]
    hub.execute("wendy", session["kernel"]["id"], TRAIN)
    assert json.loads(hub.execute("wendy", session["kernel"]["id"], LOSSES)) == want
    hub.stop_server("wendy")
