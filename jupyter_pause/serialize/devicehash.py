"""Change detection where a tensor lives: a keyed fingerprint of each storage, taken with torch
ops on its device and compared with the previous checkpoint's before anything is copied.

A storage on a GPU used to be copied to host memory and hashed there at every checkpoint, even a
frozen backbone that has not changed since the last one. Now each storage of at least
``MIN_BYTES`` on a device gets a 61-bit fingerprint computed on that device; when the previous
checkpoint of the same lineage recorded a blob of the same size with the same fingerprint, that
blob is kept: nothing is copied, nothing hashed. Otherwise the storage is copied and hashed as
before, and its fingerprint recorded with its blob for the next checkpoint. A blob the previous
checkpoint referenced in a model file (``Manifest.references``) is kept the same way, as a
reference again, while the file is in the store's pool and this checkpoint can reference it.

The fingerprint
---------------
The storage's bytes, as little-endian 16-bit words ``w_i`` (an odd last byte is a word of its
own), are hashed with a multilinear hash over the prime field ``F_p``, ``p = 2**61 - 1``::

    level 1:   v_j = sum_i k_i * w_(j*B + i)  mod p      for each block j of B = 2**16 words
    level 2:   the same over the 16-bit pieces of (v_0, v_1, ...), with keys k' of its own
    ...        until one block is left; its value is the fingerprint.

The keys (``B`` per level) are expanded by SHAKE-256 from a 128-bit seed drawn at random when a
lineage first fingerprints; every checkpoint records the seed (``Manifest.fingerprints``), and
the next one of its lineage uses it again. Products and sums are exact in int64: a key is split
into a 31-bit and a 30-bit half, so a block's two sums stay below ``2**16 * 2**16 * 2**31 =
2**63``; they are reduced mod ``p`` afterwards. Nothing rounds, on any device, in any order.

Exactness
---------
For two different byte strings of the same length, some word differs, so at level 1 some block
differs. For a block that differs, ``sum_i k_i * d_i = 0 mod p`` (``d`` the nonzero difference)
holds for exactly one value of the key at a coordinate where ``d_i != 0``: probability ``1/p``
over the key. If every level-1 value is still equal, the strings collide there; otherwise the
level-2 messages differ and the same argument applies with the level-2 keys, drawn
independently. So two different storages of the same size get the same fingerprint with
probability at most ``L / p`` for ``L`` levels: ``L = 1`` up to 128 KiB, 2 up to 2 GiB, 3 up
to 32 TiB. That is at most ``3 / (2**61 - 1) < 1.3e-18`` per comparison, whatever the size; a
storage is compared with the previous checkpoint's blobs of its own size only, so even 10^4
tensors over 10^4 checkpoints stay below ``1.3e-10`` in all. (The SHAKE expansion of the seed
stands in for independent uniform keys; the bias of reducing 61 random bits mod ``p`` is
``2**-60``.)

No write can be missed for another reason than that bound: the fingerprint is a function of
the storage's bytes, read at the checkpoint, and of nothing else: not a version counter, an
autograd flag, a data pointer or a record of which ops ran. An assignment through ``.data``, an
in-place op (``add_``, ``mul_``, ``copy_``, ``index_put_``, ``zero_``), a write through any view
or slice, an optimizer step (foreach and fused kernels included), a write under
``torch.no_grad()``, a kernel of another library on the same memory: each changes bytes, and so
the fingerprint. ``set_`` or a ``.data`` swap gives the tensor another storage, fingerprinted on
its own; a storage resized in place has another size, and sizes are compared first (they must
be: zero words appended leave a multilinear hash as it was, so the fingerprint alone would not
tell a storage grown with zeros from the one before).

The key is not a secret from code in the kernel (it is in the manifest): this guards against
accidents, not against a notebook crafting a collision. Signed checkpoints (sha256 blobs, chosen
so that no one can steer a digest) therefore never skip on a fingerprint.

On the CPU, a storage needs no copy, and xxh3 reads it about 300 times faster than these int64
ops (``benchmarks/run.py`` case 9, on 2 cores: 0.08 s/GiB against 25 s/GiB), so CPU storages
keep being hashed with xxh3 (and skipped by page flags after a resume, ``store.mapping``, or by
the kernel's record of written pages, ``writewatch``)
unless ``ON_CPU`` is set (tests, the GPU check's CPU mode). Storages under ``MIN_BYTES`` are
copied as before: they share packed blobs, and their copy costs less than a fingerprint.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError
from ..store.integrity import read_manifest
from ..store.layout import manifest_key
from ..store.manifest import ArrayRecord, FileRange, Manifest
from ..store.names import Names
from ..store.signing import Keys
from ..store.storage import Store

#: Name and version of the fingerprint; a checkpoint recorded under another one is not compared.
SCHEME = "mlh61-u16-v1"

#: Storages smaller than this are copied and hashed as before (they are packed with others).
MIN_BYTES = 1 << 20

#: Only checkpoints whose blobs are named by this digest skip on a fingerprint.
ALGORITHM = "xxh3_128"

#: CPU storages take the device path too (copied to host unless unchanged): for tests and benchmarks.
ON_CPU = False

P = (1 << 61) - 1
BLOCK = 1 << 16
#: Words fingerprinted at once on a device: the int64 temporaries (8 bytes per word, three at a
#: time) then take about 100 MiB of device memory however large the storage.
CHUNK_WORDS = BLOCK * 64


@dataclass
class Previous:
    """The fingerprints recorded by one checkpoint: its seed and, by (size, fingerprint), its blob."""

    checkpoint: str
    seed: str
    blobs: dict[tuple[int, str], str]
    #: Where each of those blobs lives (blob -> store key); one missing here is looked for in the
    #: store's pool and in the session's own folder.
    keys: dict[str, str] = field(default_factory=dict)
    #: Those of the blobs that are ranges of model files (``Manifest.references``), and the size
    #: of each file they name: such a blob is kept while its files are in the store's pool.
    references: dict[str, list[FileRange]] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)


@dataclass
class Seen:
    """What a capture learned: the seed it used, each array's fingerprint, what it kept."""

    seed: str
    fingerprints: dict[str, str] = field(default_factory=dict)  # array key -> fingerprint
    kept: dict[str, str] = field(default_factory=dict)  # array key -> blob kept from the previous checkpoint
    kept_bytes: int = 0

    def record(self, arrays: dict[str, ArrayRecord]) -> dict[str, Any]:
        """The manifest's ``fingerprints`` field: scheme, seed and, by blob key, fingerprint (of
        arrays that start their blob; a lookup also checks that the blob is the array's size)."""
        blobs = {
            arrays[k].blob: fp
            for k, fp in self.fingerprints.items()
            if k in arrays and arrays[k].blob and arrays[k].offset == 0
        }
        return {"scheme": SCHEME, "seed": self.seed, "blobs": blobs} if blobs else {}


