"""The sessions panel's numbers from the ledger: since when a session is paused, and the GPU-hours
released so far (GPUs its kernel held x time since it stopped); unknown, not zero, without a record."""

from __future__ import annotations

import pytest

from jupyter_pause import ledger
from jupyter_pause.server import accounting
from jupyter_pause.store import layout
from jupyter_pause.store.signing import user_key
from jupyter_pause.store.storage import Store

NOW = 1_767_300_000.0  # 2026-01-01 20:40 UTC


def test_paused_since_and_hours_released(tmp_path) -> None:
    store = Store(str(tmp_path))
    for event in [
        ledger.make("kernel_started", at=NOW - 5 * 86400, session="a", gpus=4),
        ledger.make("kernel_stopped", at=NOW - 4 * 86400, session="a", gpus=4, trigger="idle"),
        ledger.make("kernel_ready", at=NOW - 3 * 86400, session="a", gpus=4),
        ledger.make("kernel_stopped", at=NOW - 7200, session="a", gpus=4, trigger="button"),  # this pause
        ledger.make("kernel_stopped", at=NOW - 1800, session="b", gpus=0),
        ledger.make("kernel_stopped", at=NOW - 600, session="other", gpus=8),
    ]:
        ledger.write(store, event)
    cache = ledger.Cache(store)
    found = accounting.paused(cache, {"a": NOW - 7000, "b": NOW - 1700, "c": NOW - 100}, now=NOW)
    assert found == {
        "a": (NOW - 7200, pytest.approx(8.0)),  # 2 h x 4 GPUs
        "b": (NOW - 1800, 0.0),  # a kernel without GPUs released none
        "c": (NOW - 100, None),  # no record: paused since its state says, hours unknown
    }
    # only the day folders from the earliest hint (less a margin) were kept
    assert all(key >= layout.ledger_prefix(NOW - 7000 - accounting.MARGIN) for key in cache.seen)


def test_a_resumed_session_is_not_paused_in_the_ledger(tmp_path) -> None:
    store = Store(str(tmp_path))
    ledger.write(store, ledger.make("kernel_stopped", at=NOW - 600, session="a", gpus=1))
    ledger.write(store, ledger.make("kernel_started", at=NOW - 300, session="a", gpus=1))
    assert accounting.paused(ledger.Cache(store), {"a": NOW - 600}, now=NOW) == {"a": (NOW - 600, None)}


def test_a_stop_record_a_cotenant_signed_in_the_users_prefix_is_not_the_pause(tmp_path, monkeypatch) -> None:
    """Ben, holding the shared credential and his own key, writes stop records for ana's session
    into her prefix (naming himself, or naming her): her panel counts neither."""
    ana, ben = user_key("k" * 64, "ana"), user_key("k" * 64, "ben")
    monkeypatch.setenv("JUPYTERHUB_USER", "ana")
    store = Store(str(tmp_path), keys=ana)
    ledger.sign_with(ana)
    try:
        ledger.write(store, ledger.make("kernel_stopped", at=NOW - 7200, session="a", gpus=4, trigger="button"))
    finally:
        ledger.sign_with(None)
    ledger.sign_with(ben)
    try:
        for user in ("ben", "ana"):  # written as he can: plain bytes, with his own key's signature
            ledger.write(
                Store(str(tmp_path)), ledger.make("kernel_stopped", at=NOW - 600, session="a", gpus=8, user=user)
            )
    finally:
        ledger.sign_with(None)
    found = accounting.paused(ledger.Cache(store), {"a": NOW - 7000}, now=NOW)
    assert found == {"a": (NOW - 7200, pytest.approx(8.0))}
