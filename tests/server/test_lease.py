"""jupyter_pause.server.lease: one resume of a session at a time, across processes and servers.

The races run separate processes (``multiprocessing``, forked from a fresh process:
``racing_processes``) held at a barrier so that their claims really meet, on a local folder and
on the SeaweedFS server of ``tests/support/s3_server.py``. A store whose server ignores
create-if-absent is played by ``tests/support/lax_s3.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause.server import lease
from jupyter_pause.store import layout
from jupyter_pause.store.storage import Store
from tests.support.lax_s3 import lax_store
from tests.support.processes import racing_processes
from tests.support.s3_server import S3Server

SESSION = "exp--train"
SETTLE = 0.2
#: Processes racing for one lease, and rounds of the race per store.
RACERS = 6
ROUNDS_LOCAL = 30
ROUNDS_S3 = 20
#: Seconds a barrier waits for every process (process start-up included) before the test fails.
BARRIER_TIMEOUT = 90.0
#: What the store holds before each round, in turn: the last winner's released lease, a crashed
#: holder's expired lease, a torn record, a live lease of a server that is not racing.
ROUND_KINDS = ("released", "expired", "torn", "held")


def claim(store: Store, holder: str, node: str = "node-a", seconds: float = 600) -> lease.Lease:
    return asyncio.run(lease.acquire(store, SESSION, holder, node, "resumed", seconds, SETTLE))


def foreign(holder: str, node: str, expires: float) -> lease.Lease:
    """A lease taken by some other server, not by this test."""
    return lease.Lease(holder, node, secrets.token_hex(8), expires, "resumed")


def epochs(store: Store) -> tuple[list[int], list[int]]:
    """The lease epochs in the store that have a record, and those marked released."""
    found = [layout.lease_epoch(key) for key in store.list(layout.lease_prefix(SESSION))]
    records = sorted(e for e, released in filter(None, found) if not released)
    marks = sorted(e for e, released in filter(None, found) if released)
    return records, marks


def top_epoch(store: Store) -> int:
    records, marks = epochs(store)
    return max(records + marks, default=0)


# -- one process -----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "store"))


def test_a_held_lease_refuses_naming_its_holder_and_is_free_once_released(store: Store) -> None:
    assert lease.protocol(store) == "create-if-absent"
    held = claim(store, "server pid 7", "node-x")
    assert lease.current(store, SESSION) == held
    with pytest.raises(lease.LeaseHeld, match=r"being resumed by server pid 7 on node-x \(until \d\d:\d\d:\d\d UTC\)"):
        claim(store, "server pid 8", "node-y")
    lease.release(store, SESSION, held)
    assert lease.current(store, SESSION) is None
    again = claim(store, "server pid 8", "node-y")
    assert again.epoch == held.epoch + 1 and lease.current(store, SESSION) == again


def test_a_late_release_does_not_free_the_next_holder(store: Store) -> None:
    first = claim(store, "server pid 7", seconds=-1)  # expired at once: its server hung
    second = claim(store, "server pid 8")
    lease.release(store, SESSION, first)  # the hung server wakes up and gives back what it had
    assert lease.current(store, SESSION) == second
    with pytest.raises(lease.LeaseHeld, match="server pid 8"):
        claim(store, "server pid 9")


def test_old_epochs_are_pruned_and_the_newest_two_kept(store: Store) -> None:
    for n in range(5):
        lease.release(store, SESSION, claim(store, f"server pid {n}"))
    records, marks = epochs(store)
    assert records == [4, 5] and marks == [4, 5]


def test_a_torn_or_foreign_record_at_the_top_is_no_lease(store: Store) -> None:
    lease.release(store, SESSION, claim(store, "server pid 1"))
    store.create(layout.lease_epoch_key(SESSION, 2), b'{"holder": "server pid 1", "node": "no')
    store.create(layout.lease_epoch_key(SESSION, 3), b'["not", "a", "lease"]')
    held = claim(store, "server pid 7", "node-x")
    assert held.epoch == 4
    with pytest.raises(lease.LeaseHeld, match="server pid 7 on node-x"):
        claim(store, "server pid 8")


def test_a_live_record_below_the_top_is_not_the_lease(store: Store) -> None:
    """A record created late at an epoch others have moved past never holds the session."""
    for n in range(4):
        lease.release(store, SESSION, claim(store, f"server pid {n}"))
    late = foreign("server pid 99", "node-late", time.time() + 600)
    assert store.create(layout.lease_epoch_key(SESSION, 1), late.record())  # epoch 1 was pruned
    held = claim(store, "server pid 7")
    assert held.epoch == 5 and lease.current(store, SESSION) == held


def test_a_lease_of_an_older_server_is_respected_and_ours_is_mirrored_for_it(store: Store) -> None:
    old = foreign("server pid 424242", "node-old", time.time() + 600)
    store.write(layout.lease_key(SESSION), old.record())
    with pytest.raises(lease.LeaseHeld, match="server pid 424242 on node-old"):
        claim(store, "server pid 7")

    store.write(layout.lease_key(SESSION), foreign("server pid 424242", "node-old", time.time() - 60).record())
    held = claim(store, "server pid 7", "node-x")
    # An older server reads lease.json as Lease(**fields): exactly its five fields, or it is torn to it.
    mirror = json.loads(bytes(store.read(layout.lease_key(SESSION))))
    assert mirror == {
        "holder": "server pid 7",
        "node": "node-x",
        "token": held.token,
        "expires": held.expires,
        "what": "resumed",
    }
    lease.release(store, SESSION, held)
    assert not store.exists(layout.lease_key(SESSION))
    lease.release(store, SESSION, claim(store, "server pid 8"))


def test_threads_racing_in_one_process_get_one_lease(store: Store) -> None:
    async def race() -> list[Any]:
        tries = [lease.acquire(store, SESSION, f"task {n}", "node-a", "resumed", 600, SETTLE) for n in range(12)]
        return await asyncio.gather(*tries, return_exceptions=True)

    for _ in range(5):
        outcomes = asyncio.run(race())
        (won,) = [o for o in outcomes if isinstance(o, lease.Lease)]
        refused = [o for o in outcomes if isinstance(o, lease.LeaseHeld)]
        assert len(refused) == 11 and all(f"by {won.holder} on node-a" in str(e) for e in refused), outcomes
        lease.release(store, SESSION, won)


# -- the settle protocol, where the store has no create-if-absent -----------------------------


def check_settle_protocol(store: Store) -> None:
    assert lease.protocol(store) == "settle"
    held = claim(store, "server pid 7", "node-x")
    assert held.epoch == 0 and lease.current(store, SESSION) == held
    with pytest.raises(lease.LeaseHeld, match="server pid 7 on node-x"):
        claim(store, "server pid 8")
    lease.release(store, SESSION, held)
    assert lease.current(store, SESSION) is None and not store.exists(layout.lease_key(SESSION))

    store.write(layout.lease_key(SESSION), b'{"holder": "server pid 1", "node": "no')  # torn
    expired = claim(store, "server pid 8", seconds=-1)
    taken = claim(store, "server pid 9")  # over the expired one
    assert taken.token != expired.token and lease.current(store, SESSION) == taken
    lease.release(store, SESSION, taken)
    assert store.list(layout.lease_prefix(SESSION)) == {}


def test_a_memory_store_takes_leases_by_settling() -> None:
    check_settle_protocol(Store(f"memory://lease-{secrets.token_hex(6)}"))


def test_a_claim_too_slow_to_be_sure_of_is_tried_again_not_refused_as_someone_elses() -> None:
    store = Store(f"memory://lease-{secrets.token_hex(6)}")
    write = store.write
    writes = []

    def slow_first(key: str, data: bytes) -> None:  # a store that took longer than settle/2 once
        writes.append(key)
        if len(writes) == 1:
            time.sleep(SETTLE)
        write(key, data)

    store.write = slow_first  # type: ignore[method-assign]
    taken = claim(store, "server pid 1")  # its first claim is in the store, but came too late to count
    assert len(writes) == 2 and lease.current(store, SESSION) == taken
    with pytest.raises(lease.LeaseHeld, match="server pid 1 on node-a"):
        claim(store, "server pid 2")


@pytest.mark.integration
@pytest.mark.s3
def test_an_s3_server_that_ignores_the_condition_gets_the_settle_protocol(s3_server: S3Server) -> None:
    store = lax_store(s3_server)
    check_settle_protocol(store)

    async def two_at_once() -> list[Any]:
        settle = 10 * SETTLE  # a loaded machine's S3 round trips stay within half of it
        return await asyncio.gather(
            lease.acquire(store, SESSION, "server pid 1", "node-a", "resumed", 600, settle),
            lease.acquire(store, SESSION, "server pid 2", "node-b", "resumed", 600, settle),
            return_exceptions=True,
        )

    outcomes = asyncio.run(two_at_once())
    assert sorted(type(o).__name__ for o in outcomes) == ["Lease", "LeaseHeld"], outcomes


# -- processes racing ------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one racer got in one round."""

    round: int
    racer: int
    won: bool
    epoch: int
    detail: str


