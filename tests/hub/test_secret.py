"""The Hub's secret on a real JupyterHub: without one the Hub does not start (it says what to set),
and after a rotation the checkpoints signed with the former secret's keys still resume."""

from __future__ import annotations

import secrets

import pytest

from jupyter_pause.hub.keys import user_key
from jupyter_pause.store.signing import key_id
from tests.support.hub import run_hub
from tests.support.sharedstore import (
    NOTEBOOK,
    checkpoint_ids,
    hub_config,
    marker_of,
    pause_and_stop,
    resume,
    written_manifest,
)

pytestmark = pytest.mark.integration


def test_a_hub_without_its_secret_stops_at_start_saying_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv("JUPYTER_PAUSE_HUB_SECRET", raising=False)
    with pytest.raises(RuntimeError, match="JupyterHub exited") as failed:
        with run_hub(tmp_path / "hub", config=hub_config(tmp_path / "team", secret=None) + SIGNING_ONLY):
            pass
    assert "JUPYTER_PAUSE_HUB_SECRET" in str(failed.value) and "openssl rand -hex 32" in str(failed.value)


SIGNING_ONLY = (
    "from jupyter_pause.hub.keys import signing_environment\nc.Spawner.environment.update(signing_environment(c))\n"
)


def test_after_a_secret_rotation_checkpoints_of_the_old_key_still_resume(tmp_path):
    root, team = tmp_path / "hub", tmp_path / "team-store"
    old, new = secrets.token_hex(32), secrets.token_hex(32)
    with run_hub(root, config=hub_config(team, old)) as hub:
        hub.create_user("dora")
        hub.start_server("dora")
        kernel = hub.open_notebook("dora", NOTEBOOK)
        hub.execute("dora", kernel, "marker = 4")
        pause_and_stop(hub, "dora")
    (before,) = checkpoint_ids(team, "dora")

    with run_hub(root, config=hub_config(team, new, old=[old])) as hub:
        hub.start_server("dora")
        status = resume(hub, "dora")
        assert status["verdict"] == "restored" and status["checkpoint"] == before, status
        assert marker_of(hub, "dora") == 4
        (session,) = hub.server_fetch("dora", "api/sessions").body
        hub.execute("dora", session["kernel"]["id"], "marker = 5\n%load_ext jupyter_pause\n%checkpoint")
        hub.stop_server("dora")  # the Hub's stop pauses the notebook too: a second checkpoint
    after = set(checkpoint_ids(team, "dora")) - {before}
    assert len(after) == 2, after
    for checkpoint in after:
        written = written_manifest(team, "dora", checkpoint, user_key(new, "dora"))
        assert written["signature"]["key_id"] == key_id(user_key(new, "dora"))  # signs with the new key only
