"""jupyter_pause.serialize.arrays: NumPy arrays and torch storages saved as raw bytes, and put back."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from jupyter_pause.errors import RestoreError
from jupyter_pause.serialize.arrays import (
    NUMPY_OUT_OF_BAND_BYTES,
    ArrayLoader,
    target_device,
)
from jupyter_pause.serialize.pickler import DumpResult, dump_variables, load_variables
from tests.support.dumping import dump

torch = pytest.importorskip("torch")


def roundtrip(values: dict[str, Any], map_location: str = "auto") -> tuple[DumpResult, dict[str, Any]]:
    result, segments, records, blobs = dump(values)
    assert result.failed == {}
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs, map_location), {})
    assert failed == {}
    return result, loaded


def big(shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    n = int(np.prod(shape))
    return (np.arange(n) % 251).astype(dtype).reshape(shape)


# -- NumPy ---------------------------------------------------------------------------------------


def test_large_c_order_array_goes_out_of_band_and_comes_back() -> None:
    array = big((100, 200))
    result, loaded = roundtrip({"a": array})
    assert [f.kind for f in result.collector.found.values()] == ["numpy"]
    assert len(result.segments["a"].data) < 1000  # the bytes are not in the pickle stream
    back = loaded["a"]
    assert back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array)
    assert back.flags.c_contiguous and back.flags.writeable


def test_fortran_order_array_keeps_its_layout() -> None:
    array = np.asfortranarray(big((30, 40, 50), np.float32))
    result, loaded = roundtrip({"f": array})
    assert [f.order for f in result.collector.found.values()] == ["F"]
    back = loaded["f"]
    assert back.flags.f_contiguous and not back.flags.c_contiguous
    assert np.array_equal(back, array)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::3],
        lambda a: a[::-1],
        lambda a: a.T[5:],
    ],
    ids=["strided-columns", "reversed", "transposed-slice"],
)
def test_non_contiguous_slices_come_back_equal(make: Any) -> None:
    view = make(big((300, 300)))
    assert not view.flags.c_contiguous and not view.flags.f_contiguous
    _, loaded = roundtrip({"v": view})
    assert loaded["v"].shape == view.shape
    assert np.array_equal(loaded["v"], view)


@pytest.mark.parametrize("dtype", ["<f2", "<c16", "?", "<M8[ns]", "<U7", ">f8", ">i4", ">c8"], ids=str)
def test_dtypes_including_big_endian_round_trip(dtype: str) -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(-30_000, 30_000, size=70_000)
    array = raw.astype(dtype) if not dtype.startswith("<U") else raw.astype(str).astype(dtype)
    assert array.nbytes >= NUMPY_OUT_OF_BAND_BYTES
    result, loaded = roundtrip({"a": array})
    assert len(result.collector.found) == 1
    back = loaded["a"]
    assert back.dtype == np.dtype(dtype)
    assert back.dtype.byteorder == np.dtype(dtype).byteorder
    assert back.tobytes() == array.tobytes()


def test_structured_dtypes_round_trip() -> None:
    packed = np.dtype([("id", "<i8"), ("pos", "<f4", (3,)), ("name", "S6"), ("ok", "?")])
    aligned = np.dtype([("flag", "u1"), ("value", ">f8")], align=True)  # with padding bytes
    nested = np.dtype([("inner", [("a", "<i2"), ("b", "<u4")]), ("c", "<f8")])
    values = {}
    for name, dtype in {"packed": packed, "aligned": aligned, "nested": nested}.items():
        array = np.zeros(8000, dtype=dtype)
        for field in dtype.names:
            sub = array[field]
            sub[...] = (np.arange(sub.size) % 97).reshape(sub.shape).astype(sub.dtype) if sub.dtype.names is None else 0
        values[name] = array
    values["nested"]["inner"]["b"] = np.arange(8000)
    result, loaded = roundtrip(values)
    assert len(result.collector.found) == 3
    for name, array in values.items():
        back = loaded[name]
        assert back.dtype == array.dtype, name
        assert back.dtype.itemsize == array.dtype.itemsize, name
        assert back.tobytes() == array.tobytes(), name
    assert loaded["aligned"]["value"].tolist() == values["aligned"]["value"].tolist()
    assert loaded["nested"]["inner"]["b"][-1] == 7999


def test_small_arrays_stay_in_band() -> None:
    just_under = np.ones(NUMPY_OUT_OF_BAND_BYTES - 1, dtype=np.uint8)
    at_limit = np.ones(NUMPY_OUT_OF_BAND_BYTES, dtype=np.uint8)
    small = np.arange(10)
    result, loaded = roundtrip({"small": small, "under": just_under, "at": at_limit})
    assert [f.shape for f in result.collector.found.values()] == [[NUMPY_OUT_OF_BAND_BYTES]]
    assert result.segments["small"].arrays == [] and result.segments["under"].arrays == []
    assert np.array_equal(loaded["small"], small)
    assert np.array_equal(loaded["under"], just_under)


def test_object_arrays_stay_in_band() -> None:
    array = np.array([{"k": i} for i in range(20_000)], dtype=object)
    result, loaded = roundtrip({"o": array})
    assert result.collector.found == {}
    assert loaded["o"][19_999] == {"k": 19_999}


def test_large_array_in_two_variables_is_saved_once_and_shared() -> None:
    array = big((200, 100))
    result, loaded = roundtrip({"a": array, "holder": {"x": array}})
    assert len(result.collector.found) == 1
    assert loaded["holder"]["x"] is loaded["a"]


def test_plain_pickle_of_a_segment_says_to_use_resume() -> None:
    result = dump_variables({"a": big((100, 100))})
    with pytest.raises(RestoreError, match=r"resume\(\)"):
        pickle.loads(result.segments["a"].data)


# -- torch ---------------------------------------------------------------------------------------


def random_bits(n: int, dtype: Any) -> Any:
    """``n`` values of ``dtype`` with random bit patterns (NaN payloads, subnormals, -0.0 ...)."""
    gen = torch.Generator().manual_seed(1)
    width = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * width,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.complex64], ids=str)
def test_torch_storage_round_trips_bit_exact(dtype: Any) -> None:
    tensor = random_bits(4096, dtype)
    result, loaded = roundtrip({"t": tensor})
    (found,) = result.collector.found.values()
    assert (found.kind, found.dtype, found.device) == ("torch", str(dtype), "cpu")
    back = loaded["t"]
    assert back.dtype == dtype and back.shape == tensor.shape
    assert back.view(torch.uint8).tolist() == tensor.view(torch.uint8).tolist()


def test_bool_tensor_round_trips() -> None:
    tensor = torch.rand(1000, generator=torch.Generator().manual_seed(0)) > 0.5
    _, loaded = roundtrip({"mask": tensor})
    assert loaded["mask"].dtype == torch.bool
    assert torch.equal(loaded["mask"], tensor)


def test_tensor_keeps_requires_grad_and_parameters_stay_parameters() -> None:
    weight = torch.nn.Parameter(torch.randn(3, 3))
    leaf = torch.randn(4, requires_grad=True)
    frozen = torch.randn(2)
    _, loaded = roundtrip({"weight": weight, "leaf": leaf, "frozen": frozen})
    assert isinstance(loaded["weight"], torch.nn.Parameter) and loaded["weight"].requires_grad
    assert loaded["leaf"].requires_grad and not loaded["frozen"].requires_grad
    assert torch.equal(loaded["weight"].detach(), weight.detach())


def test_tensors_viewing_one_storage_as_different_dtypes_share_it() -> None:
    floats = torch.zeros(1024)
    ints = floats.view(torch.int32)
    result, loaded = roundtrip({"floats": floats, "ints": ints})
    assert len(result.collector.found) == 1
    f2, i2 = loaded["floats"], loaded["ints"]
    assert (f2.dtype, i2.dtype) == (torch.float32, torch.int32)
    i2[0] = 0x3F800000  # the bits of 1.0
    assert f2[0].item() == 1.0


def test_empty_tensor_and_untyped_storage_round_trip() -> None:
    empty = torch.empty(0, 5)
    storage = torch.arange(16, dtype=torch.uint8).untyped_storage()
    _, loaded = roundtrip({"empty": empty, "storage": storage})
    assert loaded["empty"].shape == (0, 5) and loaded["empty"].dtype == torch.float32
    assert isinstance(loaded["storage"], torch.UntypedStorage)
    assert list(loaded["storage"]) == list(range(16))


def test_missing_array_bytes_fail_only_the_variables_that_use_them() -> None:
    lost = torch.arange(100, dtype=torch.float32)
    kept = torch.ones(10)
    result, segments, records, blobs = dump(
        {"lost": lost, "view_of_lost": lost[10:20], "uses_lost": {"w": lost}, "kept": kept, "n": 3}
    )
    lost_key = result.segments["lost"].arrays[0]
    del blobs[records[lost_key].blob]
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {})
    assert sorted(failed) == ["lost", "uses_lost", "view_of_lost"]
    assert all("missing" in reason for reason in failed.values())
    assert torch.equal(loaded["kept"], kept) and loaded["n"] == 3


def test_missing_array_bytes_are_never_restored_as_zeros_silently() -> None:
    lost = torch.arange(1, 101, dtype=torch.float32)
    # A dict is walked value by value, last first: the long list is walked before the tensor.
    run = {"weights": lost[:10], "losses": [i / 7 for i in range(1_100_000)]}
    result, segments, records, blobs = dump({"lost": lost, "run": run})
    del blobs[records[result.segments["lost"].arrays[0]].blob]
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {})
    assert "run" in failed, f"restored with stand-in zeros: {loaded['run']['weights'].tolist()}"


def test_missing_array_bytes_in_a_notebook_class_attribute_are_reported() -> None:
    ns: dict[str, Any] = {"__name__": "__main__", "torch": torch}
    code = "class Norm:\n    mean = lost[:3]\nnorm = Norm()\n"
    ns["lost"] = torch.arange(1, 101, dtype=torch.float32)
    exec(compile(code, "<cell>", "exec", dont_inherit=True), ns)
    result, segments, records, blobs = dump({"lost": ns["lost"], "Norm": ns["Norm"], "norm": ns["norm"]})
    del blobs[records[result.segments["lost"].arrays[0]].blob]
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {})
    assert sorted(failed) == ["Norm", "lost", "norm"], f"Norm.mean came back as {loaded['Norm'].mean}"


# -- devices -------------------------------------------------------------------------------------


def unavailable_cuda() -> str:
    """A CUDA device this process does not have (cuda:0 on a CPU-only machine)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"cuda:{count}"


def test_target_device_refuses_missing_gpu_and_names_map_location() -> None:
    device = unavailable_cuda()
    with pytest.raises(RestoreError, match="--map-location cpu") as info:
        target_device(device, "auto")
    assert device in str(info.value)


def test_target_device_maps_to_cpu_when_asked() -> None:
    assert target_device("cuda:0", "cpu") == "cpu"
    assert target_device(unavailable_cuda(), "cpu") == "cpu"
    assert target_device("cpu", "auto") == "cpu"


def test_unknown_device_kind_is_refused_with_the_way_out() -> None:
    with pytest.raises(RestoreError, match="--map-location cpu"):
        target_device("xla:0", "auto")


def test_gpu_saved_tensor_restores_on_cpu_with_map_location_cpu() -> None:
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    result, segments, records, blobs = dump({"t": tensor})
    for record in records.values():
        record.device = unavailable_cuda()  # as if saved on a GPU this machine lacks
    with pytest.raises(RestoreError, match="--map-location cpu"):
        ArrayLoader(records, blobs, "auto").load(next(iter(records)))
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs, "cpu"), {})
    assert failed == {}
    assert loaded["t"].device.type == "cpu"
    assert torch.equal(loaded["t"], tensor)
