"""Signed checkpoints: refused by name and reason before any byte is unpickled; the key never stored."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
import xxhash

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.engine import lineage, probe
from jupyter_pause.store.signing import SignatureError, key_id

KEY = "correct horse battery staple 7f1e"


@pytest.fixture(autouse=True)
def new_process(monkeypatch):
    monkeypatch.delenv("JUPYTER_PAUSE_SIGNING_KEY", raising=False)
    lineage.forget()
    probe.forget()
    yield
    lineage.forget()


def _take(store, key=None, **ns):
    lineage.forget()
    return jp.checkpoint(
        store=str(store), session="s", namespace=ns, config=PauseConfig(signing_key=key or "")
    ).manifest


def _resume(store, key=None, ref="latest"):
    lineage.forget()
    target: dict = {}
    result = jp.resume(ref, store=str(store), session="s", namespace=target, config=PauseConfig(signing_key=key or ""))
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
    with pytest.raises(SignatureError, match=f"checkpoint {bad.id} is not signed"):
        _resume(tmp_path, KEY, bad.id)
    assert "UNPICKLED" not in capsys.readouterr().out


def test_other_key_is_refused(tmp_path, capsys):
    bad = _take(tmp_path, "another key entirely", bomb=Bomb())
    with pytest.raises(SignatureError, match="signed with another key"):
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
    with pytest.raises(SignatureError, match="changed after it was signed"):
        _resume(tmp_path, KEY, good.id)


def test_a_swapped_blob_is_caught_by_its_sha256(tmp_path):
    first = _take(tmp_path, KEY, payload=[1, 2, 3])
    blob = tmp_path / f"sessions/s/blobs/{first.variables[0].blob.key[:2]}/{first.variables[0].blob.key}"
    blob.write_bytes(pickle.dumps([9, 9, 9], protocol=3))
    result, target = _resume(tmp_path, KEY, first.id)
    assert "payload" not in target and "payload" in result.skipped


def test_newest_refused_falls_back_to_older_signed(tmp_path):
    older = _take(tmp_path, KEY, n=1)
    newer = _take(tmp_path, None, n=2)  # someone without the key wrote a newer one
    result, target = _resume(tmp_path, KEY)
    assert result.manifest.id == older.id and target["n"] == 1
    assert newer.id in result.damaged and "not signed" in result.damaged[newer.id]


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
    assert f"DAMAGED s {unsigned.id}: checkpoint {unsigned.id} is not signed" in out
    assert f"ok      s {signed.id}" in out
