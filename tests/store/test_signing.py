"""Signed checkpoints: refused by name and reason before any byte is unpickled; the key never stored."""

from __future__ import annotations

import asyncio
import json
import pickle
from types import SimpleNamespace

import pytest
import torch
import xxhash

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import CheckpointDamaged
from jupyter_pause.store import signing
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.signing import SignatureError, key_id
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

KEY = "correct horse battery staple 7f1e"


@pytest.fixture(autouse=True)
def no_signing_key_in_the_environment(monkeypatch):
    monkeypatch.delenv("JUPYTER_PAUSE_SIGNING_KEY", raising=False)


def _take(store, key=None, **ns):
    another_process()
    return jp.checkpoint(
        store=str(store), session="s", namespace=ns, config=PauseConfig(signing_key=key or "", encrypt=False)
    ).manifest


def _resume(store, key=None, ref="latest"):
    another_process()
    target: dict = {}
    result = jp.resume(
        ref, store=str(store), session="s", namespace=target, config=PauseConfig(signing_key=key or "", encrypt=False)
    )
    return result, target


def _manifest_path(store, manifest):
    return store / f"sessions/s/checkpoints/{manifest.id}.json"


class Bomb:
    """Unpickling this would leave a mark: it must never happen for a refused checkpoint."""

    def __reduce__(self):
        return (print, ("UNPICKLED",))


def test_signed_round_trip_uses_sha256_and_says_so(tmp_path):
    manifest = _take(tmp_path, KEY, w=torch.arange(100_000.0), n=3)
    assert manifest.hash == "sha256"
    result, target = _resume(tmp_path, KEY)
    assert target["n"] == 3 and f"signature checked (key id {key_id(KEY)})" in result.summary()


def test_unsigned_is_loaded_without_a_key_and_said_unsigned(tmp_path):
    _take(tmp_path, None, n=1)
    result, target = _resume(tmp_path, None)
    assert target["n"] == 1 and "unsigned" in result.summary() and result.manifest.hash == "xxh3_128"


def test_unsigned_checkpoint_is_refused_with_a_key(tmp_path, capsys):
    bad = _take(tmp_path, None, bomb=Bomb())
    with pytest.raises(
        CheckpointDamaged, match=f"checkpoint {bad.id} of session 's' is damaged: signature: not signed"
    ):
        _resume(tmp_path, KEY, bad.id)
    assert "UNPICKLED" not in capsys.readouterr().out


def test_other_key_is_refused(tmp_path, capsys):
    bad = _take(tmp_path, "another key entirely", bomb=Bomb())
    with pytest.raises(CheckpointDamaged, match="is damaged: signature: signed with another key"):
        _resume(tmp_path, KEY, bad.id)
    assert "UNPICKLED" not in capsys.readouterr().out


def test_changed_after_signing_is_refused_even_with_a_valid_checksum(tmp_path, capsys):
    good = _take(tmp_path, KEY, n=1)
    path = _manifest_path(tmp_path, good)
    outer = json.loads(path.read_text())
    outer["manifest"]["tag"] = "edited by someone"
    canonical = json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":")).encode()
    outer["checksum"] = xxhash.xxh3_128_hexdigest(canonical)  # the torn-write check passes
    path.write_text(json.dumps(outer))
    with pytest.raises(CheckpointDamaged, match="is damaged: signature: .*changed after it was signed"):
        _resume(tmp_path, KEY, good.id)


def test_a_swapped_blob_is_caught_by_its_sha256(tmp_path):
    first = _take(tmp_path, KEY, payload=[1, 2, 3])
    blob = tmp_path / first.blob_key(first.variables[0].blob.key, Store(str(tmp_path), keys=KEY).names)
    blob.write_bytes(pickle.dumps([9, 9, 9], protocol=3))
    with pytest.raises(CheckpointDamaged, match=rf"{first.id} of session 's' is damaged: blob .* checksum mismatch"):
        _resume(tmp_path, KEY, first.id)


def test_newest_refused_falls_back_to_older_signed(tmp_path):
    older = _take(tmp_path, KEY, n=1)
    newer = _take(tmp_path, None, n=2)  # someone without the key wrote a newer one
    result, target = _resume(tmp_path, KEY)
    assert result.manifest.id == older.id and target["n"] == 1
    assert newer.id in result.damaged and "not signed" in result.damaged[newer.id]


