"""The model check: a deterministic input through each torch module, recorded and reproduced.

At checkpoint time each module variable gets an input built from the signature of its latest
real call, or, before any, from its family (see ``modelinputs``), and its output, of any
structure, is recorded leaf by leaf (see ``outputs``), with the autocast it ran under. After a
resume the same forward pass must give the same output: bit-identical where it is (said as such),
else within the tolerance of its dtype and of the loosest matmul precision in effect at the
checkpoint or now (``hardware.matmul_mode``): another processor, GPU or cuBLAS computes the same
weights' output only to within the precision used. The check never draws from the session's
random streams and leaves the module's train/eval mode as it was. A module none of whose
storages changed since its last check is not run again: that check is recorded once more.
"""

from __future__ import annotations

import contextlib
import secrets
import weakref
from dataclasses import asdict, dataclass, field
from itertools import chain
from typing import Any, Iterator

from ..serialize import devicehash
from . import hardware, modelinputs, outputs, twin
from .modelinputs import NoInput
from .outputs import Comparison

#: Kept here for the checks recorded before outputs were walked (see ``outputs``).
KEPT_VALUES = outputs.KEPT_VALUES
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
    #: The dtype autocast ran the pass in ("" when it was off): the check runs under it again.
    autocast: str = ""

    def to_record(self) -> dict[str, Any]:
        """The check as a checkpoint records it (``asdict``), made once: a check recorded again,
        its module unchanged, is not copied again (its outputs are thousands of values)."""
        made = self.__dict__.get("_record")
        if made is None:
            made = self.__dict__["_record"] = asdict(self)
        return made


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
def _quiet(module: Any, device: Any, stand_in: Any = None) -> Iterator[Any]:
    """No grad, eval mode and the caller's RNG untouched. Yields what to run: ``stand_in``, the
    module's eval-mode twin (``twin``), or without one the module itself, switched to eval mode
    for the pass and put back afterwards."""
    import torch

    modes = [(m, m.training) for m in module.modules()] if stand_in is None else []
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad(), modelinputs.replaying():
        for m, _ in modes:
            m.training = False  # what eval() does, without calling a train() a class overrides
        try:
            yield module if stand_in is None else stand_in
        finally:
            for m, training in modes:
                m.training = training


def _first_parameter(module: Any) -> Any:
    for p in module.parameters():
        return p
    return None


def _autocast_now(device: Any) -> str:
    """The dtype autocast is on for ``device``'s kind in this thread ("" when off)."""
    import torch

    try:
        if torch.is_autocast_enabled(device.type):
            return str(torch.get_autocast_dtype(device.type))
    except (TypeError, RuntimeError, AttributeError):  # a device kind autocast does not know
        pass
    return ""


def _autocast(device: Any, dtype: str) -> contextlib.AbstractContextManager[Any]:
    import torch

    if not dtype:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, dtype.removeprefix("torch.")))


def run(
    module: Any, recipe: dict[str, Any], autocast: str | None = None, stand_in: Any = None
) -> tuple[list[dict[str, Any]], str, str]:
    """Run the recipe's input through ``module`` in eval mode (through ``stand_in``, its twin, where
    there is one): (the output's leaves, the device it ran on, the autocast dtype it ran under).
    ``autocast`` None: as the caller's context has it."""
    import torch

    param = _first_parameter(module)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    args, kwargs = modelinputs.build(recipe, device, dtype)
    if autocast is None:
        autocast, context = _autocast_now(device), contextlib.nullcontext()
    else:  # exactly the autocast recorded, whatever the caller's context has on
        context = _autocast(device, autocast) if autocast else _no_autocast(device)
    with _quiet(module, device, stand_in) as target, context:
        out = target(*args, **kwargs)
        return outputs.leaves(out), str(device), autocast


def _no_autocast(device: Any) -> contextlib.AbstractContextManager[Any]:
    import torch

    if not _autocast_now(device):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


_SEED = secrets.token_hex(16)
#: Per module: the state of its storages at its last check, that check, and its tensors' versions then.
_last: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], ModelCheck, tuple[int, ...] | None]] = (
    weakref.WeakKeyDictionary()
)


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


def versions(module: Any) -> tuple[int, ...] | None:
    """The version counters of ``module``'s parameters and buffers (each in-place change bumps
    its tensor's), or None where a tensor keeps none (an inference tensor)."""
    try:
        return tuple(t._version for t in chain(module.parameters(), module.buffers()))
    except RuntimeError:
        return None


