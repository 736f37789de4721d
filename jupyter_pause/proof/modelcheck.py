"""The model check: a deterministic input through each torch module, recorded and reproduced.

At checkpoint time each module variable gets an input built from the signature of its latest
real call, or, before any, from its family (see ``modelinputs``), and its output, of any
structure, is recorded leaf by leaf (see ``outputs``). After a resume the same forward pass must
give the same output: exactly on the same device, within the dtype's tolerance on another. The
check never draws from the session's random streams and leaves the module's train/eval mode as
it was. A module none of whose storages changed since its last check is not run again: that
check is recorded once more.
"""

from __future__ import annotations

import contextlib
import secrets
import weakref
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterator

from ..serialize import devicehash
from . import modelinputs, outputs
from .modelinputs import NoInput

#: Kept here for the checks recorded before outputs were walked (see ``outputs``).
KEPT_VALUES = outputs.KEPT_VALUES
TOLERANCE = outputs.TOLERANCE
PROBE_SEED = modelinputs.PROBE_SEED

#: (device, address, bytes) of a storage -> its fingerprint, as the capture computed it.
Known = dict[tuple[str, int, int], str]


@dataclass
class ModelCheck:
    """A recorded forward pass: the input recipe, where it ran, and what came out.

    ``outputs`` holds the output's leaves; ``dtype``, ``values`` and ``shape`` are what checks
    recorded before outputs were walked hold instead (the first output tensor).
    """

    input: dict[str, Any]
    device: str
    dtype: str = ""
    values: list[float] = field(default_factory=list)
    shape: list[int] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)


def is_module(value: Any) -> bool:
    """A torch-module-like object (an instance, not a class): Stateful, with parameters and a forward.

    The methods are looked up on its class: an object that makes up any attribute asked of it
    (a dask ``Delayed``, a mock) answers every name with something callable."""
    try:  # a dead weakref.proxy raises even on isinstance; it is no module
        if isinstance(value, type):
            return False
        kind = type(value)
        return all(callable(getattr(kind, a, None)) for a in ("state_dict", "load_state_dict", "parameters", "forward"))
    except Exception:  # an object that raises on attribute access is no module
        return False


def watch_all(namespace: dict[str, Any]) -> None:
    """Record the signature of the real calls of every module in ``namespace`` from now on
    (run after each cell, so a model made in one cell is watched when the next one trains it)."""
    for value in list(namespace.values()):
        if is_module(value):
            modelinputs.watch(value)


@contextlib.contextmanager
def _quiet(module: Any, device: Any) -> Iterator[None]:
    """No grad, eval mode and the caller's RNG untouched, all put back afterwards."""
    import torch

    modes = [(m, m.training) for m in module.modules()]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad(), modelinputs.replaying():
        for m, _ in modes:
            m.training = False  # what eval() does, without calling a train() a class overrides
        try:
            yield
        finally:
            for m, training in modes:
                m.training = training


def _first_parameter(module: Any) -> Any:
    for p in module.parameters():
        return p
    return None


def run(module: Any, recipe: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Run the recipe's input through ``module``: (the output's leaves, the device it ran on)."""
    import torch

    param = _first_parameter(module)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    args, kwargs = modelinputs.build(recipe, device, dtype)
    with _quiet(module, device):
        out = module(*args, **kwargs)
        return outputs.leaves(out), str(device)


_SEED = secrets.token_hex(16)
#: Per module: the state of its storages at its last check, and that check.
_last: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], ModelCheck]] = weakref.WeakKeyDictionary()


def _fingerprint(storage: Any, known: Known) -> str:
    """What a storage holds: xxh3 of its bytes on the CPU, the device fingerprint elsewhere."""
    import torch
    import xxhash

    where = (str(storage.device), storage.data_ptr(), storage.nbytes())
    if where in known:
        return known[where]
    if storage.device.type == "meta" or not storage.nbytes():
        return storage.device.type
    if storage.device.type == "cpu":
        flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
        return xxhash.xxh3_128_hexdigest(flat.numpy())
    return f"{_SEED}:{devicehash.fingerprint(storage, _SEED)}"


def state(module: Any, known: Known | None = None) -> tuple[Any, ...]:
    """Every parameter and buffer of ``module``: where it is, its layout, what its storage holds."""
    known = known or {}
    prints: dict[tuple[str, int, int], str] = {}
    parts = []
    tensors = chain(module.named_parameters(remove_duplicate=False), module.named_buffers(remove_duplicate=False))
    for name, t in tensors:
        storage = t.untyped_storage()
        where = (str(storage.device), storage.data_ptr(), storage.nbytes())
        if where not in prints:
            prints[where] = _fingerprint(storage, known)
        parts.append((name, tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype), where, prints[where]))
    return tuple(parts)


def record(module: Any, known: Known | None = None) -> ModelCheck | str:
    """Record the model check for ``module``, or say why there can be none.

    Where none of the module's storages changed since its last check (``known`` holds the
    fingerprints a capture took already), that check is returned without a forward pass. The
    module's real calls are replayed once it is watched (``watch_all``, before it is pickled: the
    hook is part of the module's state, so its digest must see it from then on).
    """
    now = state(module, known)
    last = _last.get(module)
    if last is not None and last[0] == now:
        return last[1]
    try:
        candidates = modelinputs.recipes(module)
    except NoInput as e:
        return str(e)
    failure = ""
    for recipe in candidates:
        try:
            found, device = run(module, recipe)
        except Exception as e:  # a forward this input does not suit: the next recipe, or the reason
            failure = (
                f"a forward pass on a probe input ({modelinputs.described(recipe)}, from its "
                f"{recipe.get('source', 'first layer')}) failed: {type(e).__name__}: {e}"
            )
            continue
        check = ModelCheck(recipe, device, outputs=found)
        _last[module] = (now, check)
        return check
    return failure


def reproduce(module: Any, check: ModelCheck) -> tuple[bool, str]:
    """Run the recorded probe again; (matches, how it compares)."""
    try:
        found, device = run(module, check.input)
    except Exception as e:  # the restored module no longer runs: a failed check
        return False, f"forward pass failed: {type(e).__name__}: {e}"
    if check.outputs:
        ok, how = outputs.compare(found, check.outputs, device == check.device)
    else:
        ok, how = _first_tensor_matches(found, check, device == check.device)
    if ok and device != check.device and "within" in how:
        how += f" (ran on {device}, recorded on {check.device})"
    return ok, how


def _first_tensor_matches(found: list[dict[str, Any]], check: ModelCheck, same_device: bool) -> tuple[bool, str]:
    """A check recorded before outputs were walked: the first output tensor, flattened."""
    first = outputs.first_tensor(found)
    if first is None:
        return False, "the output holds no tensor"
    numel = 1
    for s in first["shape"]:
        numel *= s
    if [numel] != list(check.shape):
        return False, f"output has {numel} values, {check.shape[0] if check.shape else 0} recorded"
    if first["values"] == list(check.values):
        return True, "output bit-identical"
    ok, how = outputs.close(first, {"values": check.values, "dtype": check.dtype}, same_device)
    return ok, (f"output {how}" if ok else f"output differs ({how})")
