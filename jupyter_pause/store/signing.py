"""Signed checkpoints and records: an HMAC over the manifest, whose blob digests are then sha256.

Loading a checkpoint unpickles it, which runs code. With a signing key configured
(``c.PauseConfig.signing_key`` or ``JUPYTER_PAUSE_SIGNING_KEY``), every manifest written is
signed, and a checkpoint that is unsigned, signed with another key, or changed after signing is
refused before any of its bytes are read. The key itself is never written anywhere.

The rule for every record read from a store (``seal``, ``problem``): each kind of record is
signed with its own key, derived from the user's key by a labelled KDF (``derive``), over the
record and the place it belongs to; ``seals`` applies it to JSON records.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import xxhash

from ..errors import IntegrityError

ALGORITHM = "hmac-sha256"

#: Blob digest algorithms: fast and non-cryptographic unless signing, then sha256.
HASHES = {
    "xxh3_128": xxhash.xxh3_128_hexdigest,
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
}


def hash_for(key: str | None) -> str:
    """The blob digest algorithm a checkpoint uses: sha256 when signed (a digest an attacker
    cannot steer), xxh3-128 otherwise (about 15x faster)."""
    return "sha256" if key else "xxh3_128"


def algorithm_of(digest: str) -> str:
    """The algorithm of a blob digest, from its length (sha256: 64 hex digits, xxh3-128: 32)."""
    return "sha256" if len(digest) == 64 else "xxh3_128"


def digest(data: Any, algorithm: str) -> str:
    """Hex digest of ``data`` with ``algorithm`` (a key of ``HASHES``)."""
    return HASHES[algorithm](data)


def key_id(key: str) -> str:
    """A short name for a key, safe to store and show: it reveals nothing usable of the key."""
    return hashlib.sha256(b"jupyter-pause signing key id\0" + key.encode()).hexdigest()[:12]


class SignatureError(IntegrityError):
    """A checkpoint's signature is missing, from another key, or does not match its manifest."""


@dataclass(frozen=True)
class Keyring:
    """The key this process signs with (``signing``), and former keys it still accepts when
    loading (``verifying``: a rotated key, ``JUPYTER_PAUSE_VERIFY_KEYS``), never used to sign."""

    signing: str
    verifying: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.signing or not isinstance(self.signing, str):
            raise ValueError("a keyring needs a signing key")

    @property
    def ids(self) -> list[str]:
        """The key ids accepted, the signing key's first."""
        return [key_id(k) for k in (self.signing, *self.verifying)]

    def matching(self, wanted: Any) -> str | None:
        """The accepted key whose id is ``wanted``, or None."""
        return next((k for k in (self.signing, *self.verifying) if key_id(k) == wanted), None)


#: What every function here takes as its key: one key, a ``Keyring``, or None (no signing).
Keys: TypeAlias = "str | Keyring | None"


def keyring(keys: Keys) -> Keyring | None:
    """``keys`` as a ``Keyring`` (a plain key is one with no former keys); None without a key."""
    if not keys:
        return None
    return keys if isinstance(keys, Keyring) else Keyring(keys)


class Signed(Protocol):
    """What ``verify`` reads of a manifest (``manifest.Manifest`` as read from the store)."""

    id: str
    session: str
    user: str | None
    hash: str
    signature: dict[str, Any] | None
    canonical: bytes | None


def manifest_place(manifest: Signed) -> dict[str, str | None]:
    """Where a manifest belongs, as its seal covers it: its session, its id and its user."""
    return {"session": manifest.session, "checkpoint": manifest.id, "user": manifest.user}


def manifest_problem(manifest: Signed, ring: Keyring) -> str | None:
    """Why the seal of ``manifest`` (signed with a key of ``ring``) does not verify, as the end of
    "checkpoint X was ...": None when it does."""
    signature = manifest.signature or {}
    if "kind" not in signature:
        return _legacy_problem(manifest, signature, ring)
    why = problem(manifest.canonical or b"", signature, MANIFEST, manifest_place(manifest), ring)
    if why is None:
        return None
    return "changed after it was signed" if why.startswith("signature does not match") else why