def test_the_restore_test_with_a_key_tests_against_the_newest_signed(tmp_path):
    older = _take(tmp_path, KEY, n=1)
    newer = _take(tmp_path, None, n=2)  # someone without the key wrote a newer one
    another_process()
    config = PauseConfig(signing_key=KEY)
    verdict = jp.verify(store=str(tmp_path), session="s", namespace={}, config=config)
    assert verdict.checkpoint == older.id and verdict.kind == "fresh"
    with pytest.raises(CheckpointDamaged, match=f"{newer.id} .*not signed"):
        jp.verify(newer.id, store=str(tmp_path), session="s", namespace={}, config=config)
    assert jp.verify(store=str(tmp_path), session="s", namespace={}).checkpoint == newer.id  # no key: any


def test_the_key_is_never_written(tmp_path):
    _take(tmp_path, KEY, n=1, w=torch.ones(10))
    _resume(tmp_path, KEY)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_cli_verify_refuses_unsigned_with_a_key(tmp_path, monkeypatch, capsys):
    from jupyter_pause.cli import main

    unsigned = _take(tmp_path, None, n=1)
    signed = _take(tmp_path, KEY, n=2)
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", KEY)
    assert main(["verify", "--store", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED s {unsigned.id}: damaged: signature: not signed" in out
    assert f"ok      s {signed.id}" in out


def _read(manifest: Manifest, key: str | None = None) -> Manifest:
    """The manifest as a reader gets it from the store: written (signed with ``key``), then parsed."""
    return Manifest.from_bytes(manifest.to_bytes(key))


def _record(hash_name: str = "sha256") -> Manifest:
    return Manifest("20270101-000000-abcdef", "s", "lin", None, 1.0, "manual", "node", hash=hash_name)


def test_verify_accepts_what_the_key_signed():
    signing.verify(_read(_record(), KEY), KEY)  # no error


def test_verify_without_a_key_accepts_anything():
    signing.verify(_read(_record()), None)
    signing.verify(_read(_record(), "some other key"), "")


def test_verify_refuses_a_tampered_manifest_and_says_so():
    outer = json.loads(_record().to_bytes(KEY))
    outer["manifest"]["tag"] = "edited by someone"
    canonical = json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":")).encode()
    outer["checksum"] = xxhash.xxh3_128_hexdigest(canonical)  # the torn-write check passes
    tampered = Manifest.from_bytes(json.dumps(outer).encode())
    with pytest.raises(SignatureError, match="20270101-000000-abcdef was changed after it was signed") as e:
        signing.verify(tampered, KEY)
    assert "resume an older checkpoint" in str(e.value)


def test_verify_refuses_an_unsigned_manifest_when_a_key_is_set():
    for unsigned in (_read(_record()), _record()):  # read from a store, or never written at all
        with pytest.raises(SignatureError, match="20270101-000000-abcdef is not signed") as e:
            signing.verify(unsigned, KEY)
        assert "unset JUPYTER_PAUSE_SIGNING_KEY" in str(e.value)


def test_verify_refuses_another_keys_signature_naming_both_key_ids():
    with pytest.raises(SignatureError, match="signed with another key") as e:
        signing.verify(_read(_record(), "another key entirely"), KEY)
    assert key_id("another key entirely") in str(e.value) and key_id(KEY) in str(e.value)
    assert "set JUPYTER_PAUSE_SIGNING_KEY to the key that signed it" in str(e.value)


def test_verify_refuses_a_signed_manifest_with_fast_blob_digests():
    with pytest.raises(SignatureError, match="blob digests are xxh3_128, not sha256"):
        signing.verify(_read(_record("xxh3_128"), KEY), KEY)


def test_pull_refuses_an_unsigned_notebook_when_the_server_has_a_key(tmp_path):
    from tornado import web

    from jupyter_pause.server.pulling import pull
    from jupyter_pause.store.catalog import Catalog
    from jupyter_pause.store.storage import Store

    catalog = Catalog(Store(str(tmp_path)))
    unsigned = _record()
    unsigned.notebook = {"path": "s.ipynb", "blob": "ab" * 16, "size": 2}
    catalog.commit(unsigned)  # written without a key
    manager = SimpleNamespace(catalog=catalog, store=catalog.store, config=PauseConfig(signing_key=KEY))
    with pytest.raises(web.HTTPError) as e:
        asyncio.run(pull(manager, "s"))
    assert e.value.status_code == 409 and f"{unsigned.id} is damaged: signature: not signed" in str(e.value.log_message)


