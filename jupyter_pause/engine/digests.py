"""Value digests: a fingerprint of what a variable holds, equal in any process that holds the same.

Unlike a pickle stream, the digest does not depend on hash seeds (sets are digested in sorted
order), on memo numbering across variables, or on the device a tensor lives on. It is what the
restore test compares: the value as checkpointed against the value in the kernel now.
"""

from __future__ import annotations

import struct
import sys
import types
from typing import Any

import xxhash

#: Objects visited per variable before giving up (the checkpoint's checksums still cover it).
DEFAULT_BUDGET = 200_000


class OverBudget(Exception):
    """The value is larger than the digest budget."""


#: Digests already taken of whole storages' bytes: (device, data pointer, bytes) -> xxh3-128.
Known = dict[tuple[str, int, int], bytes]


def remember(known: Known, origin: tuple[str, int, int] | None, digest: str, algorithm: str) -> None:
    """Note in ``known`` that the bytes at ``origin`` have the hex ``digest``, when it is an
    xxh3-128 digest (the kind value digests take); a blob key of another kind is not noted."""
    if origin is not None and algorithm == "xxh3_128":
        known[origin] = bytes.fromhex(digest)


class _Digester:
    def __init__(self, budget: int, known: Known | None = None) -> None:
        self.budget = budget
        self.known = known or {}
        self.count = 0
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []

    def digest(self, obj: Any) -> bytes:
        kind = type(obj)
        if obj is None or kind in (bool, str):
            return self._leaf(f"{kind.__name__}:{obj!r}".encode())
        if kind is int:
            return self._leaf(f"int:{obj:x}".encode())  # hex: no digit limit for huge ints
        if kind is float:
            return self._leaf(b"float:" + struct.pack("<d", obj))
        if kind is complex:
            return self._leaf(b"complex:" + struct.pack("<dd", obj.real, obj.imag))
        if kind in (bytes, bytearray):
            return self._leaf(kind.__name__.encode() + b":" + xxhash.xxh3_128_digest(obj))
        ref = self.seen.get(id(obj))
        if ref is not None:
            return self._leaf(f"ref:{ref}".encode())
        self.count += 1
        if self.count > self.budget:
            raise OverBudget
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)  # ids stay unique while digesting
        return self._node(obj)

    def _alone(self, element: Any) -> bytes:
        """A set element's digest in a memo of its own, so it does not depend on set order."""
        child = _Digester(self.budget - self.count, self.known)
        try:
            return child.digest(element)
        finally:
            self.count += child.count

    def _leaf(self, data: bytes) -> bytes:
        return xxhash.xxh3_128_digest(data)

    def _combine(self, tag: str, parts: Any) -> bytes:
        h = xxhash.xxh3_128(tag.encode())
        for part in parts:
            h.update(part)
        return h.digest()

    def _node(self, obj: Any) -> bytes:
        kind = type(obj)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if kind in (list, tuple):
            return self._combine(name, (self.digest(x) for x in obj))
        if isinstance(obj, dict):
            factory = getattr(obj, "default_factory", None)
            head = [self.digest(factory)] if factory is not None else []
            return self._combine(name, head + [self.digest(k) + self.digest(v) for k, v in obj.items()])
        if isinstance(obj, (set, frozenset)):
            return self._combine(name, sorted(self._alone(x) for x in obj))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj, name)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            return self._ndarray(obj, name, numpy)
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, types.CodeType):
            return self._code(obj)
        if isinstance(obj, type):
            return self._class(obj)
        if isinstance(obj, types.ModuleType):
            return self._leaf(f"module:{obj.__name__}".encode())
        return self._reduced(obj, name)

    def _tensor(self, t: Any, name: str) -> bytes:
        torch = sys.modules["torch"]
        meta = f"{name}|{t.dtype}|{tuple(t.shape)}|{t.requires_grad}"
        if t.is_sparse:
            t = t.detach().coalesce()
            return self._combine(meta, (self.digest(t.indices()), self.digest(t.values())))
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            return self._leaf(f"{meta}|{t.layout}|{t.device.type}".encode())
        body = self._stored(t)
        if body is None:
            data = t.detach().to("cpu").contiguous().reshape(-1)
            body = xxhash.xxh3_128_digest(data.view(torch.uint8).numpy()) if data.numel() else b""
        return self._leaf(meta.encode() + b"|" + body)

    def _stored(self, t: Any) -> bytes | None:
        """The digest already taken of ``t``'s bytes, when ``t`` is exactly one whole storage.

        Those bytes are the same in memory order, so the digest is the one a copy would give;
        for a GPU tensor, this also saves bringing it to host memory a second time.
        """
        if not self.known or t.is_conj() or t.is_neg() or t.storage_offset() or not t.is_contiguous():
            return None
        storage = t.untyped_storage()
        size = storage.nbytes()
        if not size or t.numel() * t.element_size() != size:
            return None
        return self.known.get((str(t.device), storage.data_ptr(), size))

    def _ndarray(self, a: Any, name: str, numpy: Any) -> bytes:
        meta = f"{name}|{a.dtype.str}|{a.shape}".encode()
        if a.dtype.hasobject:
            return self._combine(meta.decode(), (self.digest(x) for x in a.ravel().tolist()))
        body = None
        if self.known and a.flags.c_contiguous and a.nbytes:
            body = self.known.get(("cpu", a.__array_interface__["data"][0], a.nbytes))
        return self._leaf(meta + b"|" + (body or xxhash.xxh3_128_digest(numpy.ascontiguousarray(a))))

    def _code(self, code: types.CodeType) -> bytes:
        consts = (self._code(c) if isinstance(c, types.CodeType) else self.digest(c) for c in code.co_consts)
        head = self._leaf(code.co_code + "|".join(code.co_names).encode() + code.co_qualname.encode())
        return self._combine("code", (head, *consts))

    def _function(self, f: types.FunctionType) -> bytes:
        closure = tuple(_cell_value(c) for c in f.__closure__ or ())
        return self._combine(
            "function",
            (
                self._code(f.__code__),
                self.digest(f.__defaults__),
                self.digest(f.__kwdefaults__),
                self.digest(closure),
                self._leaf(f.__qualname__.encode()),
            ),
        )

    def _class(self, cls: type) -> bytes:
        head = self._leaf(f"class:{cls.__module__}.{cls.__qualname__}".encode())
        if cls.__module__ != "__main__":
            return head
        members = [
            self.digest(k) + self.digest(v)
            for k, v in vars(cls).items()
            if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)) or k == "__slots__"
        ]
        return self._combine("class", (head, *members))

    def _reduced(self, obj: Any, name: str) -> bytes:
        """Any other object, by the state the pickle protocol says it has."""
        if isinstance(obj, (staticmethod, classmethod)):
            return self._combine(name, (self.digest(obj.__func__),))
        if isinstance(obj, property):
            return self._combine(name, (self.digest(obj.fget), self.digest(obj.fset)))
        try:
            reduced = obj.__reduce_ex__(2)
        except Exception:  # an object pickle cannot describe: known only by its type
            return self._leaf(f"opaque:{name}".encode())
        if isinstance(reduced, str):
            return self._leaf(f"global:{name}.{reduced}".encode())
        func, args, state, listitems, dictitems = (tuple(reduced) + (None,) * 5)[:5]
        parts = [self._leaf(getattr(func, "__qualname__", repr(func)).encode()), self.digest(_strip_class(args))]
        parts.append(self.digest(state))
        if listitems is not None:
            parts.append(self.digest(list(listitems)))
        if dictitems is not None:
            parts.append(self.digest(dict(dictitems)))
        return self._combine(name, parts)


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return "<empty cell>"


def _strip_class(args: Any) -> Any:
    """copyreg's reconstructor args carry the class itself; its name is digested already."""
    if isinstance(args, tuple):
        return tuple(f"class:{a.__module__}.{a.__qualname__}" if isinstance(a, type) else a for a in args)
    return args


def value_digest(obj: Any, budget: int = DEFAULT_BUDGET, known: Known | None = None) -> str | None:
    """Hex digest of what ``obj`` holds; None when it has more than ``budget`` objects or is
    nested deeper than the digest can follow (then only the checkpoint's checksums and identity
    since the resume cover it).

    ``known`` holds xxh3-128 digests of whole storages taken moments ago (while writing or
    verifying their blobs), so their bytes are not read again.
    """
    try:
        return _Digester(budget, known).digest(obj).hex()
    except (OverBudget, RecursionError):  # a few calls per level: pickle reaches deeper than this
        return None
