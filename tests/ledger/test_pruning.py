"""``jupyter pause gc --ledger-older-than`` (``ledger/pruning.py``): a settled day's raw records go
only where its roll-up holds what they give, whoever summarised them; a roll-up a co-tenant
planted, counting the day's records and holding none, never has them removed."""

from __future__ import annotations

import json
import time

import pytest

from jupyter_pause import ledger
from jupyter_pause.cli.main import main
from jupyter_pause.ledger import rollup
from jupyter_pause.store import layout
from jupyter_pause.store.signing import user_key
from jupyter_pause.store.storage import Store
from tests.support.ledger_history import DAY, START, week

pytestmark = pytest.mark.usefixtures("no_pause_env")

ANA = user_key("p" * 64, "ana")


def _anas_week(store: Store) -> None:
    """Ana's records of the demo week, signed with her key, as her server writes them."""
    ledger.sign_with(ANA)
    try:
        for record in week().records:
            if record.get("user") == "ana":
                assert ledger.write(store, ledger.Event.from_dict(record)) is not None
    finally:
        ledger.sign_with(None)


def _raw(store: Store, day: float) -> list[str]:
    return sorted(k for k in store.list(layout.ledger_prefix(day)) if layout.ledger_of(k))


@pytest.mark.parametrize("summarised", ["with ana's key", "without keys"])
def test_raw_records_go_where_the_roll_up_holds_them_whoever_summarised_them(tmp_path, capsys, monkeypatch, summarised):
    store = Store(str(tmp_path))
    _anas_week(store)
    before = [_raw(store, START + d * DAY) for d in range(7)]  # ana works on weekdays
    keys = (lambda _user: ANA) if summarised == "with ana's key" else None
    ledger.Cache(store, keys=keys).read(START, START + 7 * DAY)  # writes the settled days' roll-ups
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", ANA)
    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "1d", "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)["ledger"]
    days = [time.strftime("%Y%m%d", time.gmtime(START + d * DAY)) for d in range(7)]
    worked = [day for d, day in enumerate(days) if before[d]]
    assert [(p["day"], p["kept"]) for p in pruned] == [(day, "") for day in worked]
    assert all(_raw(store, START + d * DAY) == [] for d in range(7))
    assert all(store.exists(rollup.key(day)) for day in worked)  # never the roll-ups


def test_a_planted_roll_up_never_has_the_raw_records_removed(tmp_path, capsys, monkeypatch):
    store = Store(str(tmp_path))
    _anas_week(store)
    day, raw = "20261116", _raw(store, START)
    Store(str(tmp_path)).write(rollup.key(day), rollup.encode(day, [], len(raw), 0))  # counts them, holds none
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", ANA)
    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "1d", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"ledger {day}: {len(raw)} raw records kept: its roll-up does not hold what the day's raw records" in said
    assert main(["gc", "--store", str(tmp_path), "--ledger-older-than", "1d"]) == 0
    assert _raw(store, START) == raw
