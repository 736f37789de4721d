"""The manifest: the one record that makes a checkpoint exist, written after all of its data."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import xxhash

from ..errors import IntegrityError
from .layout import blob_place, pool_key
from .names import Names
from .signing import MANIFEST, Keys, manifest_place, seal

#: Version of the manifest layout; readers refuse layouts newer than they know. 2: blobs may live
#: in the store's pool (``pool``, ``session_blobs``), where a format-1 reader would not look.
#: 3: some array blobs are byte ranges of model files (``references``), which a format-2 reader
#: would take for missing blobs; a checkpoint without references is still written as format 2.
FORMAT = 3
#: The format of a checkpoint that references no model file.
POOL_FORMAT = 2

#: The package whose import a restore of each array kind needs, and which a new kernel takes a
#: second or more to import (``Manifest.slow_imports``): begun ahead, beside the reads.
SLOW_IMPORTS: dict[str, str] = {"torch": "torch"}

#: Fields of ``Manifest`` known only once it is read, never written into its body.
NOT_IN_BODY = frozenset({"signature", "canonical"})


@dataclass
class BlobRef:
    """A content-addressed blob: its key (the xxh3-128 digest of its bytes) and its size."""

    key: str
    size: int


@dataclass
class ArrayRecord:
    """A tensor storage or array kept outside pickle as raw typed bytes.

    ``blob`` holds the bytes at ``offset`` (small arrays share one packed blob).
    """

    kind: str  # "torch" (an untyped storage) or "numpy"
    dtype: str
    shape: list[int]
    device: str
    blob: str
    offset: int
    nbytes: int
    order: str = "C"


@dataclass
class FileRange:
    """Bytes ``[start, stop)`` of model file ``file`` (the sha256 of its bytes): tensor ``tensor``'s data."""

    file: str
    tensor: str
    start: int
    stop: int


@dataclass
class ModelFileRecord:
    """A model file a checkpoint references: its size, and where the kernel that took it read
    it (a resume on that node may read it there instead of from the store's pool)."""

    size: int
    path: str = ""


@dataclass
class DataFileRecord:
    """A file values read by path, kept as a blob of the pool (``store.datafiles``): its size,
    where the kernel that took the checkpoint read it, and how (``mapped``: as it was on disk;
    ``copied``: read whole, as it may change)."""

    size: int
    path: str = ""
    how: str = "mapped"


@dataclass
class VariableRecord:
    """One saved variable: its pickled segment and what it is."""

    name: str
    type: str
    kind: str
    blob: BlobRef
    arrays: list[str] = field(default_factory=list)
    pickler: str = "pickle"  # "pickle" (shared memo, loaded in order) or "dill" (standalone)
    digest: str | None = None  # value digest (see ``digests``); None when too large to take


@dataclass
class LocalModuleRecord:
    """A file under the notebook's folder that the kernel imported (``from utils import train``),
    kept with the checkpoint so a node that lacks it gets it back."""

    path: str  # relative to the notebook's folder, with ``/``
    module: str  # the name it was imported under
    blob: BlobRef  # its bytes; the key is their digest


@dataclass
class SkippedRecord:
    """A variable that was not saved, and why."""

    name: str
    type: str
    reason: str


@dataclass
class ReplayStep:
    """One recorded statement a resume runs again: where it comes from in the cell history, and its source."""

    index: int  # its place in the history (statements in the order they ran)
    cell: int  # the execution count of its cell
    source: str  # Python, as the kernel ran it (magics already turned into calls)


@dataclass
class RecipeRecord:
    """How a variable that could not be saved is rebuilt on resume (see ``replay.rebuild``).

    ``steps`` are the statements to replay, in the order they ran; variables rebuilt together
    (an iterator over a rebuilt generator) share the same steps. ``missing`` says why it cannot be
    rebuilt ("" when it can); ``notes`` name the statements left out and the inputs that changed.
    """

    name: str
    type: str
    reach: str  # "memory", "iterator" (every statement that changed it replayed) or "outside" (only its opening)
    steps: list[ReplayStep] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)  # the names its statements read: saved, imported or rebuilt
    missing: str = ""
    notes: list[str] = field(default_factory=list)
    #: What the object showed of its state at checkpoint time (``proof.observed``), compared once it
    #: is rebuilt; "" when nothing could be read: its rebuild is not checkable.
    observed: str = ""


