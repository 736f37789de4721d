"""Value digests: a fingerprint of what a variable holds, equal in any process that holds the same.

The restore test compares the digest taken at checkpoint with the one of the value in the kernel
now, so a digest must not change when the value comes back equal, and must change when it does
not. It does not depend on hash seeds (a set is digested by its elements' digests, sorted), on
memo numbering across variables, on the device a tensor lives on or its memory layout, or on
memory addresses (nothing is digested through ``repr`` or ``id``).

What a digest covers, kind by kind:

- ``None``, bools, ints, strs, bytes, complex: the value; floats by their bits, except that
  every NaN is one value (``-0.0`` and ``0.0`` differ: they behave differently);
- lists, tuples, dicts (in insertion order, with a ``defaultdict``'s factory), sets,
  frozensets and a ``WeakSet``'s live members (in no order: pickle lists a WeakSet's members in
  an order that follows their addresses); shared objects and cycles as references to where they
  were first met, so self-referencing containers and objects pointing at each other have digests;
- arrays and tensors: type, dtype (with field names for structured dtypes), shape, values;
  ``requires_grad`` of a tensor; object arrays element by element; a masked array's mask and
  fill value too;
- functions and classes of the notebook: code, defaults, closure values, attributes; a class by
  its name and everything its body defines; an importable class by its name only; a notebook
  ``lru_cache`` function also by its cache's counts once it has any (the cache is not saved);
- exceptions and warnings: the exception's type, ``args`` and attributes (``__notes__``
  included); a ``warnings.WarningMessage`` by its attributes (message, category, filename,
  line number...). Not the traceback, ``__cause__`` or ``__context__``: pickle does not carry
  them, so no restored exception has them;
- tar and zip archives: what the checkpoint keeps of them (the path a reader is reopened from;
  a closed archive's members), not the reader's state;
- any other object: the state pickle saves of it (copyreg's table, then ``__reduce_ex__(2)``),
  attributes in name order, where an empty attribute dictionary is no state (an exception's
  dictionary exists once something looks at it, and pickle does not bring an empty one back),
  without the few entries ``objectstate.NOT_STATE`` names (caches, counters and ``id()`` keys
  of matplotlib figures, a persistent DataLoader's iterator); an object pickle cannot describe
  (a lock, a weak reference) by its type only.

Taking a digest changes only what asking for pickle state changes anyway (copyreg caches
``__slotnames__`` on a class; matplotlib advances its callback counter), and adds no warning to a
list the notebook is recording with ``warnings.catch_warnings(record=True)``.

Format 2 is what checkpoints record now (``2:`` and 32 hex digits). Format 1 (bare hex, release
0.1.x) gave a restored value another digest when it held an exception whose attribute dictionary
had been looked at (recorded warnings hold exceptions), a notebook class whose objects were
pickled after it (``__slotnames__``), a matplotlib figure, a ``WeakSet`` or a reduction named
by a ``repr`` with an address in it; it gave none to a set an element points back at, and it did
not see a change of a notebook class's attributes, a function's attributes, a structured dtype's
fields, a mask or a regular expression. It is still computed for checkpoints that recorded it, so those
are compared like with like (``like``).
"""

from __future__ import annotations

import copyreg
import functools
import math
import struct
import sys
import tarfile
import threading
import types
import warnings
import weakref
import zipfile
from typing import Any

import xxhash

from . import objectstate, openfiles

#: Objects visited per variable before giving up (the checkpoint's checksums still cover it).
DEFAULT_BUDGET = 200_000

#: The digest format new checkpoints record.
FORMAT = 2

#: Formats this version computes: 1 (release 0.1.x: bare hex) and 2 (``2:`` + hex).
FORMATS = (1, 2)

#: Kinds digested by value without a memo entry.
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray)


class OverBudget(Exception):
    """The value is larger than the digest budget."""


#: Digests already taken of whole storages' bytes: (device, data pointer, bytes) -> xxh3-128.
Known = dict[tuple[str, int, int], bytes]


def remember(known: Known, origin: tuple[str, int, int] | None, digest: str, algorithm: str) -> None:
    """Note in ``known`` that the bytes at ``origin`` have the hex ``digest``, when it is an
    xxh3-128 digest (the kind value digests take); a blob key of another kind is not noted."""
    if origin is not None and algorithm == "xxh3_128":
        known[origin] = bytes.fromhex(digest)


