"""Which of a session's manifests a cleanup may count, read with the store's keys.

Anyone holding a shared store's credential can write into a user's prefix. A cleanup that
counted what it finds there could be steered: a planted manifest newer than the user's would
make ``--keep 1`` prune every checkpoint of theirs. So a cleanup reads manifests as a resume
does (``Catalog.listing`` with ``store.keys``: signature, session, id and user checked) and
sorts the rest:

- verified: the session's checkpoints; only they count toward ``--keep`` / ``--older-than``,
  and only what they reference is kept for them;
- torn: bytes that are no manifest at all (a commit cut off, a checksum that does not match):
  garbage, removed once past the grace period;
- unverified: a well-formed manifest the keys here do not vouch for (unsigned, signed with
  another key, misplaced), or one sealed with a key not held here. It may be a co-tenant's plant,
  or the user's own under a key this process lacks: never counted, kept (and with it every
  blob), removed only on request;
- newer and unreadable: a newer release's format, or a manifest the store would not give: kept,
  with every blob.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import IntegrityError
from .catalog import Catalog, Listing
from .layout import manifest_key, manifest_prefix
from .manifest import Manifest
from .storage import Buffer, Entry


@dataclass
class Judged:
    """A session's manifests as a cleanup sees them: its listing (verified checkpoints, newer
    and unreadable ones, pending notes), the manifests' keys as listed (with sizes and times),
    and its damaged manifests sorted into torn ones and unverified ones (id: why, as the
    listing says it)."""

    listing: Listing
    manifests: dict[str, Entry] = field(default_factory=dict)
    torn: dict[str, str] = field(default_factory=dict)
    unverified: dict[str, str] = field(default_factory=dict)

    @property
    def signed(self) -> bool:
        """Whether any verified checkpoint is signed or names its blobs with a key."""
        return any(m.signature or m.names for m in self.listing.checkpoints)


def judge(catalog: Catalog, session: str, notes: Mapping[str, Entry]) -> Judged:
    """``session``'s manifests, listed now and read with the keys of ``catalog``'s store, sorted
    for a cleanup; ``notes``: the session's notes of checkpoints being written, as the cleanup
    listed them (before it read them, and before this lists the manifests: ``survey``).

    A damaged manifest (not a newer format) is read again: one whose bytes are no manifest is
    torn; one that is a manifest, or that does not open (another key's seal, or sealed and read
    without a key), is unverified; one gone meanwhile is neither; one the store would not
    give this time is unverified (kept).
    """
    store = catalog.store
    manifests = store.list(manifest_prefix(session))
    judged = Judged(catalog.listing(session, store.keys, {**manifests, **notes}), manifests)
    listing = judged.listing
    suspect = {manifest_key(session, i): i for i in listing.damaged if i not in listing.newer}
    for key, data in store.read_many(list(suspect)).items():
        checkpoint_id = suspect[key]
        why = listing.damaged[checkpoint_id]
        if isinstance(data, FileNotFoundError):
            continue
        if isinstance(data, BaseException) or _well_formed(data):  # a sealed one does not open: an exception
            judged.unverified[checkpoint_id] = why
        else:
            judged.torn[checkpoint_id] = why
    return judged


def _well_formed(data: Buffer) -> bool:
    """Whether ``data`` is a manifest's bytes, whoever wrote it (no signature checked)."""
    try:
        Manifest.from_bytes(data)
    except (IntegrityError, TypeError, KeyError, ValueError):
        return False
    return True
