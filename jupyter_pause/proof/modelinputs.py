"""The input a model check feeds a module: the signature of its real calls, replayed.

A process-wide forward hook (``watch``) keeps, for the latest real call of each watched module,
every argument's name, shape, dtype and device, never its values. ``recipes`` turns that signature into
a recipe (plain data): batch 1, sequences of at most ``SEQUENCE`` tokens, and a role for each
tensor that ``build`` fills with deterministic values: integer ids within the embedding's range,
an attention mask of ones, a scalar or one-element timestep, normal floats for the rest. Before
any real call, the module's family says what it takes: a Transformers model's ``dummy_inputs``
(with decoder inputs for an encoder-decoder), the names of ``forward``'s required arguments, and
last the first layer that says what it takes (``in_features``, ``in_channels``, ``num_embeddings``).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any

PROBE_SEED = 20240229
#: Tokens in a replayed sequence: enough to go through attention, a fraction of a real batch's work.
SEQUENCE = 8

#: Argument names filled with ones, zeros, positions or a one-element step, whatever their dtype.
_ONES = ("mask",)
_TIMESTEPS = {"timestep", "timesteps", "t", "time", "sigma", "sigmas", "noise_level"}
_IDS = {"input_ids", "ids", "tokens", "labels", "decoder_input_ids", "x_ids"}
_SAMPLES = {"x", "input", "inputs", "sample", "pixel_values", "hidden_states", "inputs_embeds", "images", "image"}
_DECODER = ("decoder_input_ids", "decoder_inputs_embeds", "labels")

_calls: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_replaying = threading.local()


class NoInput(Exception):
    """No input can be made for a module: the message says why and what to do."""


def _spec(value: Any, depth: int = 0) -> dict[str, Any]:
    """What a call's argument is, without its values."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"shape": [int(s) for s in value.shape], "dtype": str(value.dtype), "device": str(value.device)}
    if isinstance(value, (list, tuple)) and depth < 2 and value and all(isinstance(v, torch.Tensor) for v in value):
        return {"items": [_spec(v, depth + 1) for v in value], "tuple": isinstance(value, tuple)}
    return {"other": type(value).__qualname__}


def _record_call(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any = None) -> None:
    """The forward hook: keep the signature of this call of a watched module (not during a model
    check's own pass, nor inside a graph torch.compile traces: the compiled module's own call is
    recorded, outside it)."""
    import torch

    if torch.compiler.is_compiling():
        return
    if module in _watched and not getattr(_replaying, "on", False):
        _calls[module] = {"args": [_spec(a) for a in args], "kwargs": {k: _spec(v) for k, v in kwargs.items()}}


#: The modules whose calls are recorded (the namespace's models), held weakly.
_watched: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = threading.Lock()
_hook: Any = None


def watch(module: Any) -> None:
    """Record the signature of ``module``'s real calls from now on.

    One process-wide forward hook (``torch.nn.modules.module.register_module_forward_hook``, with
    the call's keyword arguments) records the calls of the watched modules. Nothing is added to
    the module itself: it pickles, saves and digests as it did, and loads where jupyter-pause is
    not installed. A call of any other module costs one set lookup.
    """
    global _hook
    if not hasattr(module, "_forward_pre_hooks"):
        return  # not a real nn.Module: the family recipe only
    try:
        _watched.add(module)
    except TypeError:
        return
    with _installed:
        if _hook is None:
            from torch.nn.modules.module import register_module_forward_hook

            _hook = register_module_forward_hook(_record_call, with_kwargs=True)


class replaying:
    """While a model check runs its own forward pass: the hook keeps no signature of it."""

    def __enter__(self) -> None:
        _replaying.on = True

    def __exit__(self, *exc: object) -> None:
        _replaying.on = False


def recorded(module: Any) -> dict[str, Any] | None:
    """The signature of ``module``'s latest real call, if one was seen."""
    return _calls.get(module)


def _config(module: Any, name: str) -> Any:
    config = getattr(module, "config", None)
    if isinstance(config, dict):
        return config.get(name)
    return getattr(config, name, None)


def vocabulary(module: Any) -> int:
    """The range of integer ids: the config's ``vocab_size``, else the first embedding's size."""
    size = _config(module, "vocab_size")
    if isinstance(size, int) and size > 0:
        return size
    for layer in module.modules():
        if hasattr(layer, "num_embeddings"):
            return int(layer.num_embeddings)
    return 2


