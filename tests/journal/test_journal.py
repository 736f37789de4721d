"""jupyter_pause.journal.journal: a queue's done items and results, kept in the store.

Unit tests run on ``memory://`` and a local folder; one runs on a real S3 server; the acceptance
test SIGKILLs real kernels while they record results and lets a kernel in another folder go on.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import threading
import time
import uuid
from pathlib import Path

import pytest

from jupyter_pause.cli import main
from jupyter_pause.errors import IntegrityError, PauseError, SerializationError
from jupyter_pause.journal.journal import AlreadyDone, Journal, journal
from jupyter_pause.journal.records import Key, encode_done, item_name
from jupyter_pause.store import layout
from jupyter_pause.store.storage import Store

SESSION = "work"


@pytest.fixture(params=["memory", "local"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://journal-{uuid.uuid4().hex}"
    return str(tmp_path / "store")


def open_journal(url: str, version: str = "1", name: str = "ocr") -> Journal:
    """A journal as a new process would open it: nothing known but the store."""
    return journal(name, version=version, store=url, session=SESSION)


def ocr(doc: dict) -> str:
    return f"text of {doc['id']}"


DOCS = [{"id": f"doc-{n}"} for n in range(10)]


def test_done_items_are_not_offered_again_and_results_come_back(store_url: str) -> None:
    j = open_journal(store_url)
    for doc in j.pending(DOCS, key=lambda d: d["id"]):
        if doc["id"] == "doc-4":
            break
        j.done(doc["id"], result=ocr(doc))

    again = open_journal(store_url)
    offered = [doc["id"] for doc in again.pending(DOCS, key=lambda d: d["id"])]
    assert offered == [f"doc-{n}" for n in range(4, 10)]
    for doc_id in offered:
        again.done(doc_id, result=ocr({"id": doc_id}))
    assert dict(open_journal(store_url).results()) == {d["id"]: ocr(d) for d in DOCS}
    assert list(open_journal(store_url).pending(DOCS, key=lambda d: d["id"])) == []


def test_a_body_that_raises_records_the_item_as_failed_and_it_is_offered_again(store_url: str) -> None:
    j = open_journal(store_url)
    with pytest.raises(ValueError, match="page 3 unreadable"):
        for n in j.pending(range(6)):
            if n == 3:
                raise ValueError("page 3 unreadable")
            j.done(n, result=n * n)
    summary = open_journal(store_url).summary()
    assert (summary.done, summary.failed, summary.pending) == (3, 1, 3)
    [failure] = Store(store_url).list(layout.journal_failed_prefix(SESSION, "ocr", "1"))
    record = json.loads(bytes(Store(store_url).read(failure)))
    assert record["key"] == 3
    assert "test_journal.py" in record["error"] and 'raise ValueError("page 3 unreadable")' in record["error"]

    assert list(open_journal(store_url).pending(range(6), retry_failed=False)) == [4, 5]
    later = open_journal(store_url)
    assert list(later.pending(range(6))) == [3, 4, 5]
    later.done(3, result=9)
    summary = open_journal(store_url).summary()
    assert (summary.done, summary.failed, summary.redone) == (4, 0, 1)


def test_break_and_return_leave_the_item_pending_not_failed(store_url: str) -> None:
    j = open_journal(store_url)
    for n in j.pending(range(5)):
        if n == 2:
            break
        j.done(n, result=n)

    def first_two() -> int:
        for n in open_journal(store_url).pending(range(5)):
            return n
        return -1

    assert first_two() == 2
    summary = open_journal(store_url).summary()
    assert (summary.done, summary.failed, summary.pending) == (2, 0, 3)


def test_a_loop_over_a_wrapper_of_pending_tells_break_from_raise(store_url: str) -> None:
    def numbered(it):
        yield from enumerate(it)

    for _, n in numbered(open_journal(store_url).pending(range(5))):
        if n == 1:
            break
    assert open_journal(store_url).summary().failed == 0
    with pytest.raises(ZeroDivisionError):
        for _, n in numbered(open_journal(store_url).pending(range(5))):
            n / 0
    assert open_journal(store_url).summary().failed == 1


def test_temporary_names_of_writes_killed_long_ago_are_removed(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    open_journal(store_url).done(0, result=0)
    folder = tmp_path / "store" / layout.journal_done_prefix(SESSION, "ocr", "1") / "ab"
    folder.mkdir(parents=True)
    old, fresh = folder / ".ab12.999-1.part", folder / ".ab34.999-2.part"
    old.write_bytes(b"half a rec")
    fresh.write_bytes(b"being writ")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert list(open_journal(store_url).pending(range(2))) == [1]
    assert not old.exists() and fresh.exists()


def test_failed_can_be_recorded_explicitly_with_the_exception(store_url: str) -> None:
    j = open_journal(store_url)
    for n in j.pending(range(3)):
        try:
            if n == 1:
                raise KeyError("no such page")
            j.done(n, result=n)
        except KeyError as e:
            j.failed(n, e)
    store = Store(store_url)
    [failure] = store.list(layout.journal_failed_prefix(SESSION, "ocr", "1"))
    assert json.loads(bytes(store.read(failure)))["error"] == "KeyError: 'no such page'"
    assert open_journal(store_url).summary().failed == 1


def test_done_twice_is_refused_by_name_and_the_first_result_kept(store_url: str) -> None:
    j = open_journal(store_url)
    j.done("doc-1", result="first")
    with pytest.raises(AlreadyDone, match="item 'doc-1' is already done"):
        j.done("doc-1", result="second")
    other = open_journal(store_url)  # another process that has not listed the journal
    with pytest.raises(AlreadyDone, match="item 'doc-1' was done by another run"):
        other.done("doc-1", result="third")
    assert list(open_journal(store_url).results()) == [("doc-1", "first")]


def test_many_writers_on_one_key_leave_exactly_one_result(store_url: str) -> None:
    outcomes: list[str] = []

    def writer(n: int) -> None:
        try:
            open_journal(store_url).done("shared", result=n)
            outcomes.append("done")
        except AlreadyDone:
            outcomes.append("refused")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["done"] + ["refused"] * 7
    assert len(list(open_journal(store_url).results())) == 1


def test_another_version_starts_empty_and_leaves_the_old_results_alone(store_url: str) -> None:
    v1 = open_journal(store_url, version="1")
    for n in v1.pending(range(4)):
        v1.done(n, result=f"v1-{n}")
    v2 = open_journal(store_url, version="2")
    assert list(v2.pending(range(4))) == [0, 1, 2, 3]
    assert list(v2.results()) == []
    v2.done(0, result="v2-0")
    assert sorted(open_journal(store_url, version="1").results()) == [(n, f"v1-{n}") for n in range(4)]
    assert list(open_journal(store_url, version="2").results()) == [(0, "v2-0")]
    assert open_journal(store_url, version=2).version == "2"


@pytest.mark.parametrize(
    "name, version, message",
    [
        ("a/b", "1", "invalid journal name 'a/b'"),
        ("", "1", "invalid journal name ''"),
        ("..", "1", "invalid journal name '..'"),
        ("ocr", "1/2", "invalid journal version '1/2'"),
        ("ocr", "", "invalid journal version ''"),
        ("ocr", "../x", "invalid journal version"),
    ],
)
def test_bad_names_and_versions_are_refused_before_anything_is_written(
    store_url: str, name: str, version: str, message: str
) -> None:
    with pytest.raises(PauseError, match=message):
        open_journal(store_url, version=version, name=name)
    assert Store(store_url).list("") == {}


@pytest.mark.parametrize("key", [1.5, None, True, ("a", 1), b"bytes"])
def test_keys_that_are_not_str_or_int_are_refused_before_anything_is_written(store_url: str, key: object) -> None:
    j = open_journal(store_url)
    with pytest.raises(PauseError, match="use a str or an int"):
        list(j.pending([key]))
    with pytest.raises(PauseError, match="use a str or an int"):
        j.done(key, result=1)  # type: ignore[arg-type]
    assert Store(store_url).list("") == {}


def test_a_result_that_cannot_be_pickled_is_refused_and_the_item_stays_pending(store_url: str) -> None:
    j = open_journal(store_url)
    with pytest.raises(SerializationError, match="item 'doc-1' cannot be pickled.*nothing was written"):
        j.done("doc-1", result=threading.Lock())
    assert Store(store_url).list(layout.journal_done_prefix(SESSION, "ocr", "1")) == {}
    assert list(open_journal(store_url).pending(["doc-1"])) == ["doc-1"]


def test_a_damaged_record_is_reported_by_name_never_returned(store_url: str) -> None:
    j = open_journal(store_url)
    j.done("doc-1", result="x" * 1000)
    store = Store(store_url)
    [key] = store.list(layout.journal_done_prefix(SESSION, "ocr", "1"))
    store.write(key, bytes(store.read(key))[:-10])
    with pytest.raises(IntegrityError, match=f"journal record {key} is damaged"):
        list(open_journal(store_url).results())


def test_repeated_keys_in_the_input_are_offered_once(store_url: str) -> None:
    with pytest.warns(UserWarning, match="1 item.s. repeat an earlier key"):
        offered = list(open_journal(store_url).pending(["a", "b", "a"]))
    assert offered == ["a", "b"]


def test_pending_lists_the_journal_once_however_many_items(store_url: str) -> None:
    j = open_journal(store_url)
    for n in j.pending(range(50)):
        j.done(n, result=n)
    again = open_journal(store_url)
    listings: list[str] = []
    real_list = again.store.list
    again.store.list = lambda prefix: listings.append(prefix) or real_list(prefix)  # type: ignore[method-assign]
    assert list(again.pending(range(200))) == list(range(50, 200))
    assert len(listings) == 3  # done records, failed records, checkpoints: not one per item


def test_summary_names_each_run_with_its_newest_checkpoint_and_accepted_results(store_url: str) -> None:
    store = Store(store_url)
    first = open_journal(store_url)
    for n in first.pending(range(5)):
        if n == 2:
            break
        first.done(n, result=n)
    checkpoint_id = "20270115-080000-a1b2c3"
    store.write(layout.manifest_key(SESSION, checkpoint_id), b"{}")  # only the name is read
    time.sleep(0.01)
    second = open_journal(store_url)
    for n in second.pending(range(5)):
        second.done(n, result=n)
    summary = open_journal(store_url).summary()
    assert (summary.done, summary.failed, summary.pending, summary.redone) == (5, 0, 0, 0)
    assert [(r.checkpoint, r.offered, r.accepted) for r in summary.runs] == [(None, 5, 2), (checkpoint_id, 3, 3)]
    assert f"checkpoint {checkpoint_id}  offered 3, accepted 3" in summary.text()


def test_cli_prints_the_summary(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the command line runs against a store it opens itself; memory:// is per process")
    j = open_journal(store_url, version="2")
    for n in j.pending(range(3)):
        j.done(n, result=n)
    assert main(["journal", "ocr", "--store", store_url, "--session", SESSION, "--json"]) == 0
    [data] = json.loads(capsys.readouterr().out)
    assert (data["version"], data["done"], data["pending"], len(data["runs"])) == ("2", 3, 0, 1)
    assert main(["journal", "ocr", "--store", store_url]) == 0
    assert "journal 'ocr' version '2' (session 'work'): 3 done, 0 failed, 0 pending" in capsys.readouterr().out
    assert main(["journal", "other", "--store", store_url]) == 2
    assert "no journal 'other'" in capsys.readouterr().err


@pytest.mark.integration
def test_journal_on_a_real_s3_server(s3_env: str) -> None:
    j = open_journal(s3_env)
    with pytest.raises(RuntimeError):
        for n in j.pending(range(6)):
            if n == 4:
                raise RuntimeError("model timed out")
            j.done(n, result={"n": n, "text": "x" * n})
    with pytest.raises(AlreadyDone, match="item 1 was done by another run"):
        open_journal(s3_env).done(1, result="again")
    rest = open_journal(s3_env)
    assert list(rest.pending(range(6))) == [4, 5]
    summary = open_journal(s3_env).summary()
    assert (summary.done, summary.failed, summary.pending) == (4, 1, 2)
    assert sorted(open_journal(s3_env).results()) == [(n, {"n": n, "text": "x" * n}) for n in range(4)]


# --- acceptance: SIGKILL while results are being recorded, continue in another folder ---------

ITEMS = 40
CELL = """
import hashlib
import jupyter_pause as jp
j = jp.journal("ocr", version={version!r})
for n in j.pending(range({items})):
    if n == {fail_at}:
        raise {error}
    text = hashlib.sha256(str(n).encode()).hexdigest() * 32768  # 2 MiB: most of the time is in done
    j.done(n, result={{"n": n, "text": text}})