def racer(url: str, env: dict[str, str], index: int, rounds: int, barrier: Any, outcomes: Any) -> None:
    """One server process: each round, claim at the barrier, report, and release if it won."""
    os.environ.update(env)
    store = Store(url)
    for n in range(rounds):
        barrier.wait()  # the parent has set the round up
        held = None
        try:
            held = claim(store, f"proc {index}", f"node-{index}")
            outcomes.put(Outcome(n, index, True, held.epoch, ""))
        except lease.LeaseHeld as e:
            outcomes.put(Outcome(n, index, False, 0, str(e)))
        except Exception as e:  # reported to the parent, which fails the test with it
            outcomes.put(Outcome(n, index, False, -1, f"{type(e).__name__}: {e}"))
        barrier.wait()  # every racer has tried
        if held is not None:
            lease.release(store, SESSION, held)
        barrier.wait()  # the winner has let go


def set_round(store: Store, kind: str) -> lease.Lease | None:
    """Leave ``kind`` at the top of the store's lease (see ``ROUND_KINDS``); the live lease planted, if any."""
    if kind == "released":
        return None
    key = layout.lease_epoch_key(SESSION, top_epoch(store) + 1)
    if kind == "torn":
        assert store.create(key, b'{"holder": "proc 3", "no')
        return None
    planted = foreign("server pid 5", "node-far", time.time() + (600 if kind == "held" else -60))
    planted.epoch = layout.lease_epoch(key)[0]
    assert store.create(key, planted.record())
    return planted if kind == "held" else None


