"""The exception family of jupyter-pause: every failure a user can meet is a ``PauseError``."""

from __future__ import annotations


class PauseError(Exception):
    """Base class: something jupyter-pause could not do; the message says what to do next."""


class StoreError(PauseError):
    """The store cannot be reached, read or written."""


class CheckpointNotFound(PauseError):
    """No checkpoint matches what was asked for."""


class IntegrityError(PauseError):
    """A checkpoint is incomplete or its bytes do not match their recorded checksums."""


class CheckpointDamaged(IntegrityError):
    """The checkpoint asked for (or every one there is) is damaged; the message says why and
    names the newest intact one."""


class SelectionError(PauseError):
    """The variables asked for cannot be selected (unknown names, bad patterns)."""


class SerializationError(PauseError):
    """Some variables could not be saved and ``strict`` was asked for."""


class RestoreError(PauseError):
    """A verified checkpoint could not be brought back into this process."""
