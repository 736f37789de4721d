"""``jupyter pause hours`` (jupyter_pause/cli/hours.py): text, JSON, what-if and its mistakes,
over a ledger written to a real store folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jupyter_pause import ledger
from jupyter_pause.cli import main
from jupyter_pause.store.storage import Store
from tests.support.ledger_history import DAY, START, week, write

H = 3600.0
WINDOW = ["--since", "2026-11-16", "--until", "2026-11-23"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store folder holding the demo week's ledger (read only: tests that add records make their own)."""
    url = str(tmp_path_factory.mktemp("hours") / "store")
    write(Store(url), week())
    return url


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_and_what_if(store, capsys):
    code, out, _ = _run(capsys, "hours", "--store", store, *WINDOW, "--what-if", "15m,30m,1h,2h")
    assert code == 0
    assert "ben-llm" in out and "4xA100" in out
    assert "hours only" in out
    for policy in ("current", "idle 15m", "idle 30m", "idle 1h", "idle 2h"):
        assert f"\n{policy} " in out
    assert "resume wait model:" in out and "a pause during activity never happens" in out


def test_json_agrees_with_the_truth_and_prices_make_money(store, capsys):
    code, out, _ = _run(capsys, "hours", "--store", store, *WINDOW, "--json", "--price", "2", "--storage-price", "0.1")
    assert code == 0
    data = json.loads(out)
    truth = week().truth
    rows = {r["session"]: r for r in data["sessions"]}
    held = sum(b - a for a, b in truth["ben-llm"].held) / H * 4
    assert rows["ben-llm"]["held_gpu_hours"] == pytest.approx(held)
    assert data["money"]["gpus_held"] == pytest.approx(2 * data["total"]["held_gpu_hours"])
    assert data["money"]["storage"]["low"] > 0  # a range: the newest checkpoint .. everything written


def test_session_and_user_filters(store, capsys):
    _, out, _ = _run(capsys, "hours", "--store", store, *WINDOW, "--json", "--user", "ana")
    assert {r["session"] for r in json.loads(out)["sessions"]} == {"ana-train", "ana-eval"}
    _, out, _ = _run(capsys, "hours", "--store", store, *WINDOW, "--json", "--session", "chen-vision")
    assert [r["session"] for r in json.loads(out)["sessions"]] == ["chen-vision"]


def test_malformed_ledger_records_are_counted_not_fatal(tmp_path, capsys):
    store = str(tmp_path / "store")
    write(Store(store), week())
    Store(store).write("ledger/20261117/20261117-120000-000000-0000abcd.json", b"{not json")
    Store(store).write("ledger/20261117/20261117-120001-000000-0000abce.json", b'{"event": "activity"}')
    Store(store).write(
        "ledger/20261117/20261117-120002-000000-0000abcf.json", b'{"event": "kernel_started", "at": 1, "gpus": "two"}'
    )
    ledger.write(
        Store(store), ledger.Event("kernel_started", START + 3 * 86400, session=None, gpus=1)
    )  # a console's kernel
    code, out, _ = _run(capsys, "hours", "--store", store, *WINDOW)
    assert code == 0
    assert "3 malformed record(s) skipped" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--what-if", "15"], "not a duration"),
        (["--what-if", "0m"], "not a positive idle threshold"),
        (["--since", "last tuesday"], "neither an age"),
        (["--price", "-1"], "not a price"),
    ],
)
def test_bad_options_are_named(store, capsys, argv, says):
    with pytest.raises(SystemExit):
        main(["hours", "--store", store, *argv])
    assert says in capsys.readouterr().err


def test_a_window_that_ends_before_it_starts_is_refused(store, capsys):
    code, _, err = _run(capsys, "hours", "--store", store, "--since", "2026-11-20", "--until", "2026-11-19")
    assert code == 2
    assert "--since must be before --until" in err


def test_an_empty_ledger_says_so(tmp_path, capsys):
    code, out, _ = _run(capsys, "hours", "--store", str(tmp_path / "empty"), "--since", "7d")
    assert code == 0
    assert "no ledger records in this window" in out


def test_store_bytes_held_by_a_session(tmp_path, capsys):
    store = str(tmp_path / "store")
    write(Store(store), week())
    Store(store).write("sessions/ana-eval/blobs/ab/" + "ab" * 16, b"x" * 1234)
    code, out, _ = _run(capsys, "hours", "--store", store, *WINDOW, "--json")
    rows = {r["session"]: r for r in json.loads(out)["sessions"]}
    assert (rows["ana-eval"]["store_bytes"], rows["ana-train"]["store_bytes"]) == (1234, 0)
    _, out, _ = _run(capsys, "hours", "--store", store, *WINDOW)
    assert "store: 1.2 kB held now by these sessions" in out