print("finished")
"""


def expected(n: int) -> dict:
    return {"n": n, "text": hashlib.sha256(str(n).encode()).hexdigest() * 32768}


def kill_during_done(kernel, store: Store, done_before: int, mid_write: bool, rng: random.Random) -> None:
    """Kill ``kernel`` once it has recorded two more results: as a record is being written
    (``mid_write``), or a random moment later (a record takes about 15 ms here)."""
    prefix = layout.journal_done_prefix(SESSION, "ocr", "1")
    deadline = time.monotonic() + 60
    while True:
        keys = store.list(prefix)
        started = len([k for k in keys if layout.journal_done_item(k)]) >= done_before + 2
        if started and (not mid_write or any(k.endswith(".part") for k in keys)):
            break
        assert time.monotonic() < deadline, "the kernel recorded no results"
        time.sleep(0.001)
    if not mid_write:
        time.sleep(rng.uniform(0.0, 0.015))
    kernel.kill()


@pytest.mark.integration
def test_kernels_killed_during_done_leave_every_item_done_exactly_once(tmp_path: Path, start_kernel) -> None:
    store_url = str(tmp_path / "store")
    store = Store(store_url)
    env = {"JUPYTER_PAUSE_STORE": store_url, "JUPYTER_PAUSE_SESSION": SESSION}
    rng = random.Random(12)
    done_before = 0
    for round_ in range(4):
        folder = tmp_path / f"node-{round_}"
        folder.mkdir()
        kernel = start_kernel(folder, **env)
        kernel.send(CELL.format(version="1", items=ITEMS, fail_at=-1, error=""))
        kill_during_done(kernel, store, done_before, mid_write=round_ % 2 == 0, rng=rng)
        done_now = open_journal(store_url).summary().done
        assert done_before < done_now < ITEMS, "the kill landed outside the loop"
        done_before = done_now
    torn = [k for k in store.list(layout.journal_done_prefix(SESSION, "ocr", "1")) if k.endswith(".part")]
    assert torn, "no kill landed while a record was being written"

    (tmp_path / "node-final").mkdir()
    final = start_kernel(tmp_path / "node-final", **env)
    assert "finished" in final.run(CELL.format(version="1", items=ITEMS, fail_at=-1, error=""), timeout=120).ok().stdout

    results = list(open_journal(store_url).results())
    assert sorted(key for key, _ in results) == list(range(ITEMS))  # each key once
    assert all(result == expected(key) for key, result in results)  # each result whole
    summary = open_journal(store_url).summary()
    assert (summary.done, summary.failed, summary.pending) == (ITEMS, 0, 0)
    assert len(summary.runs) == 5 and sum(r.accepted for r in summary.runs) == ITEMS

    failed = final.run(CELL.format(version="2", items=ITEMS, fail_at=3, error='ValueError(f"page {n} unreadable")'))
    assert failed.ename == "ValueError"
    v2 = open_journal(store_url, version="2")
    assert sorted(key for key, _ in v2.results()) == [0, 1, 2]  # a new version starts empty
    [failure] = store.list(layout.journal_failed_prefix(SESSION, "ocr", "2"))
    assert json.loads(bytes(store.read(failure)))["error"] == "ValueError: page 3 unreadable"

    stopped = final.run(CELL.format(version="3", items=ITEMS, fail_at=2, error="KeyboardInterrupt"))
    assert stopped.ename == "KeyboardInterrupt"
    v3 = open_journal(store_url, version="3").summary()
    assert (v3.done, v3.failed, v3.pending) == (2, 0, ITEMS - 2)  # an interruption is not a failure


ALICE_KEY = "alice's signing key, as the Hub derives it 51c0"
MALLORY_KEY = "mallory's signing key, as the Hub derives it 9e2a"


RAN: list[str] = []


def mallorys_code(what: str) -> None:
    """What mallory's payload calls when unpickled (it could name any function)."""
    RAN.append(what)