def _legacy_problem(manifest: Signed, signature: dict[str, Any], ring: Keyring) -> str | None:
    """A manifest signed by a release before seals: an HMAC of the key over its canonical body.

    Still accepted, so a session paused before an upgrade resumes after it: nothing else was ever
    signed with the raw key over a manifest's body (a ledger record's body is no manifest), and
    where it belongs (its session and id) is checked from that signed body by the reader
    (``integrity.misplaced``), as for every manifest."""
    key = ring.matching(signature.get("key_id"))
    value = str(signature.get("value", ""))
    if key is None or signature.get("alg") != ALGORITHM:
        return "signed by an older jupyter-pause with another key or algorithm"
    expected = hmac.new(key.encode(), manifest.canonical or b"", hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, value) else "changed after it was signed"


def verify(manifest: Signed, keys: Keys) -> None:
    """Refuse a checkpoint no key of ``keys`` signed, before any of its data is read; without a key, accept any.

    Raises
    ------
    SignatureError
        The manifest is unsigned, signed with another key, changed after it was signed, or
        signed over blob digests that are not sha256.
    """
    ring = keyring(keys)
    if ring is None:
        return
    checkpoint, signature = manifest.id, manifest.signature
    if not signature or manifest.canonical is None:
        raise SignatureError(
            f"checkpoint {checkpoint} is not signed, and a signing key is configured: refusing to load it "
            "(take a new checkpoint with the key set, or unset JUPYTER_PAUSE_SIGNING_KEY to load unsigned ones)"
        )
    key = ring.matching(signature.get("key_id"))
    if key is None:
        raise SignatureError(
            f"checkpoint {checkpoint} was signed with another key (key id {signature.get('key_id')}, "
            f"this one is {accepted(ring)}): refusing to load it (set JUPYTER_PAUSE_SIGNING_KEY to the key "
            "that signed it, or JUPYTER_PAUSE_VERIFY_KEYS to accept a former one)"
        )
    why = manifest_problem(manifest, ring)
    if why is not None:
        raise SignatureError(
            f"checkpoint {checkpoint} was {why}: refusing to load it "
            "(resume an older checkpoint; `jupyter pause verify` checks them all)"
        )
    if manifest.hash != "sha256":
        raise SignatureError(
            f"checkpoint {checkpoint} is signed but its blob digests are {manifest.hash}, not sha256: "
            "refusing to load it"
        )


# -- seals: a key per kind of record, a signature bound to its place ---------------------------

#: The kinds of record, each with a key of its own (the labels of the KDF).
MANIFEST = "manifest"
JOURNAL = "journal-record"
STATUS = "status"
LEASE = "lease"
LEDGER = "ledger-event"
#: The index of a model file in the pool (``modelfiles``): its tensors' ranges and digests.
FILE_INDEX = "model-file-index"
KINDS = frozenset({MANIFEST, JOURNAL, STATUS, LEASE, LEDGER, FILE_INDEX})

_KDF = b"jupyter-pause record key v1\0"

#: Where a record belongs: names to values (None where a value is unknown), compared exactly.
Place = Mapping[str, "str | None"]


def derive(key: str, label: str) -> bytes:
    """The key that seals records of kind ``label``, derived from the user's ``key``."""
    if label not in KINDS:
        raise ValueError(f"unknown kind of record {label!r}: one of {', '.join(sorted(KINDS))}")
    return hmac.new(key.encode(), _KDF + label.encode(), hashlib.sha256).digest()


def _message(label: str, place: Place, body: bytes) -> bytes:
    where = json.dumps({"kind": label, "place": dict(place)}, sort_keys=True, separators=(",", ":"))
    return where.encode() + b"\0" + body


def _value(key: str, label: str, place: Place, body: bytes) -> str:
    return hmac.new(derive(key, label), _message(label, place, body), hashlib.sha256).hexdigest()


