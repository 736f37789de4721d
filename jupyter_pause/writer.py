"""Writing a checkpoint's blobs while the rest of it is still being described.

A checkpoint's large array blobs are known as soon as the state is pickled and hashed; its small
blobs (variable streams, value digests, model checks) take longer to produce. ``BlobWriter``
starts writing the first batch at once, in a thread, so the disk or network is busy while the
kernel's CPU finishes the description. Every batch is named in the pending note before any of
it is written, so cleanup never mistakes a blob being written for an orphan.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from .catalog import Catalog, blob_key, blob_prefix

Progress = Callable[[int, int], None]


class BlobWriter:
    """Writes content-addressed blobs of one checkpoint, batch by batch, skipping stored ones."""

    def __init__(self, catalog: Catalog, session: str, checkpoint_id: str, created: float,
                 progress: Progress | None = None) -> None:
        self.catalog = catalog
        self.session = session
        self.checkpoint_id = checkpoint_id
        self.created = created
        self.progress = progress
        self.sizes: dict[str, int] = {}
        self.written = 0
        self.queued = 0
        self._existing = catalog.store.list(blob_prefix(session))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-writer")
        self._batches: list[Future[None]] = []
        self._failed = False

    def has(self, key: str, size: int) -> bool:
        """Whether the store held blob ``key`` (of ``size`` bytes) when this writer started."""
        stored = self._existing.get(blob_key(self.session, key))
        return stored is not None and stored.size == size

    def send(self, payloads: dict[str, Any]) -> None:
        """Note ``payloads`` in the pending note, then start writing those the store lacks."""
        batch = {}
        for key, data in payloads.items():
            if key in self.sizes:
                continue
            self.sizes[key] = len(data)
            if not self.has(key, len(data)):
                batch[blob_key(self.session, key)] = data
        try:
            self.catalog.write_pending(self.session, self.checkpoint_id, self.created, sorted(self.sizes))
        except BaseException:
            self.close()
            raise
        if not batch:
            return
        offset, size = self.queued, sum(len(d) for d in batch.values())
        self.queued += size

        def report(done: int) -> None:
            if self.progress is not None:
                self.progress(offset + done, self.queued)

        def write() -> None:
            if self._failed:  # the checkpoint is lost already: write no more of it
                return
            try:
                self.catalog.store.write_many(batch, progress=report)
            except BaseException:
                self._failed = True
                raise
            self.written += size

        self._batches.append(self._thread.submit(write))

    def finish(self) -> int:
        """Wait until every batch is written; the bytes written. Raises the first failure."""
        try:
            for batch in self._batches:
                batch.result()
        finally:
            self.close()
        return self.written

    def close(self) -> None:
        """Stop taking batches and wait for those already started (after an error, say)."""
        for batch in self._batches:
            batch.cancel()
        self._thread.shutdown(wait=True)