@dataclass
class Manifest:
    """Everything needed to find, verify and restore one checkpoint."""

    id: str
    session: str
    lineage: str
    parent: str | None
    created: float
    trigger: str
    node: str
    tag: str | None = None
    format: int = POOL_FORMAT
    hash: str = "xxh3_128"
    notebook: dict[str, Any] | None = None
    variables: list[VariableRecord] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)
    skipped: list[SkippedRecord] = field(default_factory=list)
    arrays: dict[str, ArrayRecord] = field(default_factory=dict)
    blobs: dict[str, int] = field(default_factory=dict)
    rng: BlobRef | None = None
    checks: BlobRef | None = None  # the probe value and model checks (see ``verdict``)
    probe: str | None = None  # sha256 of the probe value: proves a kernel got it from here
    environment: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    loops: list[dict[str, Any]] = field(default_factory=list)  # running ``steps`` loops and their positions
    loop_state: BlobRef | None = None  # what continuing those loops needs (RNG at a loader's start...)
    #: What the checkpoint says of its loops: a re-run continues them (and where), or a loop was
    #: left mid-pass and has no position. Empty for older checkpoints, which lack the field.
    loop_notes: list[str] = field(default_factory=list)
    #: Captured inside a running cell, outside any safe point (a SIGTERM mid-cell): variables that
    #: cell was changing may be halfway updated. False for older checkpoints, which lack the field.
    mid_cell: bool = False
    #: Process settings that change results (torch numerics and threads, scikit-learn's config,
    #: matplotlib's rcParams, working directory, added ``sys.path`` entries): see ``process.settings``.
    #: Empty for older checkpoints, which lack the field.
    settings: dict[str, Any] = field(default_factory=dict)
    #: The notebook's own modules (see ``process.localmodules``); empty for older checkpoints.
    local_modules: list[LocalModuleRecord] = field(default_factory=list)
    #: Fingerprints of device storages (see ``serialize.devicehash``): ``scheme``, ``seed`` (the
    #: lineage's key) and ``blobs`` (blob key -> fingerprint), so the next checkpoint keeps the
    #: unchanged ones without copying them. Empty for older checkpoints and those without any.
    fingerprints: dict[str, Any] = field(default_factory=dict)
    #: How each variable that could not be saved is rebuilt on resume (``replay.rebuild``); empty
    #: for older checkpoints, which lack the field.
    recipes: list[RecipeRecord] = field(default_factory=list)
    #: The cell history (``replay.history``): the statements the kernel ran, what each assigned,
    #: changed and read, never values. None for older checkpoints.
    history: BlobRef | None = None
    #: Saved variables a copy of which, loaded back at checkpoint time, did not match (see
    #: ``proof.rehearsal``): name -> why. Named at checkpoint; the restore test says so. Empty
    #: for older checkpoints, which lack the field.
    inexact: dict[str, str] = field(default_factory=dict)
    #: What will not come back on another node, or not provably, named when it was taken (see
    #: ``session.travel``): one line each. Empty for older checkpoints, which lack the field.
    elsewhere: list[str] = field(default_factory=list)
    #: The JupyterHub user whose server wrote it (signed with the manifest: a checkpoint is bound
    #: to its user and its session). None off a Hub and for older checkpoints.
    user: str | None = None
    #: Where its blobs live: True, in the store's pool (``blobs/`` at the store's root, shared by
    #: every session), except those in ``session_blobs``; False (older checkpoints), every one in
    #: its session's own folder (``sessions/<session>/blobs/``).
    pool: bool = False
    #: Blobs of a pooled checkpoint kept from before the store had a pool, in the session's own folder.
    session_blobs: list[str] = field(default_factory=list)
    #: Array blobs that are not in the store as blobs of their own: each is the bytes of these
    #: ranges of model files, one after the other (``store.references`` reads and verifies them
    #: by the digest that names them). Empty for older checkpoints and those without any.
    references: dict[str, list[FileRange]] = field(default_factory=dict)
    #: The model files ``references`` names, by sha256: each is a blob of the store's pool.
    model_files: dict[str, ModelFileRecord] = field(default_factory=dict)
    #: Files values read by path (a ``datasets`` Arrow file), by the digest of their bytes: each is
    #: a blob of the pool, in ``blobs`` too. Empty for older checkpoints and those without any.
    data_files: dict[str, DataFileRecord] = field(default_factory=dict)
    #: The files the modules of each slow import (``SLOW_IMPORTS``) had been loaded from when it
    #: was taken: package -> paths relative to the package's folder, in the order their imports
    #: ended. A resume on a node whose disk has not read them yet asks for them all before the
    #: import reads them one by one (``session.preimport``). Empty for older checkpoints and
    #: those taken where no slow import was loaded.
    import_files: dict[str, list[str]] = field(default_factory=dict)
    #: The id of the key that named its objects in the pool (``store.names``): a keyed checkpoint's
    #: blobs and model files are found under an HMAC of their digest. None: under their digest
    #: (without a key, and for older checkpoints).
    names: str | None = None

    def referenced_size(self, digest: str) -> int:
        """Bytes of the referenced blob ``digest`` (0 when it is not one)."""
        return sum(r.stop - r.start for r in self.references.get(digest, []))

    def devices(self) -> set[str]:
        """Devices the checkpoint's tensors lived on (``cpu``, ``cuda:0`` ...)."""
        return {a.device for a in self.arrays.values()}

    def needed(self) -> list[str]:
        """The blobs a whole restore of this checkpoint reads, each once, in the order it reads
        them: the variables', their arrays', then the RNG state, checks, loop positions and
        history. A prefetch copies them in this order, so the restore finds each as it comes to it."""
        keys = [v.blob.key for v in self.variables]
        keys += [a.blob for a in self.arrays.values()]
        for ref in (self.rng, self.checks, self.loop_state, self.history):
            if ref is not None:
                keys.append(ref.key)
        return list(dict.fromkeys(keys))

    def slow_imports(self) -> list[str]:
        """The slow imports a restore of this checkpoint needs: torch where it holds tensors."""
        kinds = {a.kind for a in self.arrays.values()}
        return [package for kind, package in SLOW_IMPORTS.items() if kind in kinds]

    def blob_key(self, digest: str, names: Names | None = None) -> str:
        """The store key of this checkpoint's blob ``digest``: where it lives (``names``: the
        reader's, to find a keyed checkpoint's blobs)."""
        return next(iter(self.blob_keys([digest], names)))

    def blob_keys(self, digests: Iterable[str], names: Names | None = None) -> dict[str, str]:
        """The store key of each of this checkpoint's blobs ``digests``: key -> digest. A
        checkpoint whose pool names are keyed needs the reader's ``names`` (``KeyError`` when
        they lack its key)."""
        own = set(self.session_blobs)
        if self.names is not None and names is None:
            raise KeyError(f"checkpoint {self.id} names its blobs with key id {self.names}: no key given to find them")
        keys = {}
        for d in dict.fromkeys(digests):
            if not self.pool or d in own:
                keys[blob_place(self.session, d, False)] = d
            else:
                keys[pool_key(d) if names is None else names.pool_key(d, self.names)] = d
        return keys

    def file_key(self, sha256: str, names: Names | None = None) -> str:
        """The pool key of the model file (or data file) ``sha256`` this checkpoint references."""
        if self.names is not None and names is None:
            raise KeyError(f"checkpoint {self.id} names its files with key id {self.names}: no key given to find them")
        return pool_key(sha256) if names is None else names.pool_key(sha256, self.names)

    #: Set when read: the signature block and the exact bytes it covers (not part of the body).
    signature: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    canonical: bytes | None = field(default=None, compare=False, repr=False)

    def to_bytes(self, signing_key: Keys = None) -> bytes:
        """Serialise with a trailing checksum (a torn or edited manifest is recognised), signed
        with ``signing_key`` when one is given."""
        body = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NOT_IN_BODY}
        canonical = canonical_body(body)
        signature = seal(canonical, MANIFEST, manifest_place(self), signing_key) if signing_key else None
        return _outer(canonical, signature)

    def as_read(self) -> bytes:
        """The bytes this manifest was read from, as far as they count: its body exactly as
        signed, the checksum over it and the signature. ``from_bytes`` of them verifies and gives
        this manifest back; a reader handed them checks them as it would the store's."""
        if self.canonical is None:
            raise ValueError(f"manifest {self.id} was not read from bytes: nothing to hand on")
        return _outer(self.canonical, self.signature)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray, where: str = "manifest") -> Manifest:
        """Parse and check a manifest; a torn, edited or unknown one raises ``IntegrityError``."""
        try:
            outer = json.loads(bytes(data))
            body = outer["manifest"]
            written = outer["checksum"]
        except (ValueError, KeyError, TypeError) as e:
            raise IntegrityError(f"{where} is incomplete or not a manifest ({e})") from e
        canonical = canonical_body(body)
        if checksum(canonical) != written:
            raise IntegrityError(f"{where} was changed after it was written (checksum mismatch)")
        if body.get("format", 0) > FORMAT:
            raise IntegrityError(
                f"{where} has format {body.get('format')}, newer than this jupyter-pause "
                f"understands ({FORMAT}); upgrade jupyter-pause to read it"
            )
        manifest = _manifest_from_dict(body)
        manifest.signature = outer.get("signature")
        manifest.canonical = canonical
        return manifest