def likely_changed(module: Any) -> bool:
    """Whether ``module`` has no check yet, or an in-place change since its last one: its forward
    pass is worth starting before its storages' fingerprints are known. (A write past the
    counters, through ``.data`` or a NumPy view, is found by ``record`` all the same.)"""
    last = _last.get(module)
    return last is None or last[2] is None or last[2] != versions(module)


def forward_on_twin(module: Any) -> ModelCheck | str | None:
    """``forward`` through ``module``'s eval-mode twin, or None (nothing run) where no twin can
    stand in for it: a pass that may run beside what reads the module's modes."""
    stand_in = twin.of(module)
    return None if stand_in is None else forward(module, stand_in)


def forward(module: Any, stand_in: Any = None) -> ModelCheck | str:
    """Run ``module``'s probe input through it (through ``stand_in``, its twin, when given, else
    through its twin where one can stand in): the check, or why there can be none. The first
    recipe the forward accepts is the one recorded."""
    if stand_in is None:
        stand_in = twin.of(module)
    try:
        candidates = modelinputs.recipes(module)
    except NoInput as e:
        return str(e)
    failure = ""
    for recipe in candidates:
        try:
            found, device, autocast = run(module, recipe, stand_in=stand_in)
        except Exception as e:  # a forward this input does not suit: the next recipe, or the reason
            failure = (
                f"a forward pass on a probe input ({modelinputs.described(recipe)}, from its "
                f"{recipe.get('source', 'first layer')}) failed: {type(e).__name__}: {e}"
            )
            continue
        return ModelCheck(recipe, device, outputs=found, autocast=autocast)
    return failure


def record(module: Any, known: Known | None = None, ran: ModelCheck | str | None = None) -> ModelCheck | str:
    """Record the model check for ``module``, or say why there can be none.

    Where none of the module's storages changed since its last check (``known`` holds the
    fingerprints a capture took already), that check is returned without a forward pass; else
    ``ran``, the forward pass already run on these same tensors, or a new one. The module's real
    calls are replayed once it is watched (``watch_all``, before it is pickled: the hook is part
    of the module's state, so its digest must see it from then on).
    """
    now = state(module, known)
    last = _last.get(module)
    if last is not None and last[0] == now:
        return last[1]
    check = forward(module) if ran is None else ran
    if isinstance(check, ModelCheck):
        _last[module] = (now, check, versions(module))
    return check


def matmul_mode(check: ModelCheck, device: str, recorded: dict[str, Any] | None) -> str:
    """The loosest matmul precision of the recorded pass (its settings ``recorded``, its autocast)
    and of the one that ran now on ``device``."""
    autocast = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(check.autocast, "ieee")
    then = hardware.matmul_mode(recorded, check.device.startswith("cuda"))
    now = hardware.matmul_mode(hardware.precision(), device.startswith("cuda"))
    return hardware.loosest(autocast, then, now)


def reproduce(module: Any, check: ModelCheck, recorded: dict[str, Any] | None = None) -> Comparison:
    """Run the recorded probe again and compare; ``recorded``: the precision settings in effect
    at the checkpoint (``hardware.precision()`` as its environment holds them)."""
    try:
        found, device, _ = run(module, check.input, check.autocast, twin.of(module))
    except Exception as e:  # the restored module no longer runs: a failed check
        return Comparison(False, f"forward pass failed: {type(e).__name__}: {e}")
    mode = matmul_mode(check, device, recorded)
    if check.outputs:
        result = outputs.compare(found, check.outputs, mode)
    else:
        result = _first_tensor_matches(found, check, mode)
    if result.ok and device != check.device:
        result.how += f" (ran on {device}, recorded on {check.device})"
    return result


def _first_tensor_matches(found: list[dict[str, Any]], check: ModelCheck, mode: str) -> Comparison:
    """A check recorded before outputs were walked: the first output tensor, flattened."""
    first = outputs.first_tensor(found)
    if first is None:
        return Comparison(False, "the output holds no tensor")
    numel = 1
    for s in first["shape"]:
        numel *= s
    if [numel] != list(check.shape):
        return Comparison(False, f"output has {numel} values, {check.shape[0] if check.shape else 0} recorded")
    if first["values"] == list(check.values):
        return Comparison(True, "output bit-identical")
    limit = outputs.tolerance(check.dtype, mode)
    ok, worst = outputs.close(first, {"values": check.values}, limit)
    if ok:
        return Comparison(True, f"output within {limit} (largest difference {worst:.3g})", worst, [limit])
    return Comparison(False, f"output differs ({limit.missed(worst)})", worst, [limit])
