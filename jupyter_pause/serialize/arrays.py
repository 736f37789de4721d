"""Tensor storages and NumPy arrays as raw typed bytes, kept outside the pickle stream.

While pickling, each torch storage (on any device) and each large NumPy array is replaced by a
small reference and its bytes are collected here; while unpickling, the reference is resolved
to an array built directly on the verified bytes read from the store (no extra copy on CPU).
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import gc
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RestoreError
from ..store.storage import Buffer
from . import byteorder, devicehash
from .digests import Known, remember

#: NumPy arrays smaller than this stay inside the pickle stream (no blob of their own).
NUMPY_OUT_OF_BAND_BYTES = 64 * 1024


def load_array(key: str, dtype: str | None = None) -> Any:
    """Placeholder named in pickle streams; a jupyter-pause unpickler resolves it to real data."""
    raise RestoreError("this pickle stream refers to arrays stored beside it; load it with jupyter_pause.resume()")


@dataclass
class Collected:
    """One array found while pickling: where it came from and a view of its host bytes."""

    kind: str
    dtype: str
    shape: list[int]
    device: str
    order: str
    data: memoryview
    keepalive: Any = None
    private: bool = False  # data is a copy of its own (a GPU storage brought to host, say)
    #: (device, data pointer, bytes) of the memory ``data`` came from, for ``digests.Known``.
    origin: tuple[str, int, int] | None = None
    #: Blob of the previous checkpoint that holds these bytes, known from their fingerprint on
    #: the device (``devicehash``): they are neither copied to host nor hashed.
    reused: str | None = None

    @property
    def size(self) -> int:
        """Bytes of the array, known before a device storage is brought to host."""
        return len(self.data) if self.data is not None else self.keepalive.nbytes()


@dataclass
class ArrayCollector:
    """Collects arrays met by the pickler, each once, under a key unique to this checkpoint."""

    found: dict[str, Collected] = field(default_factory=dict)
    touched: list[str] = field(default_factory=list)
    copied: int = 0  # bytes ``gather`` brought from devices to host
    #: The autograd function of the first tensor met with a graph behind it (reset per variable).
    graph: str | None = None
    _by_identity: dict[int, str] = field(default_factory=dict)

    def _key_for(self, identity: int) -> tuple[str, bool]:
        key = self._by_identity.get(identity)
        if key is not None:
            return key, False
        key = f"a{len(self._by_identity)}"
        self._by_identity[identity] = key
        return key, True

    def reduce_torch_storage(self, storage: Any) -> tuple[Any, ...]:
        """Reduce a ``TypedStorage`` / ``UntypedStorage`` to a reference.

        CPU bytes are viewed in place; storages on a device are copied to host later, all at
        once, by ``gather``.
        """
        import torch

        typed = isinstance(storage, torch.storage.TypedStorage)
        untyped = storage._untyped_storage if typed else storage
        key, new = self._key_for(untyped._cdata)
        if new:
            device = str(untyped.device)
            size = untyped.nbytes()
            dtype = storage.dtype if typed else torch.uint8
            itemsize = dtype.itemsize
            found = Collected(
                "torch",
                str(dtype),
                [size // itemsize],
                device,
                "C",
                memoryview(b""),
                keepalive=untyped,
                origin=(device, untyped.data_ptr(), size) if size else None,
            )
            if untyped.device.type != "cpu" or (devicehash.ON_CPU and size >= devicehash.MIN_BYTES):
                found.data, found.private = None, True
            elif size:  # the storage's bytes, viewed in place while ``untyped`` keeps them
                found.data = memoryview((ctypes.c_ubyte * size).from_address(untyped.data_ptr())).cast("B")
                found.keepalive = (untyped,)
            self.found[key] = found
        self.touched.append(key)
        return (load_array, (key, str(storage.dtype) if typed else None))

    def gather(self) -> None:
        """Copy every storage that lives on a device into host memory.

        One host buffer holds them all; for CUDA it is pinned, so the copies run asynchronously
        at full bus speed and the kernel waits once per device rather than once per tensor.
        """
        waiting = [f for f in self.found.values() if f.data is None and f.reused is None]
        self.copied += sum(f.keepalive.nbytes() for f in waiting)
        if not waiting:
            return
        import torch

        sizes = [f.keepalive.nbytes() for f in waiting]
        cuda = any(f.device.startswith("cuda") for f in waiting)
        host, pinned = _host_buffer(sum(sizes), pin=cuda)
        offset, devices = 0, set()
        for found, size in zip(waiting, sizes, strict=True):
            part = host[offset : offset + size]
            if size:
                storage = found.keepalive
                source = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (size,), (1,))
                part.copy_(source, non_blocking=pinned and storage.device.type == "cuda")
                devices.add(storage.device)
            found.data, found.keepalive = memoryview(part.numpy()), host
            offset += size
        for device in devices:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    def reduce_ndarray(self, array: np.ndarray) -> tuple[Any, ...] | Any:
        """Reduce a large plain-data NumPy array to a reference; small ones pickle as usual, in their
        byte order (``byteorder``)."""
        if array.dtype.hasobject or array.nbytes < NUMPY_OUT_OF_BAND_BYTES or array.dtype.itemsize == 0:
            return NotImplemented if array.dtype.isnative else byteorder.reduce_in_byte_order(array)
        key, new = self._key_for(id(array))
        if new:
            private = False
            if array.flags.c_contiguous:
                flat, order = array.reshape(-1), "C"
            elif array.flags.f_contiguous:
                flat, order = array.T.reshape(-1), "F"
            else:
                flat, order, private = np.ascontiguousarray(array).reshape(-1), "C", True
            data = memoryview(flat.view(np.uint8))
            dtype = np.lib.format.dtype_to_descr(array.dtype)
            origin = (
                ("cpu", array.__array_interface__["data"][0], array.nbytes) if order == "C" and not private else None
            )
            self.found[key] = Collected(
                "numpy",
                repr(dtype),
                list(array.shape),
                "cpu",
                order,
                data,
                keepalive=(array, flat),
                private=private,
                origin=origin,
            )
        self.touched.append(key)
        return (load_array, (key,))

    def reducers(self) -> dict[type, Any]:
        """Exact types this collector reduces, for the pickler's dispatch."""
        table: dict[type, Any] = {np.ndarray: self.reduce_ndarray}
        if "torch" in sys.modules:
            import torch

            table[torch.storage.TypedStorage] = self.reduce_torch_storage
            table[torch.UntypedStorage] = self.reduce_torch_storage
            table[torch.Tensor] = self.note_graph
        return table

    def note_graph(self, tensor: Any) -> Any:
        """Note a tensor computed with autograd (it comes back a leaf: the graph is not saved),
        then let the tensor reduce as usual."""
        if self.graph is None and tensor.grad_fn is not None:
            self.graph = type(tensor.grad_fn).__name__
        return NotImplemented


