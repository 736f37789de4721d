"""Resume choices: the newest checkpoint that verifies, damaged ones named, partial restores."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import CheckpointDamaged, RestoreError, SelectionError
from jupyter_pause.store.catalog import Catalog, Decision
from jupyter_pause.store.layout import manifest_key
from jupyter_pause.store.storage import Store
from tests.support.damage import KINDS, WHY, damage, key_for
from tests.support.devices import torch_blobs_on_a_stand_in_device
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _blob_path(store: Path, manifest, key: str) -> Path:
    return store / manifest.blob_key(key)


def _two_checkpoints(store: Path):
    ns = {"w": torch.arange(300_000, dtype=torch.float32), "step": 1, "arr": np.ones(20_000)}
    first = jp.checkpoint(store=str(store), session="s", namespace=ns).manifest
    ns["w"].add_(1)
    ns["step"] = 2
    second = jp.checkpoint(store=str(store), session="s", namespace=ns).manifest
    another_process()
    return first, second


def _array_blob(manifest, name: str) -> str:
    record = next(v for v in manifest.variables if v.name == name)
    return manifest.arrays[record.arrays[0]].blob


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_newest_is_named_and_previous_is_used(tmp_path, damage):
    first, second = _two_checkpoints(tmp_path)
    path = _blob_path(tmp_path, second, _array_blob(second, "w"))
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(data)
    elif damage == "truncate":
        path.write_bytes(data[:-100])
    else:
        path.unlink()
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns)
    assert result.manifest.id == first.id
    assert second.id in result.damaged and "array data of w" in result.damaged[second.id]
    assert f"checkpoint {second.id} is damaged" in result.summary()
    assert f"resuming from {first.id} instead" in result.summary()
    assert ns["step"] == 1 and torch.equal(ns["w"], torch.arange(300_000, dtype=torch.float32))


def test_an_explicit_damaged_checkpoint_is_refused_naming_the_damage_and_the_newest_intact(tmp_path):
    first, second = _two_checkpoints(tmp_path)
    _blob_path(tmp_path, second, _array_blob(second, "w")).unlink()
    ns: dict = {"kept": 1}
    with pytest.raises(CheckpointDamaged) as refused:
        jp.resume(second.id, store=str(tmp_path), session="s", namespace=ns)
    said = str(refused.value)
    assert f"checkpoint {second.id} of session 's' is damaged: blob " in said and "(array data of w)" in said
    assert f"the newest intact checkpoint is {first.id}" in said and "--allow-partial" in said
    assert ns == {"kept": 1}  # nothing was restored


def test_explicit_damaged_checkpoint_with_allow_partial_restores_only_what_verifies(tmp_path):
    _, second = _two_checkpoints(tmp_path)
    _blob_path(tmp_path, second, _array_blob(second, "w")).unlink()
    ns: dict = {}
    result = jp.resume(second.id, store=str(tmp_path), session="s", namespace=ns, allow_partial=True)
    assert "w" not in ns and ns["step"] == 2 and ns["arr"].sum() == 20_000
    assert not result.complete and "w" in result.skipped
    assert "not restored: w" in result.summary()


def test_every_checkpoint_with_a_damaged_blob_is_refused_unless_allow_partial(tmp_path):
    first, second = _two_checkpoints(tmp_path)
    for manifest in (first, second):
        _blob_path(tmp_path, manifest, _array_blob(manifest, "w")).unlink(missing_ok=True)
    with pytest.raises(CheckpointDamaged, match=r"every checkpoint of session 's' is damaged \(.*array data of w"):
        jp.resume(store=str(tmp_path), session="s", namespace={})
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns, allow_partial=True)
    assert result.manifest.id == second.id and ns["step"] == 2 and "w" not in ns


def _no_listing(monkeypatch):
    def listed(*args, **kwargs):
        raise AssertionError("the store was listed: the decision should have been followed")

    monkeypatch.setattr(Store, "list", listed)


def test_a_decision_from_the_server_is_followed_without_listing_the_store(tmp_path, monkeypatch):
    """The server listed and verified the manifests; the kernel reads the candidates by id,
    passes over one whose blob is damaged, and names what the server had passed over too."""
    first, second = _two_checkpoints(tmp_path)
    _blob_path(tmp_path, second, _array_blob(second, "w")).unlink()
    listing = Catalog(Store(str(tmp_path))).listing("s")
    choice = listing.resolve("latest")
    decision = Decision.of(listing, choice, by_id=False)
    decision = Decision(
        decision.candidates, {"20990101-000000-aaaaaa": "checksum mismatch"}, {"20990101-000000-aaaaaa": 4e9}
    )
    _no_listing(monkeypatch)
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns, decision=decision)
    assert result.manifest.id == first.id and ns["step"] == 1
    assert list(result.damaged) == ["20990101-000000-aaaaaa", second.id]
    assert "array data of w" in result.damaged[second.id]


def test_a_decision_by_id_of_a_checkpoint_damaged_since_is_refused(tmp_path, monkeypatch):
    first, second = _two_checkpoints(tmp_path)
    _blob_path(tmp_path, second, _array_blob(second, "w")).unlink()
    ns: dict = {"kept": 1}
    with pytest.raises(CheckpointDamaged) as refused:
        jp.resume(second.id, store=str(tmp_path), session="s", namespace=ns, decision=Decision((second.id,)))
    assert f"the newest intact checkpoint is {first.id}" in str(refused.value) and ns == {"kept": 1}
    _no_listing(monkeypatch)  # with allow_partial, nothing is listed: what verifies comes back
    result = jp.resume(
        second.id, store=str(tmp_path), session="s", namespace=ns, decision=Decision((second.id,)), allow_partial=True
    )
    assert result.manifest.id == second.id and ns["step"] == 2 and "w" not in ns


def test_a_decision_naming_a_manifest_gone_since_goes_on_to_the_next(tmp_path, monkeypatch):
    first, second = _two_checkpoints(tmp_path)
    decision = Decision((second.id, first.id))
    (tmp_path / manifest_key("s", second.id)).unlink()
    _no_listing(monkeypatch)
    result = jp.resume(store=str(tmp_path), session="s", namespace={}, decision=decision)
    assert result.manifest.id == first.id
    assert result.damaged == {second.id: "its manifest is no longer in the store"}


def _handed(store: Path, checkpoint_id: str) -> bytes:
    """A manifest as the server hands it on: read and verified there, then ``as_read``."""
    manifest = Catalog(Store(str(store))).manifest("s", checkpoint_id)
    return manifest.as_read()


def test_a_manifest_the_server_hands_on_is_used_without_reading_the_store(tmp_path, monkeypatch):
    first, second = _two_checkpoints(tmp_path)
    decision = Decision((second.id, first.id), manifests={second.id: _handed(tmp_path, second.id)})
    (tmp_path / manifest_key("s", second.id)).unlink()  # only the handed copy is left
    _no_listing(monkeypatch)
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns, decision=decision)
    assert result.manifest.id == second.id and ns["step"] == 2 and not result.damaged
    assert torch.equal(ns["w"], torch.arange(300_000, dtype=torch.float32) + 1)


@pytest.mark.parametrize("how", ["edited", "another session", "signed by another key"])
def test_a_handed_manifest_that_does_not_verify_here_is_set_aside_for_the_store_s(tmp_path, monkeypatch, how):
    """The kernel trusts what the server hands it no more than the store: an edited copy, one
    of another checkpoint's, or one its key did not sign, is verified, refused, and the
    store's own manifest read instead."""
    config = PauseConfig(signing_key="alice's key") if how == "signed by another key" else None
    ns = {"step": 3}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns, config=config).manifest
    planted = dataclasses.replace(manifest, tag="planted")
    handed = _handed(tmp_path, manifest.id) if config is None else planted.to_bytes("mallory's key")
    if how == "edited":
        handed = handed.replace(b'"step"', b'"stop"')
    if how == "another session":
        other = jp.checkpoint(store=str(tmp_path), session="t", namespace={"step": 9}).manifest
        handed = Catalog(Store(str(tmp_path))).manifest("t", other.id).as_read()
    another_process()
    _no_listing(monkeypatch)
    back: dict = {}
    decision = Decision((manifest.id,), manifests={manifest.id: handed})
    result = jp.resume(store=str(tmp_path), session="s", namespace=back, decision=decision, config=config)
    assert result.manifest.id == manifest.id and back == {"step": 3} and not result.damaged
    assert result.manifest.tag is None  # the store's manifest, not the planted one


