"""Client-side encryption of everything a store holds: AES-256-GCM under a key of the user's own.

With a key set, every object is sealed before it leaves the process: whoever holds the store's
credential without the key (a co-tenant on a shared bucket, the bucket's owner) sees ciphertext
and sizes, and cannot change a byte unnoticed. The encryption key is derived from the user's
signing key by a labelled HMAC, so a Hub that derives each user's signing key from its secret
derives their encryption key too; former keys still open what they sealed (rotation).

An object is a 32-byte header, then its bytes in chunks of ``CHUNK`` bytes, each sealed with
its own 16-byte tag (``chunked``: a range of a large object, a tensor of a model file, is read
and opened without the rest). Each object has a key of its own, ``HMAC(user key, salt)``, and
chunk ``i`` the nonce ``i``. The salt is random, except for a content-addressed object (a pool
blob, a model file), whose salt derives from its keyed name: the same bytes seal to the same
ciphertext, so a blob shared by two checkpoints of one user is stored once. Every chunk's
associated data binds the header, the object's key in the store and the chunk's index and
whether it is the last: an object copied to another key, truncated or reordered does not open.

An object without the header (written before encryption was switched on) is read as it is:
what the product trusts is checked by signatures and digests, never by where it came from.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

import numpy as np

from ..errors import IntegrityError
from . import layout
from .buffers import Buffer, buffer
from .signing import Keyring


@functools.cache
def _aes() -> tuple[Any, type[Exception]]:
    """AES-GCM and the error of a chunk that does not open, imported on first use: loading
    cryptography's bindings takes a tenth of a second, and a kernel, server or command with no
    key never needs them."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM, InvalidTag


MAGIC = b"JPE\x01"
#: Bytes of plaintext sealed at once (a power of two), and what each chunk adds.
CHUNK_LOG2 = 20
CHUNK = 1 << CHUNK_LOG2
TAG = 16
HEADER = 32
_HEAD = struct.Struct(">4sB3x8s16s")  # magic, chunk size (log2), key id, salt
_LABEL = b"jupyter-pause encryption key v1\0"


class _Opened(np.ndarray):
    """The plaintext of a sealed object that opened: its every chunk authenticated."""


def buffer_opened(size: int) -> memoryview:
    """An aligned buffer (``buffers.buffer``) for the plaintext of a sealed object, known as such by ``opened``."""
    return memoryview(np.frombuffer(buffer(size), dtype=np.uint8).view(_Opened))


def opened(data: Any) -> bool:
    """Whether ``data`` is (a view of) the plaintext of a sealed object that opened here: bytes a
    holder of the user's key sealed for the store key it was read from. Where that key names
    the bytes' digest (a pool blob), the tags vouch for them as hashing them would."""
    return isinstance(getattr(data, "obj", None), _Opened)


