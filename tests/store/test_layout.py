"""jupyter_pause.store.layout: the exact keys of a store, read back into the names they were built from.

The keys asserted here are the format on disk: a test that fails here is a format change.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_pause.errors import PauseError
from jupyter_pause.store import layout
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.retention import collect
from jupyter_pause.store.storage import Store

RELEASE_0_1_0 = Path(__file__).resolve().parents[1] / "data" / "release-0.1.0"
ID = "20270115-080000-a1b2c3"
DIGEST = "41b51aa9b5bc7f35703eddb91b7608b8"
SHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def test_every_key_of_a_session() -> None:
    assert layout.manifest_key("exp--train", ID) == "sessions/exp--train/checkpoints/20270115-080000-a1b2c3.json"
    assert layout.pending_key("exp--train", ID) == "sessions/exp--train/pending/20270115-080000-a1b2c3.json"
    assert layout.blob_key("exp--train", DIGEST) == "sessions/exp--train/blobs/41/41b51aa9b5bc7f35703eddb91b7608b8"
    assert layout.blob_key("exp--train", SHA256) == f"sessions/exp--train/blobs/9f/{SHA256}"
    assert layout.status_key("exp--train") == "sessions/exp--train/status.json"
    assert layout.lease_key("exp--train") == "sessions/exp--train/lease.json"
    assert layout.lease_epoch_key("exp--train", 7) == "sessions/exp--train/lease/000000000007.json"
    assert layout.lease_released_key("exp--train", 7) == "sessions/exp--train/lease/000000000007.released"
    assert (
        layout.report_key("exp--train", ID, T0 + 3600.25)
        == "sessions/exp--train/reports/20270115-080000-a1b2c3--20270115-090000-250.json"
    )


def test_the_pool_is_one_folder_at_the_store_root() -> None:
    assert layout.POOL == layout.pool_prefix() == "blobs/"
    assert layout.pool_key(DIGEST) == "blobs/41/41b51aa9b5bc7f35703eddb91b7608b8"
    assert layout.pool_key(SHA256) == f"blobs/9f/{SHA256}"
    assert layout.pool_digest(layout.pool_key(SHA256)) == SHA256 == layout.any_blob_digest(layout.pool_key(SHA256))
    assert layout.any_blob_digest(layout.blob_key("s", DIGEST)) == DIGEST
    assert layout.blob_place("s", DIGEST, pooled=True) == layout.pool_key(DIGEST)
    assert layout.blob_place("s", DIGEST, pooled=False) == layout.blob_key("s", DIGEST)
    assert layout.session_of(layout.pool_key(DIGEST)) is None  # no session's record
    for stray in (f"blobs/ff/{DIGEST}", f"blobs/{DIGEST}", f"blobs/41/.{DIGEST}.12-34.part", f"x/blobs/41/{DIGEST}"):
        assert layout.pool_digest(stray) is None and layout.any_blob_digest(stray) is None
    with pytest.raises(PauseError, match="invalid blob digest"):
        layout.pool_key("../../secrets")


def test_every_prefix_of_a_session_holds_its_keys() -> None:
    assert layout.SESSIONS == "sessions/"
    assert layout.manifest_prefix("s") == "sessions/s/checkpoints/"
    assert layout.pending_prefix("s") == "sessions/s/pending/"
    assert layout.blob_prefix("s") == "sessions/s/blobs/"
    assert layout.report_prefix("s") == "sessions/s/reports/"
    # A prefix ends at the folder: listing session "s" never picks up session "s2".
    assert not layout.manifest_key("s2", ID).startswith(layout.manifest_prefix("s"))


def test_report_keys_tell_apart_resumes_a_millisecond_apart() -> None:
    first = layout.report_key("s", ID, T0)
    second = layout.report_key("s", ID, T0 + 0.001)
    assert first.endswith("--20270115-080000-000.json")
    assert first != second
    assert sorted([second, first]) == [first, second]


def test_the_store_written_by_release_0_1_0_is_read_back_key_for_key() -> None:
    keys = sorted(p.relative_to(RELEASE_0_1_0).as_posix() for p in RELEASE_0_1_0.rglob("*") if p.is_file())
    manifests = [k for k in keys if layout.manifest_id(k)]
    blobs = [k for k in keys if layout.blob_digest(k)]
    assert manifests == ["sessions/release/checkpoints/20261130-150240-247c09.json"]
    assert len(blobs) == 12 and len(manifests) + len(blobs) == len(keys)
    for key in manifests:
        assert layout.manifest_key(layout.session_of(key), layout.manifest_id(key)) == key
    for key in blobs:
        assert layout.blob_key(layout.session_of(key), layout.blob_digest(key)) == key


@pytest.mark.parametrize("session", ["s", "exp--train", "a.b", "v1.2.3-rc.1", "Train_Model-2", "9lives", "x" * 128])
def test_build_then_parse_gives_the_names_back(session: str) -> None:
    assert layout.check_session(session) == session
    assert layout.session_of(layout.status_key(session)) == session
    assert layout.manifest_id(layout.manifest_key(session, ID)) == ID
    assert layout.pending_id(layout.pending_key(session, ID)) == ID
    assert layout.blob_digest(layout.blob_key(session, DIGEST)) == DIGEST
    key = layout.manifest_key(session, ID)
    assert layout.manifest_key(layout.session_of(key), layout.manifest_id(key)) == key


@pytest.mark.parametrize(
    "session", ["", ".hidden", "..", "-x", "_x", "a/b", "../etc", "a b", "tab\there", "name\n", "é", "x" * 129, None]
)
def test_a_bad_session_name_builds_no_key(session) -> None:
    with pytest.raises(PauseError, match="invalid session name .*letters, digits"):
        layout.manifest_key(session, ID)
    with pytest.raises(PauseError, match="invalid session name"):
        layout.lease_key(session)


@pytest.mark.parametrize(
    "checkpoint_id",
    ["", "latest", "../x", "20270115-080000", "20270115-080000-A1B2C3", "20270115T080000-a1b2c3", ID + "\n", None],
)
def test_a_bad_checkpoint_id_builds_no_key(checkpoint_id) -> None:
    for build in (layout.manifest_key, layout.pending_key):
        with pytest.raises(PauseError, match="invalid checkpoint id .*look like"):
            build("s", checkpoint_id)
    with pytest.raises(PauseError, match="invalid checkpoint id"):
        layout.report_key("s", checkpoint_id, T0)


@pytest.mark.parametrize("digest", ["", "ab", "../../secrets", DIGEST.upper(), DIGEST[:-1] + "/", "g" * 32])
def test_a_bad_digest_builds_no_key(digest: str) -> None:
    with pytest.raises(PauseError, match="invalid blob digest"):
        layout.blob_key("s", digest)


@pytest.mark.parametrize(
    "key",
    [
        "sessions/s/checkpoints/notes.json",
        f"sessions/s/checkpoints/{ID}.json.tmp",
        f"sessions/s/checkpoints/old/{ID}.json",
        f"sessions/.x/checkpoints/{ID}.json",
        f"sessions/s/pending/{ID}.json",
        f"s/checkpoints/{ID}.json",
        f"/sessions/s/checkpoints/{ID}.json",
    ],
)
def test_a_key_that_is_not_a_manifest_gives_no_id(key: str) -> None:
    assert layout.manifest_id(key) is None


@pytest.mark.parametrize(
    "key",
    [
        f"sessions/s/blobs/ff/{DIGEST}",  # in another fan-out folder than its digest's
        f"sessions/s/blobs/{DIGEST}",
        f"sessions/s/blobs/41/{DIGEST}.tmp",
        "sessions/s/blobs/41/README",
        f"sessions/s/checkpoints/41/{DIGEST}",
    ],
)
def test_a_key_that_is_not_a_blob_gives_no_digest(key: str) -> None:
    assert layout.blob_digest(key) is None


def test_session_of_reads_only_keys_under_a_valid_session() -> None:
    assert layout.session_of("sessions/a.b-c/blobs/41/" + DIGEST) == "a.b-c"
    assert layout.session_of("sessions/.trash/x") is None
    assert layout.session_of("sessions/s") is None
    assert layout.session_of("other/s/status.json") is None


def test_new_ids_are_valid_keys_that_sort_by_time() -> None:
    older, newer = layout.new_checkpoint_id(T0), layout.new_checkpoint_id(T0 + 1)
    assert older.startswith("20270115-080000-") and newer.startswith("20270115-080001-")
    assert layout.check_checkpoint_id(older) == older
    assert layout.manifest_id(layout.manifest_key("s", newer)) == newer
    assert sorted([newer, older]) == [older, newer]
    assert layout.new_checkpoint_id(T0) != layout.new_checkpoint_id(T0)


def test_stray_files_in_a_store_are_neither_listed_nor_cleaned_up(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    strays = [
        "sessions/s/checkpoints/notes.json",
        "sessions/s/pending/notes.json",
        f"sessions/s/blobs/ff/{DIGEST}",
        f"sessions/s/blobs/41/{DIGEST}.partial",
        f"sessions/.trash/checkpoints/{ID}.json",
    ]
    for key in strays:
        store.write(key, b"not a record")
    orphan = layout.blob_key("s", DIGEST)
    store.write(orphan, b"data nothing references")
    catalog = Catalog(store)

    listing = catalog.listing("s")
    assert (listing.checkpoints, listing.unreadable, listing.pending) == ([], {}, {})
    assert catalog.sessions() == ["s"]
    report = collect(catalog, "s", grace=0, now=time.time() + 10)
    assert report.blobs_removed == 1 and not store.exists(orphan)
    assert all(store.exists(key) for key in strays)


ITEM = "0123456789abcdef0123456789abcdef"
RUN = "20270115-080000-123456-a1b2"


def test_every_key_of_a_journal() -> None:
    base = "sessions/exp/journals/ocr/2/"
    assert layout.journal_versions_prefix("exp", "ocr") == "sessions/exp/journals/ocr/"
    assert layout.journal_prefix("exp", "ocr", "2") == base
    assert layout.journal_done_key("exp", "ocr", "2", ITEM) == f"{base}done/01/{ITEM}"
    assert layout.journal_failed_key("exp", "ocr", "2", ITEM, RUN, 3) == f"{base}failed/01/{ITEM}/{RUN}-3"
    assert layout.journal_run_key("exp", "ocr", "2", RUN) == f"{base}runs/{RUN}.json"
    assert layout.journal_run_key("exp", "ocr", "2", RUN, "keys") == f"{base}runs/{RUN}.keys"


def test_journal_keys_read_back_into_their_names() -> None:
    assert layout.journal_done_item(layout.journal_done_key("exp", "ocr", "2", ITEM)) == ITEM
    assert layout.journal_failed_item(layout.journal_failed_key("exp", "ocr", "2", ITEM, RUN, 3)) == (ITEM, RUN, 3)
    assert layout.journal_run(layout.journal_run_key("exp", "ocr", "2", RUN)) == RUN
    base = "sessions/exp/journals/ocr/2/"
    for stray in (
        f"{base}done/01/.{ITEM}.123-456.part",  # a write that was interrupted
        f"{base}done/02/{ITEM}",  # wrong fan-out folder
        f"{base}done/01/{ITEM}/x",
        f"{base}runs/{RUN}.keys",
    ):
        assert layout.journal_done_item(stray) is None
        assert layout.journal_failed_item(stray) is None
        assert layout.journal_run(stray) is None


@pytest.mark.parametrize("name", ["", "a/b", "..", ".hidden", "a b", "x" * 129, None, 2])
def test_a_bad_journal_name_or_version_builds_no_key(name) -> None:
    with pytest.raises(PauseError, match="invalid journal name"):
        layout.journal_prefix("exp", name, "1")
    with pytest.raises(PauseError, match="invalid journal version"):
        layout.journal_prefix("exp", "ocr", name)


def test_new_run_ids_are_valid_and_sort_by_time() -> None:
    first, second = layout.new_run_id(T0), layout.new_run_id(T0 + 0.000002)
    assert first.startswith("20270115-080000-000000-") and first < second
    assert layout.journal_run(layout.journal_run_key("exp", "ocr", "1", first)) == first


def test_lease_epochs_sort_as_numbers_and_read_back() -> None:
    keys = [layout.lease_epoch_key("s", n) for n in (10, 9, 100)]
    assert sorted(keys) == [layout.lease_epoch_key("s", n) for n in (9, 10, 100)]
    assert layout.lease_prefix("s") == "sessions/s/lease/"
    assert all(key.startswith(layout.lease_prefix("s")) for key in keys)
    assert layout.lease_epoch(layout.lease_epoch_key("s", 12)) == (12, False)
    assert layout.lease_epoch(layout.lease_released_key("s", layout.LAST_EPOCH)) == (layout.LAST_EPOCH, True)
    for stray in (
        "sessions/s/lease.json",
        "sessions/s/lease/000000000000.json",
        "sessions/s/lease/12.json",
        "sessions/s/lease/.000000000001.json.99-1.part",  # a local create's temporary name
        "sessions/s/lease/000000000001.json.bak",
        "sessions/s/other/000000000001.json",
    ):
        assert layout.lease_epoch(stray) is None, stray
    for epoch in (0, -1, layout.LAST_EPOCH + 1, 1.0, "1", True, None):
        with pytest.raises(PauseError, match="invalid lease epoch"):
            layout.lease_epoch_key("s", epoch)


def test_probes_live_apart_from_sessions() -> None:
    token = "0123456789abcdef0123456789abcdef"
    assert layout.probe_key(token) == f"probes/{token}"
    assert layout.session_of(layout.probe_key(token)) is None
    with pytest.raises(PauseError, match="invalid probe token"):
        layout.probe_key("../sessions/s/lease.json")


def test_release_records_live_beside_the_sessions():
    key = layout.release_key("20260101-120000-a1b2c3")
    assert key == "releases/20260101-120000-a1b2c3.json"
    assert layout.release_of(key) == "20260101-120000-a1b2c3"
    assert layout.release_of("releases/notes.json") is None
    assert layout.release_of("sessions/a/status.json") is None
    with pytest.raises(PauseError, match="release id"):
        layout.release_key("../../etc")
