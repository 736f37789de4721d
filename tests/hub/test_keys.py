"""Per-user signing keys derived by the Hub: a function of the Hub's secret and the user's name,
a clear error (never a guessable key) without a secret, and former secrets kept for verifying."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from traitlets.config import Config

import jupyter_pause.hub
from jupyter_pause.hub import keys
from jupyter_pause.store.signing import key_id, user_key

SECRET = "a" * 64
FORMER = "b" * 64


def spawner(user: str, config: Config | None = None) -> SimpleNamespace:
    return SimpleNamespace(user=SimpleNamespace(name=user), config=config or Config())


@pytest.fixture(autouse=True)
def no_secret_in_the_environment(monkeypatch):
    monkeypatch.delenv(keys.SECRET_ENV, raising=False)
    monkeypatch.delenv(keys.OLD_SECRETS_ENV, raising=False)


def test_each_user_gets_a_key_of_their_own_from_the_secret_in_the_environment(monkeypatch):
    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    alice, mallory = keys.signing_key_for(spawner("alice")), keys.signing_key_for(spawner("mallory"))
    assert alice == user_key(SECRET, "alice") and alice != mallory
    assert len(alice) == 64 and SECRET not in alice
    assert keys.signing_key_for(spawner("alice")) == alice  # the same on every spawn
    assert jupyter_pause.hub.signing_key_for is keys.signing_key_for


def test_the_secret_may_come_from_hub_config():
    config = Config()
    config.PauseHubKeys.secret = SECRET
    assert keys.signing_key_for(spawner("alice", config)) == user_key(SECRET, "alice")


def test_the_environment_wins_over_hub_config(monkeypatch):
    config = Config()
    config.PauseHubKeys.secret = FORMER
    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    assert keys.signing_key_for(spawner("alice", config)) == user_key(SECRET, "alice")


def test_no_secret_is_a_clear_error_at_hub_start_and_at_each_spawn():
    with pytest.raises(keys.MissingSecret, match="JUPYTER_PAUSE_HUB_SECRET.*openssl rand -hex 32.*PauseHubKeys"):
        keys.signing_environment(Config())
    with pytest.raises(keys.MissingSecret, match="need a Hub secret"):
        keys.signing_key_for(spawner("alice"))


def test_a_short_secret_is_refused(monkeypatch):
    monkeypatch.setenv(keys.SECRET_ENV, "hunter2")
    with pytest.raises(keys.MissingSecret, match=f"has 7 characters; give it at least {keys.MIN_SECRET}"):
        keys.signing_environment()


def test_signing_environment_gives_the_two_variables_as_spawner_callables(monkeypatch):
    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    env = keys.signing_environment()
    assert set(env) == {"JUPYTER_PAUSE_SIGNING_KEY", "JUPYTER_PAUSE_VERIFY_KEYS"}
    assert env["JUPYTER_PAUSE_SIGNING_KEY"](spawner("ana")) == user_key(SECRET, "ana")
    assert env["JUPYTER_PAUSE_VERIFY_KEYS"](spawner("ana")) == ""


def test_a_rotation_signs_with_the_new_secret_and_verifies_with_the_former(monkeypatch):
    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    monkeypatch.setenv(keys.OLD_SECRETS_ENV, f"{FORMER}, {SECRET}")
    assert keys.signing_key_for(spawner("ana")) == user_key(SECRET, "ana")
    assert keys.verify_keys_for(spawner("ana")) == user_key(FORMER, "ana")  # the current one is not repeated
    config = Config()
    config.PauseHubKeys.secret = SECRET
    config.PauseHubKeys.old_secrets = [FORMER]
    monkeypatch.delenv(keys.OLD_SECRETS_ENV)
    monkeypatch.delenv(keys.SECRET_ENV)
    assert keys.verify_keys_for(spawner("ana", config)) == user_key(FORMER, "ana")


def test_key_ids_tell_users_apart_without_giving_their_keys_away():
    assert key_id(user_key(SECRET, "alice")) != key_id(user_key(SECRET, "bob"))
    assert user_key(SECRET, "alice") != user_key(FORMER, "alice")


def test_the_readmes_hub_block_runs_on_a_fresh_config(monkeypatch):
    """The README's block, run as JupyterHub runs a config file (a fresh ``c``): no assignment
    into a lazily made ``c.Spawner.environment``, which raises TypeError there."""
    from tests.support.hub import readme_hub_config

    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    c = Config()
    exec(compile(readme_hub_config(), "README.md", "exec"), {"c": c, "get_config": lambda: c})  # noqa: S102
    environment = Config(c.Spawner).environment.to_dict()["update"]
    assert environment["JUPYTER_PAUSE_STORE"] == "s3://team-bucket/pause/{user}"
    assert environment["JUPYTER_PAUSE_SIGNING_KEY"](spawner("alice")) == user_key(SECRET, "alice")
    with pytest.raises(TypeError, match="does not support item assignment"):
        Config().Spawner.environment["JUPYTER_PAUSE_STORE"] = "what the README said before"


@pytest.mark.integration
def test_the_readmes_hub_block_starts_a_real_hub_and_gives_each_server_its_key(tmp_path, monkeypatch):
    """The block, copied as it is, first in a real Hub's jupyterhub_config.py: the Hub starts, the
    pause service it names answers, and a user's server gets that user's signing key."""
    from tests.support.hub import readme_hub_config, run_hub

    monkeypatch.setenv(keys.SECRET_ENV, SECRET)
    with run_hub(tmp_path / "hub", first=readme_hub_config()) as hub:
        hub.wait_service("jupyter-pause")
        assert hub.fetch(f"{hub.url}/services/jupyter-pause/metrics", token=hub.token).code == 200
        hub.create_user("alice")
        hub.start_server("alice")
        kernel = hub.open_notebook("alice", "keys.ipynb")
        said = hub.execute("alice", kernel, "import os; print(os.environ['JUPYTER_PAUSE_SIGNING_KEY'])")
        assert said.strip() == user_key(SECRET, "alice")
        hub.stop_server("alice")