def test_the_magic_takes_allow_partial():
    from jupyter_pause.kernel.magics import parse_resume

    assert parse_resume("abc --allow-partial").options.allow_partial is True
    assert parse_resume("abc").options.allow_partial is False


def test_nothing_touches_the_namespace_before_checks_pass(tmp_path):
    ns = {"t": torch.ones(3)}
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    target = {"t": "untouched"}
    with pytest.raises(SelectionError, match="holds no variable named nope"):
        jp.resume(store=str(tmp_path), session="s", only=["t", "nope"], namespace=target)
    with pytest.raises(SelectionError, match="map-location"):
        jp.resume(store=str(tmp_path), session="s", map_location="gpu", namespace=target)
    assert target == {"t": "untouched"}


def test_cuda_checkpoint_on_cpu_node_needs_map_location(tmp_path):
    ns = {"t": torch.ones(3), "n": 5}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    # Rewrite the manifest as if the tensor had lived on a GPU (no GPU here to make a real one).
    key = f"sessions/s/checkpoints/{manifest.id}.json"
    for record in manifest.arrays.values():
        record.device = "cuda:0"
    (tmp_path / key).write_bytes(manifest.to_bytes())
    target: dict = {}
    if not torch.cuda.is_available():
        with pytest.raises(RestoreError, match="--map-location cpu"):
            jp.resume(store=str(tmp_path), session="s", namespace=target)
        assert target == {}
    jp.resume(store=str(tmp_path), session="s", namespace=target, map_location="cpu")
    assert target["t"].device.type == "cpu" and target["n"] == 5