def race(url: str, rounds: int) -> None:
    """``RACERS`` processes claim the lease of one session ``rounds`` times; check every round."""
    store = Store(url)
    context = racing_processes(__name__)
    barrier = context.Barrier(RACERS + 1, timeout=BARRIER_TIMEOUT)
    outcomes = context.Queue()
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    processes = [
        context.Process(target=racer, args=(url, env, n, rounds, barrier, outcomes), daemon=True) for n in range(RACERS)
    ]
    for process in processes:
        process.start()
    finished = False
    try:
        for n in range(rounds):
            kind = ROUND_KINDS[n % len(ROUND_KINDS)]
            planted = set_round(store, kind)
            before = top_epoch(store)
            barrier.wait()
            barrier.wait()
            got = sorted((outcomes.get(timeout=BARRIER_TIMEOUT) for _ in range(RACERS)), key=lambda o: o.racer)
            assert all(o.round == n and o.epoch >= 0 for o in got), (kind, got)
            winners = [o for o in got if o.won]
            if kind == "held":
                assert winners == [] and all("by server pid 5 on node-far" in o.detail for o in got), got
            else:
                (winner,) = winners
                assert winner.epoch == before + 1, (kind, before, got)
                named = f"by proc {winner.racer} on node-{winner.racer}"
                assert all(named in o.detail for o in got if not o.won), (kind, got)
            barrier.wait()
            if planted is not None:
                lease.release(store, SESSION, planted)
            assert lease.current(store, SESSION) is None, (kind, got)
            records, _ = epochs(store)
            assert len(records) <= 3, records  # pruned as it goes
        finished = True
    finally:
        if not finished:
            barrier.abort()  # the racers still waiting stop at once
        for process in processes:
            process.join(BARRIER_TIMEOUT)
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0] * RACERS


