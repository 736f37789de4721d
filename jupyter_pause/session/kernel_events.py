"""What a kernel adds to the GPU-hours ledger (``jupyter_pause.ledger``): it knows its GPUs and bytes.

- ``checkpoint_committed`` when a manifest is committed (any trigger: a pause, ``%checkpoint``,
  a periodic or SIGTERM checkpoint), with the bytes written and the checkpoint's size;
- the moments of a ``%resume`` typed in the kernel, as its run report has them
  (``session/cycle.py`` measures them once; ``ledger.resume_events``): ``resume_requested``, and
  ``next_cell_run``: the restore test passed and the notebook's next cell can run, the end of
  the wait the report calls "resume to next cell". A server's resume leaves them to the server
  (``server.session_events``), which also knows ``resources_available`` and ``kernel_ready``;
- ``kernel_started`` at ``%load_ext jupyter_pause``, its cells' spans (``activity``, from
  IPython's ``pre_run_cell``/``post_run_cell``) and ``kernel_stopped`` at exit, only for a kernel
  no Jupyter server of ours started (the server records its kernels' lives and cells itself).

Every write is one small object and never raises.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Any

from .. import gpus
from .. import ledger as records
from ..errors import StoreError
from ..ledger import SERVER_RECORDS
from ..notebook import default_session
from ..store.storage import Store
from ..vocabulary import LedgerEvent

#: Seconds between activity records of a kernel recording its own cells.
FLUSH_SECONDS = 300.0

#: Seconds the exit waits for the record of the kernel's start to be written.
STOP_WAIT = 10.0


def _gpus(environment: dict[str, Any] | None = None) -> tuple[str | None, int]:
    """GPUs of this kernel: from a fingerprint that saw CUDA, else the driver's list."""
    env = environment or {}
    if env.get("gpus"):
        names = list(env["gpus"])
        return (names[0] if len(set(names)) == 1 else ", ".join(sorted(set(names)))), len(names)
    return gpus.visible()


def _event(
    name: str, node: str, session: str | None, environment: dict[str, Any] | None = None, **fields: Any
) -> records.Event:
    model, count = _gpus(environment)
    return records.make(
        name, node, session=session, server=records.server_label(), gpu_model=model, gpus=count, **fields
    )


def _sign(keys: Any) -> None:
    """Sign this kernel's records with ``keys`` (its config's keyring) when it has them: a kernel
    a server of ours started writes records too (checkpoints, resumes), and signs them all the same."""
    if keys is not None:
        records.sign_with(keys)


def committed(store: Store, manifest: Any, keys: Any = None) -> None:
    """A checkpoint was committed: ``checkpoint_committed`` (signed with ``keys``, if given)."""
    _sign(keys)
    stats = manifest.stats or {}
    event = _event(
        LedgerEvent.CHECKPOINT_COMMITTED,
        manifest.node,
        manifest.session,
        manifest.environment,
        at=(manifest.timings or {}).get("committed"),
        trigger=manifest.trigger,
        checkpoint=manifest.id,
        bytes=stats.get("bytes_written"),
        bytes_total=stats.get("bytes_total"),
    )
    records.write(store, event)


def resumed(store: Store, report: Any, node: str, keys: Any = None) -> None:
    """A resume finished: its moments as events (``ledger.resume_events``), signed with ``keys``, if given."""
    _sign(keys)

    def event(name: str, session: str | None, **fields: Any) -> records.Event:
        return _event(name, node, session, **fields)

    records.write_many(store, records.resume_events(report, event))


_loaded: list[str] = []


class CellSpans:
    """Busy spans of a kernel no server of ours watches, from IPython's cell hooks: written as one
    ``activity`` record when a cell ends ``FLUSH_SECONDS`` or more after the last one, and at exit."""

    def __init__(self, store: Store, node: str, session: str) -> None:
        self.store, self.node, self.session = store, node, session
        self.spans: list[list[float]] = []
        self.started: float | None = None
        self.flushed = time.time()

    def pre_run_cell(self, *_: Any) -> None:
        self.started = time.time()

    def post_run_cell(self, *_: Any) -> None:
        if self.started is None:
            return
        now = time.time()
        self.spans.append([self.started, now])
        self.started = None
        if now - self.flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the spans not written yet (nothing when there are none)."""
        spans, self.spans, self.flushed = self.spans, [], time.time()
        if spans:
            records.write(
                self.store, _event(LedgerEvent.ACTIVITY, self.node, self.session, at=self.flushed, spans=spans)
            )


def kernel_loaded(config: Any, shell: Any = None) -> bool:
    """``%load_ext`` in a kernel no server of ours records: ``kernel_started`` now, its cells' busy
    spans (with ``shell``), and ``kernel_stopped`` at exit (once per process); whether it records
    them (False under such a server, or with no store)."""
    if os.environ.get(SERVER_RECORDS) or _loaded or not config.store:
        return False
    try:
        store = config.open_store()
    except StoreError as e:
        records.log.warning("jupyter-pause ledger: kernel start not recorded: %s", e)
        return False
    records.sign_with(config.keyring)
    session = default_session()
    _loaded.append(session)
    # In the background: %load_ext must not wait on a slow or unreachable store.
    start = threading.Thread(
        target=records.write, args=(store, _event(LedgerEvent.KERNEL_STARTED, config.node, session)), daemon=True
    )
    start.start()
    cells = CellSpans(store, config.node, session)
    if shell is not None:
        shell.events.register("pre_run_cell", cells.pre_run_cell)
        shell.events.register("post_run_cell", cells.post_run_cell)

    def stopped() -> None:
        start.join(STOP_WAIT)
        cells.flush()
        records.write(store, _event(LedgerEvent.KERNEL_STOPPED, config.node, session))

    atexit.register(stopped)
    return True
