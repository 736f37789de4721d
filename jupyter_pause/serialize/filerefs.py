"""Which collected arrays hold exactly the bytes of tensors of a model file: those are referenced
(``Manifest.references``), not copied.

Matching is by digest, so a tensor changed after it was loaded is never taken for the file's:

- a storage that still maps its file's bytes unwritten (``transformers`` loads a model as views
  of the file, mapped privately; the mapping is known by the file's inode, as a Hugging Face
  cache blob has no ``.safetensors`` name), exactly one tensor's range, is that tensor: the page flags say
  no byte was written since (``store.mapping.unwritten``), so it is not even read (once the file
  is known to hold the bytes its index describes: ``ModelFile.verified``);
- a storage the size of some tensor of the files is hashed, and its digest looked up;
- a storage that is several tensors one after the other (experts fused into one tensor at load)
  is walked: where its next bytes start like a tensor of the files (its first ``HEAD`` bytes),
  that tensor's range is hashed and compared, until the storage is covered, or not.

A conversion at load (another dtype, a transpose) gives other bytes: no match, and the array is
stored as before.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..store import mapping, signing
from ..store.manifest import FileRange
from ..store.modelfiles import ModelFile, Tensor

#: Bytes of a tensor's start that find it as a part of a larger storage.
HEAD = 64
#: Tensors of the files tried at each place of a storage that starts like several of them.
TRIES = 4
#: Threads hashing candidates at once.
THREADS = min(8, os.cpu_count() or 1)


@dataclass
class Matched:
    """What ``Matcher.match`` found: references by array key (blob digest and ranges), and the
    digests it took of arrays that matched nothing (the plan need not take them again)."""

    references: dict[str, tuple[str, list[FileRange]]] = field(default_factory=dict)
    hashed: dict[str, str] = field(default_factory=dict)


def _regions(
    files: list[ModelFile], mappings: list[mapping.FileMapping] | None
) -> list[tuple[int, int, int, ModelFile]]:
    """(start, end, file offset, file) of each mapping of ``files`` in this process (Linux), among
    ``mappings`` (default: read now)."""
    inodes = {}
    for f in files:
        if not f.holds_its_index():  # its name's claim not verified yet: its tensors are hashed
            continue
        try:
            stat = os.stat(f.path)
        except OSError:
            continue
        inodes[(stat.st_dev, stat.st_ino)] = f
    if not inodes:
        return []
    # by inode, not by name: a Hugging Face cache blob has no suffix
    return [
        (m.start, m.end, m.offset, f)
        for m in (mapping.file_mappings() if mappings is None else mappings)
        if (f := inodes.get((m.device, m.inode))) is not None
    ]


class Matcher:
    """Finds the arrays of a capture that are tensors of ``files`` (their indexes in ``algorithm``).
    ``mappings``: the process's file mappings, as the checkpoint read them once (default: read
    when matching)."""

    def __init__(
        self,
        files: list[ModelFile],
        algorithm: str,
        known: dict[str, list[FileRange]] | None = None,
        mappings: list[mapping.FileMapping] | None = None,
    ):
        self.files = [f for f in files if f.index.algorithm == algorithm]
        self.algorithm = algorithm
        self.mappings = mappings
        #: Blobs a previous checkpoint referenced, by digest (a storage kept on its device by its
        #: fingerprint keeps its reference).
        self.known = {
            d: r for d, r in (known or {}).items() if {x.file for x in r} <= {f.index.file for f in self.files}
        }
        self.by_digest: dict[str, FileRange] = {}
        self.by_range: dict[tuple[str, int, int], Tensor] = {}
        for f in self.files:
            for t in f.index.tensors:
                self.by_digest.setdefault(t.digest, FileRange(f.index.file, t.name, t.start, t.stop))
                self.by_range[(f.index.file, t.start, t.stop)] = t
        self.sizes = {r.stop - r.start for r in self.by_digest.values()}
        self.smallest = min(self.sizes, default=0)
        self._heads: dict[bytes, list[Tensor]] | None = None
        self._files = {f.index.file: f for f in self.files}

    def heads(self) -> dict[bytes, list[Tensor]]:
        """Tensors of at least ``HEAD`` bytes by their first ``HEAD`` bytes, largest first (read once)."""
        if self._heads is None:
            self._heads = {}
            for f in self.files:
                with open(f.path, "rb") as handle:
                    for t in f.index.tensors:
                        if t.stop - t.start >= HEAD:
                            handle.seek(t.start)
                            self._heads.setdefault(handle.read(HEAD), []).append(t)
            for tensors in self._heads.values():
                tensors.sort(key=lambda t: t.start - t.stop)
        return self._heads

    def _mapped(
        self, found: Any, regions: list[tuple[int, int, int, ModelFile]], flags: int | None
    ) -> tuple[str, FileRange] | None:
        """The tensor whose file bytes ``found`` still maps, unwritten, if it is exactly one
        (``flags``: ``mapping.pagemap()``'s)."""
        if found.origin is None or found.origin[0] != "cpu" or found.private:
            return None
        _, address, size = found.origin
        for lo, hi, offset, f in regions:
            if lo <= address and address + size <= hi:
                start = address - lo + offset
                t = self.by_range.get((f.index.file, start, start + size))
                if t is not None and mapping.unwritten(address, size, flags):
                    return t.digest, FileRange(f.index.file, t.name, t.start, t.stop)
        return None

    def _parts(self, data: memoryview) -> list[FileRange] | None:
        """The tensors ``data`` is, one after the other, when it is several of them; else None."""
        heads, parts, at = self.heads(), [], 0
        while at < len(data):
            tries = [t for t in heads.get(bytes(data[at : at + HEAD]), []) if at + t.stop - t.start <= len(data)]
            hit = next(
                (
                    t
                    for t in tries[:TRIES]
                    if signing.digest(data[at : at + t.stop - t.start], self.algorithm) == t.digest
                ),
                None,
            )
            if hit is None:
                return None
            parts.append(self.by_digest[hit.digest])
            at += hit.stop - hit.start
        return parts if len(parts) > 1 else None

    def match(self, found: dict[str, Any]) -> Matched:
        """The arrays of ``found`` (``arrays.Collected`` by key) that are tensors of the files."""
        out = Matched()
        if not self.files:
            return out
        regions = _regions(self.files, self.mappings)
        rest = {}
        with mapping.pagemap() as flags:
            for key, f in found.items():
                if f.reused is not None and f.reused in self.known:
                    out.references[key] = (f.reused, self.known[f.reused])
                elif f.data is not None and f.size and (hit := self._mapped(f, regions, flags)) is not None:
                    out.references[key] = (hit[0], [hit[1]])
                elif f.data is not None and f.size and (f.size in self.sizes or f.size >= 2 * self.smallest):
                    rest[key] = f
        sized = [k for k, f in rest.items() if f.size in self.sizes]
        with ThreadPoolExecutor(THREADS) as pool:
            digests = pool.map(lambda k: signing.digest(rest[k].data, self.algorithm), sized)
            out.hashed.update(zip(sized, digests, strict=True))
        for key, f in rest.items():
            digest = out.hashed.get(key)
            if digest is not None and digest in self.by_digest:
                out.references[key] = (digest, [self.by_digest[digest]])
                del out.hashed[key]
            elif f.size >= 2 * self.smallest and (parts := self._parts(f.data)) is not None:
                out.references[key] = (digest or signing.digest(f.data, self.algorithm), parts)
        return out