def test_the_docs_show_the_real_what_if_output(store, capsys):
    argv = ["--since", "2026-11-16", "--until", "2026-11-23", "--what-if", "15m,30m,1h,2h", "--price", "2.5"]
    code, out, _ = _run(capsys, "hours", "--store", store, *argv)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "gpu-hours.md").read_text()
    assert code == 0
    assert f"$ jupyter pause hours {' '.join(argv)}\n{out}```" in readme


def test_a_window_opening_on_paused_sessions_knows_their_state_from_the_week_before(store, capsys):
    since = START + 2 * DAY + 3 * H  # Wednesday 03:00: every session is paused
    _, out, _ = _run(
        capsys, "hours", "--store", store, "--since", "2026-11-18T03:00", "--until", "2026-11-19", "--json"
    )
    rows = {r["session"]: r for r in json.loads(out)["sessions"]}
    for name, truth in week().truth.items():
        paused = sum(
            min(b, START + 3 * DAY) - max(a, since) for a, b in truth.paused if b > since and a < START + 3 * DAY
        )
        assert rows[name]["released_gpu_hours"] == pytest.approx(paused / H * truth.gpus)


def test_with_the_hub_secret_each_users_records_are_checked_with_that_users_key(tmp_path, capsys, monkeypatch):
    """Records signed with their user's key count; a forged user's records (signed by another
    user's key) never do; unsigned ones count unless --signed-only."""
    from jupyter_pause.store.signing import user_key

    secret = "c" * 64
    store = Store(str(tmp_path / "store"))
    history = week()
    forged_user = "ben"
    ledger.sign_with(lambda e: user_key(secret, "ana" if e.user == forged_user else e.user) if e.user else None)
    try:
        signed = [r for r in history.records if r.get("user") != "chen"]
        for record in signed:
            assert ledger.write(store, ledger.Event.from_dict(record)) is not None
    finally:
        ledger.sign_with(None)
    for record in history.records:
        if record.get("user") == "chen":
            ledger.write(store, ledger.Event.from_dict(record))

    monkeypatch.setenv("JUPYTER_PAUSE_HUB_SECRET", secret)
    code, out, _ = _run(capsys, "hours", "--store", str(tmp_path / "store"), *WINDOW, "--json")
    data = json.loads(out)
    counts = data["signatures"]
    users = {r["user"] for r in data["sessions"]}
    assert code == 0 and counts["checked"] is True
    assert counts["bad_signature"] == sum(r.get("user") == forged_user for r in history.records)
    assert counts["unsigned"] == sum(r.get("user") == "chen" for r in history.records)
    assert forged_user not in users and "chen" in users and "ana" in users

    code, out, _ = _run(capsys, "hours", "--store", str(tmp_path / "store"), *WINDOW, "--signed-only")
    assert code == 0 and "chen" not in out and "ana" in out
    assert "(not counted)" in out and "verified" in out


def test_signed_only_without_keys_says_which_to_set(store, capsys, monkeypatch):
    monkeypatch.delenv("JUPYTER_PAUSE_HUB_SECRET", raising=False)
    monkeypatch.delenv("JUPYTER_PAUSE_SIGNING_KEY", raising=False)
    code, _, err = _run(capsys, "hours", "--store", store, *WINDOW, "--signed-only")
    assert code != 0 and "JUPYTER_PAUSE_HUB_SECRET" in err


def test_records_of_another_user_and_replayed_copies_never_change_a_users_hours(tmp_path, capsys, monkeypatch):
    """Attack 4: under ana's prefix, ben writes records naming himself (signed with his own key)
    for ana's session, and copies of ana's own signed records under new names. Read as ana's
    prefix (``--user ana`` with the Hub's secret, or ana's own server), her figures are what her
    records say; the report names how many records it refused, and why."""
    from jupyter_pause.store.layout import LEDGER, ledger_key
    from jupyter_pause.store.signing import user_key

    secret = "s" * 64
    root = tmp_path / "ana"
    store = Store(str(root))
    anas = [r for r in week().records if r.get("user") == "ana"]
    bens = [{**r, "user": "ben"} for r in anas if r.get("session") == "ana-train"]
    ledger.sign_with(lambda e: user_key(secret, e.user) if e.user else None)
    try:
        for record in anas:
            ledger.write(store, ledger.Event.from_dict(record))
        shutil.copytree(root, tmp_path / "clean")  # ana's records alone, for the figures they give
        for record in bens:  # signed with ben's key: his own, naming him
            ledger.write(store, ledger.Event.from_dict(record))
    finally:
        ledger.sign_with(None)
    originals = sorted(p for p in (tmp_path / "clean" / LEDGER).rglob("*.json"))
    for n, path in enumerate(originals[:40]):  # ana's own records, copied under new names
        copy = root / ledger_key(json.loads(path.read_bytes())["at"], f"{n:08x}")
        copy.write_bytes(path.read_bytes())
    monkeypatch.setenv("JUPYTER_PAUSE_HUB_SECRET", secret)
    _, out, _ = _run(capsys, "hours", "--store", str(tmp_path / "clean"), *WINDOW, "--json", "--user", "ana")
    clean = json.loads(out)

    _, out, _ = _run(capsys, "hours", "--store", str(root), *WINDOW, "--json", "--user", "ana")
    data = json.loads(out)
    assert _gpu_figures(data) == _gpu_figures(clean)
    counts = data["signatures"]
    assert counts["foreign"] == len(bens) and counts["replayed"] > 0 and counts["bad_signature"] == 0
    _, text, _ = _run(capsys, "hours", "--store", str(root), *WINDOW, "--user", "ana")
    assert f"refused: {len(bens)} naming another user than the prefix's" in text

    monkeypatch.delenv("JUPYTER_PAUSE_HUB_SECRET")
    monkeypatch.setenv("JUPYTERHUB_USER", "ana")
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", user_key(secret, "ana"))
    _, out, _ = _run(capsys, "hours", "--store", str(root), *WINDOW, "--json")
    own = json.loads(out)
    assert _gpu_figures(own) == _gpu_figures(clean) and own["signatures"]["bad_signature"] == len(bens)


