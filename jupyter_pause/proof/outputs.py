"""A model's output of any structure as leaves, and how two sets of leaves compare.

A forward pass returns a tensor, a tuple, a dict, a Transformers ``ModelOutput``, a dataclass, a
cache object holding lists of tensors, or a nested mix of them. ``leaves`` walks it into a flat
list of records (plain data, for the checks blob): each tensor by its path, shape, dtype, first
values and a digest of all its bytes; each other leaf by its value (numbers, strings, None) or,
for an object with nothing more to walk, by its type's name. ``compare`` says whether a new pass
gives the same: bit-identical on the recorded device, within the dtype's tolerance on another.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

#: Values of each output tensor kept for comparison across devices (the digest covers the rest).
KEPT_VALUES = 4096
#: Output tensors that keep values; the ones after them are compared by digest, shape and dtype.
KEPT_TENSORS = 64
#: How deep an output is walked (a cache object inside an output inside a tuple is three).
MAX_DEPTH = 8

#: Relative tolerance per dtype when the device changed (bit-exact is expected otherwise).
TOLERANCE = {"torch.float16": 1e-2, "torch.bfloat16": 5e-2, "torch.float32": 1e-4, "torch.float64": 1e-9}

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _children(obj: Any) -> list[tuple[str, Any]] | None:
    """The named parts of a container or an object with attributes; None for a leaf."""
    if isinstance(obj, Mapping):
        return [(str(k), v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict) and not callable(obj):
        return [(k, v) for k, v in attributes.items() if not k.startswith("__")]
    return None


def leaves(output: Any) -> list[dict[str, Any]]:
    """The output as a flat list of leaf records, in a stable order."""
    found: list[dict[str, Any]] = []
    _walk(output, "", 0, set(), found)
    tensors = 0
    for leaf in found:
        if leaf["kind"] == "tensor":
            tensors += 1
            if tensors > KEPT_TENSORS:
                leaf["values"] = []
    return found


def _walk(obj: Any, path: str, depth: int, seen: set[int], found: list[dict[str, Any]]) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        found.append(_tensor_leaf(obj, path))
        return
    if isinstance(obj, _PLAIN):
        found.append({"path": path, "kind": "value", "value": obj})
        return
    if isinstance(obj, type) or callable(obj):
        found.append({"path": path, "kind": "type", "value": f"{getattr(obj, '__module__', '')}.{obj.__qualname__}"})
        return
    parts = _children(obj) if depth < MAX_DEPTH and id(obj) not in seen else None
    if parts is None:
        found.append({"path": path, "kind": "type", "value": type(obj).__qualname__})
        return
    seen.add(id(obj))
    for name, part in parts:
        _walk(part, f"{path}.{name}" if path else name, depth + 1, seen, found)


def _tensor_leaf(t: Any, path: str) -> dict[str, Any]:
    import torch

    t = t.detach()
    host = t.to("cpu").contiguous()
    data = host.reshape(-1).view(torch.uint8) if host.numel() else host.new_empty(0, dtype=torch.uint8)
    digest = hashlib.blake2b(data.numpy().tobytes(), digest_size=16).hexdigest()
    if host.is_complex():
        host = torch.view_as_real(host)
    values = host.reshape(-1)[:KEPT_VALUES].to(torch.float64).tolist()
    return {
        "path": path,
        "kind": "tensor",
        "shape": [int(s) for s in t.shape],
        "dtype": str(t.dtype),
        "digest": digest,
        "values": values,
    }


def first_tensor(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first tensor leaf (what a check recorded before outputs were walked compares with)."""
    return next((leaf for leaf in found if leaf["kind"] == "tensor"), None)


def compare(got: list[dict[str, Any]], want: list[dict[str, Any]], same_device: bool) -> tuple[bool, str]:
    """Whether the leaves ``got`` now match the ``want`` recorded; (matches, how it compares)."""
    paths = [(leaf["path"], leaf["kind"]) for leaf in got]
    if paths != [(leaf["path"], leaf["kind"]) for leaf in want]:
        return False, f"output has {len(got)} part(s) of another structure than the {len(want)} recorded"
    tolerated: list[str] = []
    for now, then in zip(got, want, strict=True):
        name = now["path"] or "output"
        if now["kind"] != "tensor":
            if now["value"] != then["value"]:
                return False, f"{name} is {now['value']!r}, {then['value']!r} recorded"
            continue
        if now["shape"] != then["shape"] or now["dtype"] != then["dtype"]:
            return False, f"{name} is {now['dtype']} {now['shape']}, {then['dtype']} {then['shape']} recorded"
        if now["digest"] == then["digest"]:
            continue
        ok, how = close(now, then, same_device)
        if not ok:
            return False, f"{name} differs ({how})"
        tolerated.append(how)
    tensors = sum(leaf["kind"] == "tensor" for leaf in got)
    where = f" ({tensors} tensor(s))" if tensors > 1 else ""
    if tolerated:
        return True, f"output {tolerated[0]}{where}"
    return True, f"output bit-identical{where}"


def close(now: dict[str, Any], then: dict[str, Any], same_device: bool) -> tuple[bool, str]:
    """Values that are not bit-identical: within the dtype's tolerance, on another device only."""
    import torch

    a = torch.tensor(now["values"], dtype=torch.float64)
    b = torch.tensor(then["values"], dtype=torch.float64)
    worst = float((a - b).abs().max()) if a.numel() and a.shape == b.shape else float("nan")
    if same_device:
        return False, f"largest difference {worst:.3g}" if a.numel() else "its digest differs"
    rtol = TOLERANCE.get(then["dtype"], 1e-4)
    if a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True):
        return True, f"within {rtol:g}"
    return False, f"largest difference {worst:.3g}"
