"""The sweep of a store's pool: a blob, model file or index goes only when no verified checkpoint
of any session, nor any note of a checkpoint being written, names it, and it is older than the
grace period.

With a key, the pool names an object by an HMAC of its digest (``names.Names``): what a
checkpoint references is found under every name its digest may have here (``Names.every_name``:
under each key accepted, and plain). A checkpoint this process cannot read, verify or name the
objects of (a newer format, a manifest the store would not give, one no key here verifies, one
named with a key not held here) may name any object: then none is removed this time.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import uploads
from .backends.local import PART_PREFIX
from .catalog import Catalog
from .cleanup import DEFAULT_GRACE_SECONDS, Item, Kind, PoolReport, age, past
from .layout import file_index_of, manifest_key, pool_digest, pool_prefix
from .manifest import Manifest
from .names import Names
from .storage import Store
from .survey import Noted, Survey, notes_now, read_notes

#: Why each kind of pool item goes.
_WHY = {
    Kind.BLOB: "no verified checkpoint of any session, nor one being written, names it",
    Kind.UPLOAD: "a write cut off before it completed",
}


def sweep_pool(
    catalog: Catalog,
    *,
    grace: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    now: float | None = None,
    removed: Iterable[str] = (),
    survey: Survey | None = None,
) -> PoolReport:
    """Remove the pool's blobs that no verified checkpoint of any session names, nor any note of a
    checkpoint being written, once older than ``grace``; and unfinished writes into the pool.

    The pool is listed first: a blob written after that is not looked at. Notes are read before
    the manifests and again just before deleting, so a checkpoint that commits meanwhile is seen
    in one or the other. ``removed``: manifest keys this cleanup removes (or, on a dry run, would),
    taken as gone. ``survey``: what this cleanup read of the store already, in that order (its
    time and grace period then hold: see ``survey``); by default it is read here.
    """
    survey = survey or Survey.take(catalog, now, grace)
    if survey.pool is None:
        raise ValueError("this survey of the store was taken without the pool (pool=False): take one with it")
    now, grace = survey.now, survey.grace
    store = catalog.store
    report = PoolReport(dry_run=dry_run)
    unfinished = [u for u in uploads.incomplete(store, pool_prefix()) if past(u.initiated, now, grace)]
    referenced, unsure = _noted(store, survey.notes)
    named, doubt = _referenced(survey, set(removed))
    referenced |= named
    unsure = unsure or doubt
    # A blob of unknown age counts as old; a temporary file is a local write cut off before its
    # file was moved into place. An index of a model file goes with its file, first (the survey
    # lists the indexes first).
    old = {key: e for key, e in survey.pool.items() if e.mtime is None or past(e.mtime, now, grace)}
    parts = [key for key in old if key.rsplit("/", 1)[-1].startswith(PART_PREFIX) and key.endswith(".part")]
    orphans = [key for key in old if (name := _name(key)) is not None and name not in referenced]
    if orphans and not unsure and not dry_run:  # a checkpoint begun meanwhile: its note, read again
        again, unsure = _noted(store, read_notes(store, notes_now(store), now, grace))
        orphans = [key for key in orphans if _name(key) not in again]
    if unsure:
        report.kept_all = unsure
        orphans = []
    for key in orphans + parts:
        kind = Kind.BLOB if key in orphans else Kind.UPLOAD
        report.bytes_freed += old[key].size
        report.items.append(Item(str(kind), key, old[key].size, age(old[key].mtime, now), _WHY[kind]))
    report.blobs_removed = len(orphans)
    orphans += parts
    for upload in unfinished:
        report.bytes_freed += upload.size
        why = "a multipart upload begun and never completed"
        report.items.append(Item(str(Kind.UPLOAD), upload.key, upload.size, age(upload.initiated, now), why))
    if not dry_run:
        store.delete(orphans)
        uploads.abort(store, unfinished)
    return report


def _referenced(survey: Survey, removed: set[str]) -> tuple[set[str], str | None]:
    """Every pool name the verified checkpoints of the survey's sessions reference; and why they
    cannot all be known (a checkpoint not read, not verified, or named with a key not held here), or None."""
    names = survey.catalog.store.names
    referenced: set[str] = set()
    unsure: str | None = None
    for session in survey.sessions:
        judged = survey.judged(session)
        listing = judged.listing
        for manifest in listing.checkpoints:
            if manifest_key(session, manifest.id) in removed:
                continue  # pruned by this cleanup (on a dry run, as if it had been)
            try:
                referenced |= names_of(manifest, names)
            except KeyError as e:
                unsure = unsure or f"checkpoint {manifest.id} of session {session!r} cannot be named here ({e})"
        unreadable = sorted(listing.newer) + sorted(listing.unreadable)
        if unreadable and not unsure:
            unsure = f"session {session!r} holds checkpoints this release cannot read ({', '.join(unreadable)})"
        doubtful = sorted(i for i in judged.unverified if manifest_key(session, i) not in removed)
        if doubtful and not unsure:
            unsure = (
                f"session {session!r} holds manifests the keys here do not verify ({', '.join(doubtful)}): never "
                "counted, they may name any blob (see them with --dry-run; --remove-unverified removes them)"
            )
    return referenced, unsure


def names_of(manifest: Manifest, names: Names) -> set[str]:
    """Every name in the pool of what ``manifest`` references (its blobs, data files, model files
    and their indexes), under ``names``' keys and plain.

    Raises ``KeyError`` when the manifest names its objects with a key ``names`` does not hold.
    """
    own = set(manifest.session_blobs)
    pooled = [d for d in manifest.blobs if d not in own] if manifest.pool else []
    found = {pool_digest(key) for key in manifest.blob_keys(pooled, names)}
    found |= {pool_digest(manifest.file_key(sha256, names)) for sha256 in manifest.model_files}
    for digest in [*manifest.blobs, *manifest.model_files]:
        found |= names.every_name(digest)
    return {name for name in found if name is not None}


def _name(key: str) -> str | None:
    """The name (a digest, or its keyed HMAC) of the blob or model file a key of the pool's sweep
    stands for (a model file's, for its index); None for any other key."""
    return pool_digest(key) or file_index_of(key)


def _noted(store: Store, notes: dict[str, Noted]) -> tuple[set[str], str | None]:
    """Every pool name of the blobs named by the notes of checkpoints being written (``notes``, as
    read); and why they cannot all be known (a note caught mid-rewrite, or one that does not
    open here), or None."""
    named: set[str] = set()
    for noted in notes.values():
        if isinstance(noted, str):
            return named, noted
        named.update(name for digest in noted for name in store.names.every_name(digest))
    return named, None