def format_of(digest: str) -> int | None:
    """The format of a recorded digest: 1 (bare hex), the number before ``:``, or None."""
    head, sep, body = digest.rpartition(":")
    if not sep:
        return 1 if len(digest) == 32 and all(c in "0123456789abcdef" for c in digest) else None
    return int(head) if head.isdigit() and len(body) == 32 else None


def comparable(digest: str) -> bool:
    """Whether this version computes digests in the format of ``digest``."""
    return format_of(digest) in FORMATS


class _Digester:
    def __init__(
        self, budget: int, known: Known | None = None, version: int = FORMAT, parent: _Digester | None = None
    ) -> None:
        self.budget = budget
        self.known = known or {}
        self.version = version
        self.count = 0
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []
        # A set element is digested in a memo of its own over its ancestors' (format 2).
        self.parent = parent
        self.base = parent.base + len(parent.seen) if parent is not None else 0

    def _ref(self, ident: int) -> int | None:
        digester: _Digester | None = self
        while digester is not None:
            ref = digester.seen.get(ident)
            if ref is not None:
                return ref
            digester = digester.parent
        return None

    def digest(self, obj: Any) -> bytes:
        kind = type(obj)
        if obj is None or kind in (bool, str):
            return self._leaf(f"{kind.__name__}:{obj!r}".encode())
        if kind is int:
            return self._leaf(f"int:{obj:x}".encode())  # hex: no digit limit for huge ints
        if kind is float:
            if self.version >= 2 and math.isnan(obj):
                return self._leaf(b"float:nan")
            return self._leaf(b"float:" + struct.pack("<d", obj))
        if kind is complex:
            return self._leaf(b"complex:" + struct.pack("<dd", obj.real, obj.imag))
        if kind in (bytes, bytearray):
            return self._leaf(kind.__name__.encode() + b":" + xxhash.xxh3_128_digest(obj))
        return self._enter(obj) or self._node(obj)

    def _enter(self, obj: Any) -> bytes | None:
        """A reference to where ``obj`` was met before, or None once it is noted as met now."""
        ref = self._ref(id(obj))
        if ref is not None:
            return self._leaf(f"ref:{ref}".encode())
        self.count += 1
        if self.count > self.budget:
            raise OverBudget
        self.seen[id(obj)] = self.base + len(self.seen)
        self.keep.append(obj)  # ids stay unique while digesting
        return None

    def _alone(self, element: Any) -> bytes:
        """A set element's digest in a memo of its own, so it does not depend on set order."""
        if self.version >= 2 and type(element) in _LEAVES:
            return self.digest(element)
        child = _Digester(self.budget - self.count, self.known, self.version, self if self.version >= 2 else None)
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
        if isinstance(obj, (set, frozenset)) or (self.version >= 2 and isinstance(obj, weakref.WeakSet)):
            return self._combine(name, sorted(self._alone(x) for x in obj))  # a WeakSet: its live members
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj, name)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if self.version < 2 or kind is numpy.ndarray:
                return self._ndarray(obj, name, numpy)
            masked = sys.modules.get("numpy.ma")
            if masked is not None and isinstance(obj, masked.MaskedArray):
                return self._masked(obj, name, numpy, masked)
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, types.CodeType):
            return self._code(obj)
        if isinstance(obj, type):
            return self._class(obj)
        if isinstance(obj, types.ModuleType):
            return self._leaf(f"module:{obj.__name__}".encode())
        if kind is _LRU_CACHE and self.version >= 2:
            return self._cached_function(obj, name)
        return self._reduced(obj, name)

    def _cached_function(self, wrapper: Any, name: str) -> bytes:
        """A notebook ``lru_cache`` function as any object, and its cache's counts once it has
        any: functools keeps the cache's entries out of reach, so a restored function starts with
        an empty cache (``cache_info()`` differs, a function with side effects runs again), and
        the checkpoint's rehearsal names it."""
        plain = self._reduced(wrapper, name)
        info = wrapper.cache_info()
        if not (info.hits or info.misses or info.currsize) or not _is_dynamic(wrapper):
            return plain  # nothing cached yet (or a module's function, saved by its name)
        return self._combine("cached", (plain, self.digest(tuple(info))))

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
        dtype = a.dtype.str
        if self.version >= 2 and (a.dtype.fields is not None or a.dtype.subdtype is not None):
            dtype += str(a.dtype.descr)  # "|V12" alone would not tell the fields apart
        meta = f"{name}|{dtype}|{a.shape}".encode()
        if a.dtype.hasobject:
            return self._combine(meta.decode(), (self.digest(x) for x in a.ravel().tolist()))
        body = None
        if self.known and a.flags.c_contiguous and a.nbytes:
            body = self.known.get(("cpu", a.__array_interface__["data"][0], a.nbytes))
        return self._leaf(meta + b"|" + (body or xxhash.xxh3_128_digest(numpy.ascontiguousarray(a))))

    def _masked(self, a: Any, name: str, numpy: Any, masked: Any) -> bytes:
        """A masked array: values, mask, fill value (its default until one is set: pickle sets
        the default, reading ``fill_value`` does too) and hardness."""
        fill = vars(a).get("_fill_value")
        fill = numpy.asarray(masked.default_fill_value(a) if fill is None else fill, dtype=a.dtype)
        parts = (self.digest(a.data), self.digest(masked.getmaskarray(a)), self.digest(fill), self.digest(a.hardmask))
        return self._combine(name, parts)

    def _code(self, code: types.CodeType) -> bytes:
        consts = (self._code(c) if isinstance(c, types.CodeType) else self.digest(c) for c in code.co_consts)
        head = self._leaf(code.co_code + "|".join(code.co_names).encode() + code.co_qualname.encode())
        return self._combine("code", (head, *consts))

    def _function(self, f: types.FunctionType) -> bytes:
        closure = tuple(objectstate.cell_value(c) for c in f.__closure__ or ())
        parts = [
            self._code(f.__code__),
            self.digest(f.__defaults__),
            self.digest(f.__kwdefaults__),
            self.digest(closure),
            self._leaf(f.__qualname__.encode()),
        ]
        if self.version >= 2 and f.__dict__:  # attributes set on the function (and ``__wrapped__``)
            parts.append(self._attributes(f.__dict__))
        return self._combine("function", parts)

    def _class(self, cls: type) -> bytes:
        head = self._leaf(f"class:{cls.__module__}.{cls.__qualname__}".encode())
        if self.version >= 2:
            if cls.__module__ != "__main__" and not (cls.__flags__ & _HEAPTYPE and _is_dynamic(cls)):
                return head  # found again by its name
            members = {k: v for k, v in vars(cls).items() if k not in objectstate.CLASS_SKIP}
            return self._combine("class", (head, self._attributes(members)))
        if cls.__module__ != "__main__":
            return head
        members = [
            self.digest(k) + self.digest(v)
            for k, v in vars(cls).items()
            if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)) or k == "__slots__"
        ]
        return self._combine("class", (head, *members))

    def _attributes(self, attributes: dict[str, Any]) -> bytes:
        """A dictionary of attributes, in name order: where ``__setstate__`` or a class rebuilt
        by value puts each one is no part of the value."""
        items = sorted(attributes.items()) if all(type(k) is str for k in attributes) else attributes.items()
        return self._combine("attributes", [self.digest(k) + self.digest(v) for k, v in items])

    def _state(self, state: Any, kind: type, obj: Any = None) -> bytes:
        """An object's pickled state; format 2: no attributes is no state, attributes in name order."""
        if self.version < 2:
            return self.digest(state)
        if type(state) is dict:
            state = objectstate.without_caches(state, kind)
            return self._attributes(state) if state else self.digest(None)
        if type(state) is tuple and len(state) == 2 and all(s is None or type(s) is dict for s in state):
            if not any(state):  # (instance dict, slots) both empty
                return self.digest(None)
            return self._combine("slotted", [self._state(s, kind) for s in state])
        return self._handed_over(state, obj)

    def _reduced(self, obj: Any, name: str) -> bytes:
        """Any other object, by the state the pickle protocol says it has."""
        if isinstance(obj, (staticmethod, classmethod)):
            return self._combine(name, (self.digest(obj.__func__),))
        if isinstance(obj, property):
            return self._combine(name, (self.digest(obj.fget), self.digest(obj.fset)))
        # As the checkpoint does: an archive by how it is reopened (``openfiles``), then as pickle
        # does: copyreg's table first (where ``re.Pattern`` is), then ``__reduce_ex__``.
        registered = (_ARCHIVES.get(type(obj)) or copyreg.dispatch_table.get(type(obj))) if self.version >= 2 else None
        try:
            reduced = registered(obj) if registered is not None else NotImplemented
            if reduced is NotImplemented:
                reduced = obj.__reduce_ex__(2)
        except Exception:  # an object pickle cannot describe: known only by its type
            return self._leaf(f"opaque:{name}".encode())
        if isinstance(reduced, str):
            return self._leaf(f"global:{name}.{reduced}".encode())
        func, args, state, listitems, dictitems = (tuple(reduced) + (None,) * 5)[:5]
        parts = [
            self._maker(func),
            self._handed_over(objectstate.strip_class(args), obj if self.version >= 2 else None),
        ]
        parts.append(self._state(state, type(obj), obj))
        if listitems is not None:
            parts.append(self.digest(list(listitems)))
        if dictitems is not None:
            parts.append(self.digest(dict(dictitems)))
        return self._combine(name, parts)

    def _handed_over(self, part: Any, obj: Any) -> bytes:
        """A reduction's arguments or state tuple, where a dictionary of the object's attributes
        handed over whole (astropy's ``Quantity`` state, its ``WCS`` arguments) is digested in
        name order: the restored object's attribute dictionary has its keys in another order
        (``__dict__.update`` after ``__init__``), which is no part of the value."""
        named = [objectstate.named(x) for x in part] if obj is not None and type(part) is tuple else []
        own = objectstate.attribute_names(obj) if any(named) else frozenset()
        handed = [is_named and not own.isdisjoint(x) for is_named, x in zip(named, part, strict=True)] if own else []
        if not any(handed):
            return self.digest(part)
        entered = self._enter(part)
        if entered is not None:
            return entered
        items = (self._in_name_order(x) if h else self.digest(x) for h, x in zip(handed, part, strict=True))
        return self._combine("builtins.tuple", items)

    def _in_name_order(self, attributes: dict[str, Any]) -> bytes:
        """A dictionary of attributes as a dictionary digest would take it, its keys in name order."""
        entered = self._enter(attributes)
        if entered is not None:
            return entered
        return self._combine("builtins.dict", [self.digest(k) + self.digest(v) for k, v in sorted(attributes.items())])

    def _maker(self, func: Any) -> bytes:
        """What a reduction calls to rebuild the object: by name, never by a ``repr`` (which may
        hold a memory address)."""
        qualname = getattr(func, "__qualname__", None)
        if self.version < 2:
            return self._leaf((qualname if qualname is not None else repr(func)).encode())
        if isinstance(qualname, str):
            return self._leaf(f"{getattr(func, '__module__', None)}.{qualname}".encode())
        return self._combine("maker", (self.digest(func),))  # a functools.partial, a callable object


