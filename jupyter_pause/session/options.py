"""The options of the two operations, checkpoint and resume: one frozen, checked object each.

How an option flows. An edge parses what a person or a program asked for, once, into a
``CheckpointOptions`` or a ``ResumeOptions``: ``%checkpoint``/``%resume`` (``kernel.magics``),
``jupyter pause drill`` (``cli.drill``), the server's kernel entry points (``kernel.remote``), or
the keyword arguments of the public functions (``jupyter_pause.checkpoint(store=...)``, through
``with_overrides``). Building the object checks every field (``__post_init__``), so a bad value is
refused, saying what to do, before anything is read or written. The object then goes down whole:
``checkpoint``/``checkpoint_async`` -> ``capture``; ``resume_and_verify``/``resume`` ->
``resume_in`` -> ``_resume``; each step reads the fields it uses. Adding an option means a field
here (with its check), its parser(s) and its use; nothing in between.

Not options: the namespace (what is saved or restored into) and the ``PauseConfig``, which
supplies what no call sets (the default store and session, storage options, the signing key, the
node). Both go beside the options and are resolved with their ``store`` and ``session`` into a
``context.Context``. This module imports nothing that loads torch or IPython: the command line loads it without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from ..errors import SelectionError, StoreError
from ..store.catalog import Decision
from ..store.layout import check_session
from ..vocabulary import CHECKPOINT_TRIGGERS, Trigger

__all__ = ["MAP_LOCATIONS", "MAX_TAG", "CheckpointOptions", "ResumeOptions", "with_overrides"]

#: Where a resume puts tensors: ``auto`` on the device they were saved from, ``cpu`` all on the CPU.
MAP_LOCATIONS = ("auto", "cpu")

#: Longest tag accepted (it lives in the manifest, read by every listing).
MAX_TAG = 1000


def _shown(value: object) -> str:
    """``value`` for an error message, cut short: a 10 MB argument is not echoed back whole."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _names(value: Iterable[str] | None, field: str) -> tuple[str, ...] | None:
    """A list of variable names (or glob patterns) as a tuple; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise SelectionError(f"{field} takes a list of names, not one string: write {field}=[{_shown(value)}]")
    names = tuple(value)
    wrong = [n for n in names if not isinstance(n, str)]
    if wrong:
        raise SelectionError(
            f"{field} takes names as strings; {_shown(wrong[0])} is a {type(wrong[0]).__name__}: "
            f"write {field}=[{_shown(str(wrong[0]))}]"
        )
    return names


def _store(value: str | os.PathLike[str] | None) -> str | None:
    """The store URL or folder as a string (a ``pathlib.Path`` is accepted as its path)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise StoreError(
        f"store is a URL or a folder as a string, not a {type(value).__name__}: write store='s3://bucket/pause'"
    )


def _session(value: str | None) -> str | None:
    """The session name, checked; ``None`` or ``""`` means the configured one."""
    return check_session(value) if value not in (None, "") else value


def _flag(value: bool, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field} is True or False, not {_shown(value)}")
    return value