#: The latest checkpoint's fingerprints by (store URL, session), so the next one need not read it.
_latest: dict[tuple[str, str], Previous] = {}


def remember(store: Store, manifest: Manifest) -> None:
    """Keep ``manifest``'s fingerprints for the next checkpoint of its session (called at commit)."""
    _latest[(store.url, manifest.session)] = _previous(manifest, store.names)


def forget() -> None:
    """Forget every remembered checkpoint (a new process holds none)."""
    _latest.clear()


def _previous(manifest: Manifest, names: Names) -> Previous:
    recorded = manifest.fingerprints
    if recorded.get("scheme") != SCHEME or manifest.hash != ALGORITHM:
        return Previous(manifest.id, "", {})
    references = {b: manifest.references[b] for b in recorded.get("blobs", {}) if b in manifest.references}
    sizes = {**manifest.blobs, **{b: manifest.referenced_size(b) for b in references}}
    blobs = {(sizes.get(b, -1), fp): b for b, fp in recorded.get("blobs", {}).items()}
    keys = {b: k for k, b in manifest.blob_keys((b for b in blobs.values() if b not in references), names).items()}
    named = {r.file for ranges in references.values() for r in ranges}
    files = {f: r.size for f, r in manifest.model_files.items() if f in named}
    return Previous(manifest.id, recorded.get("seed", ""), blobs, keys, references, files)