#: Archives go by what the checkpoint keeps of them (the path they are reopened from, or a closed
#: one's members), not their reader's state: a reopened reader has loaded fewer members yet.
_ARCHIVES: dict[type, Any] = {tarfile.TarFile: openfiles.reduce_tarfile, zipfile.ZipFile: openfiles.reduce_zipfile}

#: ``Py_TPFLAGS_HEAPTYPE``: set on classes made by Python code.
_HEAPTYPE = 1 << 9

#: The type of a function wrapped by ``functools.lru_cache`` (or ``functools.cache``).
_LRU_CACHE = functools._lru_cache_wrapper  # type: ignore[attr-defined]


def _is_dynamic(obj: Any) -> bool:
    from .reducers import is_dynamic

    return is_dynamic(obj)


def value_digest(
    obj: Any, budget: int = DEFAULT_BUDGET, known: Known | None = None, like: str | None = None
) -> str | None:
    """Digest of what ``obj`` holds; None when it has more than ``budget`` objects or is nested
    deeper than the digest can follow (then only the checkpoint's checksums and identity since
    the resume cover it).

    Parameters
    ----------
    known
        xxh3-128 digests of whole storages taken moments ago (while writing or verifying their
        blobs), so their bytes are not read again.
    like
        A recorded digest: the result is in its format (to compare like with like); None when
        this version does not know that format. Default: ``FORMAT``.
    """
    version = FORMAT if like is None else format_of(like)
    if version not in FORMATS:
        return None
    digester = _Digester(budget, known, version)
    try:
        if threading.current_thread() is threading.main_thread():
            # Reading an object's state may warn (deprecated accessors); that is no warning of
            # the notebook's, and must not land in a list it records with catch_warnings.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = digester.digest(obj)
        else:
            raw = digester.digest(obj)
    except (OverBudget, RecursionError):  # a few calls per level: pickle reaches deeper than this
        return None
    return raw.hex() if version == 1 else f"{version}:{raw.hex()}"