def test_only_restores_named_variables_and_leaves_rng(tmp_path):
    ns = {"a": 1, "b": [2]}
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    target: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", only=["b"], namespace=target)
    assert target == {"b": [2]} and result.restored == ["b"]
    assert torch.equal(torch.rand(1), expected)


class _Explodes(Exception):
    pass


def test_interrupted_commit_leaves_nothing_visible(tmp_path, monkeypatch):
    """Killed between data and manifest: the earlier checkpoint stays the one resumed."""
    ns = {"v": 1}
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    ns["v"] = 2
    real_write_many = Store.write_many

    def write_half(self, items, progress=None):
        real_write_many(self, dict(list(items.items())[:1]))
        raise KeyboardInterrupt

    monkeypatch.setattr(Store, "write_many", write_half)
    with pytest.raises(KeyboardInterrupt):
        jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    monkeypatch.undo()
    listing = Catalog(Store(str(tmp_path))).listing("s")
    assert [m.id for m in listing.checkpoints] == [first.id]
    assert len(listing.pending) == 1  # visible to cleanup, never as a checkpoint
    another_process()
    target: dict = {}
    assert jp.resume(store=str(tmp_path), session="s", namespace=target).manifest.id == first.id
    assert target["v"] == 1


def test_new_lineage_never_replaces_old(tmp_path):
    jp.checkpoint(store=str(tmp_path), session="shared", namespace={"who": "notebook-a"})
    another_process()  # another kernel, another notebook, same session name
    result = jp.checkpoint(store=str(tmp_path), session="shared", namespace={"who": "notebook-b"})
    assert any("starts lineage" in note for note in result.notes)
    checkpoints = Catalog(Store(str(tmp_path))).checkpoints("shared")
    assert len(checkpoints) == 2 and len({m.lineage for m in checkpoints}) == 2
    assert result.manifest.parent is None


def test_resume_continues_lineage(tmp_path):
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace={"x": 1}).manifest
    another_process()
    jp.resume(store=str(tmp_path), session="s", namespace={})
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace={"x": 2}).manifest
    assert second.lineage == first.lineage and second.parent == first.id


def test_environment_differences_are_reported(tmp_path):
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace={"x": 1}).manifest
    manifest.environment["python"] = "3.9.0"
    manifest.environment["packages"]["torch"] = "1.0.0"
    (tmp_path / f"sessions/s/checkpoints/{manifest.id}.json").write_bytes(manifest.to_bytes())
    result = jp.resume(store=str(tmp_path), session="s", namespace={})
    summary = result.summary()
    assert "python: 3.9.0 at checkpoint" in summary and "torch: 1.0.0 at checkpoint" in summary


