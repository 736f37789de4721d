"""Fixtures of the server tests: a real Jupyter server (``jp_serverapp``, from pytest-jupyter)
configured on a local store, its extension's manager, and the clouds' metadata services faked on
127.0.0.1. A test module overrides ``store``, ``pause_server`` or ``jp_server_config`` where it
needs another store or more settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.metadata import FakeAws, FakeAzure, FakeGce, started
from tests.support.server_helpers import server_config


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def pause_server() -> dict[str, Any]:
    """Extra ``c.PauseServer`` settings of the test (a module or class overrides this)."""
    return {}


@pytest.fixture
def jp_server_config(store: Path, pause_server: dict[str, Any]) -> dict[str, Any]:
    return server_config(str(store), **pause_server)


@pytest.fixture
def manager(jp_serverapp: Any) -> Iterator[Any]:
    """The extension's PauseManager; its watchers stop when the test ends."""
    pause = jp_serverapp.web_app.settings["jupyter_pause"]
    yield pause
    for callback in getattr(pause, "watchers", []):
        callback.stop()


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    yield from started(FakeAws())


@pytest.fixture
def gce() -> Iterator[FakeGce]:
    yield from started(FakeGce())


@pytest.fixture
def azure() -> Iterator[FakeAzure]:
    yield from started(FakeAzure())
