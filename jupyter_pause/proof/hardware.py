"""What a forward pass ran on: the processor, the GPU, the numeric libraries and their settings.

Floating-point results of the same weights differ in their last bits from one processor to the
next (torch picks AVX-512, AVX2 or plain kernels at run time), from one GPU model, CUDA, cuBLAS or
cuDNN version to the next, and with the matmul precision in effect (TF32, bf16 reductions). A
checkpoint records ``describe()`` in its environment; a resume compares it with the node it runs
on (``where``), and the model check allows the difference the precision in effect can make
(``matmul_mode``). Weights, data and digests do not depend on any of this.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
import sys
from typing import Any

#: Matmul precisions, loosest last: plain fp32, TF32 or fp16 (10-bit mantissa products), bf16 (7).
MODES = ("ieee", "tf32", "fp16", "bf16")


@functools.lru_cache(maxsize=1)
def _cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo; elsewhere what ``platform`` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_cublas: list[str] = []  # the version once found: a loaded library does not change


def _cublas_version() -> str | None:
    """cuBLAS's version, asked of the library this process already loaded (None if it did not)."""
    if _cublas:
        return _cublas[0]
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            path = next((p for line in f if "libcublas.so" in (p := line.split()[-1])), None)
        if path is None:
            return None
        lib = ctypes.CDLL(path)
        parts = []
        for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            value = ctypes.c_int()
            if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                return None
            parts.append(str(value.value))
        _cublas.append(".".join(parts))
        return _cublas[0]
    except (OSError, AttributeError, StopIteration):
        return None


def _fp32_precision(backend: Any) -> str | None:
    """The newer per-backend ``fp32_precision`` setting ("ieee", "tf32", "none"), where torch has it."""
    with contextlib.suppress(Exception):
        value = getattr(backend, "fp32_precision", None)
        return str(value) if value is not None else None
    return None


def precision() -> dict[str, Any]:
    """The matmul and convolution precision settings in effect in this process."""
    import torch

    found: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    cuda = torch.backends.cuda.matmul
    found["cuda_matmul_tf32"] = bool(cuda.allow_tf32)
    found["cudnn_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    found["cuda_bf16_reduced_reduction"] = bool(getattr(cuda, "allow_bf16_reduced_precision_reduction", False))
    found["cuda_fp16_reduced_reduction"] = bool(getattr(cuda, "allow_fp16_reduced_precision_reduction", False))
    found["deterministic"] = bool(torch.are_deterministic_algorithms_enabled())
    for name, backend in (("cuda_matmul_fp32", cuda), ("cudnn_conv_fp32", getattr(torch.backends.cudnn, "conv", None))):
        if backend is not None and (value := _fp32_precision(backend)) is not None:
            found[name] = value
    return found


def describe() -> dict[str, Any]:
    """This node as a forward pass sees it (with torch not yet imported: the processor only)."""
    found: dict[str, Any] = {"cpu": _cpu_model(), "machine": platform.machine()}
    if "torch" not in sys.modules:
        return found
    import torch

    with contextlib.suppress(Exception):  # torch builds without the call
        found["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    found["torch"] = torch.__version__
    found["threads"] = torch.get_num_threads()
    found["interop_threads"] = torch.get_num_interop_threads()
    found["precision"] = precision()
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    # Device names need an initialised CUDA context; only ask when the session made one.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        found["gpus"] = [
            f"{torch.cuda.get_device_name(i)} ({'.'.join(map(str, torch.cuda.get_device_capability(i)))})"
            for i in range(torch.cuda.device_count())
        ]
        with contextlib.suppress(Exception):
            found["cudnn"] = torch.backends.cudnn.version()
        if (cublas := _cublas_version()) is not None:
            found["cublas"] = cublas
    return found


def matmul_mode(settings: dict[str, Any] | None, on_cuda: bool) -> str:
    """The loosest fp32 matmul precision ``settings`` (a ``precision()``) allow on this device kind."""
    settings = settings or {}
    mode = {"medium": "bf16", "high": "tf32"}.get(settings.get("float32_matmul_precision", "highest"), "ieee")
    if on_cuda:
        tf32 = settings.get("cuda_matmul_tf32") or settings.get("cudnn_tf32")
        tf32 = tf32 or "tf32" in (settings.get("cuda_matmul_fp32"), settings.get("cudnn_conv_fp32"))
        if tf32 and mode == "ieee":
            mode = "tf32"
    return mode


def loosest(*modes: str) -> str:
    """The loosest of matmul precisions (``MODES`` order)."""
    return max(modes, key=MODES.index, default="ieee")


def _gpus(found: dict[str, Any]) -> str:
    return ", ".join(found.get("gpus", [])) or "none"


def _changes(then: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str], bool]:
    """What differs between two descriptions: the places (processor, GPU), the extras (library
    versions, threads), and whether anything does."""
    a, b = then.get("cpu_capability"), now.get("cpu_capability")
    moved = a != b or then.get("cpu") != now.get("cpu")
    if a != b:
        places = [f"another processor ({a} -> {b})"]
    elif moved:
        places = [f"another processor ({then.get('cpu')} -> {now.get('cpu')})"]
    else:
        places = ["the same processor"]
    if then.get("gpus") != now.get("gpus"):
        moved = True
        places.append(f"another GPU ({_gpus(then)} -> {_gpus(now)})")
    elif "gpus" in now:
        places.append("the same GPU")
    extras = [
        f"{name} {then[key]} -> {now[key]}"
        for key, name in (("torch", "torch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("cublas", "cuBLAS"))
        if key in then and key in now and then[key] != now[key]
    ]
    if then.get("threads") != now.get("threads"):
        extras.append(f"{then.get('threads')} -> {now.get('threads')} threads")
    return places, extras, moved or bool(extras)


def where(then: dict[str, Any] | None, now: dict[str, Any]) -> str:
    """Where this resume runs, relative to where the checkpoint was taken: ``on the same
    processor``, ``on another processor (AVX512 -> DEFAULT)``, ``on another GPU (...)``..."""
    if not then:
        return "on a node the checkpoint did not describe (taken by an older release)"
    places, extras, _ = _changes(then, now)
    return "on " + " and ".join(places) + (f", with {', '.join(extras)}" if extras else "")


def moved(then: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a resume on ``now`` runs on other hardware, libraries or threads than ``then``."""
    return _changes(then, now)[2]
