"""The names of a store's content-addressed objects: pool blobs, model files and their indexes.

Without a key, an object is named by the digest of its bytes, which anyone can compute: a
co-tenant holding the store's credential can plant garbage under the name of a blob a user's
next checkpoint will hold (a tensor of zeros, a seeded initialisation), so a writer reuses such
an object only after hashing what is there. With a key, an object is named by an HMAC of its
digest under a key derived from the user's (``Names.name``): no one without the key can
predict or plant a name, so an object found under one was written by a holder of the key.

A checkpoint records the id of the key that named its objects (``Manifest.names``); a reader
names them again with that key, a former one included (a rotated key still reads).
"""

from __future__ import annotations

import hashlib
import hmac

from .layout import file_index_key, pool_key
from .signing import Keyring, Keys, key_id, keyring

_LABEL = b"jupyter-pause pool names v1\0"


def _name(key: str, digest: str) -> str:
    names_key = hmac.new(key.encode(), _LABEL, hashlib.sha256).digest()
    return hmac.new(names_key, digest.encode(), hashlib.sha256).hexdigest()


class Names:
    """How one user names the objects of a store's pool: keyed by their key, or by digest."""

    def __init__(self, keys: Keys = None) -> None:
        self.ring: Keyring | None = keyring(keys)

    @property
    def key_id(self) -> str | None:
        """The id of the key that names what this process writes (None: names are digests)."""
        return None if self.ring is None else key_id(self.ring.signing)

    def name(self, digest: str, named_by: str | None = "") -> str:
        """The name of the object whose bytes have ``digest``: under the key whose id is
        ``named_by`` (by default the signing key; None, the digest itself)."""
        if named_by == "":
            named_by = self.key_id
        if named_by is None:
            return digest
        key = self.ring.matching(named_by) if self.ring is not None else None
        if key is None:
            raise KeyError(
                f"objects named with key id {named_by} cannot be found without that key: set "
                "JUPYTER_PAUSE_SIGNING_KEY to it, or JUPYTER_PAUSE_VERIFY_KEYS to accept it as a former key"
            )
        return _name(key, digest)

    def pool_key(self, digest: str, named_by: str | None = "") -> str:
        """The pool key of the blob whose bytes have ``digest`` (``named_by``: as for ``name``)."""
        return pool_key(self.name(digest, named_by))

    def file_index_key(self, sha256: str, algorithm: str, named_by: str | None = "") -> str:
        """The key of the index of the model file whose sha256 is ``sha256``."""
        return file_index_key(self.name(sha256, named_by), algorithm)

    def every_name(self, digest: str) -> set[str]:
        """Every name ``digest`` may have in the pool: under each key accepted, and plain."""
        names = {digest}
        if self.ring is not None:
            names.update(_name(key, digest) for key in (self.ring.signing, *self.ring.verifying))
        return names