def test_a_record_a_cotenant_signed_in_a_users_prefix_never_counts_with_signed_only(tmp_path, capsys, monkeypatch):
    """Issue 54, attack 5: in ana's prefix of a team store (``JUPYTER_PAUSE_STORE=<team>/{user}``),
    ben writes records for ana's session signed with his own key, naming himself. Read with the
    Hub's secret over ana's prefix, without --user and off a Hub, the store URL says whose prefix it
    is: ben's records are foreign and ana's figures are what her own records say."""
    from jupyter_pause.store.signing import user_key

    secret = "t" * 64
    team = tmp_path / "team"
    store = Store(str(team / "ana"))
    anas = [r for r in week().records if r.get("user") == "ana"]
    bens = [{**r, "user": "ben"} for r in anas if r.get("session") == "ana-train"]
    ledger.sign_with(lambda e: user_key(secret, e.user) if e.user else None)
    try:
        for record in anas:
            ledger.write(store, ledger.Event.from_dict(record))
        shutil.copytree(team / "ana", tmp_path / "clean")  # ana's records alone
        for record in bens:
            ledger.write(store, ledger.Event.from_dict(record))
    finally:
        ledger.sign_with(None)
    for var in ("JUPYTERHUB_USER", "JUPYTER_PAUSE_SIGNING_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("JUPYTER_PAUSE_HUB_SECRET", secret)
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", str(team / "{user}"))
    clean = tmp_path / "clean"
    _, out, _ = _run(capsys, "hours", "--store", str(clean), *WINDOW, "--json", "--signed-only", "--user", "ana")
    expected = _gpu_figures(json.loads(out))

    _, out, _ = _run(capsys, "hours", "--store", str(team / "ana"), *WINDOW, "--json", "--signed-only")
    data = json.loads(out)
    assert _gpu_figures(data) == expected and data["signatures"]["prefix_of"] == "ana"
    assert data["signatures"]["foreign"] == len(bens) and {r["user"] for r in data["sessions"]} == {"ana"}
    _, text, _ = _run(capsys, "hours", "--store", str(team / "ana"), *WINDOW, "--signed-only")
    assert f"refused: {len(bens)} naming another user than the prefix's" in text and "read as ana's prefix" in text


def _gpu_figures(report: dict) -> list[dict]:
    """A report's rows without the store's size (the forged records take room in the store)."""
    return [{k: v for k, v in r.items() if k not in ("store_bytes", "storage_gb_months")} for r in report["sessions"]]


def test_a_blob_two_sessions_share_in_the_pool_is_split_between_them(tmp_path, capsys, new_process):
    """Two notebooks holding the same weights store them once; each session is shown half of
    them, so the sessions' bytes add up to what the store holds."""
    import numpy as np

    import jupyter_pause as jp
    from tests.support.processes import another_process

    store = tmp_path / "store"
    write(Store(str(store)), week())
    weights = np.arange(250_000, dtype=np.float32)  # 1 MB, written once into the pool
    for session in ("ana-eval", "ana-train"):
        another_process()
        jp.checkpoint(store=str(store), session=session, namespace={"w": weights, "tag": session})
    code, out, _ = _run(capsys, "hours", "--store", str(store), *WINDOW, "--json")
    rows = {r["session"]: r for r in json.loads(out)["sessions"]}
    held = rows["ana-eval"]["store_bytes"] + rows["ana-train"]["store_bytes"]
    everything = sum(p.stat().st_size for p in store.rglob("*") if p.is_file() and "ledger" not in p.parts)
    assert abs(held - everything) <= 2  # rounding of the two halves
    assert min(rows["ana-eval"]["store_bytes"], rows["ana-train"]["store_bytes"]) > weights.nbytes // 2
