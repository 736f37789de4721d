"""Roll-ups of settled ledger days: written once by the first reader, read instead of the day's
events, giving the same report for any window (mid-day ones, and ones that open or close inside a
run of merged activity records, too), rebuilt when damaged or outdated; signed where the writer
holds the keys, so readers that check signatures get the same verdicts and figures from them as
from the raw events; on a local folder and a real S3 server."""

from __future__ import annotations

import json
import random

import pytest

from jupyter_pause import ledger
from jupyter_pause.hours import records, text, timeline, totals, whatif
from jupyter_pause.ledger import checked, rollup
from jupyter_pause.ledger.spans import Spans
from jupyter_pause.store import layout, signing
from jupyter_pause.store.layout import ledger_key
from jupyter_pause.store.storage import Store
from tests.support.ledger_history import DAY, START, week

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
    reads: list[list[str]] = []
    original = Store.read_many

    def counted(self, keys, *args, **kwargs):
        reads.append(list(keys))
        return original(self, keys, *args, **kwargs)

    monkeypatch.setattr(Store, "read_many", counted)
    events, _ = ledger.Cache(store).read(START, START + 3 * DAY)
    days = ["20261116", "20261117", "20261118", "20261119"]
    assert reads == [[rollup.key(d) for d in days], []]  # the four days' roll-ups at once, no raw event
    assert len(events) == 2 * 3 * (1 + 8)
    reads.clear()
    events, _ = ledger.Cache(store, rollups=False).read(START, START + 3 * DAY)
    assert sum(map(len, reads)) == 2 * 3 * (50 + 8)


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
    assert len([k for k in store.list(layout.ledger_prefix(START)) if layout.ledger_of(k)]) == 2 * (10 + 8)


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
    day16 = [k for k in store.list(layout.ledger_prefix(START)) if layout.ledger_of(k)]

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "3d", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)["ledger"]
    assert [(p["day"], p["records"], bool(p["kept"])) for p in dry] == [
        ("20261116", 26, False),
        ("20261117", 26, False),
        ("20261118", 26, True),
    ]
    assert "it has no roll-up yet" in dry[2]["kept"]
    assert [k for k in store.list(layout.ledger_prefix(START)) if layout.ledger_of(k)] == day16  # a dry run

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "3d"]) == 0
    said = capsys.readouterr().out
    assert "ledger 20261116: removed 26 raw records" in said and "its roll-up stays" in said
    assert not [k for k in store.list(layout.ledger_prefix(START)) if layout.ledger_of(k)]
    assert len(store.list(rollup.ROLLUPS)) == 2  # never the roll-ups
    assert _report(ledger.Cache(store).read(*window)[0], *window) == expected  # the same report after


def test_gc_ledger_older_than_refuses_a_bad_age(tmp_path, capsys):
    from jupyter_pause.cli.main import main

    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "0s"]) != 0
    assert "--ledger-older-than must be a positive age" in capsys.readouterr().err


# -- windows that cut through a merged run ---------------------------------------------------------

#: (read from, window since, window until): the read opens inside day 16's run of activity records
#: and the window closes inside day 17's (runs span 950 s .. 18650 s of each day).
CUTS = [
    (START + 5000, START + DAY + 5000, START + DAY + 10000.5),
    (START + 960, START + 965, START + DAY + 18600),
    (START + 18000, START + 18100, START + 18200),
]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("store", "cut"), [*(("local", cut) for cut in CUTS), ("s3", CUTS[0])], indirect=["store"]
)  # the cuts are arithmetic on the records; one of them on S3 is enough for S3's listing
def test_a_window_inside_a_run_of_merged_records_gives_the_raw_report(store, cut):
    _write(store, _busy_kernels(3, 60))
    read_from, since, until = cut
    raw, _ = ledger.Cache(store, rollups=False).read(read_from, until)
    ledger.Cache(store).read(read_from, until)  # writes the roll-ups
    rolled, _ = ledger.Cache(store).read(read_from, until)
    assert _report(rolled, since, until) == _report(raw, since, until)
    assert sum(ledger.stands_for(e) for e in rolled) == len(raw)  # the narrowed runs hold exactly the raw records