class Payload:
    """What mallory plants: unpickling it calls ``mallorys_code``."""

    def __reduce__(self):
        return (mallorys_code, ("mallory's code ran",))


def plant(url: str, item: Key, key: str | None, user: str = "alice") -> str:
    """mallory's done record for ``item`` in alice's journal: unsigned, or sealed with ``key``."""
    planted = Journal(Store(url), SESSION, "ocr", "1", "mallory-node", key)
    record_key = layout.journal_done_key(SESSION, "ocr", "1", item_name(item))
    Store(url).write(
        record_key, encode_done(item, planted.run, "mallory-node", Payload(), key, planted._place(item_name(item)))
    )
    return record_key


@pytest.mark.parametrize("planted_with", [None, MALLORY_KEY], ids=["unsigned", "mallory's key"])
def test_a_done_record_another_user_planted_is_named_and_never_unpickled(
    store_url: str, planted_with: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 1: mallory writes a ``done`` record into alice's journal; with alice's key set, her
    kernel never unpickles it, names it, and offers the item again; her own result replaces it."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    RAN.clear()
    alice = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    for n in alice.pending(["doc-1"]):
        alice.done(n, result="alice's text")
    record_key = plant(store_url, "doc-2", planted_with)

    again = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    with pytest.warns(UserWarning, match=f"record {record_key} refused, never loaded: .*(not signed|another key)"):
        assert dict(again.results()) == {"doc-1": "alice's text"}
    assert RAN == [] and record_key in again.refused
    assert pickle.loads(pickle.dumps(Payload())) is None and RAN == ["mallory's code ran"]  # what was kept out
    RAN.clear()
    offered = list(again.pending(["doc-1", "doc-2"]))
    assert offered == ["doc-2"]
    again.done("doc-2", result="alice's own")
    assert dict(Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY).results()) == {
        "doc-1": "alice's text",
        "doc-2": "alice's own",
    }
    assert RAN == []


