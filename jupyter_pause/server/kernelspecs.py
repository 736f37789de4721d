"""Which kernelspec a resume starts: the one the notebook's kernel ran on, where this node has it.

A pause records the running kernel's kernelspec on the session's status (``Status.kernel``),
which every server sharing the store reads. A session the server never paused (a ``%checkpoint``
taken in the kernel) has its notebook's ``metadata.kernelspec``, which JupyterLab writes when
a kernel is picked and which travels in each checkpoint's copy of the notebook.
``PauseServer.kernel_name`` is only the fallback for a session that recorded neither. A resume
request may pick a kernelspec instead (``kernel_name``); a pick this server lacks is refused
at once (HTTP 400), and a recorded kernelspec it lacks fails the resume, naming both it and
the kernelspecs that are here, before any kernel starts: the checkpoint stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import PauseError
from .http import http_error, maybe_await
from .status import Status

#: Where a resume's kernelspec came from (``Kernel.source``).
PICKED = "picked for this resume"
RECORDED = "recorded when the session was paused"
METADATA = "named in the notebook's metadata"
FALLBACK = "c.PauseServer.kernel_name, as the session recorded none"


class KernelSpecMissing(PauseError):
    """The kernelspec a session ran on is not installed on this node."""


@dataclass(frozen=True)
class Kernel:
    """The kernelspec a resume starts (``name``) and where that came from (``source``)."""

    name: str
    source: str

    @property
    def recorded(self) -> str | None:
        """The name to keep on the session's status: a kernelspec the session ran on or was
        resumed in, never the server's fallback."""
        return None if self.source == FALLBACK else self.name


async def available(manager: Any) -> dict[str, str]:
    """The kernelspecs this server can start: name -> display name, sorted by name."""
    specs = await maybe_await(manager.serverapp.kernel_spec_manager.get_all_specs())
    return {name: str((specs[name].get("spec") or {}).get("display_name") or name) for name in sorted(specs)}


def listed(specs: dict[str, str]) -> str:
    """``python3 (Python 3), other (Other env)``; "none" when there are none."""
    return ", ".join(name if shown == name else f"{name} ({shown})" for name, shown in specs.items()) or "none"


async def wanted(manager: Any, path: str, status: Status | None, pick: Any = None) -> Kernel:
    """The kernelspec a resume of ``path`` should start: ``pick`` (the request's
    ``kernel_name``: HTTP 400 unless this server has it), else the one the session ``status``
    recorded, else the notebook's ``metadata.kernelspec``, else the server's ``kernel_name``."""
    if pick is not None and pick != "":
        if not isinstance(pick, str):
            raise http_error(400, '"kernel_name" must be the name of a kernelspec, as `jupyter kernelspec list` shows')
        specs = await available(manager)
        found = _found(pick, specs)
        if found is None:
            raise http_error(
                400,
                f'"kernel_name": no kernelspec {pick!r} on this server; the kernelspecs here are: {listed(specs)}',
            )
        return Kernel(found, PICKED)
    if status is not None and status.kernel:
        return Kernel(status.kernel, RECORDED)
    named = await notebook_kernel(manager, path)
    if named:
        return Kernel(named, METADATA)
    return Kernel(manager.settings.kernel_name, FALLBACK)


async def notebook_kernel(manager: Any, path: str) -> str | None:
    """The kernelspec name in the notebook's ``metadata.kernelspec``; None when it names none."""
    model = await maybe_await(manager.contents.get(path, content=True, type="notebook"))
    metadata = (model.get("content") or {}).get("metadata") or {}
    spec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


async def present(manager: Any, kernel: Kernel | None, checkpoint: str) -> str:
    """``kernel``'s name as this server knows it (None: the server's ``kernel_name``);
    ``KernelSpecMissing`` naming it, where it came from and the kernelspecs that are here when
    this server lacks it."""
    kernel = kernel or Kernel(manager.settings.kernel_name, FALLBACK)
    specs = await available(manager)
    found = _found(kernel.name, specs)
    if found is not None:
        return found
    raise KernelSpecMissing(
        f"this notebook's kernelspec {kernel.name!r} ({kernel.source}) is not installed on this server; "
        f"the kernelspecs here are: {listed(specs)}. Install {kernel.name!r} here, or resume in one of these "
        f'(Resume asks which; the REST API takes "kernel_name"). Checkpoint {checkpoint} stays in the store'
    )


async def start(manager: Any, path: str, kernel: str, running: str | None = None) -> str:
    """Start a ``kernel`` kernel for the notebook at ``path`` through the server's sessions (as
    JupyterLab would), or bind the kernel ``running`` already to it; its kernel id."""
    name = path.rsplit("/", 1)[-1]
    create = manager.sessions_manager.create_session
    model = await maybe_await(create(path=path, name=name, type="notebook", kernel_name=kernel, kernel_id=running))
    return str(model["kernel"]["id"])


def _found(name: str, specs: dict[str, str]) -> str | None:
    """The kernelspec of ``specs`` that ``name`` names (kernelspec names are not case-sensitive)."""
    return next((known for known in specs if known.lower() == name.lower()), None)