def _host_buffer(size: int, pin: bool) -> tuple[Any, bool]:
    """A host byte tensor of ``size``: pinned when asked and possible, else pageable."""
    import torch

    if pin:
        try:
            return torch.empty(size, dtype=torch.uint8, pin_memory=True), True
        except RuntimeError:  # pinned memory is limited (containers, ulimit -l): copy slower
            pass
    return torch.empty(size, dtype=torch.uint8), False


def to_device(data: Buffer, device: str) -> Any:
    """A verified blob's bytes as a flat byte tensor on ``device`` (the host bytes may then go)."""
    import torch

    host = torch.frombuffer(data, dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)
    return host.to(device)


def target_device(device: str, map_location: str) -> str:
    """Where a storage saved on ``device`` goes back to under ``map_location`` (auto | cpu)."""
    if device == "cpu" or map_location == "cpu":
        return "cpu"
    import torch

    kind, _, index = device.partition(":")
    if kind == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(index or 0) < available:
            return device
        raise RestoreError(
            f"the checkpoint holds tensors on {device}, and this process sees "
            f"{available} CUDA device(s); resume on a node with a GPU, or use "
            "--map-location cpu to restore them into host memory"
        )
    raise RestoreError(
        f"the checkpoint holds tensors on {device}, which this loader cannot place; use --map-location cpu"
    )