def _role(name: str, spec: dict[str, Any]) -> str:
    dtype = spec["dtype"]
    if any(word in name for word in _ONES) or dtype == "torch.bool":
        return "ones"
    if name == "token_type_ids":
        return "zeros"
    if name == "position_ids":
        return "positions"
    numel = 1
    for s in spec["shape"]:
        numel *= s
    if name in _TIMESTEPS or (len(spec["shape"]) <= 1 and numel <= 1 and name not in _IDS):
        return "step"
    if dtype.startswith("torch.int") or dtype == "torch.uint8":
        return "ids"
    return "normal"


def _shrunk(spec: dict[str, Any], batch: int | None, lengths: set[int], small: bool) -> dict[str, Any]:
    """The spec at batch 1 and short sequences (``small``), or as recorded."""
    if "items" in spec:
        return {**spec, "items": [_shrunk(s, batch, lengths, small) for s in spec["items"]]}
    shape = list(spec["shape"])
    if small and shape and shape[0] == batch:
        shape[0] = 1
    if small and len(shape) >= 2 and shape[1] in lengths:
        shape[1] = min(shape[1], SEQUENCE)
    return {"shape": shape, "dtype": spec["dtype"]}


def _named(module: Any, call: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The call's arguments by name where ``forward``'s signature names them."""
    args, kwargs = list(call["args"]), dict(call["kwargs"])
    try:
        params = [
            p
            for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) >= len(args) and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(args)]):
        kwargs = {p.name: a for p, a in zip(params, args, strict=False)} | kwargs
        args = []
    return args, kwargs


def _required(module: Any) -> set[str]:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _from_call(module: Any, call: dict[str, Any], small: bool) -> dict[str, Any]:
    args, kwargs = _named(module, call)
    every = [s for s in args + list(kwargs.values()) if "shape" in s]
    if any("other" in s for s in args):
        raise NoInput("its forward takes a positional argument that is not a tensor: it cannot be replayed")
    for name, spec in kwargs.items():
        if "other" in spec and name in _required(module):
            raise NoInput(
                f"its forward needs {name!r}, a {spec['other']}, which a check cannot make: only tensor "
                "arguments are replayed"
            )
    kwargs = {k: s for k, s in kwargs.items() if "other" not in s}  # left to forward's defaults
    batch = next((s["shape"][0] for s in every if s["shape"]), None)
    lengths = {s["shape"][1] for s in every if len(s["shape"]) >= 2 and not s["dtype"].startswith("torch.float")}
    return {
        "source": "recorded call",
        "high": vocabulary(module),
        "args": [_with_role("", _shrunk(s, batch, lengths, small)) for s in args],
        "kwargs": {k: _with_role(k, _shrunk(s, batch, lengths, small)) for k, s in kwargs.items()},
    }


def _with_role(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    if "items" in spec:
        return {**spec, "items": [_with_role(name, s) for s in spec["items"]]}
    return {**spec, "role": _role(name, spec)}


def _dtype(module: Any) -> str:
    for p in module.parameters():
        if p.is_floating_point():
            return str(p.dtype)
    return "torch.float32"


def _layer_shape(module: Any) -> tuple[list[int], str] | None:
    """Today's recipe: the first layer that says what it takes."""
    for layer in module.modules():
        weight = getattr(layer, "weight", None)
        if hasattr(layer, "num_embeddings"):
            return [1, 4], "ids"
        if hasattr(layer, "in_channels") and weight is not None:
            spatial = max(weight.dim() - 2, 0)
            return [1, int(layer.in_channels)] + [8] * spatial, "normal"
        if hasattr(layer, "in_features"):
            return [1, int(layer.in_features)], "normal"
    return None


def _guess(module: Any, name: str, first: bool) -> dict[str, Any] | None:
    """A spec for ``forward``'s required argument ``name`` from its name and the module's config."""
    floats = _dtype(module)
    size = _config(module, "sample_size")
    channels = _config(module, "in_channels") or _config(module, "num_channels")
    if name in _TIMESTEPS:
        return {"shape": [1], "dtype": "torch.int64", "role": "step"}
    if name in _IDS or name == "input_ids":
        return {"shape": [1, SEQUENCE], "dtype": "torch.int64", "role": "ids"}
    if "mask" in name:
        return {"shape": [1, SEQUENCE], "dtype": "torch.int64", "role": "ones"}
    if name == "encoder_hidden_states" and _config(module, "cross_attention_dim"):
        return {"shape": [1, SEQUENCE, int(_config(module, "cross_attention_dim"))], "dtype": floats, "role": "normal"}
    if name in _SAMPLES and isinstance(channels, int) and size:
        sides = list(size) if isinstance(size, (list, tuple)) else [int(size)] * 2
        return {"shape": [1, channels, *sides], "dtype": floats, "role": "normal"}
    if first or name in _SAMPLES:
        layer = _layer_shape(module)
        if layer is not None:
            shape, role = layer
            return {"shape": shape, "dtype": "torch.int64" if role == "ids" else floats, "role": role}
    return None


def _from_family(module: Any) -> dict[str, Any]:
    """Before any real call: ``dummy_inputs``, else ``forward``'s required arguments by name."""
    recipe: dict[str, Any] = {"source": "module family", "high": vocabulary(module), "args": [], "kwargs": {}}
    try:
        dummy = module.dummy_inputs
    except Exception:  # no such attribute, or one that needs what this model lacks
        dummy = None
    if isinstance(dummy, dict) and dummy:
        call = {"args": [], "kwargs": {k: _spec(v) for k, v in dummy.items()}}
        recipe = _from_call(module, call, small=True) | {"source": "dummy_inputs"}
        main = recipe["kwargs"].get(getattr(module, "main_input_name", "input_ids"))
        if _config(module, "is_encoder_decoder") and main and not any(d in recipe["kwargs"] for d in _DECODER):
            recipe["kwargs"]["decoder_input_ids"] = dict(main)
        return recipe
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError) as e:
        raise NoInput("its forward has no signature to read") from e
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not required:
        required = params[:1] if params and params[0].kind is params[0].VAR_POSITIONAL else []
    for i, p in enumerate(required):
        spec = _guess(module, p.name, first=i == 0)
        if spec is None:
            if i == 0:
                raise NoInput("no layer says what input it takes (in_features, in_channels, num_embeddings)")
            raise NoInput(
                f"its forward needs {p.name!r}, which cannot be guessed before a real call: call the model "
                "once (any cell that runs it), then checkpoint again"
            )
        if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
            recipe["args"].append(spec)
        else:
            recipe["kwargs"][p.name] = spec
    if not recipe["args"] and not recipe["kwargs"]:
        raise NoInput("no layer says what input it takes (in_features, in_channels, num_embeddings)")
    return recipe