def previous(store: Store, session: str, parent: str | None, signing_key: Keys = None) -> Previous | None:
    """The fingerprints of checkpoint ``parent``: remembered, else read from its manifest; None
    where there is no parent or its manifest cannot be read (then every storage is hashed)."""
    if parent is None:
        return None
    known = _latest.get((store.url, session))
    if known is not None and known.checkpoint == parent:
        return known
    try:
        manifest = read_manifest(store.read(manifest_key(session, parent)), parent, signing_key, session)
    except (FileNotFoundError, StoreError):  # gone or unreadable: every storage is hashed
        return None
    if not isinstance(manifest, Manifest):
        return None
    try:
        return _previous(manifest, store.names)
    except KeyError:  # named with a key this process lacks: every storage is hashed
        return None


def skip_unchanged(collector: Any, store: Store, session: str, before: Previous | None, algorithm: str) -> Seen | None:
    """Fingerprint the collector's device storages and mark those unchanged since ``before``.

    A marked storage (``Collected.reused``) is not copied to host memory and not hashed: its blob
    is the one ``before`` recorded for the same size and fingerprint, and the store still holds
    it. Returns what was seen, for the manifest; None when no storage is fingerprinted.
    """
    if algorithm != ALGORITHM:
        return None
    candidates = {
        k: f for k, f in collector.found.items() if f.kind == "torch" and f.data is None and f.size >= MIN_BYTES
    }
    if not candidates:
        return None
    seed = before.seed if before is not None and before.seed else secrets.token_hex(16)
    seen = Seen(seed)
    seen.fingerprints = fingerprints({k: f.keepalive for k, f in candidates.items()}, seed)
    if before is None or not before.blobs:
        return seen
    matches = {k: before.blobs.get((candidates[k].size, fp)) for k, fp in seen.fingerprints.items()}
    matches = {k: b for k, b in matches.items() if b is not None}
    if matches:
        ways = {b: _ways(before, store.names, b, candidates[k].size) for k, b in matches.items()}
        sizes = store.sizes(key for found in ways.values() for way in found for key in way)
        for k, b in matches.items():
            if any(all(sizes[key] == size for key, size in way.items()) for way in ways[b]):
                candidates[k].reused = b
                seen.kept[k] = b
                seen.kept_bytes += candidates[k].size
    return seen


def _ways(before: Previous, names: Names, blob: str, size: int) -> list[dict[str, int]]:
    """Where the store may hold ``blob`` of ``before`` (``size`` bytes): each way is store keys
    with the size each must have, all there. A blob that is ranges of model files is held
    when its files are in the pool."""
    ranges = before.references.get(blob)
    if ranges is None:
        return [{before.keys[blob] if blob in before.keys else names.pool_key(blob): size}]
    files = {r.file for r in ranges}
    if not files <= before.files.keys():
        return []
    return [{names.pool_key(f): before.files[f] for f in files}]


def release(collector: Any, seen: Seen | None, before: Previous | None, files: set[str]) -> bool:
    """Unmark the storages kept as references to model files not among ``files`` (those this
    capture cannot reference: not offered, or not indexed in time), so that they are copied
    and hashed after all. True if any was."""
    if seen is None or before is None:
        return False
    dropped = [
        k
        for k, b in seen.kept.items()
        if b in before.references and not {r.file for r in before.references[b]} <= files
    ]
    for k in dropped:
        collector.found[k].reused = None
        seen.kept_bytes -= collector.found[k].size
        del seen.kept[k]
    return bool(dropped)


def fingerprints(storages: dict[str, Any], seed: str) -> dict[str, str]:
    """Fingerprints (16 hex digits) of untyped storages, computed on their devices, by name.

    The results come to host once per device, not once per storage. A device that cannot compute
    them (out of memory, a backend without these integer ops) gives none: its storages are then
    copied and hashed as they always were.
    """
    import torch

    by_device: dict[Any, list[tuple[str, Any]]] = {}
    for name, storage in storages.items():
        by_device.setdefault(storage.device, []).append((name, storage))
    out: dict[str, str] = {}
    for items in by_device.values():
        try:
            values = torch.stack([_fingerprint(s, seed) for _, s in items]).tolist()
        except (RuntimeError, NotImplementedError):  # torch.OutOfMemoryError is a RuntimeError
            continue
        out.update((name, f"{v:016x}") for (name, _), v in zip(items, values, strict=True))
    return out