def test_unchanged_data_is_not_written_again(tmp_path):
    ns = {"big": torch.randn(2_000_000), "small": torch.arange(5), "n": 0}
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    ns["n"] = 1
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert first.stats["bytes_written"] > 8_000_000
    assert second.stats["bytes_written"] < 20_000
    assert second.stats["bytes_reused"] >= 8_000_000


def test_variable_sharing_lost_data_is_not_restored(tmp_path):
    """An optimizer whose model weights are gone must not come back holding zeros."""
    model = torch.nn.Linear(600, 600)
    ns = {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1), "epoch": 7}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    weight_blob = _array_blob(manifest, "model")
    _blob_path(tmp_path, manifest, weight_blob).unlink()
    another_process()
    target: dict = {}
    result = jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=target, allow_partial=True)
    assert set(result.skipped) == {"model", "opt"}
    assert target == {"epoch": 7}


def test_digests_taken_on_resume_match_digests_from_scratch(tmp_path):
    """Resume digests whole arrays from their verified blob keys; a fresh digest must agree."""
    from jupyter_pause.proof import probe
    from jupyter_pause.serialize.digests import value_digest

    model = torch.nn.Linear(700, 700)
    ns = {
        "model": model,
        "opt": torch.optim.Adam(model.parameters()),
        "arr": np.random.default_rng(1).random(200_000),
        "fortran": np.asfortranarray(np.ones((400, 400))),
        "view": torch.arange(1_000_000.0)[5:500],
    }
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    taken = probe.as_restored(manifest.id)
    assert set(taken) == set(ns)
    for record in manifest.variables:
        assert taken[record.name] == record.digest == value_digest(target[record.name]), record.name


def test_blobs_moved_to_their_device_while_reading_restore_the_same(tmp_path, monkeypatch):
    from jupyter_pause.proof import probe

    torch.manual_seed(0)
    model = torch.nn.Linear(600, 600)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 600)).sum().backward()
    opt.step()
    ns = {
        "model": model,
        "opt": opt,
        "small": torch.arange(10),
        "view": torch.arange(1e6)[3:9],
        "arr": np.ones(100_000),
    }
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    moved = torch_blobs_on_a_stand_in_device(monkeypatch)
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    torch_blobs = {r.blob for r in manifest.arrays.values()} - {
        r.blob for r in manifest.arrays.values() if r.kind != "torch"
    }
    assert (
        len(torch_blobs) >= 3
        and len(moved) == len(torch_blobs)
        and sum(moved) == sum(manifest.blobs[b] for b in torch_blobs)
    )
    assert torch.equal(target["model"].weight, model.weight) and torch.equal(target["view"], ns["view"])
    assert torch.equal(target["small"], ns["small"]) and np.array_equal(target["arr"], ns["arr"])
    assert target["opt"].param_groups[0]["params"][0] is target["model"].weight
    assert all(
        torch.equal(a["exp_avg"], b["exp_avg"])
        for a, b in zip(target["opt"].state.values(), opt.state.values(), strict=True)
    )
    taken = probe.as_restored(manifest.id)
    assert taken == {v.name: v.digest for v in manifest.variables}, [v.name for v in manifest.variables]


def test_a_damaged_blob_is_never_moved_to_a_device(tmp_path, monkeypatch):
    ns = {"w": torch.randn(500_000), "b": torch.randn(400_000)}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    blob = _array_blob(manifest, "w")
    path = _blob_path(tmp_path, manifest, blob)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    moved = torch_blobs_on_a_stand_in_device(monkeypatch)
    another_process()
    target: dict = {}
    result = jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=target, allow_partial=True)
    assert len(moved) == 1 and moved[0] == manifest.blobs[_array_blob(manifest, "b")]
    assert "w" in result.skipped and torch.equal(target["b"], ns["b"])


