"""The catalog keeps damaged manifests visible, says why, and never calls one "no checkpoint"."""

from __future__ import annotations

import pytest

from jupyter_pause.errors import CheckpointDamaged, CheckpointNotFound
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import manifest_key
from jupyter_pause.store.manifest import FORMAT, Manifest
from jupyter_pause.store.signing import hash_for
from jupyter_pause.store.storage import Store
from tests.support.damage import KEY, KINDS, WHY, damage, key_for, manifest_path

OLDER, NEWER = "20270101-000000-aaaaaa", "20270101-000100-bbbbbb"


def _commit(catalog: Catalog, checkpoint_id: str, created: float, key: str | None) -> Manifest:
    manifest = Manifest(checkpoint_id, "s", "lin", None, created, "manual", "node", hash=hash_for(key))
    catalog.commit(manifest, key)
    return manifest


@pytest.fixture
def two(tmp_path):
    """A store with two intact checkpoints of session "s", signed for the signature kind (and
    encrypted for the sealed kind)."""

    def make(kind: str) -> Catalog:
        catalog = Catalog(Store(str(tmp_path), keys=key_for(kind), encrypt=kind == "sealed"))
        _commit(catalog, OLDER, 1_000.0, key_for(kind))
        _commit(catalog, NEWER, 2_000.0, key_for(kind))
        return catalog

    return make


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_manifest_is_listed_as_damaged_with_why(two, tmp_path, kind):
    catalog = two(kind)
    damage(tmp_path, "s", NEWER, kind)
    listing = catalog.listing("s", key_for(kind))
    assert [m.id for m in listing.checkpoints] == [OLDER]
    assert listing.damaged[NEWER].startswith(WHY[kind]), listing.damaged
    assert NEWER not in listing.unreadable and NEWER not in listing.pending


@pytest.mark.parametrize("kind", KINDS)
def test_latest_is_the_newest_intact_and_says_what_it_passed_over(two, tmp_path, kind):
    catalog = two(kind)
    damage(tmp_path, "s", NEWER, kind)
    choice = catalog.choose("s", "latest", key_for(kind))
    assert choice.manifest.id == OLDER and list(choice.passed_over) == [NEWER]
    assert f"checkpoint {NEWER} is damaged: {WHY[kind]}" in choice.note
    assert f"using {OLDER}, the newest intact checkpoint, instead" in choice.note
    assert catalog.resolve("s", "latest", key_for(kind)).id == OLDER


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_checkpoint_asked_for_by_id_is_named_with_the_newest_intact(two, tmp_path, kind):
    catalog = two(kind)
    damage(tmp_path, "s", NEWER, kind)
    with pytest.raises(CheckpointDamaged) as e:
        catalog.resolve("s", NEWER[:17], key_for(kind))  # a unique prefix finds it too
    message = str(e.value)
    assert f"checkpoint {NEWER} of session 's' is damaged: {WHY[kind]}" in message
    assert f"the newest intact checkpoint is {OLDER}" in message and "no checkpoint" not in message


@pytest.mark.parametrize("kind", KINDS)
def test_every_checkpoint_damaged_is_said_so_never_no_checkpoint(two, tmp_path, kind):
    catalog = two(kind)
    damage(tmp_path, "s", NEWER, kind)
    damage(tmp_path, "s", OLDER, kind)
    with pytest.raises(CheckpointDamaged) as e:
        catalog.resolve("s", "latest", key_for(kind))
    message = str(e.value)
    assert "every checkpoint of session 's'" in message and "is damaged (2)" in message
    assert f"{NEWER} is damaged: {WHY[kind]}" in message and f"{OLDER} is damaged: {WHY[kind]}" in message
    assert "no checkpoint of session" not in message
    assert not isinstance(e.value, CheckpointNotFound)


def test_no_checkpoint_is_said_only_when_there_is_none(tmp_path):
    catalog = Catalog(Store(str(tmp_path)))
    with pytest.raises(CheckpointNotFound, match="no checkpoint of session 's'.*run %checkpoint first"):
        catalog.resolve("s", "latest")
    _commit(catalog, OLDER, 1_000.0, None)
    with pytest.raises(CheckpointNotFound, match=f"no checkpoint 'nope' in session 's' \\(newest: {OLDER}\\)"):
        catalog.resolve("s", "nope")


def test_an_empty_manifest_left_by_a_commit_cut_short_is_a_torn_write(tmp_path):
    """A kill between creating the manifest file and writing it (its pending note still there)."""
    catalog = Catalog(Store(str(tmp_path)))
    _commit(catalog, OLDER, 1_000.0, None)
    catalog.write_pending("s", NEWER, 2_000.0, [])
    manifest_path(tmp_path, "s", NEWER).write_bytes(b"")
    listing = catalog.listing("s")
    assert listing.damaged[NEWER] == "torn write (the manifest file is empty); its writer stopped while committing it"
    assert catalog.choose("s", "latest").passed_over == {NEWER: listing.damaged[NEWER]}