def test_alices_own_record_copied_to_another_item_is_refused(store_url: str) -> None:
    j = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    j.done("doc-1", result="one")
    store = Store(store_url)
    source = layout.journal_done_key(SESSION, "ocr", "1", item_name("doc-1"))
    copy = layout.journal_done_key(SESSION, "ocr", "1", item_name("doc-2"))
    store.write(copy, bytes(store.read(source)))
    with pytest.warns(UserWarning, match=f"record {copy} refused.*another item"):
        assert dict(Journal(store, SESSION, "ocr", "1", "node", ALICE_KEY).results()) == {"doc-1": "one"}


def test_without_a_key_records_are_read_as_before(store_url: str) -> None:
    Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY).done("doc-1", result="signed")
    Journal(Store(store_url), SESSION, "ocr", "1", "node").done("doc-2", result="unsigned")
    assert dict(Journal(Store(store_url), SESSION, "ocr", "1", "node").results()) == {
        "doc-1": "signed",
        "doc-2": "unsigned",
    }


def test_a_failure_record_another_user_planted_does_not_skip_the_item(store_url: str) -> None:
    """A forged failure of doc-2 would make ``retry_failed=False`` pass over it: with alice's key
    it is named and not counted; her own failures still are."""
    mallory = Journal(Store(store_url), SESSION, "ocr", "1", "mallory-node", MALLORY_KEY)
    mallory.failed("doc-2", "made up")
    [forged] = Store(store_url).list(layout.journal_failed_prefix(SESSION, "ocr", "1"))
    alice = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    alice.failed("doc-3", "a real failure")
    again = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    with pytest.warns(UserWarning, match="refused, never loaded: signed with another key"):
        offered = list(again.pending(["doc-1", "doc-2", "doc-3"], retry_failed=False))
    assert offered == ["doc-1", "doc-2"]
    assert list(Journal(Store(store_url), SESSION, "ocr", "1", "node").pending(["doc-2"], retry_failed=False)) == []

    # bytes that are no record under a failure's name: named too, and the item offered again
    Store(store_url).write(forged, b"not json")
    again = Journal(Store(store_url), SESSION, "ocr", "1", "node", ALICE_KEY)
    with pytest.warns(UserWarning, match="refused, never loaded: not a failure record"):
        assert list(again.pending(["doc-2"], retry_failed=False)) == ["doc-2"]