def test_placements_only_for_tensor_blobs_bound_for_a_usable_device(tmp_path):
    from jupyter_pause.session.restore import _placements
    from jupyter_pause.store.manifest import ArrayRecord

    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace={"w": torch.ones(3)}).manifest
    manifest.arrays = {
        "a": ArrayRecord("torch", "torch.float32", [9], "cuda:0", "gpu-only", 0, 36, "C"),
        "b": ArrayRecord("torch", "torch.float32", [9], "cuda:0", "mixed", 0, 36, "C"),
        "c": ArrayRecord("numpy", "'<f4'", [9], "cpu", "mixed", 36, 36, "C"),
        "d": ArrayRecord("torch", "torch.float32", [9], "cpu", "host", 0, 36, "C"),
    }
    assert _placements(manifest, "cpu") == {}
    expected = {"gpu-only": "cuda:0"} if torch.cuda.is_available() else {}  # no GPU: none usable
    assert _placements(manifest, "auto") == expected


def test_restored_arrays_are_aligned_as_torch_aligns_its_own(tmp_path):
    """Small arrays share packed blobs; each still starts on a 64-byte boundary, since
    vectorised kernels can round differently on differently aligned data."""
    ns = {f"t{i}": torch.randn(1000 + i) for i in range(20)}
    ns["layer"] = torch.nn.Linear(300, 7)
    ns["arr"] = np.random.default_rng(0).random(9_001)
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    tensors = [target[f"t{i}"] for i in range(20)] + list(target["layer"].parameters())
    assert all(t.data_ptr() % 64 == 0 for t in tensors)
    assert target["arr"].__array_interface__["data"][0] % 64 == 0
    assert all(torch.equal(target[f"t{i}"], ns[f"t{i}"]) for i in range(20))


# -- damaged manifests: named, passed over for the newest intact, never "no checkpoint" -----------


def _two_small(store: Path, key: str | None):
    config = PauseConfig(signing_key=key or "")
    ns = {"step": 1}
    first = jp.checkpoint(store=str(store), session="s", namespace=ns, config=config).manifest
    ns["step"] = 2
    second = jp.checkpoint(store=str(store), session="s", namespace=ns, config=config).manifest
    another_process()
    return first, second, config


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_newest_manifest_is_named_and_the_newest_intact_resumed(tmp_path, kind):
    first, second, config = _two_small(tmp_path, key_for(kind))
    damage(tmp_path, "s", second.id, kind)
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns, config=config)
    assert result.manifest.id == first.id and ns["step"] == 1
    assert result.damaged[second.id].startswith(WHY[kind]), result.damaged
    summary = result.summary()
    assert f"checkpoint {second.id} is damaged: {WHY[kind]}" in summary
    assert f"resuming from {first.id} instead" in summary


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_checkpoint_asked_for_fails_naming_why_and_the_newest_intact(tmp_path, kind):
    first, second, config = _two_small(tmp_path, key_for(kind))
    damage(tmp_path, "s", second.id, kind)
    target = {"step": "untouched"}
    with pytest.raises(CheckpointDamaged) as e:
        jp.resume(second.id, store=str(tmp_path), session="s", namespace=target, config=config)
    assert f"checkpoint {second.id} of session 's' is damaged: {WHY[kind]}" in str(e.value)
    assert f"the newest intact checkpoint is {first.id}" in str(e.value)
    assert target == {"step": "untouched"}


@pytest.mark.parametrize("kind", KINDS)
def test_every_manifest_damaged_is_said_so_not_no_checkpoint(tmp_path, kind):
    first, second, config = _two_small(tmp_path, key_for(kind))
    damage(tmp_path, "s", first.id, kind)
    damage(tmp_path, "s", second.id, kind)
    with pytest.raises(CheckpointDamaged) as e:
        jp.resume(store=str(tmp_path), session="s", namespace={}, config=config)
    assert "every checkpoint of session 's'" in str(e.value) and WHY[kind] in str(e.value)
    assert "no checkpoint of session" not in str(e.value) and "run %checkpoint first" not in str(e.value)


class _BecomesAList:
    """Saves as something else: its reduction rebuilds a list (as a library's may)."""

    def __reduce__(self):
        return (list, ((1, 2),))


def test_a_variable_that_comes_back_as_another_type_is_named(tmp_path):
    ns = {"shape": _BecomesAList(), "kept": {"a": 1}}
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    fresh: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=fresh)
    assert fresh["shape"] == [1, 2] and fresh["kept"] == {"a": 1}
    changed = [n for n in result.notes if n.startswith("changed type")]
    assert changed == [f"changed type: shape came back as list, it was {__name__}._BecomesAList"], result.notes
    assert "changed type: shape" in result.summary()


