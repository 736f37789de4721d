"""What this kernel process holds of a session: probe values and the state as it was restored.

The probe is a random value made when a checkpoint is taken. It lives in the memory of the
kernel that took it and in the checkpoint, and nowhere else: no notebook, no output. A kernel that
holds it for checkpoint C either took C or resumed it; a kernel that re-ran the notebook's cells
cannot have it.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

_probes: dict[str, str] = {}
_as_restored: dict[str, dict[str, str | None]] = {}
_restore_failures: dict[str, dict[str, str]] = {}
_rebuilt: dict[str, dict[str, str]] = {}
_rebuilt_checks: dict[str, dict[str, tuple[str, str]]] = {}
_rng_moved: dict[str, list[str]] = {}
#: The checks blob of the checkpoint restored last, as loaded: its key (which names its digest) -> data.
_checks: dict[str, dict[str, Any]] = {}


def new_probe() -> str:
    """A fresh probe value."""
    return secrets.token_hex(16)


def fingerprint(value: str) -> str:
    """What the manifest records of a probe: its sha256, never the value."""
    return hashlib.sha256(value.encode()).hexdigest()


def remember(checkpoint_id: str, value: str) -> None:
    """This process now holds ``value`` as the probe of ``checkpoint_id``."""
    _probes[checkpoint_id] = value


def remember_checks(checkpoint_id: str, key: str, checks: dict[str, Any]) -> None:
    """This process restored ``checkpoint_id``: it holds the probe in ``checks``, its checks
    blob ``key`` as loaded, which the restore test then takes from here (``checks``) rather than
    reading it from the store again."""
    remember(checkpoint_id, checks["probe"])
    _checks.clear()
    _checks[key] = checks


def checks(key: str) -> dict[str, Any] | None:
    """The checks blob ``key`` as the restore loaded it, or None."""
    return _checks.get(key)


def held(checkpoint_id: str) -> str | None:
    """The probe of ``checkpoint_id`` this process holds, if any."""
    return _probes.get(checkpoint_id)


def record_restore(checkpoint_id: str, digests: dict[str, str | None], failures: dict[str, str]) -> None:
    """Remember each variable as restored (its digest) and what failed, for later checks."""
    _as_restored[checkpoint_id] = dict(digests)
    _restore_failures[checkpoint_id] = dict(failures)


def as_restored(checkpoint_id: str) -> dict[str, str | None]:
    """Digests of the variables as ``checkpoint_id`` restored them in this process (empty if not)."""
    return _as_restored.get(checkpoint_id, {})


def restore_failures(checkpoint_id: str) -> dict[str, str]:
    """Variables ``checkpoint_id`` could not restore in this process, and why."""
    return _restore_failures.get(checkpoint_id, {})


def record_rebuilt(
    checkpoint_id: str, outcomes: dict[str, str], checks: dict[str, tuple[str, str]] | None = None
) -> None:
    """Remember what the resume of ``checkpoint_id`` rebuilt by replay: name -> "" when rebuilt, else
    why not; and ``checks``: name -> how its rebuilt state compared (``proof.observed.check``)."""
    _rebuilt[checkpoint_id] = dict(outcomes)
    _rebuilt_checks[checkpoint_id] = dict(checks or {})


def rebuilt(checkpoint_id: str) -> dict[str, str]:
    """Variables the resume of ``checkpoint_id`` rebuilt by replay in this process ("") or failed to (why)."""
    return _rebuilt.get(checkpoint_id, {})


def rebuilt_checks(checkpoint_id: str) -> dict[str, tuple[str, str]]:
    """How each variable the resume of ``checkpoint_id`` rebuilt compared with the state it had:
    (``rebuilt and checked``, ``rebuilt, not checkable`` or ``rebuilt, differs``; what differs)."""
    return _rebuilt_checks.get(checkpoint_id, {})


def record_rng_moved(checkpoint_id: str, streams: list[str]) -> None:
    """Remember which random streams were not as ``checkpoint_id`` saved them once its resume ended."""
    _rng_moved[checkpoint_id] = list(streams)


def rng_moved(checkpoint_id: str) -> list[str]:
    """The random streams the resume of ``checkpoint_id`` left elsewhere than it saved them (empty if none)."""
    return _rng_moved.get(checkpoint_id, [])


def forget() -> None:
    """Hold nothing (what a new process starts with; a test helper)."""
    _probes.clear()
    _checks.clear()
    _as_restored.clear()
    _restore_failures.clear()
    _rebuilt.clear()
    _rebuilt_checks.clear()
    _rng_moved.clear()