def test_cut_keeps_exactly_the_records_in_the_window():
    run = [
        {"v": 1, "event": "activity", "at": 10.0 * i, "session": "s", "spans": [[10.0 * i - 5, 10.0 * i - 1]]}
        for i in range(1, 6)
    ]
    (merged,) = rollup.summarise(run)
    assert rollup.parts(merged) == [(10.0 * i, 1) for i in range(1, 6)]
    assert rollup.cut(merged, None, None) is merged and rollup.cut(merged, 51, None) is None
    narrowed = rollup.cut(merged, 20, 40)
    assert narrowed["at"] == 20 and narrowed["spans"] == [[15.0, 19.0], [25.0, 29.0], [35.0, 39.0]]
    assert rollup.stands_for(narrowed) == 3 and rollup.stands_for(run[0]) == 1


# -- signed roll-ups ---------------------------------------------------------------------------------

SECRET = "roll-up test hub secret " + "7" * 40
USERS_KEYS = signing.hub_keyrings({signing.HUB_SECRET_ENV: SECRET})


def _write_signed(store: Store, rows: list[dict], keys_for, unsigned_users: tuple[str, ...] = ()) -> None:
    """``rows`` written as the ledger writes them, each signed with its user's keys (except the
    users in ``unsigned_users``)."""
    rng = random.Random(11)
    ledger.sign_with(lambda e: None if e.user in unsigned_users else keys_for(e.user))
    try:
        objects = {
            ledger_key(r["at"], f"{rng.getrandbits(32):08x}"): ledger.encode(ledger.Event.from_dict(r)) for r in rows
        }
    finally:
        ledger.sign_with(None)
    store.write_many(objects)


def _checked_report(events: list, since: float, until: float, keys_for, signed_only: bool = False) -> dict:
    kept, counts = checked(events, keys_for, signed_only)
    return {"report": _report(kept, since, until), "signatures": counts}


def _rows_with_three_users(days: int = 3, per_day: int = 30) -> list[dict]:
    rows = _busy_kernels(days, per_day)  # ann and bob
    rows += [{**r, "session": "cid-nb", "user": "cid", "server": "cid"} for r in rows if r["user"] == "ann"]
    return rows


#: Who wrote the roll-ups, and whether the reader counts signed records only: every pair on a local
#: folder, and on S3 the one whose roll-ups merge signed records (what the keys decide is the same there).
CHECKING = [
    *(
        ("local", writer, signed_only)
        for writer in ("hub secret", "no keys", "ann's key")
        for signed_only in (False, True)
    ),
    ("s3", "hub secret", False),
]


@pytest.mark.integration
@pytest.mark.parametrize(("store", "writer", "signed_only"), CHECKING, indirect=["store"])
def test_a_checking_reader_gets_the_raw_report_from_roll_ups_whoever_wrote_them(store, writer, signed_only):
    """cid's records are unsigned; every reader here checks with every user's keys (the Hub's
    secret). A roll-up written with the Hub's secret merges ann's and bob's signed records into
    signed ones; one written without keys, or with only ann's key, keeps the records it cannot
    verify whole, signatures and all. Either way: the raw report, the raw counts."""
    _write_signed(store, _rows_with_three_users(), USERS_KEYS, unsigned_users=("cid",))
    ann = USERS_KEYS("ann")
    writer_keys = {"hub secret": USERS_KEYS, "no keys": None, "ann's key": lambda _user: ann}[writer]
    for since, until in WINDOWS + [(START + DAY + 5000, START + 2 * DAY + 10000.5)]:
        raw, _ = ledger.Cache(store, rollups=False).read(since - DAY, until)
        ledger.Cache(store, keys=writer_keys).read(since - DAY, until)  # the roll-ups' writer
        rolled, _ = ledger.Cache(store, keys=USERS_KEYS).read(since - DAY, until)
        expected = _checked_report(raw, since, until, USERS_KEYS, signed_only)
        assert _checked_report(rolled, since, until, USERS_KEYS, signed_only) == expected
        assert expected["signatures"]["verified"] > 0 and expected["signatures"]["unsigned"] > 0
    day = rollup.decode(store.read(rollup.key("20261117")), "20261117")
    merged = [r for r in day.records if rollup.PARTS in r]
    signed = {r["user"] for r in merged if "sig" in r}
    assert {"hub secret": {"ann", "bob"}, "no keys": set(), "ann's key": {"ann"}}[writer] == signed
    assert "cid" in {r["user"] for r in merged if "sig" not in r}  # unsigned records merged, unsigned
    kept_whole = [r for r in day.records if r["event"] == "activity" and rollup.PARTS not in r]
    assert all("sig" in r for r in kept_whole) and len(kept_whole) == 30 * (2 - len(signed))


