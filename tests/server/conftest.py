"""Fixtures of the server tests: the clouds' metadata services, faked on 127.0.0.1 (the server
itself is configured by ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.metadata import FakeAws, FakeAzure, FakeGce, started


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    yield from started(FakeAws())


@pytest.fixture
def gce() -> Iterator[FakeGce]:
    yield from started(FakeGce())


@pytest.fixture
def azure() -> Iterator[FakeAzure]:
    yield from started(FakeAzure())