class ArrayLoader:
    """Builds arrays on verified bytes, each once, so shared storages stay shared.

    ``blobs`` maps blob keys to their verified bytes, or to a flat byte tensor already on the
    device its tensors go to (moved there while reading, see ``restore._placements``).
    """

    def __init__(self, records: dict[str, Any], blobs: dict[str, Any], map_location: str = "auto", hash_name: str = ""):
        self.records = records
        self.blobs = blobs
        self.map_location = map_location
        self._built: dict[str, Any] = {}
        #: xxh3-128 digests of whole arrays built here, from their verified blob keys
        #: (``digests.Known``), so the value digests of the resume need not read them again.
        self.known: Known = {}
        self.hash_name = hash_name
        #: Keys whose bytes were missing: built as zeros so loading can go on, never restored.
        self.missing: set[str] = set()

    def load(self, key: str, dtype: str | None = None) -> Any:
        """The array or storage for ``key`` (typed by ``dtype`` for torch storages)."""
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._build(key)
        if dtype is None:
            return built
        import torch

        torch_dtype = getattr(torch, dtype.split(".", 1)[1])
        return torch.storage.TypedStorage(wrap_storage=built, dtype=torch_dtype, _internal=True)

    def _build(self, key: str) -> Any:
        record = self.records.get(key)
        if record is None:
            raise RestoreError(f"array {key} is not recorded in the manifest")
        blob = self.blobs.get(record.blob)
        if blob is None:
            # Zeros stand in so the other variables of this stream still load; every variable
            # that reaches them is reported as not restored (see ``poisoned``).
            self.missing.add(key)
            blob, record = bytearray(record.nbytes), _replace(record, offset=0)
        whole = key not in self.missing and record.nbytes == len(blob) and record.nbytes
        if record.kind == "torch":
            import torch

            if isinstance(blob, torch.Tensor):  # moved to its device while it was read
                part = blob[record.offset : record.offset + record.nbytes]
                return self._note((part if len(part) == len(blob) else part.clone()).untyped_storage(), record, whole)
            if record.nbytes == 0:
                flat = torch.empty(0, dtype=torch.uint8)
            else:
                flat = torch.frombuffer(blob, dtype=torch.uint8, count=record.nbytes, offset=record.offset)
            device = target_device(record.device, self.map_location)
            if device != "cpu":
                flat = flat.to(device)
            return self._note(flat.untyped_storage(), record, whole)
        dtype = np.lib.format.descr_to_dtype(_literal(record.dtype))
        count = record.nbytes // dtype.itemsize
        flat = np.frombuffer(blob, dtype=dtype, count=count, offset=record.offset)
        if record.order == "F":
            return flat.reshape(record.shape[::-1]).T
        if whole:
            remember(
                self.known, ("cpu", flat.__array_interface__["data"][0], record.nbytes), record.blob, self.hash_name
            )
        return flat.reshape(record.shape)

    def _note(self, storage: Any, record: Any, whole: bool) -> Any:
        """``storage``, its digest noted from its blob key when it is the whole blob."""
        if whole:
            remember(self.known, (str(storage.device), storage.data_ptr(), record.nbytes), record.blob, self.hash_name)
        return storage

    def poisoned(
        self, value: Any, namespace: dict[str, Any] | None = None, extra: tuple[Any, ...] = (), limit: int = 5_000_000
    ) -> bool:
        """Whether ``value`` reaches a stand-in for missing bytes, or one of ``extra`` (``reached``)."""
        return self.reached(value, namespace, extra, limit) is not None

    def reached(
        self, value: Any, namespace: dict[str, Any] | None = None, extra: tuple[Any, ...] = (), limit: int = 5_000_000
    ) -> Any:
        """The first stand-in for missing bytes, or one of ``extra``, that ``value`` reaches (a tensor
        on a missing storage stands for it); None when it reaches none.

        The walk follows containers, instances and notebook-defined classes, not modules,
        importable classes or function globals (those lead to the whole interpreter, not to this
        variable's data). A value too large to walk within ``limit`` objects counts as reaching
        one: the value itself is returned.
        """
        if not self.missing and not extra:
            return None
        bad_ids = {id(self._built[k]) for k in self.missing} | {id(x) for x in extra}
        bad_storages = {getattr(self._built[k], "_cdata", None) for k in self.missing} - {None}
        torch = sys.modules.get("torch")
        seen: set[int] = set()
        todo = [value]
        while todo:
            obj = todo.pop()
            if obj is None or isinstance(obj, _ATOMIC) or id(obj) in seen:
                continue
            if len(seen) >= limit:
                return value
            seen.add(id(obj))
            if id(obj) in bad_ids:
                return obj
            if obj is namespace or isinstance(obj, types.ModuleType):
                continue
            if isinstance(obj, type):
                if obj.__module__ == "__main__":
                    todo.extend(vars(obj).values())
                continue
            if isinstance(obj, types.FunctionType):
                todo.extend((obj.__defaults__, obj.__kwdefaults__, obj.__closure__, obj.__dict__))
                continue
            if torch is not None and isinstance(obj, torch.Tensor):
                if bad_storages and obj.untyped_storage()._cdata in bad_storages:
                    return obj
            elif isinstance(obj, np.ndarray) and obj.base is not None:
                todo.append(obj.base)
            todo.extend(gc.get_referents(obj))
        return None


#: Values that hold no references: never walked.
_ATOMIC = (int, float, complex, str, bytes, bool)


def _replace(record: Any, **changes: Any) -> Any:
    return dataclasses.replace(record, **changes)


def _literal(text: str) -> Any:
    return ast.literal_eval(text)
