"""jupyter_pause.store.manifest: the checkpoint's record survives storage exactly, or is refused."""

from __future__ import annotations

import json

import pytest
import xxhash

from jupyter_pause.errors import IntegrityError
from jupyter_pause.store.manifest import (
    FORMAT,
    ArrayRecord,
    BlobRef,
    Manifest,
    SkippedRecord,
    VariableRecord,
)


def sample(**changes: object) -> Manifest:
    fields = dict(
        id="20260101T000000-abc",
        session="dir--Train-1",
        lineage="L1",
        parent="20251231T235959-xyz",
        created=1767225600.123456,
        trigger="manual",
        node="gpu-node-7",
        tag="before lr sweep ✓",
        notebook={"path": "dir/Train 1.ipynb", "blob": "n" * 32, "size": 1234},
        variables=[
            VariableRecord("model", "__main__.Net", "module", BlobRef("a" * 32, 100), ["a0"]),
            VariableRecord("lock", "_thread.lock", "object", BlobRef("b" * 32, 50), [], "dill"),
        ],
        imports={"np": "numpy"},
        skipped=[SkippedRecord("api_token", "str", "looks like a secret")],
        arrays={"a0": ArrayRecord("torch", "torch.float32", [10], "cuda:0", "c" * 32, 64, 40, "C")},
        blobs={"a" * 32: 100, "b" * 32: 50, "c" * 32: 104},
        rng=BlobRef("d" * 32, 7),
        environment={"python": "3.11.7", "packages": {"torch": "2.3.0"}},
        process={"pid": 42, "token": "t"},
        timings={"requested": 1.5},
        stats={"bytes_total": 254},
        import_files={"torch": ["__init__.py", "nn/modules/linear.py", "_C.cpython-311-x86_64-linux-gnu.so"]},
    )
    fields.update(changes)
    return Manifest(**fields)  # type: ignore[arg-type]


def test_round_trip_is_exact() -> None:
    manifest = sample()
    back = Manifest.from_bytes(manifest.to_bytes())
    assert back == manifest
    assert isinstance(back.variables[0].blob, BlobRef)
    assert isinstance(back.arrays["a0"], ArrayRecord)
    assert back.variables[1].pickler == "dill"
    assert back.devices() == {"cuda:0"}


def test_a_checkpoint_of_tensors_names_torch_as_its_slow_import_with_the_files_it_loaded() -> None:
    back = Manifest.from_bytes(sample().to_bytes())
    assert back.slow_imports() == ["torch"]
    assert back.import_files["torch"][:2] == ["__init__.py", "nn/modules/linear.py"]
    numpy_only = {"a0": ArrayRecord("numpy", "float32", [10], "cpu", "c" * 32, 64, 40, "C")}
    assert sample(arrays=numpy_only).slow_imports() == []
    older = json.loads(sample().to_bytes())
    del older["manifest"]["import_files"]  # written before the field: nothing to read ahead
    body = json.dumps(older["manifest"], sort_keys=True, separators=(",", ":"))
    older["checksum"] = xxhash.xxh3_128_hexdigest(body.encode())
    assert Manifest.from_bytes(json.dumps(older).encode()).import_files == {}


def test_a_manifest_read_is_handed_on_as_it_was_read() -> None:
    """``as_read``: what a reader hands another (the server to its kernel) verifies there as the
    store's bytes would, signature included; a manifest never read has nothing to hand on."""
    read = Manifest.from_bytes(sample().to_bytes("alice's key"))
    again = Manifest.from_bytes(read.as_read())
    assert again == read and again.signature == read.signature and again.canonical == read.canonical
    with pytest.raises(ValueError, match="was not read from bytes"):
        sample().as_read()
    edited = read.as_read().replace(b"gpu-node-7", b"gpu-node-8")
    with pytest.raises(IntegrityError, match="checksum mismatch"):
        Manifest.from_bytes(edited)


def test_round_trip_of_a_minimal_manifest() -> None:
    manifest = Manifest("id", "s", "L", None, 0.0, "manual", "n")
    assert Manifest.from_bytes(bytearray(manifest.to_bytes())) == manifest


def test_truncated_manifest_is_refused() -> None:
    data = sample().to_bytes()
    with pytest.raises(IntegrityError, match="incomplete or not a manifest"):
        Manifest.from_bytes(data[: len(data) // 2])


def test_edited_manifest_is_refused() -> None:
    data = sample().to_bytes()
    edited = data.replace(b'"gpu-node-7"', b'"gpu-node-8"')
    assert edited != data
    with pytest.raises(IntegrityError, match="changed after it was written"):
        Manifest.from_bytes(edited)


def test_edit_that_keeps_the_json_valid_in_a_nested_value_is_refused() -> None:
    outer = json.loads(sample().to_bytes())
    outer["manifest"]["arrays"]["a0"]["nbytes"] = 41
    with pytest.raises(IntegrityError, match="checksum mismatch"):
        Manifest.from_bytes(json.dumps(outer).encode())


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00\xff\xfe garbage", b"[1, 2]", b"null", b'"text"', b"{}", b'{"manifest": {}}'],
    ids=["empty", "binary", "list", "null", "string", "empty-object", "no-checksum"],
)
def test_garbage_is_refused(garbage: bytes) -> None:
    with pytest.raises(IntegrityError, match="incomplete or not a manifest"):
        Manifest.from_bytes(garbage)


def test_errors_name_where_the_manifest_came_from() -> None:
    where = "s3://bucket/pause/sess/manifests/20260101.json"
    with pytest.raises(IntegrityError, match=where):
        Manifest.from_bytes(b"{", where=where)


def test_newer_format_is_refused_asking_to_upgrade() -> None:
    data = sample(format=FORMAT + 1).to_bytes()
    with pytest.raises(IntegrityError, match="upgrade jupyter-pause") as info:
        Manifest.from_bytes(data)
    assert f"format {FORMAT + 1}" in str(info.value)


def test_unknown_fields_from_a_same_format_writer_are_ignored() -> None:
    outer = json.loads(sample().to_bytes())
    outer["manifest"]["added_later"] = {"x": 1}
    body = json.dumps(outer["manifest"], sort_keys=True, separators=(",", ":"))
    outer["checksum"] = xxhash.xxh3_128_hexdigest(body.encode())
    assert Manifest.from_bytes(json.dumps(outer).encode()) == sample()
