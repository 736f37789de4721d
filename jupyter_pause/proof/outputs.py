"""A model's output of any structure as leaves, and how two sets of leaves compare.

A forward pass returns a tensor, a tuple, a dict, a Transformers ``ModelOutput``, a dataclass, a
cache object holding lists of tensors, or a nested mix of them. ``leaves`` walks it into a flat
list of records (plain data, for the checks blob): each tensor by its path, shape, dtype, first
values and a digest of all its bytes; each other leaf by its value (numbers, strings, None) or,
for an object with nothing more to walk, by its type's name. ``compare`` says whether a new pass
gives the same: bit-identical (the strongest result, said as such), or within the tolerance of the
dtype and the matmul precision in effect (``tolerance``): the same weights on another processor,
GPU or library version agree only to within the precision the computation used.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

#: Values of each output tensor kept for comparison across devices (the digest covers the rest).
KEPT_VALUES = 4096
#: Runs the values past ``KEPT_VALUES`` are summed in (see ``_blocks``).
BLOCKS = 64
#: Output tensors that keep values; the ones after them are compared by digest, shape and dtype.
KEPT_TENSORS = 64
#: How deep an output is walked (a cache object inside an output inside a tuple is three).
MAX_DEPTH = 8

#: (rtol, atol) per dtype: ``torch.testing.assert_close``'s defaults.
TOLERANCE = {
    "torch.float16": (1e-3, 1e-5),
    "torch.bfloat16": (1.6e-2, 1e-5),
    "torch.float32": (1.3e-6, 1e-5),
    "torch.float64": (1e-7, 1e-7),
    "torch.complex32": (1e-3, 1e-5),
    "torch.complex64": (1.3e-6, 1e-5),
    "torch.complex128": (1e-7, 1e-7),
}

#: What fp32 results may differ by under a looser matmul precision (``hardware.MODES``): TF32
#: and fp16 autocast keep 10 bits of mantissa in products (PyTorch's own TF32 tests allow 5e-3),
#: bf16 keeps 7.
MATMUL_TOLERANCE = {"tf32": (5e-3, 5e-3), "fp16": (5e-3, 5e-3), "bf16": (1.6e-2, 1.6e-2)}

#: Short names of dtypes, as a person reads them in a tolerance.
_SHORT = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float64": "fp64"}

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
    flat = host.reshape(-1)
    leaf = {
        "path": path,
        "kind": "tensor",
        "shape": [int(s) for s in t.shape],
        "dtype": str(t.dtype),
        "digest": digest,
        "values": flat[:KEPT_VALUES].to(torch.float64).tolist(),
    }
    if flat.numel() > KEPT_VALUES and (host.is_floating_point() or host.is_complex()):
        leaf["blocks"] = _blocks(flat[KEPT_VALUES:].to(torch.float64))
    return leaf


def _blocks(rest: Any) -> list[list[float]]:
    """[count, sum, sum of magnitudes] of up to ``BLOCKS`` runs of the values past the kept ones:
    a change there shows in its run's sum, beyond what rounding can move it."""
    size = -(-rest.numel() // BLOCKS)
    return [[float(b.numel()), float(b.sum()), float(b.abs().sum())] for b in rest.split(size)]


def first_tensor(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first tensor leaf (what a check recorded before outputs were walked compares with)."""
    return next((leaf for leaf in found if leaf["kind"] == "tensor"), None)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far a value may be from the recorded one: ``|got - want| <= atol + rtol * |want|``,
    with ``atol`` at least ``rtol`` times the output's root mean square (an error of a sum
    scales with its terms, not with a result that cancels to near zero)."""

    rtol: float
    atol: float
    label: str

    def __str__(self) -> str:
        return f"{self.label} tolerance"

    def missed(self, worst: float) -> str:
        """Said of values beyond this tolerance."""
        return f"largest difference {worst:.3g}, beyond {self}: rtol {self.rtol:g}, atol {self.atol:g}"


def tolerance(dtype: str, matmul: str = "ieee") -> Tolerance:
    """The tolerance of values of ``dtype`` computed under the ``matmul`` precision (``hardware.MODES``)."""
    label = _SHORT.get(dtype, dtype.removeprefix("torch."))
    if dtype not in TOLERANCE and dtype.startswith(("torch.int", "torch.uint", "torch.bool")):
        return Tolerance(0.0, 0.0, label)  # integers (token ids, class indices) are exact anywhere
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE["torch.float32"])
    if dtype in ("torch.float32", "torch.complex64") and matmul in MATMUL_TOLERANCE:
        rtol, atol = MATMUL_TOLERANCE[matmul]
        label = f"{label} with {matmul.upper()} matmuls"
    return Tolerance(rtol, atol, label)


@dataclasses.dataclass
class Comparison:
    """How a new pass compares with the recorded one, leaf by leaf."""

    ok: bool
    how: str
    #: The largest difference of a value not bit-identical (0.0 when every value is).
    worst: float = 0.0
    #: The tolerances that non-identical values were held to (empty when all are bit-identical).
    tolerances: list[Tolerance] = dataclasses.field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.ok and not self.tolerances


def compare(got: list[dict[str, Any]], want: list[dict[str, Any]], matmul: str = "ieee") -> Comparison:
    """Whether the leaves ``got`` now match the ``want`` recorded."""
    paths = [(leaf["path"], leaf["kind"]) for leaf in got]
    if paths != [(leaf["path"], leaf["kind"]) for leaf in want]:
        return Comparison(False, f"output has {len(got)} part(s) of another structure than the {len(want)} recorded")
    result = Comparison(True, "")
    for now, then in zip(got, want, strict=True):
        name = now["path"] or "output"
        if now["kind"] != "tensor":
            if now["value"] != then["value"]:
                return Comparison(False, f"{name} is {now['value']!r}, {then['value']!r} recorded")
            continue
        if now["shape"] != then["shape"] or now["dtype"] != then["dtype"]:
            return Comparison(
                False, f"{name} is {now['dtype']} {now['shape']}, {then['dtype']} {then['shape']} recorded"
            )
        if now["digest"] == then["digest"]:
            continue
        limit = tolerance(then["dtype"], matmul)
        ok, worst = close(now, then, limit)
        if not ok:
            return Comparison(False, f"{name} differs ({limit.missed(worst)})", worst, [limit])
        result.worst = max(result.worst, worst)
        if limit not in result.tolerances:
            result.tolerances.append(limit)
    tensors = sum(leaf["kind"] == "tensor" for leaf in got)
    where = f" ({tensors} tensor(s))" if tensors > 1 else ""
    if result.tolerances:
        held = "/".join(t.label for t in result.tolerances)
        result.how = f"output within {held} tolerance (largest difference {result.worst:.3g}){where}"
    else:
        result.how = f"output bit-identical{where}"
    return result


def close(now: dict[str, Any], then: dict[str, Any], limit: Tolerance) -> tuple[bool, float]:
    """Whether values that are not bit-identical are within ``limit``; (within, largest difference)."""
    import torch

    a = torch.tensor(now["values"], dtype=torch.float64)
    b = torch.tensor(then["values"], dtype=torch.float64)
    if a.shape != b.shape:
        return False, float("nan")
    if not b.numel():  # no values kept (past KEPT_TENSORS): shape, dtype and structure matched
        return True, 0.0
    finite = torch.isfinite(b)
    # NaN and infinities stand where they stood (a NaN where a number stood fails below)
    same_specials = bool(torch.allclose(a[~finite], b[~finite], rtol=0, atol=0, equal_nan=True))
    a, b = a[finite], b[finite]
    if not b.numel():
        return same_specials, 0.0
    diff = (a - b).abs()
    worst = float(diff.nan_to_num(float("inf")).max())
    scale = float(b.pow(2).mean().sqrt())
    atol = max(limit.atol, limit.rtol * scale)
    ok = same_specials and bool((diff <= atol + limit.rtol * b.abs()).all())
    if ok and then.get("blocks") and now.get("blocks"):
        ok, moved = _blocks_close(now["blocks"], then["blocks"], limit.rtol, atol)
        worst = worst if ok else moved  # the values past the kept ones: how far their run's sum moved
    return ok, worst


def _blocks_close(now: list[list[float]], then: list[list[float]], rtol: float, atol: float) -> tuple[bool, float]:
    """Whether the runs' sums past the kept values agree: each within ``atol`` per value and
    ``rtol`` of its magnitudes; (agree, largest move of a sum)."""
    if [b[0] for b in now] != [b[0] for b in then]:
        return False, float("nan")
    worst = 0.0
    for (count, total, _), (_, recorded, magnitude) in zip(now, then, strict=True):
        moved = abs(total - recorded)
        if not moved <= atol * count + rtol * magnitude:  # NaN fails too
            return False, moved
        worst = max(worst, moved)
    return True, worst