def test_unknown_format_and_not_a_manifest_are_damage_too(tmp_path):
    catalog = Catalog(Store(str(tmp_path)))
    future = Manifest(NEWER, "s", "lin", None, 2_000.0, "manual", "node", format=FORMAT + 1)
    catalog.commit(future)
    catalog.store.write(manifest_key("s", OLDER), b'{"something": "else"}')
    damaged = catalog.listing("s").damaged
    assert damaged[NEWER].startswith(f"unknown format {FORMAT + 1} (this jupyter-pause reads format {FORMAT}")
    assert damaged[OLDER].startswith("not a manifest")


@pytest.mark.parametrize(
    ("signed_with", "why"),
    [(None, "signature: not signed"), ("another key", "signature: signed with another key")],
)
def test_with_a_key_a_checkpoint_it_did_not_sign_is_damaged(tmp_path, signed_with, why):
    catalog = Catalog(Store(str(tmp_path)))
    _commit(catalog, OLDER, 1_000.0, KEY)
    _commit(catalog, NEWER, 2_000.0, signed_with)
    assert catalog.listing("s", KEY).damaged[NEWER].startswith(why)
    assert catalog.listing("s").damaged == {}  # without a key, any intact manifest is accepted


def test_a_damaged_manifest_older_than_the_newest_intact_is_not_passed_over(tmp_path):
    """Only damaged checkpoints newer than the one chosen are said to be skipped; the time comes
    from the manifest where it can still be read (ids of one second do not sort by time)."""
    catalog = Catalog(Store(str(tmp_path)))
    same_second_later = "20270101-000000-000000"  # sorts before OLDER, taken after it
    _commit(catalog, OLDER, 1_798_761_600.0, None)
    _commit(catalog, same_second_later, 1_798_761_600.5, None)
    damage(tmp_path, "s", same_second_later, "checksum")
    choice = catalog.choose("s", "latest")
    assert choice.manifest.id == OLDER and list(choice.passed_over) == [same_second_later]
    _commit(catalog, NEWER, 1_798_761_700.0, None)
    choice = catalog.choose("s", "latest")
    assert choice.manifest.id == NEWER and choice.passed_over == {} and choice.note == ""


# -- without signing, "latest" keeps to the lineage the session was paused from --------------------

PLANTED = "20270101-000200-cccccc"


def _commit_lineage(catalog: Catalog, checkpoint_id: str, created: float, lineage: str, key: str | None = None):
    manifest = Manifest(checkpoint_id, "s", lineage, None, created, "manual", "elsewhere", hash=hash_for(key))
    catalog.commit(manifest, key)
    return manifest


def test_without_signing_a_new_lineage_never_becomes_latest_for_a_paused_session(tmp_path):
    catalog = Catalog(Store(str(tmp_path)))
    _commit(catalog, OLDER, 1_000.0, None)
    _commit(catalog, NEWER, 2_000.0, None)  # a later checkpoint of the paused lineage (a SIGTERM's) is fine
    _commit_lineage(catalog, PLANTED, 3_000.0, "planted")

    choice = catalog.choose("s", "latest", None, paused_from=OLDER)
    assert choice.manifest.id == NEWER
    assert list(choice.elsewhere) == [PLANTED]
    assert "starts lineage planted (written on elsewhere), not lin" in choice.elsewhere[PLANTED]
    assert f"checkpoint {PLANTED} was passed over: not resumed as latest" in choice.note
    assert catalog.choose("s", PLANTED, None, paused_from=OLDER).manifest.id == PLANTED  # by id, if it is yours
    assert catalog.choose("s", "latest").manifest.id == PLANTED  # nothing known of the pause: the newest


def test_with_signing_every_lineage_its_key_signed_may_be_latest(tmp_path):
    catalog = Catalog(Store(str(tmp_path)))
    _commit(catalog, OLDER, 1_000.0, KEY)
    _commit_lineage(catalog, PLANTED, 3_000.0, "mine-too", KEY)
    choice = catalog.choose("s", "latest", KEY, paused_from=OLDER)
    assert choice.manifest.id == PLANTED and choice.elsewhere == {}


def test_a_pause_whose_checkpoint_is_not_intact_here_tells_no_lineage_apart(tmp_path):
    catalog = Catalog(Store(str(tmp_path)))
    _commit(catalog, OLDER, 1_000.0, None)
    _commit_lineage(catalog, PLANTED, 3_000.0, "planted")
    damage(tmp_path, "s", OLDER, "checksum")
    listing = catalog.listing("s")
    assert listing.following(OLDER) is listing and listing.following(None) is listing
    assert catalog.choose("s", "latest", None, paused_from=OLDER).manifest.id == PLANTED
