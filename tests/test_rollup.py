"""Roll-ups of settled ledger days: written once by the first reader, read instead of the day's
events, giving the same report for any window (mid-day ones too), rebuilt when damaged or
outdated, never used by a reader that checks signatures; on a local folder and a real S3 server."""

from __future__ import annotations

import json
import random

import pytest

from jupyter_pause.hours import records, text, timeline, totals, whatif
from jupyter_pause.store import ledger, rollup
from jupyter_pause.store.layout import ledger_key
from jupyter_pause.store.storage import Store
from tests.ledger_history import DAY, START, week

#: The demo week's days (all settled long ago) and a window that opens and closes mid-day.
WINDOWS = [(START, START + 7 * DAY), (START + 1.3 * DAY, START + 4.6 * DAY), (START + 2.2 * DAY, START + 2.7 * DAY)]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path) -> Store:
    url = str(tmp_path / "store") if request.param == "local" else request.getfixturevalue("s3_env")
    return Store(url)


def _write(store: Store, rows: list[dict]) -> None:
    rng = random.Random(7)
    store.write_many({ledger_key(r["at"], f"{rng.getrandbits(32):08x}"): json.dumps(r).encode() for r in rows})


def _busy_kernels(days: int, per_day: int) -> list[dict]:
    """Synthetic records: two users' kernels that write ``per_day`` activity records a day, with a
    pause and a resume each day, and a death."""
    rows = []
    for user in ("ann", "bob"):
        for d in range(days):
            day = START + d * DAY
            base = {"v": 1, "session": f"{user}-nb", "user": user, "node": "n1", "server": user, "gpus": 1}
            rows.append({**base, "event": "kernel_started", "at": day + 600})
            for i in range(per_day):
                at = day + 700 + i * 300
                rows.append({**base, "event": "activity", "at": at + 250, "spans": [[at, at + 200]]})
            rows.append({**base, "event": "pause_requested", "at": day + 40000, "trigger": "idle"})
            rows.append({**base, "event": "kernel_stopped", "at": day + 40010, "trigger": "idle"})
            rows.append({**base, "event": "resume_requested", "at": day + 50000})
            rows.append({**base, "event": "kernel_ready", "at": day + 50030, "bytes": 10_000})
            rows.append({**base, "event": "next_cell_run", "at": day + 50100})
            rows.append({**base, "event": "kernel_restarted", "at": day + 60000, "reason": "died"})
            rows.append({**base, "event": "kernel_stopped", "at": day + 80000})
    return rows


def _report(events: list, since: float, until: float) -> dict:
    parsed, _ = records.parse_all(events)
    lines = timeline.timelines(parsed)
    hours = totals.compute(lines, totals.Window(since, until))
    return text.to_json(hours, whatif.what_if(lines, hours, {"15m": 900.0, "1h": 3600.0}))


@pytest.mark.integration
@pytest.mark.parametrize("rows", ["demo week", "busy kernels"])
def test_reports_from_roll_ups_equal_reports_from_the_raw_events(store, rows):
    _write(store, week(3).records if rows == "demo week" else _busy_kernels(4, 60))
    for since, until in WINDOWS:
        raw, raw_bad = ledger.Cache(store, rollups=False).read(since - 2 * DAY, until)
        first, first_bad = ledger.Cache(store).read(since - 2 * DAY, until)  # writes the roll-ups
        again, again_bad = ledger.Cache(store).read(since - 2 * DAY, until)  # reads them
        assert _report(first, since, until) == _report(raw, since, until) == _report(again, since, until)
        assert raw_bad == first_bad == again_bad == 0
    rolled = [k for k in store.list(rollup.ROLLUPS)]
    assert rolled and all(k.endswith(".json") for k in rolled)
    if rows == "busy kernels":  # a day's 120 activity records are 2 merged ones, the 16 other events kept
        day = rollup.decode(store.read(rollup.key("20261117")), "20261117")
        assert day.raw == 2 * (60 + 8) and len(day.records) == 2 * (1 + 8)