def seal(body: bytes, label: str, place: Place, keys: Keys) -> dict[str, Any]:
    """The seal of ``body``, a record of kind ``label`` belonging at ``place``, by the signing key."""
    ring = keyring(keys)
    assert ring is not None, "sealing needs a key"
    value = _value(ring.signing, label, place, body)
    return {"alg": ALGORITHM, "kind": label, "for": dict(place), "key_id": key_id(ring.signing), "value": value}


def problem(body: bytes, block: Any, label: str, place: Place, keys: Keys) -> str | None:
    """Why the record ``body`` with seal ``block``, found at ``place``, is refused as a ``label``
    record under ``keys``, in a few words; None when it verifies, or when there is no key."""
    ring = keyring(keys)
    if ring is None:
        return None
    if not isinstance(block, dict):
        return "not signed, and a signing key is configured"
    key = ring.matching(block.get("key_id"))
    if key is None:
        return f"signed with another key (key id {block.get('key_id')}; this one is {accepted(ring)})"
    if block.get("kind") != label or block.get("alg") != ALGORITHM:
        return f"signed as a {block.get('kind') or 'record of no kind'}, not a {label} record"
    if hmac.compare_digest(_value(key, label, place, body), str(block.get("value", ""))):
        return None
    claimed = block.get("for")
    if isinstance(claimed, dict) and claimed != dict(place):
        if hmac.compare_digest(_value(key, label, claimed, body), str(block.get("value", ""))):
            return f"signed for {_where(claimed)}, found at {_where(place)} (a copy from elsewhere)"
    return "signature does not match (changed after it was signed)"


def _where(place: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(place.items())) or "no place"


#: The JupyterHub's secret that each user's key derives from, in the Hub's (and a reader's) environment.
HUB_SECRET_ENV = "JUPYTER_PAUSE_HUB_SECRET"
#: Former Hub secrets whose keys still verify, separated by commas.
HUB_OLD_SECRETS_ENV = "JUPYTER_PAUSE_HUB_OLD_SECRETS"

_PER_USER = b"jupyter-pause per-user signing key v1\0"


def user_key(secret: str, user: str) -> str:
    """The signing key of ``user`` under a Hub's ``secret`` (hex; a function of both, nothing else)."""
    return hmac.new(secret.encode(), _PER_USER + user.encode(), hashlib.sha256).hexdigest()


def user_keyring(secret: str, former: list[str] | tuple[str, ...], user: str) -> Keyring:
    """``user``'s keys under a Hub's ``secret`` and its ``former`` secrets."""
    return Keyring(user_key(secret, user), tuple(user_key(old, user) for old in former if old != secret))


def hub_keyrings(env: dict[str, str]) -> Callable[[str | None], Keyring | None] | None:
    """Each user's keys as the Hub derives them, from ``JUPYTER_PAUSE_HUB_SECRET`` (and its former
    secrets) in ``env``: for readers beside the Hub that check every user's records. None without
    a secret; a user of None has no keys."""
    secret = env.get(HUB_SECRET_ENV)
    if not secret:
        return None
    former = [s.strip() for s in env.get(HUB_OLD_SECRETS_ENV, "").split(",") if s.strip()]
    return lambda user: user_keyring(secret, former, user) if user else None


def accepted(ring: Keyring) -> str:
    """The key ids ``ring`` accepts, for a message: ``abc`` or ``abc (former keys: def, ...)``."""
    first, *former = ring.ids
    return f"{first} (former keys: {', '.join(former)})" if former else first


def describe(signature: dict[str, Any] | None, key: Keys) -> str:
    """One line on how a loaded checkpoint was (or was not) vouched for."""
    if signature and key:
        return f"signature checked (key id {signature.get('key_id')})"
    if signature:
        return f"signed (key id {signature.get('key_id')}), not checked: no signing key is configured here"
    if os.environ.get("JUPYTERHUB_USER"):
        return (
            "UNSIGNED, on a JupyterHub: every user with the store's credentials could have written this "
            "checkpoint, and loading it ran its code in this server; give each user a signing key of their own "
            "(jupyter_pause.hub.keys.signing_environment in jupyterhub_config.py)"
        )
    return "unsigned: anyone who can write to the store could have written it"