def test_a_forged_record_does_not_become_signed_through_a_roll_up(tmp_path):
    """A record with a signature no key verifies, and an unsigned record claiming a signed user,
    written among that user's signed ones: the roll-up keeps the first whole and bad, merges the
    second only with unsigned records; neither ever counts as verified."""
    store = Store(str(tmp_path))
    rows = _busy_kernels(1, 10)
    _write_signed(store, rows, USERS_KEYS)
    ann = [r for r in rows if r["user"] == "ann" and r["event"] == "activity"]
    forged = {**ann[3], "at": ann[3]["at"] + 1, "spans": [[ann[3]["at"] - 100, ann[3]["at"] + 0.5]]}
    record = ledger.Event.from_dict(forged).to_dict()
    body = json.dumps(record, sort_keys=True).encode()
    record["sig"] = signing.seal(body, signing.LEDGER, {"user": "ann", "day": "20261116"}, "a key nobody holds")
    bad = json.dumps(record).encode()
    plain = json.dumps({**forged, "at": forged["at"] + 1}).encode()
    store.write_many({ledger_key(forged["at"], "0000bad0"): bad, ledger_key(forged["at"] + 1, "0000bad1"): plain})
    window = (START, START + DAY - 1)
    raw, _ = ledger.Cache(store, rollups=False).read(*window)
    ledger.Cache(store, keys=USERS_KEYS).read(*window)
    rolled, _ = ledger.Cache(store, keys=USERS_KEYS).read(*window)
    expected = _checked_report(raw, *window, USERS_KEYS, signed_only=True)
    assert _checked_report(rolled, *window, USERS_KEYS, signed_only=True) == expected
    assert expected["signatures"] == {
        "verified": 2 * 18,
        "unsigned": 1,
        "bad signature": 1,
        "foreign": 0,
        "replayed": 0,
    }
    day = rollup.decode(store.read(rollup.key("20261116")), "20261116")
    assert [r for r in day.records if r.get("sig") == record["sig"]] == [record]  # kept whole, still bad
    assert json.loads(plain) | {"v": 1} in [{k: v for k, v in r.items() if v is not None} for r in day.records]
    assert all(
        ledger.trust(ledger.Event.from_dict(r), USERS_KEYS(r["user"])) != ledger.VERIFIED
        for r in day.records
        if r.get("at") in (forged["at"], forged["at"] + 1)
    )


def test_a_forged_roll_up_cannot_vouch_for_its_records(tmp_path):
    """A roll-up rewritten by someone without the keys (a merged record's spans stretched, its
    checksum recomputed): its record's signature no longer verifies, so it never counts."""
    from jupyter_pause.store.manifest import canonical_body, checksum

    store = Store(str(tmp_path))
    _write_signed(store, _busy_kernels(1, 10), USERS_KEYS)
    window = (START, START + DAY - 1)
    ledger.Cache(store, keys=USERS_KEYS).read(*window)
    path = tmp_path / rollup.key("20261116")
    outer = json.loads(path.read_bytes())
    (run, *_) = [r for r in outer["rollup"]["records"] if rollup.PARTS in r]
    stretched = Spans.decode(run["spans"]).array.copy()  # packed: the base64 of the values
    stretched[0, 0] -= 3600
    run["spans"] = Spans.of_pairs(stretched.tolist()).encode()
    outer["checksum"] = checksum(canonical_body(outer["rollup"]))
    path.write_text(json.dumps(outer))
    rolled, _ = ledger.Cache(store, keys=USERS_KEYS).read(*window)
    _, counts = checked(rolled, USERS_KEYS, signed_only=True)
    assert counts == {"verified": 18 + 8, "unsigned": 0, "bad signature": 10, "foreign": 0, "replayed": 0}


# -- packed spans (format 3) and adding up many spans at once ----------------------------------------


