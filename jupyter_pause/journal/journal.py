"""A work journal: which items of a queue are done, with their results, kept in the store.

    j = jupyter_pause.journal("ocr", version="2")
    for doc in j.pending(docs, key=lambda d: d["id"]):
        j.done(doc["id"], result=run_ocr(doc))

Each done item is one object holding its key, its pickled result and a checksum, created only if
absent (``Store.create``): the result and the done mark appear together or not at all, a second
``done`` for a key is refused by name, and many writers can share a journal. ``pending`` lists
the journal once, then answers per item from a set, so its cost per item does not grow with the
journal. A loop body that raises has its item recorded as failed; the item is offered again next
time unless ``retry_failed=False``. Each version of a journal has its own records: another
version starts empty. Keys of every record come from ``store.layout``.

With a signing key (``PauseConfig.keyring``), done and failure records are sealed for their item
(``store.seals``) and a result is unpickled only after its record verifies; a record that does
not is named (``Journal.refused``, a warning) and passed over, its item pending again. ``pending``
then reads the done records rather than only listing them.
"""

from __future__ import annotations

import dis
import functools
import json
import linecache
import os
import pickle
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..errors import PauseError
from ..store import layout, seals
from ..store.signing import Keys, keyring
from ..store.storage import Store
from .records import Key, RunSummary, Summary, decode_done, encode_done, item_name, refusal

T = TypeVar("T")

#: Seconds after which a temporary name left by a killed write (local stores) is removed.
ABANDONED_AFTER = 3600.0
#: Done records read at once by ``results`` and ``summary``.
READ_BATCH = 256


class AlreadyDone(PauseError):
    """``done`` was called for a key whose result is already in the journal."""


def _consumer() -> Any:
    """The frame that let go of the generator now being closed, or None if none is known."""
    try:
        return sys._getframe(2)
    except ValueError:  # closed from outside any Python frame (interpreter shutdown)
        return None


def _left_by_raising(frame: Any) -> bool:
    """Whether ``frame`` let go of a loop's iterator because an exception is passing through it.

    ``break`` and ``return`` drop the iterator with a POP_TOP; an exception drops it wherever the
    raising instruction is (also when the loop runs over a generator that wraps this one).
    """
    if frame is None:
        return False
    return dis.opname[frame.f_code.co_code[frame.f_lasti]] != "POP_TOP"