class DecryptionError(IntegrityError):
    """An object that does not open: sealed with another key, changed, truncated or moved.
    ``why``: the reason in a few words, for a list of damaged checkpoints."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def sealed_size(size: int) -> int:
    """Bytes in the store of an object of ``size`` bytes."""
    return HEADER + size + TAG * max(1, -(-size // CHUNK))


def plain_size(stored: int) -> int | None:
    """Bytes of plaintext in a sealed object of ``stored`` bytes; None where no object is that size."""
    body = stored - HEADER
    if body < TAG:
        return None
    chunks = -(-body // (CHUNK + TAG))
    size = body - TAG * chunks
    return size if size >= 0 and sealed_size(size) == stored else None


def is_sealed(data: Buffer | bytes) -> bool:
    """Whether ``data`` starts as a sealed object does."""
    return len(data) >= HEADER + TAG and bytes(data[:4]) == MAGIC


def plaintext(key: str, data: Buffer) -> Buffer:
    """``data`` read from ``key`` by a process without a key: as it is, unless it is a sealed
    object (then ``DecryptionError``, saying which key opens it), never taken for plaintext."""
    if is_sealed(data) and plain_size(len(data)) is not None:
        raise DecryptionError(
            f"{key} is encrypted, and no key is set here: set JUPYTER_PAUSE_SIGNING_KEY to its user's key "
            "(beside a Hub: JUPYTER_PAUSE_HUB_SECRET, with JUPYTER_PAUSE_STORE the URL with {user} in it)",
            "encryption: encrypted, and no key here opens it",
        )
    return data


def content_addressed(key: str) -> bool:
    """Whether ``key`` names its bytes (a pool blob or model file): the same bytes seal the same way."""
    return layout.pool_digest(key) is not None


class Cipher:
    """Seals and opens a user's objects with the keys of ``ring`` (sealing with the signing key's)."""

    def __init__(self, ring: Keyring) -> None:
        self._keys = {}
        for key in (ring.signing, *ring.verifying):
            secret = hmac.new(key.encode(), _LABEL, hashlib.sha256).digest()
            self._keys.setdefault(hashlib.sha256(b"id\0" + secret).digest()[:8], secret)
        self._id = next(iter(self._keys))

    def _header(self, key: str) -> bytes:
        secret = self._keys[self._id]
        if content_addressed(key):
            salt = hmac.new(secret, b"salt\0" + key.encode(), hashlib.sha256).digest()[:16]
        else:
            salt = os.urandom(16)
        return _HEAD.pack(MAGIC, CHUNK_LOG2, self._id, salt)

    def _aead(self, header: bytes, key: str) -> Any:
        magic, log2, key_id, salt = _HEAD.unpack(header[:HEADER])
        if magic != MAGIC or log2 != CHUNK_LOG2:
            raise DecryptionError(
                f"{key} is not sealed as this jupyter-pause seals objects", "encryption: unknown format"
            )
        secret = self._keys.get(key_id)
        if secret is None:
            raise DecryptionError(
                f"{key} was encrypted with another key (key id {key_id.hex()}): set JUPYTER_PAUSE_SIGNING_KEY "
                "to the key of the user who wrote it, or JUPYTER_PAUSE_VERIFY_KEYS to accept a former key",
                f"encryption: encrypted with another key (key id {key_id.hex()})",
            )
        aesgcm, _ = _aes()
        return aesgcm(hmac.new(secret, b"object\0" + salt, hashlib.sha256).digest())

    def seal(self, key: str, data: Buffer | bytes) -> memoryview:
        """``data`` sealed for the store's ``key``: header and sealed chunks, in one buffer."""
        view = memoryview(data).cast("B")
        header = self._header(key)
        aead = self._aead(header, key)
        out = buffer(sealed_size(len(view)))
        out[:HEADER] = header
        count = max(1, -(-len(view) // CHUNK))
        for i in range(count):
            chunk = view[i * CHUNK : (i + 1) * CHUNK]
            at = HEADER + i * (CHUNK + TAG)
            aead.encrypt_into(_nonce(i), chunk, _aad(header, key, i, i == count - 1), out[at : at + len(chunk) + TAG])
        return out

    def seal_pieces(self, key: str, data: Buffer | bytes, chunks: int = 8) -> Iterator[memoryview]:
        """``seal(key, data)`` a part of ``chunks`` sealed chunks at a time, each part in the same
        buffer (consumed before the next is asked for): a large blob is never held twice."""
        view = memoryview(data).cast("B")
        header = self._header(key)
        aead = self._aead(header, key)
        yield memoryview(header)
        count = max(1, -(-len(view) // CHUNK))
        out = bytearray(min(count, chunks) * (CHUNK + TAG))
        for first in range(0, count, chunks):
            at = 0
            for i in range(first, min(first + chunks, count)):
                chunk = view[i * CHUNK : (i + 1) * CHUNK]
                end = at + len(chunk) + TAG
                aead.encrypt_into(_nonce(i), chunk, _aad(header, key, i, i == count - 1), memoryview(out)[at:end])
                at = end
            yield memoryview(out)[:at]

    def seal_stream(self, key: str, pieces: Iterable[bytes]) -> Iterator[bytes]:
        """The sealed object for ``key`` of the bytes of ``pieces``, a part at a time (a model
        file too large to hold in memory)."""
        header = self._header(key)
        aead = self._aead(header, key)
        yield header
        pending, i = bytearray(), 0
        for piece in pieces:
            pending += piece
            while len(pending) > CHUNK:  # the last chunk is sealed only once known to be the last
                yield aead.encrypt(_nonce(i), bytes(pending[:CHUNK]), _aad(header, key, i, False))
                del pending[:CHUNK]
                i += 1
        yield aead.encrypt(_nonce(i), bytes(pending), _aad(header, key, i, True))

    def open(self, key: str, data: Buffer | bytes) -> Buffer:
        """The plaintext of the object read from ``key``: an aligned buffer of its own. An object
        without the header is returned as it is (written before encryption was on).

        Raises ``DecryptionError`` when it does not open.
        """
        view = memoryview(data).cast("B")
        if not is_sealed(view):
            return view
        size = plain_size(len(view))
        if size is None:
            raise DecryptionError(
                f"{key} is truncated: {len(view)} bytes is no sealed object's size", "encryption: truncated"
            )
        header = bytes(view[:HEADER])
        aead = self._aead(header, key)
        out = buffer_opened(size)
        count = max(1, -(-size // CHUNK))
        for i in range(count):
            at, n = HEADER + i * (CHUNK + TAG), min(CHUNK, size - i * CHUNK)
            try:
                aead.decrypt_into(
                    _nonce(i),
                    view[at : at + n + TAG],
                    _aad(header, key, i, i == count - 1),
                    out[i * CHUNK : i * CHUNK + n],
                )
            except _aes()[1] as e:
                raise _not_opened(key) from e
        return out

    def read_range(self, key: str, fetch: Callable[[int, int], bytes], start: int, stop: int) -> Buffer:
        """Bytes ``[start, stop)`` of the plaintext of the object at ``key``, reading only the
        chunks that hold them through ``fetch(start, stop)`` (a ranged read of the stored object)."""
        header = bytes(fetch(0, HEADER))
        if len(header) < HEADER or header[:4] != MAGIC:
            return memoryview(fetch(start, stop))  # written before encryption was on
        aead = self._aead(header, key)
        first, last = start // CHUNK, max(start, stop - 1) // CHUNK
        raw = memoryview(fetch(HEADER + first * (CHUNK + TAG), HEADER + (last + 1) * (CHUNK + TAG)))
        out = bytearray()
        for i in range(first, last + 1):
            at = (i - first) * (CHUNK + TAG)
            part = raw[at : at + CHUNK + TAG]
            final = len(part) < CHUNK + TAG or len(raw) == at + len(part) and _is_last(fetch, i)
            try:
                out += aead.decrypt(_nonce(i), bytes(part), _aad(header, key, i, final))
            except _aes()[1] as e:
                raise _not_opened(key) from e
        offset = start - first * CHUNK
        return memoryview(out)[offset : offset + stop - start]

    def open_stream(self, key: str, source: BinaryIO, target: BinaryIO) -> None:
        """Open the object at ``key`` read from ``source`` into ``target``, a chunk at a time."""
        header = source.read(HEADER)
        if len(header) < HEADER or header[:4] != MAGIC:
            target.write(header)
            while piece := source.read(CHUNK):
                target.write(piece)
            return
        aead = self._aead(header, key)
        i, part = 0, source.read(CHUNK + TAG)
        while True:
            following = source.read(CHUNK + TAG)
            try:
                target.write(aead.decrypt(_nonce(i), part, _aad(header, key, i, not following)))
            except _aes()[1] as e:
                raise _not_opened(key) from e
            if not following:
                return
            i, part = i + 1, following


def _is_last(fetch: Callable[[int, int], bytes], i: int) -> bool:
    """Whether chunk ``i`` (a whole one) is the object's last: nothing follows it."""
    at = HEADER + (i + 1) * (CHUNK + TAG)
    return not fetch(at, at + 1)


def _nonce(i: int) -> bytes:
    return i.to_bytes(12, "big")


def _aad(header: bytes, key: str, i: int, last: bool) -> bytes:
    return header + key.encode() + struct.pack(">QB", i, last)


def _not_opened(key: str) -> DecryptionError:
    return DecryptionError(
        f"{key} does not open with this user's key: changed, truncated or copied from another key "
        "(damaged, or put there by someone else)",
        "encryption: does not open here (changed after it was written, or a copy from another place)",
    )