def test_a_settled_day_costs_one_read_once_rolled_up(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    _write(store, _busy_kernels(3, 50))
    ledger.Cache(store).read(START, START + 3 * DAY)
    reads: list[int] = []
    original = Store.read_many

    def counted(self, keys, *args, **kwargs):
        reads.append(len(keys))
        return original(self, keys, *args, **kwargs)

    monkeypatch.setattr(Store, "read_many", counted)
    events, _ = ledger.Cache(store).read(START, START + 3 * DAY)
    assert sum(reads) == 0 and len(events) == 2 * 3 * (1 + 8)  # three roll-ups, read one by one
    events, _ = ledger.Cache(store, rollups=False).read(START, START + 3 * DAY)
    assert sum(reads) == 2 * 3 * (50 + 8)


@pytest.mark.parametrize("damage", ["flip", "version", "truncate"])
def test_a_damaged_or_outdated_roll_up_is_rebuilt_from_the_raw_events_and_said(tmp_path, damage):
    store = Store(str(tmp_path))
    _write(store, _busy_kernels(2, 20))
    window = (START, START + 2 * DAY)
    expected = _report(ledger.Cache(store, rollups=False).read(*window)[0], *window)
    ledger.Cache(store).read(*window)
    path = tmp_path / rollup.key("20261116")
    data = path.read_bytes()
    if damage == "flip":
        data = data.replace(b'"ann"', b'"eve"', 1)
    elif damage == "version":
        outer = json.loads(data)
        outer["rollup"]["version"] = 99
        from jupyter_pause.store.manifest import canonical_body, checksum

        outer["checksum"] = checksum(canonical_body(outer["rollup"]))
        data = json.dumps(outer).encode()
    else:
        data = data[: len(data) // 2]
    path.write_bytes(data)
    reader = ledger.Cache(store)
    events, _ = reader.read(*window)
    assert _report(events, *window) == expected
    (note,) = reader.notes
    assert note.startswith("the roll-up of 20261116 was not used (") and "rebuilt from its 56 events" in note
    assert isinstance(rollup.decode(path.read_bytes(), "20261116"), rollup.Rollup)  # replaced by a good one
    assert ledger.Cache(store).read(*window)[0] == events and not ledger.Cache(store).notes


def test_two_readers_at_once_write_one_roll_up_and_the_raw_events_stay(tmp_path):
    store = Store(str(tmp_path))
    _write(store, _busy_kernels(1, 10))
    window = (START, START + DAY - 1)
    a, b = ledger.Cache(store), ledger.Cache(store)
    assert a.read(*window)[0] == b.read(*window)[0]
    assert list(store.list(rollup.ROLLUPS)) == [rollup.key("20261116")]
    assert len([k for k in store.list(ledger.ledger_prefix(START)) if ledger.ledger_of(k)]) == 2 * (10 + 8)


def test_a_day_not_settled_is_read_from_its_events_and_no_roll_up_is_written(tmp_path):
    store = Store(str(tmp_path))
    now = __import__("time").time()
    ledger.write(store, ledger.make("kernel_started", "n1", now - 60, session="s", user="u"))
    events, _ = ledger.Cache(store).read(now - 3600, None)
    assert [e.event for e in events] == ["kernel_started"]
    assert list(store.list(rollup.ROLLUPS)) == []


def test_gc_ledger_older_than_drops_raw_records_of_rolled_up_days_never_the_roll_ups(tmp_path, capsys):
    from jupyter_pause.cli.main import main

    store = Store(str(tmp_path))
    _write(store, _busy_kernels(3, 5))
    window = (START, START + 2 * DAY - 1)  # days 16 and 17 rolled up, day 18 not yet
    expected = _report(ledger.Cache(store).read(*window)[0], *window)
    day16 = [k for k in store.list(ledger.ledger_prefix(START)) if ledger.ledger_of(k)]

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "3d", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)["ledger"]
    assert [(p["day"], p["records"], bool(p["kept"])) for p in dry] == [
        ("20261116", 26, False),
        ("20261117", 26, False),
        ("20261118", 26, True),
    ]
    assert "it has no roll-up yet" in dry[2]["kept"]
    assert [k for k in store.list(ledger.ledger_prefix(START)) if ledger.ledger_of(k)] == day16  # a dry run

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "3d"]) == 0
    said = capsys.readouterr().out
    assert "ledger 20261116: removed 26 raw records" in said and "its roll-up stays" in said
    assert not [k for k in store.list(ledger.ledger_prefix(START)) if ledger.ledger_of(k)]
    assert len(store.list(rollup.ROLLUPS)) == 2  # never the roll-ups
    assert _report(ledger.Cache(store).read(*window)[0], *window) == expected  # the same report after


def test_gc_ledger_older_than_refuses_a_bad_age(tmp_path, capsys):
    from jupyter_pause.cli.main import main

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "0s"]) != 0
    assert "--ledger-older-than must be a positive age" in capsys.readouterr().err