def recipes(module: Any) -> list[dict[str, Any]]:
    """Recipes to try in order (the first that runs is recorded); raises ``NoInput`` for none."""
    call = recorded(module)
    if call is not None:
        small, exact = _from_call(module, call, small=True), _from_call(module, call, small=False)
        return [small] if small == exact else [small, exact]
    return [_from_family(module)]


def build(recipe: dict[str, Any], device: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
    """The recipe's tensors, the same on every call and in every process, on ``device``."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(PROBE_SEED)
    if "kind" in recipe:  # a check recorded before signatures were: one tensor, by its first layer
        if recipe["kind"] == "indices":
            return [torch.randint(0, recipe["high"], recipe["shape"], generator=generator).to(device)], {}
        return [torch.randn(recipe["shape"], generator=generator).to(dtype).to(device)], {}
    high = recipe["high"]

    def make(spec: dict[str, Any]) -> Any:
        if "items" in spec:
            made = [make(s) for s in spec["items"]]
            return tuple(made) if spec["tuple"] else made
        kind, shape = getattr(torch, spec["dtype"].removeprefix("torch.")), spec["shape"]
        role = spec["role"]
        if role == "ones":
            t = torch.ones(shape, dtype=kind)
        elif role == "zeros":
            t = torch.zeros(shape, dtype=kind)
        elif role == "positions":
            t = torch.arange(shape[-1] if shape else 1, dtype=kind).expand(shape).contiguous()
        elif role == "step":
            t = torch.full(shape, 1 if not kind.is_floating_point else 0.5, dtype=kind)
        elif role == "ids":
            t = torch.randint(0, high, shape, generator=generator).to(kind)
        else:
            t = torch.randn(shape, generator=generator).to(kind)
        return t.to(device)

    return [make(s) for s in recipe["args"]], {k: make(s) for k, s in recipe["kwargs"].items()}


def described(recipe: dict[str, Any]) -> str:
    """A short account of a recipe's input, for messages: ``input_ids [1, 8], attention_mask [1, 8]``."""
    if "kind" in recipe:
        return str(recipe["shape"])
    parts = [str(s.get("shape", "...")) for s in recipe["args"]]
    parts += [f"{k} {s.get('shape', '...')}" for k, s in recipe["kwargs"].items()]
    return ", ".join(parts)