def _text(value: str | None, field: str, example: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{field} is a string such as {example!r}, not a {type(value).__name__}")
    return value


def _set(options: object, **values: Any) -> None:
    """Store the normalised ``values`` on a frozen ``options`` (from its ``__post_init__`` only)."""
    for name, value in values.items():
        object.__setattr__(options, name, value)


@dataclass(frozen=True)
class CheckpointOptions:
    """What one checkpoint saves, where, and why: every option of ``checkpoint``.

    Attributes
    ----------
    names
        Exactly these variables; ``None`` saves the default selection (see ``selection.select``).
    store, session
        Override the configured store URL (or folder) and session name; ``None``: configured.
    exclude
        Glob patterns of variable names to leave out.
    strict
        Fail, writing nothing, if any selected variable cannot be saved.
    tag
        Free text stored with the checkpoint (at most ``MAX_TAG`` characters).
    trigger
        Why the checkpoint was taken: one of ``vocabulary.CHECKPOINT_TRIGGERS``.
    """

    names: tuple[str, ...] | None = None
    store: str | None = None
    session: str | None = None
    exclude: tuple[str, ...] = ()
    strict: bool = False
    tag: str | None = None
    trigger: str = Trigger.MANUAL

    def __post_init__(self) -> None:
        """Normalise the lists to tuples and refuse a bad value, saying what to write instead."""
        _text(self.tag, "tag", "baseline")
        if self.tag is not None and len(self.tag) > MAX_TAG:
            raise SelectionError(f"the tag is {len(self.tag)} characters long; keep it under {MAX_TAG}")
        if self.trigger not in CHECKPOINT_TRIGGERS:
            raise ValueError(f"unknown trigger {_shown(self.trigger)}; use one of {', '.join(CHECKPOINT_TRIGGERS)}")
        _set(
            self,
            names=_names(self.names, "names"),
            exclude=_names(self.exclude, "exclude") or (),
            store=_store(self.store),
            session=_session(self.session),
            strict=_flag(self.strict, "strict"),
            trigger=str(self.trigger),
        )


@dataclass(frozen=True)
class ResumeOptions:
    """What one resume restores, from where, and how: every option of ``resume``.

    Attributes
    ----------
    checkpoint
        ``latest`` (the newest checkpoint that verifies), an id, or a unique prefix of one.
    store, session
        Override the configured store URL (or folder) and session name; ``None``: configured.
    only
        Restore just these variables (the random streams are then left as they are); ``None``: all.
    map_location
        ``auto`` puts tensors back on the device they were saved from; ``cpu`` puts all on the CPU.
    overwrite
        Replace a local module of the notebook that differs from the checkpoint's (without it,
        such a file is kept and named).
    paused_from
        The checkpoint the session was paused from (the server's resume sets it): without a
        signing key, "latest" keeps to its lineage and names the others (``Listing.following``).
    allow_partial
        Bring back what verifies of a damaged checkpoint: one asked for by id, or the newest when
        every one is damaged. Without it such a resume is refused, naming the damage.
    decision
        What the server already chose from its listing of the store (``Decision``: the
        checkpoints to try, newest first, and those passed over); the kernel follows it rather
        than list and verify the store again. ``None``: the kernel lists and chooses itself.
    rebuild
        Rebuild what the checkpoint could not save by replaying the statements that made it
        (``replay.rebuild``); False (``%resume --no-rebuild``) leaves it out. ``PauseConfig.rebuild``
        (``JUPYTER_PAUSE_REBUILD``) switches it off as well.
    """

    checkpoint: str = "latest"
    store: str | None = None
    session: str | None = None
    only: tuple[str, ...] | None = None
    map_location: str = "auto"
    overwrite: bool = False
    paused_from: str | None = None
    allow_partial: bool = False
    decision: Decision | None = None
    rebuild: bool = True

    def __post_init__(self) -> None:
        """Normalise ``only`` to a tuple and refuse a bad value, saying what to write instead."""
        _text(self.checkpoint, "checkpoint", "latest")
        if self.decision is not None and not isinstance(self.decision, Decision):
            raise SelectionError(f"decision must be a Decision (from the store's catalog), not {_shown(self.decision)}")
        if self.map_location not in MAP_LOCATIONS:
            raise SelectionError(
                f"--map-location must be one of {', '.join(MAP_LOCATIONS)}, not {_shown(self.map_location)}"
            )
        _set(
            self,
            checkpoint=self.checkpoint or "latest",
            only=_names(self.only, "only"),
            store=_store(self.store),
            session=_session(self.session),
            overwrite=_flag(self.overwrite, "overwrite"),
            paused_from=self.paused_from or None,
            allow_partial=_flag(self.allow_partial, "allow_partial"),
            rebuild=_flag(self.rebuild, "rebuild"),
        )


OptionsT = TypeVar("OptionsT", CheckpointOptions, ResumeOptions)


def with_overrides(kind: type[OptionsT], options: OptionsT | None, overrides: dict[str, Any], where: str) -> OptionsT:
    """``options`` (else the defaults of ``kind``) with ``overrides`` replacing fields of the same name.

    This is how the public functions keep their documented keywords: ``checkpoint(store=...)``
    is ``checkpoint(options=CheckpointOptions(store=...))``. ``where`` names the function in the
    error for a keyword that is no option.
    """
    if options is not None and not isinstance(options, kind):
        raise TypeError(f"{where}() takes options=a {kind.__name__}, not a {type(options).__name__}")
    known = [f.name for f in fields(kind)]
    unknown = [name for name in overrides if name not in known]
    if unknown:
        raise TypeError(
            f"{where}() got an unexpected keyword argument {unknown[0]!r}; the options it takes as keywords "
            f"are those of {kind.__name__}: {', '.join(known)}"
        )
    base = options if options is not None else kind()
    return replace(base, **overrides) if overrides else base
