"""Device fingerprints: every in-place write is seen, unchanged storages are kept without a copy,
and anything unsure (another key, no previous fingerprints, a blob gone) falls back to hashing.

CPU tensors stand in for device ones (``devicehash.ON_CPU``); the CUDA tests skip without a GPU.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.serialize import devicehash
from jupyter_pause.serialize.arrays import ArrayCollector
from jupyter_pause.session.context import make_context
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

N = 1 << 19  # float32 elements: 2 MiB, over devicehash.MIN_BYTES


@pytest.fixture
def on_device(monkeypatch):
    """CPU storages take the device path: fingerprinted, copied only when changed."""
    monkeypatch.setattr(devicehash, "ON_CPU", True)
    devicehash.forget()
    yield
    devicehash.forget()


def _reference(data: bytes, seed: str) -> int:
    """The fingerprint as the module docstring defines it, in Python integers."""
    p, block = (1 << 61) - 1, 1 << 16

    def keys(level: int) -> list[int]:
        raw = hashlib.shake_256(b"jupyter-pause devicehash\0" + bytes.fromhex(seed) + bytes([level])).digest(8 * block)
        ks = [int.from_bytes(raw[8 * i : 8 * i + 8], "little") & p for i in range(block)]
        return [0 if k == p else k for k in ks]

    words = [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data) - len(data) % 2, 2)]
    words += [data[-1]] if len(data) % 2 else []
    level = 1
    while True:
        k = keys(level)
        starts = range(0, max(len(words), 1), block)
        values = [sum(a * b for a, b in zip(k, words[j : j + block], strict=False)) % p for j in starts]
        if len(values) == 1:
            return values[0]
        words = [(v >> s) & 0xFFFF for v in values for s in (0, 16, 32, 48)]
        level += 1


@pytest.mark.parametrize("size", [1, 2, 7, 4096, (1 << 17) + 3])
def test_the_fingerprint_is_the_documented_multilinear_hash(size):
    seed = "5a" * 16
    data = torch.randint(0, 256, (size,), dtype=torch.uint8)
    got = devicehash.fingerprint(data.untyped_storage(), seed)
    assert int(got, 16) == _reference(bytes(data.numpy()), seed)
    assert devicehash.fingerprint(data.untyped_storage(), "a5" * 16) != got  # keyed


def test_a_single_flipped_bit_anywhere_changes_the_fingerprint():
    seed = "01" * 16
    base = torch.randn(3 * N + 1).untyped_storage()  # three levels of blocks, several chunks
    first = devicehash.fingerprint(base, seed)
    flat = torch.empty(0, dtype=torch.uint8).set_(base, 0, (base.nbytes(),), (1,))
    for where in (0, 1, base.nbytes() // 2, base.nbytes() - 1):
        flat[where] ^= 1
        assert devicehash.fingerprint(base, seed) != first, where
        flat[where] ^= 1
    assert devicehash.fingerprint(base, seed) == first


def _change(kind: str, ns: dict) -> None:
    """One in-place write of ``kind`` to ``ns["t"]`` (or to the trainable part of ``ns["model"]``)."""
    t = ns["t"]
    if kind == "data assignment":
        t.data = t.data * 2
    elif kind == "in-place op on .data":
        t.data.mul_(2)
    elif kind == "slice":
        t[100:200] = 7.0
    elif kind == "view of another dtype":
        t.view(torch.int32)[-1] ^= 1  # one bit of the last element
    elif kind == "reshaped view":
        t.view(512, -1).T[3, 5] += 1.0
    elif kind == "copy_":
        t.copy_(torch.arange(t.numel(), dtype=t.dtype))
    elif kind == "add_":
        t.add_(1e-3)
    elif kind == "index_put_":
        t.index_put_((torch.tensor([0, N - 1]),), torch.tensor([5.0, 6.0]))
    elif kind == "no_grad write to a parameter":
        with torch.no_grad():
            ns["p"].mul_(0.5)
    elif kind == "optimizer step":
        ns["model"](torch.randn(4, 512)).sum().backward()
        ns["opt"].step()
    elif kind == "set_":
        t.set_(torch.full((N,), 3.0).untyped_storage())
    elif kind == "storage resize":
        t.untyped_storage().resize_(t.untyped_storage().nbytes() + 4096)
    else:
        raise AssertionError(kind)


KINDS = [
    "data assignment",
    "in-place op on .data",
    "slice",
    "view of another dtype",
    "reshaped view",
    "copy_",
    "add_",
    "index_put_",
    "no_grad write to a parameter",
    "optimizer step",
    "set_",
    "storage resize",
]


def _namespace() -> dict:
    gen = torch.Generator().manual_seed(0)
    frozen = torch.nn.Linear(1024, 1024)  # 4 MiB of weight: stays as it is
    frozen.requires_grad_(False)
    model = torch.nn.Linear(512, 1024, bias=False)  # 2 MiB, trained
    return {
        "t": torch.randn(N, generator=gen),
        "p": torch.nn.Parameter(torch.randn(N, generator=gen)),
        "frozen": frozen,
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
    }


#: Bytes of each large storage of ``_namespace``, and which one each kind of write changes.
SIZES = {"t": 4 * N, "p": 4 * N, "frozen": 4 << 20, "w": 2 << 20}
CHANGES = {"no_grad write to a parameter": "p", "optimizer step": "w"}


@pytest.mark.parametrize("kind", KINDS)
def test_every_in_place_write_kind_is_copied_again_and_restored(kind, on_device, tmp_path):
    ns = _namespace()
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert first.stats["bytes_kept_on_device"] == 0 and first.fingerprints["scheme"] == devicehash.SCHEME
    _change(kind, ns)
    expected = {"t": ns["t"].clone(), "p": ns["p"].detach().clone(), "w": ns["model"].weight.detach().clone()}
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    changed = CHANGES.get(kind, "t")
    # Exactly the storage written to is copied; the others are kept where they are.
    assert second.stats["bytes_kept_on_device"] == sum(v for k, v in SIZES.items() if k != changed), kind
    grown = 4096 if kind == "storage resize" else 0
    assert second.stats["bytes_copied"] == SIZES[changed] + grown, kind
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["t"], expected["t"]) and torch.equal(target["p"].detach(), expected["p"])
    assert torch.equal(target["model"].weight.detach(), expected["w"])
    assert torch.equal(target["frozen"].weight, ns["frozen"].weight)


def test_nothing_changed_nothing_is_copied(on_device, tmp_path):
    ns = _namespace()
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    again = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    large = sum(r.nbytes for r in again.manifest.arrays.values() if r.nbytes >= devicehash.MIN_BYTES)
    assert again.manifest.stats["bytes_kept_on_device"] == large > 0
    assert again.manifest.stats["bytes_copied"] < 64 * 1024  # the small ones only
    assert again.manifest.stats["bytes_written"] < 64 * 1024
    assert "unchanged on its device" in again.summary()


def test_a_background_checkpoint_copies_only_what_changed(on_device, tmp_path):
    ns = _namespace()
    jp.checkpoint_async(store=str(tmp_path), session="s", namespace=ns).wait(60)
    ns["t"].add_(1)
    expected = ns["t"].clone()
    job = jp.checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    ns["t"].add_(1)  # after the copy: must not reach the checkpoint
    manifest = job.wait(60).manifest
    assert manifest.stats["bytes_copied"] == SIZES["t"]
    assert manifest.stats["bytes_kept_on_device"] == sum(SIZES.values()) - SIZES["t"]
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["t"], expected) and torch.equal(target["frozen"].weight, ns["frozen"].weight)


def test_another_key_means_no_match_and_every_storage_is_copied(on_device):
    seed, other = "11" * 16, "22" * 16
    tensors = [torch.randn(N), torch.randn(N)]
    recorded = devicehash.fingerprints({str(i): t.untyped_storage() for i, t in enumerate(tensors)}, other)
    before = devicehash.Previous("c0", seed, {(4 * N, fp): f"{i:032x}" for i, fp in enumerate(recorded.values())})
    collector = ArrayCollector()
    for t in tensors:
        collector.reduce_torch_storage(t.untyped_storage())
    assert all(f.data is None for f in collector.found.values())  # as on a device, before ``gather``
    seen = devicehash.skip_unchanged(collector, None, "s", before, "xxh3_128")  # the store is never asked
    assert seen is not None and seen.seed == seed and not seen.kept
    collector.gather()
    assert collector.copied == 2 * 4 * N
    assert [bytes(f.data) for f in collector.found.values()] == [bytes(t.numpy()) for t in tensors]
    # The same fingerprints under the right key are found (so the test above can fail).
    same = devicehash.Previous("c0", other, before.blobs)
    again = ArrayCollector()
    for t in tensors:
        again.reduce_torch_storage(t.untyped_storage())
    with pytest.raises(AttributeError):  # a match asks the store whether it still holds the blob
        devicehash.skip_unchanged(again, None, "s", same, "xxh3_128")


def test_no_previous_fingerprints_means_hashing_then_the_next_one_keeps(monkeypatch, tmp_path):
    ns = _namespace()
    plain = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest  # CPU: xxh3, as before
    assert plain.fingerprints == {} and plain.stats["bytes_copied"] == 0
    monkeypatch.setattr(devicehash, "ON_CPU", True)
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert first.stats["bytes_kept_on_device"] == 0 and first.stats["bytes_copied"] > 8 * N
    assert first.stats["bytes_written"] < 64 * 1024  # the same blobs: the store holds them already
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_kept_on_device"] > 8 * N


def test_fingerprints_of_another_scheme_are_not_compared(on_device, tmp_path):
    ns = _namespace()
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    first.fingerprints = {**first.fingerprints, "scheme": "some-later-scheme"}
    devicehash.remember(make_context(store=str(tmp_path), session="s").store, first)
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_kept_on_device"] == 0 and second.fingerprints["scheme"] == devicehash.SCHEME


def test_a_kept_blob_gone_from_the_store_is_copied_and_written_again(on_device, tmp_path):
    ns = _namespace()
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    frozen = next(r.blob for r in first.arrays.values() if r.nbytes == SIZES["frozen"])
    (tmp_path / first.blob_key(frozen)).unlink()
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_written"] >= 4 * 1024 * 1024
    assert (tmp_path / second.blob_key(frozen)).exists()
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["frozen"].weight, ns["frozen"].weight)


def test_a_device_that_cannot_fingerprint_gets_its_storages_copied(on_device, monkeypatch, tmp_path):
    def out_of_memory(storage, seed):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 128.00 MiB")

    ns = _namespace()
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    monkeypatch.setattr(devicehash, "_fingerprint", out_of_memory)
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_kept_on_device"] == 0 and second.stats["bytes_copied"] == sum(SIZES.values())
    assert second.fingerprints == {}
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["t"], ns["t"]) and torch.equal(target["frozen"].weight, ns["frozen"].weight)


def test_signed_checkpoints_never_skip_on_a_fingerprint(on_device, tmp_path):
    config = PauseConfig(signing_key="k" * 32)
    ns = _namespace()
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns, config=config)
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns, config=config).manifest
    assert second.hash == "sha256" and second.fingerprints == {}
    assert second.stats["bytes_kept_on_device"] == 0


def _frozen_backbone(device: str = "cpu") -> dict:
    """A frozen backbone (16 MiB) and a small trainable head, AdamW on the head only."""
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(4)]).to(device)
    backbone.requires_grad_(False)
    head = torch.nn.Linear(1024, 512).to(device)  # 2 MiB
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    return {"backbone": backbone, "head": head, "opt": opt}


def _train_step(ns: dict, device: str = "cpu") -> None:
    x = torch.randn(8, 1024, device=device)
    ns["head"](ns["backbone"](x)).pow(2).mean().backward()
    ns["opt"].step()
    ns["opt"].zero_grad(set_to_none=True)


def _frozen_backbone_round_trip(tmp_path, device: str) -> None:
    ns = _frozen_backbone(device)
    _train_step(ns, device)
    first = jp.checkpoint(store=str(tmp_path), session="ft", namespace=ns).manifest
    _train_step(ns, device)
    second = jp.checkpoint(store=str(tmp_path), session="ft", namespace=ns).manifest
    frozen_bytes = 4 * 4 * 1024 * 1024
    trainable = 3 * 4 * 512 * 1024  # head weight + AdamW's two moments
    assert first.stats["bytes_copied"] >= frozen_bytes + trainable
    assert second.stats["bytes_kept_on_device"] == frozen_bytes
    assert trainable <= second.stats["bytes_copied"] < trainable + 64 * 1024  # the trainable part only
    assert second.fingerprints["seed"] == first.fingerprints["seed"]  # one key per lineage
    expected = {k: v.detach().clone() for k, v in ns["head"].state_dict().items()}
    another_process()  # a new process: the fingerprints come from the manifest
    target: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="ft", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    assert all(torch.equal(target["head"].state_dict()[k], v) for k, v in expected.items())
    assert target["head"].weight.device.type == torch.device(device).type
    _train_step(target, device)  # the resumed session goes on keeping the backbone
    third = jp.checkpoint(store=str(tmp_path), session="ft", namespace=target).manifest
    assert third.parent == second.id and third.stats["bytes_kept_on_device"] == frozen_bytes


def test_frozen_backbone_second_checkpoint_copies_only_the_trainable_part(on_device, tmp_path):
    _frozen_backbone_round_trip(tmp_path, "cpu")


@pytest.mark.parametrize("size", [1, 4097, 3 * N + 1])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fingerprints_equal_the_cpu_ones(size):
    data = torch.randint(0, 256, (size,), dtype=torch.uint8)
    seed = "77" * 16
    on_gpu = devicehash.fingerprint(data.cuda().untyped_storage(), seed)
    assert on_gpu == devicehash.fingerprint(data.untyped_storage(), seed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_in_place_writes_are_seen(kind):
    ns = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in _namespace().items()}
    ns["model"] = ns["model"].cuda()
    ns["p"] = torch.nn.Parameter(ns["p"].detach())
    ns["opt"] = torch.optim.SGD(ns["model"].parameters(), lr=0.1)
    watched = {"t": ns["t"], "p": ns["p"], "w": ns["model"].weight}
    seed = "33" * 16

    def prints() -> dict:  # (size, fingerprint): what a checkpoint compares
        found = devicehash.fingerprints({k: v.untyped_storage() for k, v in watched.items()}, seed)
        return {k: (watched[k].untyped_storage().nbytes(), fp) for k, fp in found.items()}

    before = prints()
    if kind == "optimizer step":
        ns["model"](torch.randn(4, 512, device="cuda")).sum().backward()
        ns["opt"].step()
    elif kind == "index_put_":
        ns["t"].index_put_((torch.tensor([0, N - 1], device="cuda"),), torch.tensor([5.0, 6.0], device="cuda"))
    elif kind == "copy_":
        ns["t"].copy_(torch.arange(N, dtype=torch.float32, device="cuda"))
    elif kind == "set_":
        ns["t"].set_(torch.full((N,), 3.0, device="cuda").untyped_storage())
    else:
        _change(kind, ns)
    watched["t"] = ns["t"]
    after = prints()
    changed = {k for k in before if before[k] != after[k]}
    expected = {"no_grad write to a parameter": {"p"}, "optimizer step": {"w"}}.get(kind, {"t"})
    assert changed == expected, kind


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_frozen_backbone_second_checkpoint_copies_only_the_trainable_part(tmp_path):
    _frozen_backbone_round_trip(tmp_path, "cuda")


class _Loaded(torch.nn.Module):
    """Weights loaded from a model file, as ``from_pretrained`` leaves them: the folder they came
    from named in ``name_or_path``, so a checkpoint offers its ``safetensors`` file."""

    def __init__(self, folder: str, device: str) -> None:
        super().__init__()
        from safetensors.torch import load_file

        for name, tensor in load_file(f"{folder}/model.safetensors").items():
            self.register_buffer(name, tensor.to(device))
        self.name_or_path = folder


def _model_file(tmp_path) -> str:
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(3)
    folder = tmp_path / "model"
    folder.mkdir()
    save_file(
        {"a": torch.randn(N, generator=gen), "b": torch.randn(N, generator=gen)}, str(folder / "model.safetensors")
    )
    return str(folder)


def _referenced_blobs_round_trip(tmp_path, device: str) -> None:
    """A model whose previous checkpoint referenced its weights in their file keeps them on the
    device by fingerprint, still as references; a resume elsewhere reads them back exactly."""
    folder, url = _model_file(tmp_path), str(tmp_path / "store")
    ns = {"model": _Loaded(folder, device), "t": torch.randn(N).to(device)}
    first = jp.checkpoint(store=url, session="s", namespace=ns).manifest
    assert len(first.references) == 2 and first.stats["bytes_referenced"] == 2 * 4 * N
    ns["t"].add_(1)
    second = jp.checkpoint(store=url, session="s", namespace=ns).manifest
    assert second.stats["bytes_kept_on_device"] == 2 * 4 * N  # the weights: neither copied nor hashed
    assert second.stats["bytes_copied"] == 4 * N  # only what changed
    assert second.references == first.references and second.stats["bytes_referenced"] == 2 * 4 * N
    assert second.stats["bytes_written"] < 4 * N + 64 * 1024
    expected = {k: v.cpu().clone() for k, v in ns["model"].state_dict().items()} | {"t": ns["t"].cpu().clone()}
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=url, session="s", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    got = {k: v.cpu() for k, v in target["model"].state_dict().items()} | {"t": target["t"].cpu()}
    assert got.keys() == expected.keys() and all(torch.equal(got[k], v) for k, v in expected.items())
    assert target["t"].device.type == torch.device(device).type


def test_a_referenced_model_file_tensor_is_kept_on_its_device_as_a_reference(on_device, tmp_path):
    _referenced_blobs_round_trip(tmp_path, "cpu")


def test_a_kept_reference_that_cannot_be_made_again_is_copied(on_device, tmp_path, monkeypatch):
    folder, url = _model_file(tmp_path), str(tmp_path / "store")
    ns = {"model": _Loaded(folder, "cpu")}
    first = jp.checkpoint(store=url, session="s", namespace=ns).manifest
    assert first.stats["bytes_referenced"] == 2 * 4 * N
    monkeypatch.setenv("JUPYTER_PAUSE_MODEL_FILES", "off")  # the file is not offered this time
    second = jp.checkpoint(store=url, session="s", namespace=ns, config=PauseConfig()).manifest
    assert not second.references and second.stats["bytes_kept_on_device"] == 0
    assert second.stats["bytes_copied"] == 2 * 4 * N and second.stats["bytes_written"] >= 2 * 4 * N
    another_process()
    target: dict = {}
    jp.resume(store=url, session="s", namespace=target)
    assert all(torch.equal(target["model"].state_dict()[k], v) for k, v in ns["model"].state_dict().items())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_referenced_model_file_tensor_is_kept_on_the_gpu_as_a_reference(tmp_path):
    _referenced_blobs_round_trip(tmp_path, "cuda")