@pytest.mark.integration
def test_processes_racing_on_a_local_folder_get_one_lease_a_round(tmp_path: Path) -> None:
    race(str(tmp_path / "store"), ROUNDS_LOCAL)


@pytest.mark.integration
@pytest.mark.s3
def test_processes_racing_on_s3_get_one_lease_a_round(s3_env: str) -> None:
    assert lease.protocol(Store(s3_env)) == "create-if-absent"
    race(s3_env, ROUNDS_S3)


ALICE_KEY = "alice's signing key, as the Hub derives it 51c0"
MALLORY_KEY = "mallory's signing key, as the Hub derives it 9e2a"


@pytest.mark.parametrize("where", ["local", "memory"], ids=["create-if-absent", "settle"])
@pytest.mark.parametrize("forged_with", [None, MALLORY_KEY], ids=["unsigned", "mallory's key"])
def test_a_lease_another_user_wrote_blocks_nothing_and_is_named(tmp_path: Path, where: str, forged_with) -> None:
    """Attack 3: mallory writes a live lease ("restoring on another node") into alice's session;
    with alice's key set it holds nothing: alice's resume takes the lease, and the record is named."""
    store = Store(str(tmp_path) if where == "local" else f"memory://lease-{secrets.token_hex(8)}")
    assert lease.protocol(store) == ("create-if-absent" if where == "local" else "settle")
    forged = foreign("server pid 1", "another-node", time.time() + 3600)
    store.write(layout.lease_epoch_key(SESSION, 1), forged.record(SESSION, forged_with))
    store.write(layout.lease_key(SESSION), forged.record(SESSION, forged_with))
    lease.IGNORED.pop(SESSION, None)

    assert lease.current(store, SESSION).holder == "server pid 1"  # without a key, as before: any record holds
    assert lease.current(store, SESSION, ALICE_KEY) is None
    mine = asyncio.run(lease.acquire(store, SESSION, "alice", "node-a", "resumed", 600, SETTLE, ALICE_KEY))
    assert mine.holder == "alice" and lease.current(store, SESSION, ALICE_KEY).token == mine.token
    assert "a lease record naming server pid 1 on another-node" in lease.IGNORED[SESSION]
    assert ("another key" if forged_with else "not signed") in lease.IGNORED[SESSION]


def test_alices_own_lease_holds_against_her_other_servers(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    asyncio.run(lease.acquire(store, SESSION, "alice", "node-a", "resumed", 600, SETTLE, ALICE_KEY))
    with pytest.raises(lease.LeaseHeld, match="being resumed by alice on node-a"):
        asyncio.run(lease.acquire(store, SESSION, "alice 2", "node-b", "resumed", 600, SETTLE, ALICE_KEY))


def test_a_release_mark_another_user_wrote_frees_nothing(tmp_path: Path) -> None:
    """mallory marks alice's live lease released: with alice's key the mark is ignored (her other
    server still waits); her own release frees the session."""
    store = Store(str(tmp_path))
    held = asyncio.run(lease.acquire(store, SESSION, "alice", "node-a", "resumed", 600, SETTLE, ALICE_KEY))
    store.write(layout.lease_released_key(SESSION, held.epoch), json.dumps({"released": time.time()}).encode())
    with pytest.raises(lease.LeaseHeld, match="being resumed by alice on node-a"):
        asyncio.run(lease.acquire(store, SESSION, "alice 2", "node-b", "resumed", 600, SETTLE, ALICE_KEY))
    assert "a release mark of the lease held by alice on node-a: not signed" in lease.IGNORED[SESSION]
    assert lease.current(store, SESSION) is None  # without a key, as before: any mark releases
    lease.release(store, SESSION, held, ALICE_KEY)
    again = asyncio.run(lease.acquire(store, SESSION, "alice 2", "node-b", "resumed", 600, SETTLE, ALICE_KEY))
    assert again.epoch == held.epoch + 1
