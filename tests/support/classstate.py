"""Importable classes that keep their state in the class, for tests of ``serialize.shared``."""

from __future__ import annotations

from typing import Any


class Borg:
    """Every instance shares the class's one dictionary as its ``__dict__``."""

    _shared: dict[str, Any] = {}

    def __init__(self) -> None:
        self.__dict__ = self._shared


class Single:
    """The class holds its one instance."""

    _instance: Single | None = None

    def __init__(self) -> None:
        Single._instance = self
        self.steps = 0