# -- key rotation: a keyring signs with its key and still accepts its former ones ----------------

NEW = "the new key, after a rotation 41c9"


def test_after_a_rotation_a_checkpoint_of_the_former_key_resumes_and_new_ones_use_the_new_key(tmp_path):
    old = _take(tmp_path, KEY, marker=1)
    rotated = PauseConfig(signing_key=NEW, verify_keys=[KEY], encrypt=False)
    another_process()
    target: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=target, config=rotated)
    assert result.manifest.id == old.id and target["marker"] == 1
    another_process()
    new = jp.checkpoint(store=str(tmp_path), session="s", namespace={"marker": 2}, config=rotated).manifest
    written = json.loads(_manifest_path(tmp_path, new).read_text())
    assert written["signature"]["key_id"] == key_id(NEW)


def test_once_the_former_key_is_dropped_its_checkpoints_are_refused_naming_it(tmp_path, capsys):
    old = _take(tmp_path, KEY, marker=1, bomb=Bomb())
    with pytest.raises(CheckpointDamaged, match=rf"{old.id}.*signed with another key \(key id {key_id(KEY)}"):
        _resume(tmp_path, NEW)
    assert "UNPICKLED" not in capsys.readouterr().out


def test_a_keyring_names_every_key_it_accepts_when_it_refuses():
    ring = signing.Keyring(NEW, (KEY,))
    stranger = _read(_record(), "someone else's key 0000")
    with pytest.raises(SignatureError) as refused:
        signing.verify(stranger, ring)
    assert f"this one is {key_id(NEW)} (former keys: {key_id(KEY)})" in str(refused.value)
    signing.verify(_read(_record(), KEY), ring)  # a former key still verifies


def test_former_keys_without_a_signing_key_are_a_clear_error(monkeypatch):
    monkeypatch.setenv("JUPYTER_PAUSE_VERIFY_KEYS", f"{KEY}, another")
    with pytest.raises(jp.PauseError, match="JUPYTER_PAUSE_VERIFY_KEYS .* without JUPYTER_PAUSE_SIGNING_KEY"):
        PauseConfig()
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", NEW)
    assert PauseConfig().keyring == signing.Keyring(NEW, (KEY, "another"))


def test_on_a_hub_an_unsigned_resume_says_every_user_could_have_written_it(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    said = signing.describe(None, None)
    assert "every user with the store's credentials could have written" in said
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert signing.describe(None, None) == "unsigned: anyone who can write to the store could have written it"


def _signed_by_an_older_release(path, key: str) -> None:
    """Re-sign a manifest file as releases before seals did: an HMAC of the key over its body."""
    import hashlib
    import hmac

    from jupyter_pause.store.signing import key_id

    outer = json.loads(path.read_text())
    canonical = json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":")).encode()
    outer["checksum"] = xxhash.xxh3_128_hexdigest(canonical)
    value = hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()
    outer["signature"] = {"alg": "hmac-sha256", "key_id": key_id(key), "value": value}
    path.write_text(json.dumps(outer))


def test_a_checkpoint_signed_by_an_older_release_still_resumes_with_its_key(tmp_path):
    """A session paused before an upgrade comes back after it; an edit of it, or another key's
    signature, is still refused."""
    old = _take(tmp_path, KEY, n=41)
    _signed_by_an_older_release(_manifest_path(tmp_path, old), KEY)
    result, target = _resume(tmp_path, KEY, old.id)
    assert target["n"] == 41 and result.manifest.id == old.id

    path = _manifest_path(tmp_path, old)
    outer = json.loads(path.read_text())
    outer["manifest"]["tag"] = "edited by someone"  # after it was signed; the checksum made to match
    outer["checksum"] = xxhash.xxh3_128_hexdigest(
        json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":")).encode()
    )
    path.write_text(json.dumps(outer))
    with pytest.raises(CheckpointDamaged, match="changed after it was signed"):
        _resume(tmp_path, KEY, old.id)
    _signed_by_an_older_release(_manifest_path(tmp_path, old), "another key " * 4)
    with pytest.raises(CheckpointDamaged, match="another key"):
        _resume(tmp_path, KEY, old.id)
