"""The model check: a fixed probe input through each torch module, recorded and reproduced.

At checkpoint time each module variable gets a deterministic input (built from its first layer's
``in_features`` / ``in_channels`` / ``num_embeddings``) and its output is recorded. After a resume
the same forward pass must give the same output: exactly on the same device, within the dtype's
tolerance on another. The check never draws from the session's random streams and leaves the
module's train/eval mode as it was.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

#: Values of the output kept for comparison (the rest is covered by the digest).
KEPT_VALUES = 4096
PROBE_SEED = 20240229

#: Relative tolerance per dtype when the device changed (bit-exact is expected otherwise).
TOLERANCE = {"torch.float16": 1e-2, "torch.bfloat16": 5e-2, "torch.float32": 1e-4, "torch.float64": 1e-9}


@dataclass
class ModelCheck:
    """A recorded forward pass: the input recipe, where it ran, and what came out."""

    input: dict[str, Any]
    device: str
    dtype: str
    values: list[float]
    shape: list[int]


def is_module(value: Any) -> bool:
    """A torch-module-like object (an instance, not a class): Stateful, with parameters and a forward."""
    if isinstance(value, type):
        return False
    try:
        return all(
            callable(getattr(value, a, None)) for a in ("state_dict", "load_state_dict", "parameters", "forward")
        )
    except Exception:  # an object that raises on attribute access is no module
        return False


def _recipe(module: Any) -> dict[str, Any] | None:
    """How to build a probe input for ``module``, from the first layer that says what it takes."""
    for layer in module.modules():
        weight = getattr(layer, "weight", None)
        if hasattr(layer, "num_embeddings"):
            return {"kind": "indices", "shape": [8, 4], "high": int(layer.num_embeddings)}
        if hasattr(layer, "in_channels") and weight is not None:
            spatial = max(weight.dim() - 2, 0)
            return {"kind": "normal", "shape": [1, int(layer.in_channels)] + [8] * spatial}
        if hasattr(layer, "in_features"):
            return {"kind": "normal", "shape": [1, int(layer.in_features)]}  # one row: every weight, a 16th of the work
    return None


@contextlib.contextmanager
def _quiet(module: Any, device: Any) -> Iterator[None]:
    """No grad, eval mode and the caller's RNG untouched, all put back afterwards."""
    import torch

    modes = [(m, m.training) for m in module.modules()]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        module.eval()
        try:
            yield
        finally:
            for m, training in modes:
                m.training = training


def _first_parameter(module: Any) -> Any:
    for p in module.parameters():
        return p
    return None


def run(module: Any, recipe: dict[str, Any]) -> tuple[Any, str, str]:
    """Run the probe input through ``module``: (output on CPU as float64, device, dtype)."""
    import torch

    param = _first_parameter(module)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    generator = torch.Generator(device="cpu").manual_seed(PROBE_SEED)
    if recipe["kind"] == "indices":
        x = torch.randint(0, recipe["high"], recipe["shape"], generator=generator)
    else:
        x = torch.randn(recipe["shape"], generator=generator).to(dtype)
    with _quiet(module, device):
        out = module(x.to(device))
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"forward returned {type(out).__name__}, not a tensor")
    return out.detach().to("cpu", torch.float64).reshape(-1), str(device), str(out.dtype)


def record(module: Any) -> ModelCheck | str:
    """Record the model check for ``module``, or say why there can be none."""
    recipe = _recipe(module)
    if recipe is None:
        return "no layer says what input it takes (in_features, in_channels, num_embeddings)"
    try:
        out, device, dtype = run(module, recipe)
    except Exception as e:  # a forward that needs more than one tensor: no check, said so
        return f"a forward pass on a probe input {recipe['shape']} failed: {type(e).__name__}: {e}"
    return ModelCheck(recipe, device, dtype, out[:KEPT_VALUES].tolist(), [int(out.numel())])


def reproduce(module: Any, check: ModelCheck) -> tuple[bool, str]:
    """Run the recorded probe again; (matches, how it compares)."""
    import torch

    try:
        out, device, _ = run(module, check.input)
    except Exception as e:  # the restored module no longer runs: a failed check
        return False, f"forward pass failed: {type(e).__name__}: {e}"
    if [int(out.numel())] != list(check.shape):
        return False, f"output has {out.numel()} values, {check.shape[0]} recorded"
    got = out[:KEPT_VALUES]
    want = torch.tensor(check.values, dtype=torch.float64)
    if got.shape != want.shape:
        return False, f"output has {got.numel()} values, {want.numel()} recorded"
    if torch.equal(got, want):
        return True, "output bit-identical"
    if device != check.device:
        rtol = TOLERANCE.get(check.dtype, 1e-4)
        if torch.allclose(got, want, rtol=rtol, atol=rtol):
            return True, f"output within {rtol:g} (ran on {device}, recorded on {check.device})"
    worst = float((got - want).abs().max())
    return False, f"output differs (largest difference {worst:.3g})"
