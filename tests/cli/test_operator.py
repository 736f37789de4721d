"""An operator beside the Hub (its secret, no key of their own) reads a user's encrypted prefix as
the user's server does."""

from __future__ import annotations

import json

import pytest

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.signing import HUB_SECRET_ENV, user_key
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

SECRET = "the hub's secret, 32 characters or more 5e0b"


@pytest.fixture
def anas_prefix(tmp_path, monkeypatch):
    """ana's checkpoint in her ``{user}`` prefix, encrypted with her key as her server writes it."""
    for var in ("JUPYTER_PAUSE_SIGNING_KEY", "JUPYTER_PAUSE_VERIFY_KEYS", "JUPYTERHUB_USER"):
        monkeypatch.delenv(var, raising=False)
    prefix = tmp_path / "ana"
    config = PauseConfig(signing_key=user_key(SECRET, "ana"))
    checkpoint = jp.checkpoint(store=str(prefix), session="train", namespace={"marker": 7}, config=config).manifest
    another_process()
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", str(tmp_path / "{user}"))
    return prefix, checkpoint


def _listed(capsys, prefix) -> dict:
    main(["list", "--store", str(prefix), "--json"])
    (row,) = json.loads(capsys.readouterr().out)
    return row


def test_with_the_hubs_secret_a_users_encrypted_prefix_reads_with_her_key(anas_prefix, capsys, monkeypatch):
    prefix, checkpoint = anas_prefix
    monkeypatch.setenv(HUB_SECRET_ENV, SECRET)
    row = _listed(capsys, prefix)
    assert row["id"] == checkpoint.id and "damaged" not in row and row["variables"] == 1, row
    assert main(["verify", "--store", str(prefix)]) == 0


def test_without_it_the_prefix_is_named_encrypted_and_nothing_is_read(anas_prefix, capsys):
    prefix, checkpoint = anas_prefix
    row = _listed(capsys, prefix)
    assert row["id"] == checkpoint.id and "no key here opens it" in row["damaged"], row