def _outer(canonical: bytes, signature: dict[str, Any] | None) -> bytes:
    """A manifest as stored: its canonical body, the checksum over it, and its signature if any."""
    outer = b'{"manifest":' + canonical + b',"checksum":"' + checksum(canonical).encode() + b'"'
    if signature is not None:
        outer += b',"signature":' + json.dumps(signature).encode()
    return outer + b"}\n"


def canonical_body(body: dict[str, Any]) -> bytes:
    """The exact bytes a manifest's checksum and signature cover: its body as sorted, compact JSON."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=_fields).encode()


def checksum(canonical: bytes) -> str:
    """The checksum written after a manifest's body, over ``canonical_body``'s bytes."""
    return xxhash.xxh3_128_hexdigest(canonical)


def _fields(record: Any) -> dict[str, Any]:
    """A nested record as JSON sees it (what ``dataclasses.asdict`` gives, without its deep copy)."""
    if not is_dataclass(record):
        raise TypeError(f"{type(record).__name__} cannot go into a manifest")
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _manifest_from_dict(body: dict[str, Any]) -> Manifest:
    known = {f.name for f in fields(Manifest)} - NOT_IN_BODY
    data = {k: v for k, v in body.items() if k in known}
    data["variables"] = [VariableRecord(**{**v, "blob": BlobRef(**v["blob"])}) for v in data.get("variables", [])]
    data["skipped"] = [SkippedRecord(**s) for s in data.get("skipped", [])]
    data["arrays"] = {k: ArrayRecord(**a) for k, a in data.get("arrays", {}).items()}
    data["local_modules"] = [
        LocalModuleRecord(**{**m, "blob": BlobRef(**m["blob"])}) for m in data.get("local_modules", [])
    ]
    data["references"] = {k: [FileRange(**r) for r in v] for k, v in data.get("references", {}).items()}
    data["model_files"] = {k: ModelFileRecord(**f) for k, f in data.get("model_files", {}).items()}
    data["data_files"] = {k: DataFileRecord(**f) for k, f in data.get("data_files", {}).items()}
    data["recipes"] = [
        RecipeRecord(**{**r, "steps": [ReplayStep(**step) for step in r.get("steps", [])]})
        for r in data.get("recipes", [])
    ]
    for name in ("rng", "checks", "loop_state", "history"):
        if data.get(name):
            data[name] = BlobRef(**data[name])
    return Manifest(**data)
