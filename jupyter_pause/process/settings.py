"""Process settings that change results, kept with a checkpoint and set again on resume.

torch's default dtype, deterministic algorithms, cuDNN flags, float32 matmul precision and
thread counts; scikit-learn's ``get_config()``; matplotlib's rcParams that differ from its
defaults; the working directory and the ``sys.path`` entries the user added (``places``). A
library is read only when the session imported it.
Together with the notebook's own modules (``localmodules``), this is what ``capture`` keeps and
``restore`` brings back; a setting that cannot be applied here is named, never an error.
"""

from __future__ import annotations

import enum
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..store.manifest import SLOW_IMPORTS, Manifest
from ..store.storage import Store
from . import localmodules, places
from .loaded import Loaded
from .localmodules import folder_words, notebook_folder

#: rcParams that belong to the front end, not to results: never kept.
RC_IGNORED = frozenset({"backend", "backend_fallback", "interactive"})

CUDNN_FLAGS = ("enabled", "benchmark", "deterministic", "allow_tf32")


@dataclass
class Outcome:
    """What ``apply`` set, and what it could not set with the reason, in words."""

    applied: list[str] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """Lines for the resume summary."""
        lines = [f"settings restored: {'; '.join(self.applied)}"] if self.applied else []
        return lines + [f"setting NOT applied: {reason}" for reason in self.not_applied]


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _plain(value: Any) -> Any:
    """A value as JSON can hold it (a cycler or an enum by the text its setter accepts)."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


def _torch() -> dict[str, Any] | None:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):
        return None
    cudnn = torch.backends.cudnn
    return {
        "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        "cudnn": {flag: bool(getattr(cudnn, flag)) for flag in CUDNN_FLAGS},
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpus": _cpus(),
    }


def _sklearn() -> dict[str, Any] | None:
    sklearn = sys.modules.get("sklearn")
    if sklearn is None or not hasattr(sklearn, "get_config"):
        return None
    return {k: _plain(v) for k, v in sklearn.get_config().items()}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # an array-like compared elementwise
        return False


def _matplotlib() -> dict[str, Any] | None:
    mpl = sys.modules.get("matplotlib")
    if mpl is None or not hasattr(mpl, "rcParamsDefault"):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated keys
        defaults = dict(mpl.rcParamsDefault)
        return {
            key: _plain(value)
            for key, value in dict(mpl.rcParams).items()
            if key not in RC_IGNORED and key in defaults and not _same(value, defaults[key])
        }


def capture(notebook: str | None, loaded: Loaded | None = None) -> tuple[dict[str, Any], list[str]]:
    """The settings to keep, as JSON values, and notes on any that could not be read. ``loaded``:
    what the process has loaded, as the checkpoint read it once (default: read now)."""
    folder = notebook_folder(notebook)
    kept: dict[str, Any] = {"folder": folder}
    notes: list[str] = []
    readers: dict[str, Callable[[], Any]] = {
        "torch": _torch,
        "sklearn": _sklearn,
        "matplotlib": _matplotlib,
        "cwd": lambda: places.place(os.getcwd(), folder),
        "sys_path": lambda: places.capture_sys_path(folder, loaded),
    }
    for name, read in readers.items():
        try:
            value = read()
        except Exception as e:  # a library in an odd state: the checkpoint goes on and says so
            notes.append(f"setting {name} not kept: {type(e).__name__}: {e}")
            continue
        if value is not None:
            kept[name] = value
    return kept, notes


def _set(out: Outcome, label: str, now: Any, wanted: Any, put: Callable[[], Any]) -> None:
    """Set one setting where it differs; a refusal is named with its reason, never raised."""
    if now == wanted:
        return
    try:
        put()
    except Exception as e:  # this library or node refuses it: named, the resume goes on
        out.not_applied.append(f"{label}: {type(e).__name__}: {str(e).strip()}; left at {now!r}")
        return
    out.applied.append(label)


def _apply_torch(saved: dict[str, Any], out: Outcome) -> None:
    import torch

    dtype = getattr(torch, saved["default_dtype"], None)
    if isinstance(dtype, torch.dtype):
        label = f"torch default dtype {saved['default_dtype']}"
        _set(out, label, torch.get_default_dtype(), dtype, lambda: torch.set_default_dtype(dtype))
    else:
        out.not_applied.append(f"torch default dtype {saved['default_dtype']}: unknown to torch {torch.__version__}")
    mode, warn_only = saved["deterministic"], saved["deterministic_warn_only"]
    _set(
        out,
        f"deterministic algorithms {'on' if mode else 'off'}{' (warn only)' if mode and warn_only else ''}",
        (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        (mode, warn_only),
        lambda: torch.use_deterministic_algorithms(mode, warn_only=warn_only),
    )
    cudnn = torch.backends.cudnn
    for flag, value in saved["cudnn"].items():
        _set(
            out,
            f"cudnn.{flag} {value}",
            getattr(cudnn, flag, None),
            value,
            lambda f=flag, v=value: setattr(cudnn, f, v),
        )
    precision = saved["float32_matmul_precision"]
    _set(
        out,
        f"float32 matmul precision {precision}",
        torch.get_float32_matmul_precision(),
        precision,
        lambda: torch.set_float32_matmul_precision(precision),
    )
    cpus = _cpus()
    for what, name, get, put in (
        ("threads", "threads", torch.get_num_threads, torch.set_num_threads),
        ("interop_threads", "inter-op threads", torch.get_num_interop_threads, torch.set_num_interop_threads),
    ):
        wanted, now = saved[what], get()
        if wanted > cpus and wanted != now:
            out.not_applied.append(f"torch {name} {wanted}: this node has {cpus} CPU(s); left at {now}")
        else:  # inter-op threads are fixed once torch ran parallel work: that refusal is named
            _set(out, f"torch {name} {wanted}", now, wanted, lambda put=put, n=wanted: put(n))


def _apply_sklearn(saved: dict[str, Any], out: Outcome) -> None:
    import sklearn

    current = sklearn.get_config()
    for key, value in saved.items():
        if key not in current:
            out.not_applied.append(f"scikit-learn {key}={value!r}: unknown to scikit-learn {sklearn.__version__}")
        else:
            label, now = f"scikit-learn {key}={value!r}", _plain(current[key])
            _set(out, label, now, value, lambda k=key, v=value: sklearn.set_config(**{k: v}))


def _apply_matplotlib(saved: dict[str, Any], out: Outcome) -> None:
    import matplotlib

    changed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, value in saved.items():
            if key not in matplotlib.rcParams:
                out.not_applied.append(f"matplotlib rcParams[{key!r}]: unknown to matplotlib {matplotlib.__version__}")
            elif _plain(matplotlib.rcParams[key]) != value:
                try:
                    matplotlib.rcParams[key] = value
                except (KeyError, TypeError, ValueError) as e:
                    out.not_applied.append(f"matplotlib rcParams[{key!r}] = {value!r}: {e}")
                    continue
                changed.append(key)
    if changed:
        out.applied.append(f"matplotlib rcParams {', '.join(changed)}")


def apply(saved: dict[str, Any], folder: str, words: str = "the notebook's folder") -> Outcome:
    """Set the kept settings in this process; what cannot be set is named in the outcome. The
    working directory comes first: relative ``sys.path`` entries are taken from it. Places kept
    relative are taken from ``folder``, called ``words`` in the outcome."""
    out = Outcome()
    steps: list[tuple[str, str, Callable[[Any], None]]] = [
        ("cwd", "working directory", lambda kept: places.apply_cwd(kept, folder, words, out.applied, out.not_applied)),
        (
            "sys_path",
            "sys.path",
            lambda kept: places.apply_sys_path(kept, folder, words, out.applied, out.not_applied),
        ),
        ("torch", "torch settings", lambda kept: _apply_torch(kept, out)),
        ("sklearn", "scikit-learn config", lambda kept: _apply_sklearn(kept, out)),
        ("matplotlib", "matplotlib rcParams", lambda kept: _apply_matplotlib(kept, out)),
    ]
    for key, what, step in steps:
        if key not in saved:
            continue
        try:
            step(saved[key])
        except ImportError as e:
            out.not_applied.append(f"{what}: {key} cannot be imported here ({type(e).__name__}: {e})")
        except Exception as e:  # a library refusing here: named, the resume goes on
            out.not_applied.append(f"{what}: {type(e).__name__}: {e}")
    return out


@dataclass
class Kept:
    """What a checkpoint keeps of the process beside its variables."""

    settings: dict[str, Any]
    local_modules: localmodules.Kept
    notes: list[str]
    #: The files each slow import's modules came from (``Loaded.package_files``), where loaded.
    import_files: dict[str, list[str]]


def keep(notebook: str | None, algorithm: str, values: Mapping[str, Any] | None = None) -> Kept:
    """Capture the settings and the local modules (the checkpoint's hook): those under the
    notebook's folder and the ``sys.path`` folders the user added; one that ``values`` need but
    that is not kept is named. What the process has loaded is read once, for all of these."""
    loaded = Loaded.now()
    with localmodules.resolving_once():
        settings, notes = capture(notebook, loaded)
        try:
            entries = places.added_folders(loaded)
        except Exception as e:  # an odd sys.path: the modules under the notebook's folder are still kept
            entries = []
            notes.append(f"sys.path folders not searched for local modules: {type(e).__name__}: {e}")
        modules = localmodules.capture(notebook, algorithm, entries, values, loaded)
    import_files = loaded.package_files(SLOW_IMPORTS.values())
    return Kept(settings=settings, local_modules=modules, notes=notes + modules.notes, import_files=import_files)


def restore(store: Store, manifest: Manifest, notebook: str | None, *, full: bool, overwrite: bool) -> list[str]:
    """Bring back the local modules and, on a full resume, the settings, before the variables
    load (they may import the local modules, or open files relative to the working directory).
    Returns the resume summary's lines."""
    notes = localmodules.put_back(store, manifest, notebook, overwrite)
    if full and manifest.settings:
        notes += apply(manifest.settings, notebook_folder(notebook), folder_words(notebook)).notes()
    elif manifest.settings:
        notes.append("settings left as they are: only some variables were asked for")
    return notes + localmodules.make_importable(manifest, notebook)
