"""The ledger: records round trip, keys sort by time, malformed records are skipped and counted,
writes never raise, and two processes writing at once lose no event (local folder and S3)."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from typing import Any

import pytest

from jupyter_pause import ledger
from jupyter_pause.store import layout
from jupyter_pause.store.storage import Store
from tests.support.processes import racing_processes

# store_url (every backend) and no_pause_env: tests/support/stores.py, through conftest.py
pytestmark = pytest.mark.usefixtures("no_pause_env")

#: Events each writer process appends in the concurrency test.
PER_WRITER = 500


def test_key_is_day_folder_then_time_then_tag() -> None:
    at = 1767225600.25  # 2026-01-01 00:00:00.25 UTC
    key = layout.ledger_key(at, "0a1b2c3d")
    assert key == "ledger/20260101/20260101-000000-250000-0a1b2c3d.json"
    assert layout.ledger_of(key) == "20260101-000000-250000-0a1b2c3d"
    assert layout.ledger_of(key.replace("ledger/20260101", "ledger/20260102")) is None  # wrong day folder
    assert layout.ledger_of("ledger/20260101/.x.part") is None
    assert layout.ledger_key(at) != layout.ledger_key(at)  # same microsecond, two writers: two keys
    # a time that rounds up to the next day lands in that day's folder
    assert layout.ledger_key(1767225599.9999999, "00000000").startswith("ledger/20260101/20260101-000000-000000")


def test_events_round_trip_in_time_order(store_url: str) -> None:
    store = Store(store_url)
    now = time.time()
    written = [
        ledger.make("kernel_started", "n1", at=now - 30, session="s", gpu_model="H200", gpus=2),
        ledger.make("activity", "n1", at=now - 10, session="s", spans=[[now - 25, now - 20], [now - 15, now - 11]]),
        ledger.make("pause_requested", "n1", at=now - 9, session="s", trigger="idle"),
        ledger.make("checkpoint_committed", "n1", at=now - 8, session="s", bytes=10, bytes_total=99, checkpoint="c"),
    ]
    for event in reversed(written):
        assert ledger.write(store, event) is not None
    events, malformed = ledger.read(store)
    assert malformed == 0
    assert [e.event for e in events] == [e.event for e in written]
    assert events[0].gpus == 2 and events[0].gpu_model == "H200" and events[0].user == ledger.current_user()
    assert events[1].spans == [[now - 25, now - 20], [now - 15, now - 11]]
    assert events[3].bytes == 10 and events[3].bytes_total == 99 and events[3].checkpoint == "c"
    assert ledger.read(store, since=now - 9.5)[0] == events[2:]
    assert ledger.read(store, since=now - 100, until=now - 9.5)[0] == events[:2]


def test_since_lists_only_the_days_it_needs(tmp_path) -> None:
    store = Store(str(tmp_path))
    old, new = time.time() - 10 * 86400, time.time()
    ledger.write(store, ledger.make("kernel_started", at=old))
    ledger.write(store, ledger.make("kernel_started", at=new))
    listed: list[str] = []
    original = store.list
    store.list = lambda prefix: listed.append(prefix) or original(prefix)  # type: ignore[method-assign]
    events, _ = ledger.read(store, since=new - 3600)
    assert [e.at for e in events] == [new]
    assert all(p.startswith("ledger/2") for p in listed) and len(listed) <= 3


def test_hub_user_is_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    assert ledger.make("kernel_started").user == "ada"


def test_unknown_fields_are_kept_and_ignored(tmp_path) -> None:
    store = Store(str(tmp_path))
    store.write(layout.ledger_key(100.0), json.dumps({"v": 2, "event": "kernel_started", "at": 100, "new": 1}).encode())
    (event,), malformed = ledger.read(store)
    assert malformed == 0 and event.extra == {"new": 1} and event.gpus == 0


BAD = [
    b"not json",
    b"[1, 2]",
    b'{"at": 5}',
    b'{"event": "kernel_started"}',
    b'{"event": "kernel_started", "at": "yesterday"}',
    b'{"event": "kernel_started", "at": 5, "gpus": "two"}',
    b'{"event": "kernel_started", "at": 5, "gpus": -1}',
    b'{"event": "kernel_started", "at": 5, "session": 7}',
    b'{"event": "activity", "at": 5, "spans": [[3, 1]]}',
    b'{"event": "activity", "at": 5, "spans": "busy"}',
    b'{"event": "kernel_started", "at": NaN}',
    b"\xff\xfe",
]


def test_malformed_records_are_skipped_and_counted(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(str(tmp_path))
    for n, body in enumerate(BAD):
        store.write(layout.ledger_key(1000.0 + n), body)
    store.write("ledger/19700101/stray-file.txt", b"ignored: not a ledger key")
    good = ledger.make("kernel_stopped", at=2000.0, session="s", trigger="button")
    ledger.write(store, good)
    events, malformed = ledger.read(store)
    assert malformed == len(BAD)
    assert [(e.event, e.session, e.trigger) for e in events] == [("kernel_stopped", "s", "button")]


class _BrokenFS:
    """A filesystem whose every write fails, as an unreachable store's does."""

    def open(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("endpoint unreachable")


def test_write_never_raises_and_counts_what_it_lost(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(f"memory://ledger-{uuid.uuid4().hex}")
    store.fs = _BrokenFS()  # type: ignore[assignment]
    before = ledger.lost()
    with caplog.at_level(logging.WARNING, logger="jupyter_pause.ledger"):
        assert ledger.write(store, ledger.make("pause_requested", trigger="idle")) is None
        assert ledger.write(store, ledger.make("kernel_stopped")) is None
    assert ledger.lost() == before + 2
    assert "kernel_stopped event lost" in caplog.text and f"({before + 2} lost so far)" in caplog.text
    assert ledger.write(None, ledger.make("kernel_stopped")) is None  # no store: nothing, quietly


def _writer(url: str, env: dict[str, str], name: str, barrier: Any) -> None:
    os.environ.update(env)
    store = Store(url)
    barrier.wait()
    for n in range(PER_WRITER):
        if ledger.write(store, ledger.make("activity", name, session=f"{name}-{n}", spans=[[0.0, 1.0]])) is None:
            raise SystemExit(f"{name}: event {n} lost")


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_two_processes_writing_at_once_lose_no_event(backend: str, tmp_path, request: pytest.FixtureRequest) -> None:
    url = str(tmp_path / "store") if backend == "local" else request.getfixturevalue("s3_env")
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    context = racing_processes(__name__)
    barrier = context.Barrier(2)
    writers = [context.Process(target=_writer, args=(url, env, name, barrier)) for name in ("w1", "w2")]
    for process in writers:
        process.start()
    for process in writers:
        process.join(300)
        assert process.exitcode == 0
    events, malformed = ledger.read(Store(url))
    assert malformed == 0
    assert sorted(e.session for e in events) == sorted(f"{w}-{n}" for w in ("w1", "w2") for n in range(PER_WRITER))


def test_a_cache_reads_each_record_once_and_lists_settled_days_once(tmp_path) -> None:
    store = Store(str(tmp_path))
    now = time.time()
    ledger.write(store, ledger.make("kernel_stopped", at=now - 5 * 86400, session="old"))
    ledger.write(store, ledger.make("kernel_stopped", at=now, session="new"))
    cache = ledger.Cache(store)
    listed: list[str] = []
    read: list[str] = []
    original_list, original_read = store.list, store.read_many
    store.list = lambda prefix: listed.append(prefix) or original_list(prefix)  # type: ignore[method-assign]
    store.read_many = lambda keys, **kw: (  # type: ignore[method-assign]
        read.extend(k for k in keys if layout.ledger_of(k)) or original_read(keys, **kw)
    )
    first, _ = cache.read(now - 6 * 86400)
    assert [e.session for e in first] == ["old", "new"]
    listed.clear()
    ledger.write(store, ledger.make("kernel_started", at=now + 1, session="new"))
    second, _ = cache.read(now - 6 * 86400)
    assert [e.session for e in second] == ["old", "new", "new"]
    assert len(read) == 3  # each record read once (the old one to roll its day up)
    today = layout.ledger_prefix(now)
    assert today in listed and all(p >= layout.ledger_prefix(now - 86400) for p in listed)  # old days not again


# -- signed records -------------------------------------------------------------------------------

KEY = "the server's signing key 5d2a"


@pytest.fixture
def signing_with():
    """Sign this process's records with the given keys for one test, then stop signing."""
    yield ledger.sign_with
    ledger.sign_with(None)


def _only(store: Store) -> tuple[ledger.Event, dict[str, Any]]:
    (event,), _ = ledger.read(store)
    (key,) = [k for k in store.list("ledger/")]
    return event, json.loads(bytes(store.read(key)))


def test_with_a_key_every_record_is_signed_and_verifies(tmp_path, signing_with) -> None:
    store = Store(str(tmp_path))
    signing_with(KEY)
    ledger.write(store, ledger.make("kernel_started", session="s", gpus=2, extra={"note": "x"}))
    event, raw = _only(store)
    assert raw["sig"]["alg"] == "hmac-sha256" and KEY not in json.dumps(raw)
    assert ledger.trust(event, KEY) == ledger.VERIFIED
    assert ledger.trust(event, "another key") == ledger.BAD_SIGNATURE


def test_a_record_changed_after_signing_does_not_verify(tmp_path, signing_with) -> None:
    store = Store(str(tmp_path))
    signing_with(KEY)
    ledger.write(store, ledger.make("kernel_started", session="s", gpus=1))
    _, raw = _only(store)
    raw["gpus"] = 8  # a forger claiming more GPU hours
    (key,) = list(store.list("ledger/"))
    store.write(key, json.dumps(raw).encode())
    event, _ = _only(store)
    assert ledger.trust(event, KEY) == ledger.BAD_SIGNATURE


def test_without_a_key_records_are_unsigned_and_say_so(tmp_path) -> None:
    store = Store(str(tmp_path))
    ledger.write_many(store, [ledger.make("kernel_started", session="s")])
    event, raw = _only(store)
    assert "sig" not in raw
    assert ledger.trust(event, KEY) == ledger.UNSIGNED


def test_keys_per_event_sign_each_users_record_with_that_users_key(tmp_path, signing_with) -> None:
    store = Store(str(tmp_path))
    signing_with(lambda event: f"key of {event.user}")
    ledger.write(store, ledger.make("server_started", user="ana"))
    event, _ = _only(store)
    assert ledger.trust(event, "key of ana") == ledger.VERIFIED
    assert ledger.trust(event, "key of ben") == ledger.BAD_SIGNATURE