def test_packed_spans_and_parts_come_back_exactly_and_refuse_what_they_are_not():
    pairs = [[1794787200.123456789, 1794787260.5], [1794787300.0, 1794787300.0], [0.1, 0.30000000000000004]]
    spans = Spans.of_pairs(pairs)
    again = Spans.decode(spans.encode())
    assert again == spans and again.tolist() == pairs and again[1:].tolist() == pairs[1:]
    assert [list(p) for p in again] == pairs and len(again) == 3
    for bad in ([[2.0, 1.0]], [[0.0, float("inf")]], [[0.0, float("nan")]]):
        with pytest.raises(ValueError):
            Spans.of_pairs(bad)
    with pytest.raises(ValueError):
        Spans.decode("not base64!")
    with pytest.raises(ValueError):
        Spans.decode(Spans.of_pairs([[1.0, 2.0]]).encode()[:-4])  # not whole pairs
    with pytest.raises(ValueError):
        rollup.Parts.of_pairs([[10.0, 1.5]])  # a count that is not whole
    (merged,) = rollup.summarise(
        [
            {"v": 1, "event": "activity", "at": 10.0 * i, "session": "s", "spans": [[10.0 * i - 5, 10.0 * i - 1]]}
            for i in (1, 2)
        ]
    )
    assert rollup.parts(merged) == [(10.0, 1), (20.0, 1)] and rollup.stands_for(merged) == 2
    written = rollup.decode(rollup.encode("20261116", [merged], 2, 0), "20261116")
    assert isinstance(written, rollup.Rollup) and written.records == [merged]
    assert isinstance(written.records[0]["spans"], Spans) and b"[[" not in rollup.encode("20261116", [merged], 2, 0)


def test_a_roll_up_whose_packed_spans_cannot_be_read_is_rebuilt(tmp_path):
    from jupyter_pause.store.manifest import canonical_body, checksum

    store = Store(str(tmp_path))
    _write(store, _busy_kernels(1, 10))
    window = (START, START + DAY - 1)
    expected = _report(ledger.Cache(store, rollups=False).read(*window)[0], *window)
    ledger.Cache(store).read(*window)
    path = tmp_path / rollup.key("20261116")
    outer = json.loads(path.read_bytes())
    (run, *_) = [r for r in outer["rollup"]["records"] if rollup.PARTS in r]
    run["spans"] = run["spans"][:-8]  # its checksum recomputed: only the spans themselves are wrong
    outer["checksum"] = checksum(canonical_body(outer["rollup"]))
    path.write_text(json.dumps(outer))
    reader = ledger.Cache(store)
    assert _report(reader.read(*window)[0], *window) == expected
    (note,) = reader.notes
    assert "a merged record cannot be read" in note


def test_many_spans_add_up_as_they_do_one_by_one():
    """Unions and clips of an array are exactly those of lists; GPU-seconds over many spans at once
    are those of each span alone (counts changing inside some spans, and unknown ones)."""
    from jupyter_pause.hours import intervals

    rng = random.Random(5)
    starts = [rng.uniform(0, 10_000) for _ in range(400)]
    pairs = [(a, a + rng.choice([0.0, rng.uniform(0, 60)])) for a in starts]
    pairs += [(b, b + 5) for _, b in pairs[:50]]  # touching ones
    array = intervals.as_array(pairs)
    assert intervals.pairs(intervals.union_array(array)) == intervals.union(pairs)
    assert intervals.pairs(intervals.clip_array(array, 2500.5, 7000.0)) == intervals.clip(pairs, 2500.5, 7000.0)
    united = intervals.union(pairs)
    assert len(united) >= timeline.MANY
    t = timeline.Timeline(key="s", counts=[(0.0, 1), (3000.0, 4), (3000.0, 2), (8000.0, 3)])
    alone = [t.gpu_seconds([span]) for span in united]
    assert t.gpu_seconds(intervals.as_array(united)) == pytest.approx(sum(alone), rel=1e-12)
    assert t.gpu_seconds(united) == t.gpu_seconds(intervals.as_array(united))  # list or array alike
    t.counts.append((9000.0, None))
    assert t.gpu_seconds(intervals.as_array(united)) is None
    assert t.gpu_seconds(intervals.as_array([s for s in united if s[1] <= 9000.0])) is not None