def test_a_tensor_with_an_autograd_graph_is_named_and_comes_back_a_leaf(tmp_path):
    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    ns = {"w": w, "loss": loss, "pair": (torch.zeros(2), w.exp()), "plain": torch.zeros(2)}
    taken = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    (note,) = [n for n in taken.notes if n.startswith("autograd graphs")]
    assert "loss (SumBackward0), pair (ExpBackward0) come(s) back as leaf tensors" in note, note
    assert "autograd graphs are not saved" in taken.summary()
    another_process()
    fresh: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=fresh)
    assert fresh["loss"].grad_fn is None and fresh["loss"].requires_grad and fresh["loss"].detach().item() == 6.0
    assert fresh["w"].is_leaf and fresh["w"].requires_grad


def test_no_autograd_note_without_a_graph(tmp_path):
    ns = {"w": torch.ones(3, requires_grad=True), "t": torch.zeros(2)}
    taken = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert not [n for n in taken.notes if "autograd" in n]


IMPORT_SPY = """
import importlib.abc, importlib.util, sys, threading
import jupyter_pause
from jupyter_pause.session import restore
from jupyter_pause.store import readahead
from jupyter_pause.store.storage import Store

def say(*words):  # one write a line: two threads say things
    sys.stdout.write(" ".join(map(str, words)) + "\\n")

say("torch" in sys.modules)
imported, reading, first = threading.Event(), threading.Event(), threading.Lock()
read, ask, asked = Store.read, readahead.ask, []

def noting(paths):
    paths = list(paths)
    asked.extend(paths)
    return ask(paths)

def watched(self, key, *args, **kwargs):
    with first:
        if key.startswith("blobs/") and not reading.is_set():
            say("first blob read; torch imported:", imported.is_set())
            reading.set()
    return read(self, key, *args, **kwargs)

class Spy(importlib.abc.MetaPathFinder):
    looking = False

    def find_spec(self, name, path, target=None):  # asked by the import, and by whoever looks for torch first
        if name != "torch" or self.looking:
            return None
        self.looking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.looking = False
        run = spec.loader.exec_module

        def exec_module(module):
            say("torch imported on", threading.current_thread().name)
            say("its library loaded first:", any("libtorch_cpu" in line for line in open("/proc/self/maps")))
            say("its modules' files asked for first:", sum("/torch/" in path for path in asked) > 100)
            if sys.argv[2] == "s3":  # held until a read begins: one that waits for the import never does
                say("a read began meanwhile:", reading.wait(60))
            run(module)
            imported.set()

        spec.loader.exec_module = exec_module
        return spec

load = restore.load_variables

def loading(*args, **kwargs):
    say("unpickling; torch imported:", imported.is_set())
    return load(*args, **kwargs)

Store.read = watched
readahead.ask = noting
restore.load_variables = loading
sys.meta_path.insert(0, Spy())
ns = {}
jupyter_pause.resume(store=sys.argv[1], session="s", namespace=ns)
say(type(ns["w"]).__name__, int(ns["w"].sum()))
"""


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_new_process_imports_torch_before_a_folders_reads_and_beside_a_remote_stores(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "s3":
        request.applymarker(pytest.mark.s3)
    url = str(tmp_path / "store") if where == "folder" else request.getfixturevalue("s3_env")
    jp.checkpoint(store=url, session="s", namespace={"w": torch.ones(300_000, dtype=torch.int64)})
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_SPY, url, where], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    said = [
        "torch imported on jupyter-pause-import-torch",
        "its library loaded first: True",
        "its modules' files asked for first: True",  # as the checkpoint named them
    ]
    if where == "folder":
        said += ["first blob read; torch imported: True"]
    else:  # which thread says its first line first is theirs to race for
        said += ["first blob read; torch imported: False", "a read began meanwhile: True"]
    first, *middle, unpickling, last = done.stdout.splitlines()
    assert (first, sorted(middle), last) == ("False", sorted(said), "Tensor 300000")
    assert unpickling == "unpickling; torch imported: True"  # the import is waited for
