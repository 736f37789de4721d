"""Signed checkpoints: an HMAC over the manifest, whose blob digests are then sha256.

Loading a checkpoint unpickles it, which runs code. With a signing key configured
(``c.PauseConfig.signing_key`` or ``JUPYTER_PAUSE_SIGNING_KEY``), every manifest written is
signed, and a checkpoint that is unsigned, signed with another key, or changed after signing is
refused before any of its bytes are read. The key itself is never written anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Protocol

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


def digest(data: Any, algorithm: str) -> str:
    """Hex digest of ``data`` with ``algorithm`` (a key of ``HASHES``)."""
    return HASHES[algorithm](data)


def key_id(key: str) -> str:
    """A short name for a key, safe to store and show: it reveals nothing usable of the key."""
    return hashlib.sha256(b"jupyter-pause signing key id\0" + key.encode()).hexdigest()[:12]


class SignatureError(IntegrityError):
    """A checkpoint's signature is missing, from another key, or does not match its manifest."""


def sign(canonical: bytes, key: str) -> dict[str, str]:
    """The signature block of a manifest whose canonical body is ``canonical``."""
    value = hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()
    return {"alg": ALGORITHM, "key_id": key_id(key), "value": value}


class Signed(Protocol):
    """What ``verify`` reads of a manifest (``manifest.Manifest`` as read from the store)."""

    id: str
    hash: str
    signature: dict[str, Any] | None
    canonical: bytes | None


def verify(manifest: Signed, key: str | None) -> None:
    """Refuse a checkpoint ``key`` did not sign, before any of its data is read; without a key, accept any.

    Raises
    ------
    SignatureError
        The manifest is unsigned, signed with another key, changed after it was signed, or
        signed over blob digests that are not sha256.
    """
    if not key:
        return
    checkpoint, signature = manifest.id, manifest.signature
    if not signature or manifest.canonical is None:
        raise SignatureError(
            f"checkpoint {checkpoint} is not signed, and a signing key is configured: refusing to load it "
            "(take a new checkpoint with the key set, or unset JUPYTER_PAUSE_SIGNING_KEY to load unsigned ones)"
        )
    if signature.get("key_id") != key_id(key):
        raise SignatureError(
            f"checkpoint {checkpoint} was signed with another key (key id {signature.get('key_id')}, "
            f"this one is {key_id(key)}): refusing to load it (set JUPYTER_PAUSE_SIGNING_KEY to the key "
            "that signed it)"
        )
    expected = hmac.new(key.encode(), manifest.canonical, hashlib.sha256).hexdigest()
    if signature.get("alg") != ALGORITHM or not hmac.compare_digest(expected, str(signature.get("value", ""))):
        raise SignatureError(
            f"checkpoint {checkpoint} was changed after it was signed: refusing to load it "
            "(resume an older checkpoint; `jupyter pause verify` checks them all)"
        )
    if manifest.hash != "sha256":
        raise SignatureError(
            f"checkpoint {checkpoint} is signed but its blob digests are {manifest.hash}, not sha256: "
            "refusing to load it"
        )


def describe(signature: dict[str, Any] | None, key: str | None) -> str:
    """One line on how a loaded checkpoint was (or was not) vouched for."""
    if signature and key:
        return f"signature checked (key id {signature.get('key_id')})"
    if signature:
        return f"signed (key id {signature.get('key_id')}), not checked: no signing key is configured here"
    return "unsigned: anyone who can write to the store could have written it"