class Journal:
    """The records of one journal version in a session's store (see the module docstring)."""

    def __init__(self, store: Store, session: str, name: str, version: str, node: str, keys: Keys = None) -> None:
        self.prefix = layout.journal_prefix(session, name, version)  # checks all three names
        self.store, self.session, self.name, self.version, self.node = store, session, name, version, node
        self.keys = keyring(keys)
        #: Done records refused (their key: why): unsigned where a key is set, another key's, copied
        #: from another item or journal. Never unpickled; their items are pending again.
        self.refused: dict[str, str] = {}
        self.run = layout.new_run_id()
        self._run_written = False
        self._done: set[str] = set()
        self._failures = 0

    def __repr__(self) -> str:
        return f"Journal({self.name!r}, version={self.version!r}, session={self.session!r}, store={self.store!r})"

    def _keys(self, what: str) -> Any:
        return getattr(layout, f"journal_{what}")(self.session, self.name, self.version)

    def _place(self, item: str) -> dict[str, str | None]:
        """Where a done record of ``item`` belongs, as its seal covers it."""
        where = {"session": self.session, "journal": self.name, "version": self.version, "item": item}
        return {**where, "user": seals.this_user()}

    def _refuse(self, key: str, why: str) -> None:
        """Name a refused done record, once per journal object."""
        if key not in self.refused:
            self.refused[key] = why
            warnings.warn(
                f"journal {self.name!r}: record {key} refused, never loaded: {why}; its item is pending again",
                stacklevel=4,
            )

    def _scan(self) -> tuple[set[str], dict[str, int]]:
        """Done items, and failed attempts per item: one listing of each (with a signing key, the
        done records are read too: an item is done only where its record verifies)."""
        listed = self.store.list(self._keys("done_prefix"))
        done = {i for key in listed if (i := layout.journal_done_item(key))}
        if self.keys is not None:
            done = {i for _, i, _, _ in self._records()}
        stale = time.time() - ABANDONED_AFTER
        abandoned = [k for k, e in listed.items() if k.endswith(".part") and e.mtime is not None and e.mtime < stale]
        self.store.delete(abandoned)  # temporary names of writes killed long ago
        failed: dict[str, int] = {}
        for item, _ in self._failures_found():
            failed[item] = failed.get(item, 0) + 1
        return done, failed

    def _failures_found(self) -> list[tuple[str, str]]:
        """``(item, run)`` of each failure record: listed; with a signing key, read too, and only
        those sealed for their item and run by one of its keys (the others named, not counted)."""
        found = {k: f for k in self.store.list(self._keys("failed_prefix")) if (f := layout.journal_failed_item(k))}
        if self.keys is None:
            return [(item, run) for item, run, _ in found.values()]
        kept = []
        for key, data in self.store.read_many(list(found)).items():
            item, run, _ = found[key]
            try:
                record = json.loads(bytes(data)) if not isinstance(data, BaseException) else None
            except ValueError:
                record = None
            if isinstance(data, FileNotFoundError):
                continue  # gone since the listing
            if not isinstance(record, dict):  # unreadable, or bytes that are no record: named, not counted
                self._refuse(key, f"unreadable: {data}" if isinstance(data, BaseException) else "not a failure record")
                continue
            why = seals.opened_json(record, seals.JOURNAL, {**self._place(item), "run": run}, self.keys)
            if why is not None:
                self._refuse(key, why)
                continue
            kept.append((item, run))
        return kept

    def _newest_checkpoint(self) -> str | None:
        ids = [i for key in self.store.list(layout.manifest_prefix(self.session)) if (i := layout.manifest_id(key))]
        return max(ids, default=None)

    def _start_run(self, offered: list[str] | None) -> None:
        """Write this run's record (and the items it found pending) before any of its results."""
        record = {
            "run": self.run,
            "started": time.time(),
            "node": self.node,
            "pid": os.getpid(),
            "checkpoint": self._newest_checkpoint(),
            "offered": None if offered is None else len(offered),
        }
        run_key = functools.partial(layout.journal_run_key, self.session, self.name, self.version, self.run)
        if offered is not None:
            self.store.write(run_key("keys"), "\n".join(offered).encode())
        self.store.write(run_key("json"), json.dumps(record).encode())
        self._run_written = True

    def pending(
        self, items: Iterable[T], key: Callable[[T], Key] | None = None, *, retry_failed: bool = True
    ) -> Iterator[T]:
        """Yield the items whose key is not done yet (each key once), starting a new run.

        Parameters
        ----------
        items
            The whole queue; it is read once, up front.
        key
            The item's key (str or int); default: the item itself.
        retry_failed
            Offer items whose earlier attempts failed (default); False skips them.

        An exception that leaves the loop body records the item as failed with where it was
        raised (in IPython, with the exception itself once the cell ends).
        """
        keyed = self._keyed(items, key or (lambda item: item))  # type: ignore[arg-type, return-value]
        done, failed = self._scan()
        self._done = done
        todo = [(i, k, item) for i, k, item in keyed if i not in done and (retry_failed or i not in failed)]
        self.run = layout.new_run_id()
        self._start_run([i for i, _, _ in todo])
        return self._offer(todo)

    def _keyed(self, items: Iterable[T], key: Callable[[T], Key]) -> list[tuple[str, Key, T]]:
        keyed, seen, repeats = [], set(), 0
        for item in items:
            k = key(item)
            i = item_name(k)
            if i in seen:
                repeats += 1
                continue
            seen.add(i)
            keyed.append((i, k, item))
        if repeats:
            warnings.warn(
                f"journal {self.name!r}: {repeats} item(s) repeat an earlier key; each key is offered once",
                stacklevel=3,
            )
        return keyed

    def _offer(self, todo: list[tuple[str, Key, T]]) -> Iterator[T]:
        for i, k, item in todo:
            if i in self._done:
                continue  # done meanwhile through this journal
            try:
                yield item
            except GeneratorExit:
                frame = _consumer()
                if i not in self._done and _left_by_raising(frame):
                    self._record_raised(k, frame)
                raise

    def _record_raised(self, key: Key, frame: Any) -> None:
        """Record ``key`` as failed because its loop body raised at ``frame``'s current line."""
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        try:
            self._explain_later(key, self.failed(key, f"the loop body raised at {where}: {line}"))
        except PauseError as e:  # the body's own exception is the one to see; say this beside it
            warnings.warn(
                f"journal {self.name!r}: item {key!r} failed, and recording that failed too: {e}", stacklevel=2
            )

    def done(self, key: Key, result: Any = None) -> None:
        """Record ``key`` as done with ``result``, in one object; ``AlreadyDone`` if it already is."""
        i = item_name(key)
        where = f"journal {self.name!r} version {self.version!r}"
        if i in self._done:
            raise AlreadyDone(
                f"item {key!r} is already done in {where}; its first result is kept, this one was not written"
            )
        record = encode_done(key, self.run, self.node, result, self.keys, self._place(i))
        if not self._run_written:
            self._start_run(None)
        record_key = layout.journal_done_key(self.session, self.name, self.version, i)
        if not self.store.create(record_key, record):
            if self._replaces_refused(record_key, i, record):
                self._done.add(i)
                return
            self._done.add(i)
            raise AlreadyDone(
                f"item {key!r} was done by another run of {where} first; its result is kept, this one was not written"
            )
        self._done.add(i)

    def failed(self, key: Key, error: BaseException | str) -> str:
        """Record a failed attempt at ``key`` with its error; returns the record's key."""
        i = item_name(key)
        if not self._run_written:
            self._start_run(None)
        self._failures += 1
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        record_key = layout.journal_failed_key(self.session, self.name, self.version, i, self.run, self._failures)
        record = {"key": key, "run": self.run, "node": self.node, "time": time.time(), "error": text}
        self.store.write(record_key, self._sealed_failure(record, i))
        return record_key

    def _sealed_failure(self, record: dict[str, Any], item: str) -> bytes:
        """A failure record's bytes, sealed for its item and run where this journal has a key."""
        return seals.sealed_json(record, seals.JOURNAL, {**self._place(item), "run": record["run"]}, self.keys)

    def _explain_later(self, key: Key, record_key: str) -> None:
        """In IPython, put the cell's exception into the failure record once the cell ends."""
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None:
            return

        def explain(result: Any) -> None:
            shell.events.unregister("post_run_cell", explain)
            error = getattr(result, "error_in_exec", None)
            if error is not None and not isinstance(error, Exception):
                # KeyboardInterrupt, a pause at a safe point: an interruption, not a failure
                self.store.delete([record_key])
            elif error is not None:
                record = json.loads(bytes(self.store.read(record_key)))
                record["error"] = f"{type(error).__name__}: {error}"
                self.store.write(record_key, self._sealed_failure(record, item_name(key)))

        shell.events.register("post_run_cell", explain)

    def _replaces_refused(self, record_key: str, item: str, record: bytes) -> bool:
        """Whether the record already at ``record_key`` is one this journal refuses (then ``record``
        replaces it, and the refused one is named); False when it is a record of this journal."""
        try:
            header, _ = decode_done(self.store.read(record_key), record_key)
            why = refusal(header, item, self._place(item), self.keys)
        except FileNotFoundError:
            return False
        except PauseError as e:  # damaged: no result of anyone's, replaced as a refused record
            why = str(e)
        if why is None:
            return False
        self._refuse(record_key, why)
        self.store.write(record_key, record)
        return True

    def _records(self) -> Iterator[tuple[str, str, dict[str, Any], bytes]]:
        """``(key, item, header, result bytes)`` of every done record this journal accepts: a
        refused one (``refusal``) is named and passed over, never returned."""
        keys = sorted(self.store.list(self._keys("done_prefix")))
        items = {k: i for k in keys if (i := layout.journal_done_item(k))}
        keys = list(items)
        for start in range(0, len(keys), READ_BATCH):
            for k, data in self.store.read_many(keys[start : start + READ_BATCH]).items():
                if isinstance(data, BaseException):
                    raise data
                header, payload = decode_done(data, k)
                why = refusal(header, items[k], self._place(items[k]), self.keys)
                if why is not None:
                    self._refuse(k, why)
                    continue
                yield k, items[k], header, payload

    def results(self) -> Iterator[tuple[Key, Any]]:
        """Every done ``(key, result)``, each checked against its checksum (in no set order); with
        a signing key, a result is unpickled only after its record's seal verifies for this journal
        item (``refused`` names the others)."""
        for _, _, header, payload in self._records():
            yield header["key"], pickle.loads(payload)

    def summary(self) -> Summary:
        """Counts and runs of this journal version.

        It reads every done record to count each run's results: about 0.1 ms a record from a local
        disk (11 s for 10^5), unlike ``pending``, which only lists them.
        """
        done, failed = self._scan()
        runs: dict[str, RunSummary] = {}
        for data in self.store.read_many(
            [k for k in self.store.list(self._keys("run_prefix")) if layout.journal_run(k)]
        ).values():
            if isinstance(data, BaseException):
                continue
            r = json.loads(bytes(data))
            runs[r["run"]] = RunSummary(r["run"], r["started"], r["node"], r["checkpoint"], r["offered"])
        for _, _, header, _ in self._records():
            if header["run"] in runs:
                runs[header["run"]].accepted += 1
        for _, run in self._failures_found():
            if run in runs:
                runs[run].failed += 1
        ordered = sorted(runs.values(), key=lambda r: (r.started, r.run))
        pending = None
        last = next((r for r in reversed(ordered) if r.offered is not None), None)
        if last is not None:
            keys_key = layout.journal_run_key(self.session, self.name, self.version, last.run, "keys")
            offered = bytes(self.store.read(keys_key)).decode().split()
            pending = sum(1 for i in offered if i not in done)
        return Summary(
            self.name,
            self.version,
            self.session,
            done=len(done),
            failed=sum(1 for i in failed if i not in done),
            pending=pending,
            redone=sum(1 for i in failed if i in done),
            runs=ordered,
        )


def journal(name: str, version: str | int = "1", *, store: str | None = None, session: str | None = None) -> Journal:
    """The work journal ``name`` at processing ``version``, in the session's store.

    Parameters
    ----------
    name, version
        What the journal is for and which processing produced its results: 1-128 letters,
        digits, '.', '_' or '-'. Another version starts empty.
    store, session
        Where it lives (default: the configured store and this notebook's session).
    """
    from ..config import PauseConfig
    from ..notebook import default_session

    if isinstance(version, int) and not isinstance(version, bool):
        version = str(version)
    layout.check_journal(name)
    layout.check_journal(version, "journal version")  # type: ignore[arg-type]
    config = PauseConfig()
    target = config.open_store(store)
    who = layout.check_session(session or config.session or default_session())
    return Journal(target, who, name, version, config.node, config.keyring)  # type: ignore[arg-type]
