"""jupyter_pause.config: explicit arguments > JUPYTER_PAUSE_* environment > traitlets config > default."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_pause.config import (
    ENV_VARS,
    PauseConfig,
    default_store_url,
    parse_storage_options,
)
from jupyter_pause.errors import PauseError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    data_dir = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data_dir))
    return data_dir


def traitlets_config() -> Config:
    c = Config()
    c.PauseConfig.store = "s3://from-config/pause"
    c.PauseConfig.session = "config-session"
    c.PauseConfig.node = "config-node"
    c.PauseConfig.storage_options = {"source": "config"}
    return c


def test_defaults(clean_env: Path) -> None:
    config = PauseConfig()
    assert config.store == str(clean_env / "pause") == default_store_url()
    assert config.session == ""
    assert config.node == socket.gethostname()
    assert config.storage_options == {}


def test_traitlets_config_overrides_defaults() -> None:
    config = PauseConfig(config=traitlets_config())
    assert config.store == "s3://from-config/pause"
    assert config.session == "config-session"
    assert config.node == "config-node"
    assert config.storage_options == {"source": "config"}


def test_environment_overrides_traitlets_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", "gs://from-env/pause")
    monkeypatch.setenv("JUPYTER_PAUSE_SESSION", "env-session")
    monkeypatch.setenv("JUPYTER_PAUSE_NODE", "env-node")
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", '{"source": "env", "anon": false}')
    config = PauseConfig(config=traitlets_config())
    assert config.store == "gs://from-env/pause"
    assert config.session == "env-session"
    assert config.node == "env-node"
    assert config.storage_options == {"source": "env", "anon": False}


def test_explicit_arguments_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", "gs://from-env/pause")
    monkeypatch.setenv("JUPYTER_PAUSE_SESSION", "env-session")
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", '{"source": "env"}')
    config = PauseConfig(config=traitlets_config(), store="/explicit/store", session="explicit", storage_options={})
    assert config.store == "/explicit/store"
    assert config.session == "explicit"
    assert config.storage_options == {}
    assert config.node == "config-node"  # not given explicitly, not in the environment


def test_empty_environment_variable_is_ignored(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", "")
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", "")
    config = PauseConfig()
    assert config.store == str(clean_env / "pause")
    assert config.storage_options == {}


def test_invalid_json_storage_options_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", "{anon: true}")
    with pytest.raises(PauseError, match="JUPYTER_PAUSE_STORAGE_OPTIONS is not valid JSON"):
        PauseConfig()


def test_json_list_storage_options_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_STORAGE_OPTIONS", '["anon", true]')
    with pytest.raises(PauseError, match="JUPYTER_PAUSE_STORAGE_OPTIONS must be a JSON object, not list"):
        PauseConfig()


def test_parse_storage_options_names_its_source() -> None:
    assert parse_storage_options('{"key": "v"}', "--storage-options") == {"key": "v"}
    with pytest.raises(PauseError, match="--storage-options"):
        parse_storage_options("nope", "--storage-options")


@pytest.mark.parametrize(("raw", "on"), [("0", False), ("off", False), ("No", False), ("1", True), ("on", True)])
def test_rebuild_by_replay_is_switched_by_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, on: bool) -> None:
    assert PauseConfig().rebuild is True  # on by default
    monkeypatch.setenv("JUPYTER_PAUSE_REBUILD", raw)
    assert PauseConfig().rebuild is on


def test_a_rebuild_switch_that_is_neither_on_nor_off_says_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_REBUILD", "maybe")
    with pytest.raises(
        PauseError, match=r"JUPYTER_PAUSE_REBUILD is on or off \(1, true, yes, on / 0, false, no, off\)"
    ):
        PauseConfig()


def test_the_share_of_disk_a_prefetch_leaves_free_is_set_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PauseConfig(prefetch_dir="/p").open_store("memory://k").prefetched.keep_free == 0.10
    monkeypatch.setenv("JUPYTER_PAUSE_PREFETCH_KEEP_FREE", "0.25")
    assert PauseConfig(prefetch_dir="/p").open_store("memory://k").prefetched.keep_free == 0.25


def test_a_store_finds_copies_in_the_shared_memory_folder_the_environment_names(
    monkeypatch: pytest.MonkeyPatch, shared_memory_of_the_test
) -> None:
    near = PauseConfig(prefetch_dir="/p").open_store("memory://k").prefetched
    assert near.memory is not None and near.memory.parent == shared_memory_of_the_test  # by default
    monkeypatch.setenv("JUPYTER_PAUSE_PREFETCH_MEMORY_DIR", "/dev/shm/elsewhere")
    near = PauseConfig(prefetch_dir="/p").open_store("memory://k").prefetched
    assert near.memory is not None and str(near.memory.parent) == "/dev/shm/elsewhere"
    assert near.memory.name == near.root.name  # one folder per store URL in each place
    assert PauseConfig(prefetch_dir="/p", prefetch_memory_dir="").open_store("memory://k").prefetched.memory is None


@pytest.mark.parametrize("raw", ["ten", "1.5", "-0.1", "nan"])
def test_a_share_of_disk_outside_0_to_1_says_what_it_takes(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("JUPYTER_PAUSE_PREFETCH_KEEP_FREE", raw)
    with pytest.raises(PauseError, match=r"JUPYTER_PAUSE_PREFETCH_KEEP_FREE must be a share of the disk from 0 to 1"):
        PauseConfig()
    with pytest.raises(TraitError, match=r"prefetch_keep_free is a share of the disk from 0 to 1"):
        PauseConfig(prefetch_keep_free=float(raw) if raw != "ten" else 2.0)
