"""A kernel made ready while a resume waits for resources.

A resume that waits (for a busy GPU, for devices not yet there) used to start its kernel only
once the wait ended, and that kernel then imported torch and the extension's resume code before
it read a byte: on a 2-core node about as long as reading a gigabyte. Now the first time the
resume finds something lacking, ``Warming`` starts the notebook's kernel beside the wait and does
those imports in it (with that of the library the store talks through, s3fs, where the kernel
will read the store itself rather than copies the prefetch made), and keeps the client it did
them with for the restore (a new client waits 0.2 s for its first answer).
Importing torch touches no GPU (CUDA starts at a tensor's first use), so the kernel takes nothing
the wait is for. Until the restore is under way no session names the kernel: the notebook has
no kernel while its resume waits, and a wait that gives up shuts it down. Once the resources are
there the restore runs in the warmed kernel, and the resume costs the reading and mapping of its
bytes (already on this node where the prefetch fetched them). Where the warmed kernel cannot be
had (it died, the culler took it), or the resume never waited, a kernel is started then.

Once imported, and while the wait goes on, the warmed kernel also reads the checkpoint's blobs
and verifies them against the manifest it checks with its own key (a ``HoldRequest``:
``session.holding``), as the restore would: the copies the prefetch makes as they arrive, or the
store's objects. The restore then takes them from its memory and reads only what is not there:
after a wait, a resume of a gigabyte from S3 costs unpickling and the restore test.

Either way the notebook's session takes the kernel only once the restore's request is on its way
(``bind``): a notebook connected to it from then on (JupyterLab connects as soon as its session
names a kernel) runs a cell after the restore, never before it in an empty kernel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..protocol import HoldReply, HoldRequest, RemoteError, call_source, parse_reply
from ..protocol.wire import KERNEL_MODULE
from ..store.manifest import Manifest
from ..store.storage import Store
from . import kernelrun, kernelspecs
from .http import maybe_await

log = logging.getLogger(__name__)

#: The modules a resume imports first, whatever the checkpoint holds.
RESUME_MODULES = (KERNEL_MODULE, "jupyter_pause.session.cycle")


def modules_for(manifest: Manifest, store: Store, copied: bool = False) -> list[str]:
    """The imports a resume of ``manifest`` from ``store`` begins with: its slow imports, the
    resume's own, then the library a remote store talks through (s3fs takes a fifth of a
    second), unless the checkpoint is ``copied`` onto the node (``prefetch.Prefetch``): the
    kernel then reads the copies and opens no store client."""
    client = [] if store.local or copied else [type(store.fs).__module__]
    return [*manifest.slow_imports(), *RESUME_MODULES, *client]


def import_source(modules: list[str]) -> str:
    """A line that imports ``modules`` in a kernel, binds no name and evaluates to None."""
    return " and ".join(f"__import__({name!r})" for name in modules) + " and None"


class Warming:
    """The kernel of one resume: warmed while it waits (``begin``), or started when it is needed."""

    def __init__(self, manager: Any, path: str, kernel: str, manifest: Manifest, copied: bool = False) -> None:
        self.manager, self.path, self.kernel_name, self.manifest = manager, path, kernel, manifest
        self.copied = copied  # the checkpoint is being copied onto the node (``modules_for``)
        self.kernel_id: str | None = None
        self._task: asyncio.Task[str] | None = None
        self._adopted = False
        self._client: Any = None
        self._waiting = False  # the resume still waits: the warmed kernel may read its checkpoint
        self._reading: asyncio.Task[None] | None = None
        #: What the warmed kernel read ahead of the restore (``hold``), once it did.
        self.held: HoldReply | None = None

    def begin(self) -> None:
        """Start warming the kernel, once (the resume found something lacking and waits)."""
        if self._task is None:
            self._waiting = True
            self._task = asyncio.ensure_future(self._warm())

    async def _start(self) -> str:
        """Start the kernel as the notebook's session would, but named by no session yet."""
        sessions, kernels = self.manager.sessions_manager, self.manager.kernels
        name = self.path.rsplit("/", 1)[-1]
        where = await maybe_await(sessions.contents_manager.get_kernel_path(path=self.path))
        env = sessions.get_kernel_env(self.path, name)  # as a session would start it
        self.kernel_id = str(await maybe_await(kernels.start_kernel(path=where, kernel_name=self.kernel_name, env=env)))
        return self.kernel_id

    async def _warm(self) -> str:
        kernels = self.manager.kernels
        kernel_id = await self._start()
        timeout = self.manager.settings.checkpoint_timeout
        client = await kernelrun.connect(kernels, kernel_id, self.manager.settings.kernel_start_timeout)
        imports = import_source(modules_for(self.manifest, self.manager.store, self.copied))
        try:
            await kernelrun.execute(kernels, kernel_id, imports, timeout, client=client, keep=True)
        except kernelrun.KernelCodeError as e:
            if isinstance(e, kernelrun.KernelDied):
                kernelrun.stop(client)
                raise
            log.info("jupyter-pause: the kernel warmed for %s could not import ahead: %s", self.path, e)
        except BaseException:  # cancelled, or anything else: no client is left open
            kernelrun.stop(client)
            raise
        try:
            if self._waiting:
                self._reading = asyncio.ensure_future(self._hold(kernel_id, client, timeout))
                await self._reading
        except BaseException:  # the kernel died, or the resume gave up (``close``)
            kernelrun.stop(client)
            raise
        self._client = client  # kept for the restore: a new client would wait for a first answer again
        return kernel_id

    async def _hold(self, kernel_id: str, client: Any, timeout: float) -> None:
        """Have the kernel read and verify the checkpoint meanwhile, for its restore to take; a
        kernel that cannot leaves the restore to read it all (``KernelDied`` is raised)."""
        manifest = self.manifest
        text = manifest.as_read().decode() if manifest.canonical is not None else ""
        request = HoldRequest(manifest.id, self.manager.session_name(self.path), text)
        try:
            output = await kernelrun.execute(
                self.manager.kernels, kernel_id, call_source(request), timeout, client=client, keep=True
            )
            self.held = parse_reply(output, HoldReply)
        except (RemoteError, kernelrun.KernelCodeError) as e:
            if isinstance(e, kernelrun.KernelDied):
                raise
            log.info("jupyter-pause: the kernel warmed for %s did not read ahead: %s", self.path, e)
            return
        if self.held.skipped:
            log.info("jupyter-pause: the kernel warmed for %s did not read ahead: %s", self.path, self.held.skipped)
            return
        log.info(
            "jupyter-pause: the kernel warmed for %s read %d blob(s) of %s ahead, %d bytes%s",
            self.path,
            self.held.blobs,
            manifest.id,
            self.held.bytes,
            f"; not: {self.held.bad}" if self.held.bad else "",
        )

    async def kernel(self) -> str:
        """The kernel for the restore, named by no session yet (``bind``): the warmed one, else one
        started now."""
        self._waiting = False  # the wait is over: a kernel still importing goes on to the restore
        if self._task is not None:
            try:
                warmed = await self._task
            except Exception as e:  # the resume goes on with a kernel of its own
                log.warning("jupyter-pause: the kernel warmed for %s during the wait failed: %s", self.path, e)
            else:
                if warmed in self.manager.kernels:
                    return warmed
        return await self._start()

    async def bind(self) -> None:
        """Make the kernel the notebook's, in its session (call it once the restore's request is
        on its way)."""
        if self.kernel_id is None:
            raise RuntimeError("no kernel to bind: kernel() starts one first")
        await kernelspecs.start(self.manager, self.path, self.kernel_name, running=self.kernel_id)
        self._adopted = True

    def client(self) -> Any:
        """The warmed kernel's client, connected, for the restore to run with (the caller stops
        it); None where there is none, or the kernel is no longer where that client connected."""
        client, self._client = self._client, None
        if client is None or kernelrun.still_connected(self.manager.kernels, self.kernel_id, client):
            return client
        kernelrun.stop(client)
        return None

    async def close(self) -> None:
        """Shut the kernel down unless the notebook's session took it (the wait gave up, or the
        resume failed before its restore began): once its start has ended, so that no kernel is
        left."""
        if self._client is not None:
            kernelrun.stop(self._client)
            self._client = None
        if self._adopted:
            return
        if self._reading is not None:
            self._reading.cancel()  # the wait gave up: reading ahead for a restore that will not come
        if self._task is not None:
            await asyncio.wait([self._task])
            if not self._task.cancelled() and self._task.exception() is not None:
                log.info("jupyter-pause: the kernel warmed for %s had failed: %s", self.path, self._task.exception())
        kernels = self.manager.kernels
        if self.kernel_id is not None and self.kernel_id in kernels:
            await maybe_await(kernels.shutdown_kernel(self.kernel_id))
