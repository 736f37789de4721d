"""What a co-tenant holding a shared store's credential, and not the user's key, plants in the
user's prefix: a manifest of the user's session, in the user's lineage, taken after the user's
newest, written as they could write it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from jupyter_pause.store.layout import manifest_key, new_checkpoint_id
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store
from tests.support.stores import stored_bytes

#: How a co-tenant can write a manifest the user's gc would find.
UNSIGNED = "unsigned"  # the user's newest, taken later, not signed
ANOTHER_KEY = "another key"  # the same, signed with the co-tenant's own key
SEALED_BY_ANOTHER_KEY = "sealed by another key"  # signed and encrypted with the co-tenant's key
COPIED = "copied"  # the user's newest manifest's stored bytes, under a newer id
PLANTS = (UNSIGNED, ANOTHER_KEY, SEALED_BY_ANOTHER_KEY, COPIED)

#: What a planted manifest holds: nothing of the user's, so nothing of theirs stays for its sake.
EMPTY: dict[str, Any] = {
    "variables": [],
    "arrays": {},
    "blobs": {},
    "references": {},
    "model_files": {},
    "data_files": {},
    "session_blobs": [],
    "local_modules": [],
    "fingerprints": {},
    "notebook": None,
    "rng": None,
    "checks": None,
    "loop_state": None,
    "history": None,
    "names": None,
}

#: The co-tenant's own signing key (their Hub key, say).
CO_TENANT_KEY = "c0" * 32


def plant_manifest(url: str, like: Manifest, how: str, options: dict[str, Any] | None = None) -> str:
    """Write into the store at ``url`` a manifest of ``like``'s session and lineage, a minute
    newer than ``like`` and naming none of its data, as ``how`` says (one of ``PLANTS``; a copy
    is ``like``'s own bytes, naming all of it); its id."""
    later = like.created + 60
    forged = replace(like, id=new_checkpoint_id(later), created=later, **EMPTY)
    mine = Store(url, options)  # the shared credential, none of the user's keys
    if how == COPIED:
        data = stored_bytes(url, manifest_key(like.session, like.id), options)
    elif how == UNSIGNED:
        data = forged.to_bytes(None)
    elif how in (ANOTHER_KEY, SEALED_BY_ANOTHER_KEY):
        data = forged.to_bytes(CO_TENANT_KEY)
    else:
        raise ValueError(f"no plant {how!r}; one of {PLANTS}")
    if how == SEALED_BY_ANOTHER_KEY:
        mine = Store(url, options, keys=CO_TENANT_KEY)  # their own server's store: encrypted with their key
    mine.write(manifest_key(like.session, forged.id), data)
    return forged.id
