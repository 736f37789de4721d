"""The Hub service's part of the ledger: servers starting and stopping, from its listings."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_pause import ledger
from jupyter_pause.hub import metrics
from jupyter_pause.hub.options import configure
from jupyter_pause.hub.policy import ServerView
from jupyter_pause.hub.server_events import ServerLedger, parse_profile_gpus
from jupyter_pause.hub.service import ledger_hours, server_ledger
from jupyter_pause.ledger import rollup
from jupyter_pause.store import signing
from jupyter_pause.store.storage import Store

STARTED = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def view(user: str, name: str = "", ready: bool = True, profile: str | None = None) -> ServerView:
    options = {"profile": profile} if profile else {}
    started = STARTED + timedelta(minutes=len(name))  # bob/gpu started after ann
    return ServerView(user, name, f"/user/{user}/{name}", ready, None, started, None, options)


def test_servers_starting_and_stopping_become_events(tmp_path) -> None:
    store = Store(str(tmp_path))
    book = ServerLedger(store, gpus=1, profile_gpus={"big": 8}, node="hub")
    asyncio.run(book.seen([view("ann"), view("bob", "gpu", profile="big"), view("cat", ready=False)]))
    book.released.add("ann")
    asyncio.run(book.seen([view("bob", "gpu", profile="big")]))
    asyncio.run(book.seen([]))
    events, malformed = ledger.read(store)
    assert malformed == 0
    assert [(e.event, e.server, e.user, e.gpus, e.trigger) for e in events] == [
        ("server_started", "ann", "ann", 1, None),
        ("server_started", "bob/gpu", "bob", 8, None),
        ("server_stopped", "ann", "ann", 1, "release"),
        ("server_stopped", "bob/gpu", "bob", 8, None),
    ]
    assert events[0].at == STARTED.timestamp()  # when the Hub says it started, not when it was seen


def test_a_restarted_service_writes_no_second_start(tmp_path) -> None:
    store = Store(str(tmp_path))
    for _ in range(2):  # two lives of the service, each seeing the same running server
        asyncio.run(ServerLedger(store).seen([view("ann")]))
    events, _ = ledger.read(store)
    assert [e.event for e in events] == ["server_started"]


def test_profile_gpus_are_parsed_and_checked() -> None:
    assert parse_profile_gpus(["gpu=1", " big = 8"]) == {"gpu": 1, "big": 8}
    with pytest.raises(ValueError, match="PROFILE=COUNT"):
        parse_profile_gpus(["gpu=two"])


def test_without_store_the_service_writes_nothing(tmp_path) -> None:
    args, _, _ = configure([], {})
    assert server_ledger(args, {}) is None
    args, _, _ = configure([f"--store={tmp_path}", "--server-gpus=2", "--profile-gpus=big=8"], {})
    book = server_ledger(args, {"JUPYTER_PAUSE_STORAGE_OPTIONS": "{}"})
    assert book is not None and book.gpus == 2 and book.profile_gpus == {"big": 8}
    with pytest.raises(SystemExit):
        configure(["--profile-gpus=big"], {})


def test_the_metrics_read_the_ledger_with_the_hubs_keys_so_its_roll_ups_merge_and_sign(tmp_path) -> None:
    """On a Hub that signs records, the metrics' reader holds every user's keys: the roll-up it
    writes for a settled day merges ann's signed activity records into one, signed with her key."""
    env = {"JUPYTER_PAUSE_STORAGE_OPTIONS": "{}", signing.HUB_SECRET_ENV: "metrics test hub secret " + "5" * 40}
    args, _, _ = configure([f"--store={tmp_path}"], env)
    keys = signing.hub_keyrings(env)
    assert keys is not None
    day = STARTED.timestamp() - STARTED.timestamp() % 86400
    base = {"session": "ann-nb", "user": "ann", "node": "n1", "server": "ann", "gpus": 2}
    events = [ledger.Event(event="kernel_started", at=day + 600, **base)]
    events += [
        ledger.Event(
            event="activity", at=day + 1000 + i * 300, spans=[[day + 900 + i * 300, day + 1000 + i * 300]], **base
        )
        for i in range(20)
    ]
    events.append(ledger.Event(event="kernel_stopped", at=day + 9000, **base))
    try:
        hours = ledger_hours(server_ledger(args, env), args, env)
        assert hours is not None and hours.keys is not None
        ledger.write_many(hours.store, events)  # signed with ann's key, as her server signs them
    finally:
        ledger.sign_with(None)
    figures = metrics.per_user(hours.store, day, day + 86400, hours.keys)  # writes the day's roll-up
    assert figures["ann"]["active"] == 20 * 100 * 2 / 3600
    name = STARTED.strftime("%Y%m%d")
    written = rollup.decode(hours.store.read(rollup.key(name)), name)
    assert isinstance(written, rollup.Rollup) and len(written.records) == 3  # the start, one merged run, the stop
    merged = written.records[1]
    assert rollup.stands_for(merged) == 20
    assert ledger.trust(ledger.Event.from_dict(merged), keys("ann")) == ledger.VERIFIED
    assert metrics.per_user(hours.store, day, day + 86400, hours.keys) == figures  # and from the roll-up
