"""Writing a checkpoint's blobs while the rest of it is still being described.

A checkpoint's large array blobs can go to the store as soon as each is hashed; its small blobs
(variable streams, value digests, model checks) take longer to produce. ``BlobWriter`` hashes
and writes in threads, so the disk or network is busy from the first blob on while the kernel's
CPU finishes the description.

Blobs go to the store's pool (``layout.pool_key``), shared by every session: a blob any
checkpoint of the store holds already is not written again. What the store holds is known
without listing the pool (``pool``): the blobs the session's latest checkpoint from this process
names (for a synchronous checkpoint, whose data stays until it ends), the session's own folder
(blobs written before the store had a pool, still used where a checkpoint names them), and, for
each other digest, the store's answer.

Cleanup (``retention``) leaves alone the blobs named in a pending note and every blob younger
than its grace period. Blobs sent with ``send`` are named in the note before any is written;
blobs from ``hash_and_send`` are written as soon as they are hashed and named at the next
``send``, while still young. A blob this checkpoint reuses rather than writes could be removed
by a cleanup that ran before the note named it, so ``finish`` looks again and puts back any
that went missing.

Used as a context manager, the writer finishes when its block ends well and is abandoned
(``close``) when the block raises, so every blob is written before the caller commits a
manifest, and an error leaves only a pending note and whole blobs, never a checkpoint.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Callable

from ..errors import StoreError
from . import pool, signing, workers
from .catalog import Catalog
from .layout import blob_prefix
from .storage import PARALLELISM

Progress = Callable[[int, int], None]

#: The process's threads a writer works in (``workers.shared``): hashing, its lanes (sending,
#: then writing batches, each in order), and writing pending notes.
HASHING, LANES, NOTES = "jupyter-pause-hash", "jupyter-pause-writer", "jupyter-pause-note"
#: Threads of the lanes (two per writer at work) and of the notes (one per writer at work).
LANE_THREADS, NOTE_THREADS = 4, 2


class Stored:
    """A blob a checkpoint keeps from the one before without holding its bytes (a storage left
    on its device, unchanged: ``serialize.devicehash``): the store must still have it."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


