"""Which model files the kernel loaded, offered to the store at each checkpoint (see ``store.modelfiles``).

Two cheap looks, no hook into any library: the ``safetensors`` files mapped into this process
that the saved tensors are views of (``transformers`` keeps a loaded model's weights as views
of its mapped files; the mappings are read from ``/proc/self/maps``), and the files of the
folder each saved model says it came from (``name_or_path``, or its config's
``_name_or_path``: a local folder, or a model id found in the Hugging Face cache, whose files
are named by their sha256 already). A file is offered once per process and store; it is read
(indexed) once, and uploaded in the background.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Iterable
from concurrent.futures import Future, TimeoutError, wait
from dataclasses import dataclass, field
from typing import Any

from ..proof import modelcheck
from ..serialize.filerefs import Matcher
from ..serialize.weakrefs import is_dead_proxy
from ..store import hubcache, mapping, modelfiles
from ..store.manifest import FileRange, ModelFileRecord
from ..store.modelfiles import SUFFIX, ModelFile
from ..store.storage import Store

#: Seconds a checkpoint waits for the indexes of the files it saw (reading a file once); past
#: that, it copies their tensors as before.
INDEX_WAIT = 600.0


def mapped(mappings: Iterable[mapping.FileMapping] | None = None) -> list[tuple[int, int, str]]:
    """Where ``safetensors`` files are mapped into this process: (start, end, path); none where
    ``/proc`` is absent. ``mappings``: the process's file mappings as a checkpoint read them once
    (default: read now)."""
    found = mapping.file_mappings() if mappings is None else mappings
    return [(m.start, m.end, m.path) for m in found if m.path.endswith(SUFFIX) and os.path.isfile(m.path)]


def _tensors(value: Any) -> Iterable[Any]:
    """The tensors of a module (parameters and buffers), a tensor, or a dict of tensors (a state dict)."""
    if modelcheck.is_module(value):
        return [*value.parameters(), *value.buffers()]
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return []


def _mapped_files(values: Iterable[Any], mappings: Iterable[mapping.FileMapping] | None) -> set[str]:
    """The mapped model files whose bytes tensors of ``values`` are views of."""
    regions = mapped(mappings)
    if not regions:
        return set()
    found = set()
    for value in values:
        for tensor in _tensors(value):
            address = tensor.data_ptr()
            found.update(path for lo, hi, path in regions if lo <= address < hi)
    return found


def folder_files(name: str) -> list[str]:
    """The ``safetensors`` files of model ``name``: a local folder, or a model id in the Hugging Face cache."""
    if os.path.isdir(name):
        return sorted(glob.glob(os.path.join(name, f"*{SUFFIX}")))
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        return []
    repo = os.path.join(hubcache.hub_cache(), "models--" + name.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main")) as ref:
            snapshots = [os.path.join(repo, "snapshots", ref.read().strip())]
    except OSError:
        snapshots = sorted(glob.glob(os.path.join(repo, "snapshots", "*")), key=os.path.getmtime)[-1:]
    return sorted(p for s in snapshots for p in glob.glob(os.path.join(s, f"*{SUFFIX}")))


def _names(values: Iterable[Any]) -> set[str]:
    """The ``name_or_path`` of each model among ``values`` (and of the modules inside them)."""
    names: set[str] = set()
    for value in values:
        if not modelcheck.is_module(value):
            continue
        for module in value.modules():
            own = vars(module)
            for name in (own.get("name_or_path"), getattr(own.get("config"), "_name_or_path", None)):
                if isinstance(name, str) and name:
                    names.add(name)
    return names


def loaded(values: Iterable[Any], mappings: Iterable[mapping.FileMapping] | None = None) -> dict[str, str | None]:
    """The model files this kernel loaded, each with the sha256 its name claims (a Hugging Face
    cache blob), or None. A weak proxy whose object is gone is passed over: asking its type raises.
    ``mappings``: as for ``mapped``."""
    values = [value for value in values if not is_dead_proxy(value)]
    paths = _mapped_files(values, mappings)
    for name in _names(values):
        paths.update(folder_files(name))
    found: dict[str, str | None] = {}
    seen: set[str] = set()
    for path in sorted(paths):
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found[path] = hubcache.claimed_sha256(real)
    return found


@dataclass
class Offered:
    """The model files one checkpoint saw, on their way into the store (see ``store.modelfiles``),
    and the process's file mappings as the checkpoint read them (once: ``matcher`` takes them too)."""

    files: list[Future[ModelFile]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mappings: list[mapping.FileMapping] = field(default_factory=list)

    def ready(self, timeout: float = INDEX_WAIT) -> list[ModelFile]:
        """The files indexed within ``timeout`` (a note names each that could not be)."""
        done, _ = wait(self.files, timeout=timeout)
        ready = []
        for future in self.files:
            try:
                if future not in done:
                    raise TimeoutError(f"not indexed within {timeout:.0f} s")
                ready.append(future.result())
                self.notes += ready[-1].notes
            except Exception as e:
                self.notes.append(f"a model file could not be indexed ({e}): its tensors are copied")
        return ready


def offer(
    store: Store, values: Iterable[Any], algorithm: str, mappings: list[mapping.FileMapping] | None = None
) -> Offered:
    """Offer every model file the kernel loaded to ``store`` (index, then upload, in the background).
    ``mappings``: the process's file mappings as the checkpoint read them once, read here if not
    given; ``Offered.mappings`` hands them on."""
    offered = Offered(mappings=mapping.file_mappings() if mappings is None else mappings)
    for path, claimed in loaded(values, offered.mappings).items():
        try:
            offered.files.append(modelfiles.offer(store, path, algorithm, claimed))
        except OSError as e:
            offered.notes.append(f"model file {path} cannot be read ({e}): its tensors are copied")
    return offered


def matcher(
    files: list[ModelFile],
    algorithm: str,
    known: dict[str, list[FileRange]] | None,
    mappings: list[mapping.FileMapping] | None = None,
) -> Matcher | None:
    """What finds the tensors of ``files`` among a capture's arrays (``mappings``: the process's
    file mappings as the checkpoint read them, ``Offered.mappings``); None without files."""
    return Matcher(files, algorithm, known, mappings) if files else None


def _named(files: list[ModelFile], references: dict[str, list[FileRange]]) -> list[ModelFile]:
    """The ``files`` that ``references`` names."""
    named = {r.file for ranges in references.values() for r in ranges}
    return [f for f in files if f.index.file in named]


def records(files: list[ModelFile], references: dict[str, list[FileRange]]) -> dict[str, ModelFileRecord]:
    """The manifest's ``model_files``: each file ``references`` names, with where it was read."""
    return {f.index.file: ModelFileRecord(f.index.size, f.path) for f in _named(files, references)}


def uploads(files: list[ModelFile], references: dict[str, list[FileRange]]) -> dict[str, Future[None]]:
    """The uploads a checkpoint with ``references`` must see finished before it commits, by file."""
    return {f.index.file: f.uploaded for f in _named(files, references)}