def fingerprint(storage: Any, seed: str) -> str:
    """The fingerprint of one untyped storage (see the module docstring)."""
    return f"{int(_fingerprint(storage, seed)):016x}"


def _fingerprint(storage: Any, seed: str) -> Any:
    """A 0-d int64 tensor on the storage's device: the fingerprint's value."""
    import torch

    size = storage.nbytes()
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (size,), (1,))
    lo, hi = _keys(seed, 1, storage.device)
    values = []
    even = size - size % 2
    for start in range(0, even, 2 * CHUNK_WORDS):
        chunk = flat[start : min(start + 2 * CHUNK_WORDS, even)]
        words = chunk.view(torch.int16).to(torch.int64) & 0xFFFF
        if size % 2 and start + 2 * CHUNK_WORDS >= even:
            words = torch.cat([words, flat[even:].to(torch.int64)])
        values.append(_blocks(words, lo, hi))
    if not values:  # fewer than two bytes
        values.append(_blocks(flat.to(torch.int64), lo, hi))
    level, value = 1, torch.cat(values)
    while value.numel() > 1:
        level += 1
        pieces = torch.stack([(value >> s) & 0xFFFF for s in (0, 16, 32, 48)], dim=1).reshape(-1)
        value = _blocks(pieces, *_keys(seed, level, storage.device))
    return value.reshape(())


def _blocks(words: Any, lo: Any, hi: Any) -> Any:
    """One level: the multilinear hash mod p of each block of ``BLOCK`` words (the last may be short)."""
    import torch

    full = words.numel() // BLOCK * BLOCK
    sums_lo, sums_hi = [], []
    if full:
        grid = words[:full].view(-1, BLOCK)
        sums_lo.append((grid * lo).sum(1))
        sums_hi.append((grid * hi).sum(1))
    if words.numel() > full or not full:
        rest = words[full:]
        n = rest.numel()
        sums_lo.append((rest * lo[:n]).sum().reshape(1))
        sums_hi.append((rest * hi[:n]).sum().reshape(1))
    low, high = torch.cat(sums_lo), torch.cat(sums_hi)
    return _mod(_times_2_31(_mod(high)) + _mod(low))


def _mod(x: Any) -> Any:
    """``x mod p`` for int64 ``0 <= x < 2**63``."""
    import torch

    y = (x & P) + (x >> 61)
    return torch.where(y >= P, y - P, y)


def _times_2_31(y: Any) -> Any:
    """``y * 2**31 mod p`` for ``0 <= y < p`` (below ``2**62``, reduced by the caller's ``_mod``)."""
    return (y >> 30) + ((y & ((1 << 30) - 1)) << 31)


_key_cache: dict[tuple[str, int, str], tuple[Any, Any]] = {}


def _keys(seed: str, level: int, device: Any) -> tuple[Any, Any]:
    """The level's ``BLOCK`` keys, split into 31-bit low and 30-bit high halves, on ``device``."""
    import numpy as np
    import torch

    cached = _key_cache.get((seed, level, str(device)))
    if cached is not None:
        return cached
    raw = hashlib.shake_256(b"jupyter-pause devicehash\0" + bytes.fromhex(seed) + bytes([level])).digest(8 * BLOCK)
    keys = np.frombuffer(raw, dtype="<u8") & np.uint64(P)
    keys = np.where(keys == np.uint64(P), np.uint64(0), keys).astype(np.int64)
    lo = torch.from_numpy(keys & ((1 << 31) - 1)).to(device)
    hi = torch.from_numpy(keys >> 31).to(device)
    if len(_key_cache) > 64:
        _key_cache.clear()
    _key_cache[(seed, level, str(device))] = (lo, hi)
    return lo, hi