class BlobWriter:
    """Writes content-addressed blobs of one checkpoint, skipping those the store holds.

    ``reused_data_stays``: the data of blobs found stored stays as it was until ``finish``
    (true while the kernel waits for a synchronous checkpoint), so a reused blob that went
    missing meanwhile can be written again; otherwise its loss fails the checkpoint.
    """

    def __init__(
        self,
        catalog: Catalog,
        session: str,
        checkpoint_id: str,
        created: float,
        progress: Progress | None = None,
        reused_data_stays: bool = False,
    ) -> None:
        self.catalog = catalog
        self.session = session
        self.checkpoint_id = checkpoint_id
        self.created = created
        self.progress = progress
        self.sizes: dict[str, int] = {}
        self.written = 0
        self.queued = 0
        self.done = 0
        self.names = catalog.store.names
        #: Blobs the store holds as far as this writer knows: digest -> (key, size). Each was
        #: written by this process, found under a keyed name, or hashed where it was found.
        self._held: dict[str, tuple[str, int]] = {}
        #: Blobs in the session's own folder (written before the store had a pool): named by their
        #: digest, so used only once what is there is hashed.
        self._folder = pool.session_folder(catalog.store, session)
        if reused_data_stays:  # taken on trust until ``finish`` looks: one gone is written again
            self._held.update(pool.latest(catalog.store, session))
        self._looked: set[str] = set()
        self._asking: dict[str, Future[None]] = {}  # keys being asked about now, and when that ends
        self._reused: dict[str, Any] = {}
        self._reused_data_stays = reused_data_stays
        self._lock = threading.Lock()
        # The process's threads (``workers``), shared with every checkpoint; this writer's own
        # order is kept by its lanes, and ``close`` waits for its own futures only.
        self._thread = workers.Lane(workers.shared(LANES, LANE_THREADS))
        self._sender = workers.Lane(workers.shared(LANES, LANE_THREADS))
        self._notes = workers.shared(NOTES, NOTE_THREADS)
        self._noted: list[Future[None]] = []
        self._sends: list[Future[None]] = []
        self._pool = workers.shared(HASHING, PARALLELISM)
        self._batches: list[Future[Any]] = []
        self._failed = False
        #: Model files this checkpoint references (sha256 -> their upload): in the pool before it commits.
        self._files: dict[str, Future[None]] = {}
        self._algorithm = ""

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Finish (wait for every blob) when the block ended well; else abandon the writing."""
        if error is None:
            self.finish()
        else:
            self.close()

    @contextlib.contextmanager
    def abandoned_on_error(self) -> Iterator[BlobWriter]:
        """Like the writer's own ``with``, but leaves it writing when the block ends well (for a
        caller that hands the finishing to another thread)."""
        try:
            yield self
        except BaseException:
            self.close()
            raise

    def look_up(self, keys: Iterable[str]) -> None:
        """Ask the store, all at once, about each blob of ``keys`` this writer knows nothing of
        yet; for one another thread is asking about, wait for its answer."""
        keys = list(dict.fromkeys(keys))
        asked: Future[None] = Future()
        with self._lock:
            todo = [k for k in keys if k not in self._held and k not in self._looked]
            others = {self._asking[k] for k in keys if k in self._asking and k not in todo}
            self._looked.update(todo)
            self._asking.update((k, asked) for k in todo)
        try:
            if todo:
                found = self._found(todo)
                with self._lock:
                    for key, held in found.items():
                        self._held.setdefault(key, held)
        finally:
            with self._lock:
                for k in todo:
                    del self._asking[k]
            asked.set_result(None)
        futures.wait(others)

    def _found(self, digests: list[str]) -> dict[str, tuple[str, int]]:
        """Where the store holds each of ``digests`` (its key and size), asked all at once: under
        a keyed name, found is enough (no one without the key can predict or plant one); under
        a name anyone can compute (no key, or the session's own folder), only where the bytes
        there hash to the digest: a same-size object planted under a predicted name is written
        over instead of trusted."""
        store = self.catalog.store
        pooled = {self.names.pool_key(k): k for k in digests}
        places = {**pooled, **{self._folder[k][0]: k for k in digests if k in self._folder}}
        sizes = {path: size for path, size in store.sizes(places).items() if size is not None}
        held: dict[str, tuple[str, int]] = {}
        if self.names.key_id is not None:
            held = {pooled[p]: (p, sizes[p]) for p in pooled if p in sizes}
        unsure = {p: size for p, size in sizes.items() if places[p] not in held}
        if unsure:

            def check(path: str, data: Any) -> bool:
                return signing.digest(data, signing.algorithm_of(places[path])) == places[path]

            for path, ok in store.read_many(unsure, then=check, mapped=True, sizes=unsure).items():
                if ok is True:
                    held.setdefault(places[path], (path, unsure[path]))
        return held

    def has(self, key: str, size: int) -> bool:
        """Whether the store holds blob ``key`` (of ``size`` bytes), in its pool or (written
        before it had one) the session's folder."""
        self.look_up([key])
        with self._lock:
            return self._holds(key, size)

    def _holds(self, key: str, size: int) -> bool:
        held = self._held.get(key)
        return held is not None and held[1] == size

    @property
    def session_blobs(self) -> list[str]:
        """The blobs this checkpoint reads from the session's own folder (kept from before the
        store had a pool), not the pool."""
        own = blob_prefix(self.session)
        return sorted(k for k in self._reused if self._held[k][0].startswith(own))

    def _claim(self, key: str, data: Any) -> bool:
        """Count ``key`` in this checkpoint; True when it is the first time and the store lacks it."""
        self.look_up([key])
        with self._lock:
            if key in self.sizes:
                return False
            self.sizes[key] = len(data)
            if self._holds(key, len(data)):
                self._reused[key] = data
                return False
            if isinstance(data, Stored):
                raise _gone([key])
            self.queued += len(data)
            return True

    def _write(self, items: dict[str, Any]) -> None:
        """Write ``{key: data}`` unless an earlier write of this checkpoint failed."""
        if self._failed or not items:  # the checkpoint is lost already: write no more of it
            return
        paths = {self.names.pool_key(key): data for key, data in items.items()}
        size = sum(len(d) for d in items.values())
        reported = 0

        def report(done: int) -> None:
            nonlocal reported
            with self._lock:  # one count for all threads, reported in order: it only grows
                self.done += done - reported
                reported = done
                if self.progress is not None:
                    self.progress(self.done, self.queued)

        try:
            self.catalog.store.write_many(paths, progress=report)
        except BaseException:
            self._failed = True
            raise
        with self._lock:
            self.written += size
            self._held.update((key, (self.names.pool_key(key), len(data))) for key, data in items.items())

    def reference(self, files: dict[str, Future[None]], algorithm: str) -> None:
        """Note that this checkpoint references model files ``files`` (sha256 -> their upload,
        indexed in ``algorithm``): named in the pending note from the next ``send``, and in the
        store, with their indexes, before ``finish`` returns."""
        self._files.update(files)
        self._algorithm = algorithm

    def send(self, payloads: dict[str, Any]) -> None:
        """Note ``payloads`` (and every key so far) in the pending note, then start writing
        those the store lacks, as one batch: in a thread of the writer's, one send after the
        other, so the caller goes on describing the checkpoint meanwhile (``finish`` raises
        what failed)."""
        self._sends.append(self._sender.submit(self._send, dict(payloads)))  # the caller may add to its dict

    def wait_sent(self) -> None:
        """Wait until every ``send`` so far has written its note and found which blobs the store
        holds (its writes may still be under way); raises what failed."""
        for sent in list(self._sends):
            sent.result()

    def _send(self, payloads: dict[str, Any]) -> None:
        """``send``'s work. The note names every key, held or not, so it is written while the
        store is asked which it holds."""
        with self._lock:
            named = sorted(set(self.sizes) | set(payloads)) + sorted(self._files)
        note = self._notes.submit(self.catalog.write_pending, self.session, self.checkpoint_id, self.created, named)
        self._noted.append(note)
        try:
            self.look_up(payloads)
            batch = {key: data for key, data in payloads.items() if self._claim(key, data)}
        finally:
            futures.wait([note])
        try:
            note.result()
        except BaseException:
            self._failed = True  # no blob of this checkpoint is written from now on
            raise
        if batch:
            before = list(self._batches)  # a batch starts once the work sent before it ended, so
            self._batches.append(self._thread.submit(self._after, before, batch))  # a failure stops it

    def _after(self, before: list[Future[Any]], batch: dict[str, Any]) -> None:
        futures.wait(before)
        self._write(batch)

    def hash_and_send(self, items: dict[str, Any], algorithm: str) -> dict[str, Future[str]]:
        """Hash each of ``items`` and write it unless stored, in parallel threads, so the first
        blob is on its way while the others are still hashed. Returns each item's key, to come
        (as soon as it is hashed, not written)."""
        keys: dict[str, Future[str]] = {name: Future() for name in items}

        def one(name: str, data: Any) -> None:
            try:
                key = signing.digest(data, algorithm)
            except BaseException as e:
                keys[name].set_exception(e)
                raise
            keys[name].set_result(key)
            if self._claim(key, data):
                self._write({key: data})

        self._batches += [self._pool.submit(one, name, data) for name, data in items.items()]
        return keys

    def finish(self) -> int:
        """Wait until every blob is written and every reused one is still there; the bytes
        written. Raises the first failure."""
        try:
            self.wait_sent()  # first: each queues its batch
            for batch in self._batches:
                batch.result()
            self._wait_for_files()
            unsure = {self._held[k][0]: k for k in self._reused}
            names = self.names
            records = [k for f in self._files for k in (names.pool_key(f), names.file_index_key(f, self._algorithm))]
            now = self.catalog.store.sizes([*unsure, *records])  # one look at both, at once
            self._put_back_missing(unsure, now)
            self._files_in_store(records, now)
        finally:
            self.close()
        return self.written

    def _put_back_missing(self, unsure: dict[str, str], now: dict[str, int | None]) -> None:
        """Of the reused blobs (``unsure``: key -> digest; ``now``: their sizes, looked at again),
        write back those gone (to the pool) where their data stayed, else fail."""
        if not unsure:
            return
        now = {key: now[key] for key in unsure}
        missing = {unsure[p]: self._reused[unsure[p]] for p, size in now.items() if size is None}
        if any(isinstance(d, Stored) for d in missing.values()):
            raise _gone([k for k, d in missing.items() if isinstance(d, Stored)])
        if missing and not self._reused_data_stays:
            raise StoreError(
                f"{len(missing)} blob(s) this checkpoint reuses were deleted while it was written "
                f"(by `jupyter pause gc` with a short --grace?): {', '.join(sorted(missing)[:3])}; "
                "nothing was committed, take the checkpoint again"
            )
        with self._lock:
            self.queued += sum(len(d) for d in missing.values())
        self._write(missing)  # into the pool, where the manifest then names them

    def _wait_for_files(self) -> None:
        """Wait for the uploads of the model files this checkpoint references."""
        for file, upload in self._files.items():
            try:
                upload.result()
            except BaseException as e:
                raise StoreError(
                    f"model file {file[:12]} could not be put into the store ({e}); nothing was committed: take "
                    "the checkpoint again, or set JUPYTER_PAUSE_MODEL_FILES=off to copy its tensors instead"
                ) from e

    def _files_in_store(self, records: list[str], now: dict[str, int | None]) -> None:
        """Make sure each model file this checkpoint references and its index are in the store
        (``now``: the sizes of ``records``, looked at once the uploads ended; a cleanup may have
        removed an older upload)."""
        gone = [key for key in records if now[key] is None]
        if gone:
            raise StoreError(
                f"{len(gone)} model file record(s) this checkpoint references left the store while it was taken "
                f"(`jupyter pause gc` with a short --grace?): {', '.join(gone[:2])}; nothing was committed, "
                "take the checkpoint again (the files are uploaded again)"
            )

    def close(self) -> None:
        """Stop taking work and wait for what of this writer's already started (after an error,
        say); another checkpoint's work on the shared threads is not waited for."""
        for sent in self._sends:
            sent.cancel()
        futures.wait(self._sends)  # first: a send under way may still queue its batch
        for batch in self._batches:
            batch.cancel()
        futures.wait(self._batches)
        futures.wait(self._noted)


def _gone(keys: list[str]) -> StoreError:
    return StoreError(
        f"{len(keys)} blob(s) this checkpoint keeps from the previous one, unchanged on their device, "
        f"left the store while it was taken (`jupyter pause gc` with a short --grace?): {', '.join(sorted(keys)[:3])}; "
        "nothing was committed, take the checkpoint again (it copies them this time)"
    )
